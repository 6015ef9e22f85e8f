"""torch's CUDA caching allocator, rebuilt as a Python model.

Mirrors ``c10/cuda/CUDACachingAllocator.cpp`` (class ``DeviceCachingAllocator``, the
``Native`` backend that ``torch.cuda`` uses by default), with the size constants of
``c10/core/AllocatorConfig.h``, the counters of ``c10/core/Allocator.h`` (``Stat``,
``StatType``) and ``c10/core/CachingDeviceAllocator.h`` (``DeviceStats``), named as
``torch.cuda.memory_stats`` (``torch/cuda/memory.py``) flattens them.

The rules, as the C++ states them (function names are torch's):

* ``round_size``: every request is rounded up to a multiple of ``kMinBlockSize`` = 512 bytes
  (or to a power-of-two division when ``roundup_power2_divisions`` is set).
* ``get_pool``: a rounded size up to ``kSmallSize`` = 1 MiB goes to the small ``BlockPool``,
  anything larger to the large one.
* ``get_allocation_size``: when no cached block fits, the segment asked from ``cudaMalloc`` is
  ``kSmallBuffer`` = 2 MiB for small requests, ``kLargeBuffer`` = 20 MiB for requests under
  ``kMinLargeAlloc`` = 10 MiB, else the request rounded up to ``kRoundLarge`` = 2 MiB.
* ``get_free_block``: best fit, the smallest cached block of the same stream that is large
  enough (ties: lowest address); blocks of ``max_split_size`` or more only serve requests of
  that size class, and only within ``max_non_split_rounding_size`` (20 MiB) of their size.
* ``should_split`` / ``alloc_found_block``: the rest of a block is split off and cached when it
  is at least 512 bytes (small pool) or more than 1 MiB (large pool).
* ``free_block`` / ``try_merge_blocks``: a freed block merges with free neighbours of its segment.
* ``release_cached_blocks`` (``empty_cache``): only whole, unsplit free segments go back to CUDA.
* ``malloc``'s OOM path: ``alloc_block`` fails, then ``release_available_cached_blocks`` (only
  with a ``max_split_size``), then ``release_cached_blocks`` and one retry
  (``num_alloc_retries``); if that fails too, ``num_ooms`` and ``OutOfMemoryError``.

The function bodies were read from pytorch/pytorch's main branch (commit 001074d); the
constants and the configuration defaults are checked, in tests/test_tensor_allocator.py, against
the headers that torch 2.13 installs (``torch/include/c10/core/AllocatorConfig.h``).

* ``recordStream`` / ``insert_events`` / ``process_events``: a block used on another stream
  (``Tensor.record_stream``) is not cached when freed; an event is recorded on each such
  stream, and the block stays *active* (no longer *allocated*) until ``process_events``, at the
  start of a later ``malloc``, finds all of them completed; ``synchronize_and_free_events``
  waits for them all before ``empty_cache`` and the out-of-memory retry release memory.

Left out: CUDA-graph private pools, expandable segments, the memory-fraction garbage collector
and free-memory callbacks. Streams are plain integers, and an event completes when the model is
told its stream's work is done (``stream_synchronize``).

The raw device memory is pluggable. By default :class:`CUDACachingAllocator` hands out fake
addresses from a counter (a pure model, any device size); with ``raw_malloc=numba_raw_malloc``
every segment is a real Numba device array and :meth:`Block.memory` is the block's slice of it,
which is how CUDA storages of ``retorch.tensor`` allocate through it (:func:`storage_allocator`).

:func:`record_trace` records the allocations and frees of a real torch program on the CPU (the
sizes of the storages it creates and when they die), :func:`replay` runs such a trace through
the model and returns a :class:`Timeline`, and :func:`plot_timeline` draws it.
"""

from __future__ import annotations

import bisect
import gc
import itertools
import threading
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass, field

# c10/core/AllocatorConfig.h (v2.13.0), lines 17-25
kSmallBuffer = 2097152  # "small" allocations are packed in 2 MiB blocks
kMinBlockSize = 512  # all sizes are rounded to at least 512 bytes
kSmallSize = 1048576  # largest "small" allocation is 1 MiB
kMinLargeAlloc = 10485760  # allocations between 1 and 10 MiB may use kLargeBuffer
kRoundLarge = 2097152  # round up large allocations to 2 MiB
# "large" allocations may be packed in 20 MiB blocks: `const size_t kLargeBuffer = 20971520;` in
# CUDACachingAllocator.cpp, in v2.13.0 the default of `large_segment_size_` (AllocatorConfig.h:340)
kLargeBuffer = 20971520
#: ``max_split_size_``'s default, ``std::numeric_limits<size_t>::max()`` (AllocatorConfig.h:342)
SIZE_MAX = 2**64 - 1
MiB = 1048576

#: ``StatType``: AGGREGATE, SMALL_POOL, LARGE_POOL, as ``memory_stats`` names them.
STAT_TYPES = ("all", "small_pool", "large_pool")
#: The ``StatArray`` fields of ``DeviceStats`` (c10/core/CachingDeviceAllocator.h).
STAT_ARRAYS = (
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
)
#: Where the fake device addresses of the default raw allocator start.
FAKE_BASE_ADDRESS = 0x7F0000000000


class OutOfMemoryError(RuntimeError):
    """``torch.OutOfMemoryError`` (a ``RuntimeError``): the device has no room for a segment."""


def format_size(size: int) -> str:
    """``format_size`` of the allocator: bytes up to 1 KiB, then KiB, MiB, GiB with 2 decimals."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1048576:
        return f"{size / 1024.0:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576.0:.2f} MiB"
    return f"{size / 1073741824.0:.2f} GiB"


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """Round ``size`` up to the next of ``divisions`` equal steps between two powers of two."""
    if size > 0 and size & (size - 1) == 0:
        return size
    if divisions < 2:
        raise RuntimeError("Only 2 or more divisions are supported")
    power2_floor = 1 << (size.bit_length() - 1)
    power2_division = power2_floor >> (divisions.bit_length() - 1)
    if power2_division == 0:
        return power2_floor << 1
    round_size_floor = size & ~(power2_division - 1)
    return size if round_size_floor == size else round_size_floor + power2_division


def round_size(size: int, roundup_power2_divisions: int = 0) -> int:
    """``DeviceCachingAllocator::round_size``: the block size a request of ``size`` bytes gets."""
    if size < kMinBlockSize:
        return kMinBlockSize
    divisions = roundup_power2_divisions
    if divisions > 1 and size > kMinBlockSize * divisions:
        return roundup_power2_next_division(size, divisions)
    return kMinBlockSize * ((size + kMinBlockSize - 1) // kMinBlockSize)


def parse_settings(config: str) -> dict:
    """``AcceleratorAllocatorConfig::parseArgs`` (``c10/core/AllocatorConfig.cpp``): the
    ``PYTORCH_ALLOC_CONF`` string (``"max_split_size_mb:64,roundup_power2_divisions:4"``) as
    keyword arguments of :class:`CUDACachingAllocator`, with the parser's checks and
    ``ValueError`` messages. ``expandable_segments`` and ``garbage_collection_threshold`` are
    checked and then left out, as the model leaves out what they switch on; the list form of
    ``roundup_power2_divisions`` (one count per size band) is not modelled."""
    out: dict = {}
    for item in filter(None, config.split(",")):
        key, _, value = item.partition(":")
        key, value = key.strip(), value.strip()
        if key in ("max_split_size_mb", "max_non_split_rounding_mb"):
            if not value.lstrip("-").isdigit():
                raise ValueError("stoull")
            mb = int(value) % 2**64  # std::stoull wraps a negative number
            if mb < kLargeBuffer // MiB:
                raise ValueError(
                    f"CachingAllocator option {key} too small, must be >= {kLargeBuffer // MiB}"
                )
            size = min(mb, SIZE_MAX // MiB) * MiB
            out[
                "max_split_size" if key == "max_split_size_mb" else "max_non_split_rounding_size"
            ] = size
        elif key == "roundup_power2_divisions":
            if value.startswith("["):
                raise NotImplementedError("the model takes one division count for every size")
            n = int(value)
            if n <= 0 or n & (n - 1):
                raise ValueError("For roundups, the divisions has to be power of 2 ")
            out["roundup_power2_divisions"] = n
        elif key == "garbage_collection_threshold":
            if not 0.0 < float(value) < 1.0:
                raise ValueError("garbage_collect_threshold is invalid, set it in (0.0, 1.0)")
        elif key == "expandable_segments":
            if value not in ("True", "False"):
                raise ValueError(
                    f"Expected 'True' or 'False' at index 2 in ConfigTokenizer but got '{value}'"
                )
    return out


def get_allocation_size(size: int, large_segment_size: int = kLargeBuffer) -> int:
    """``get_allocation_size``: the segment ``cudaMalloc`` is asked for, for a rounded size."""
    if size <= kSmallSize:
        return kSmallBuffer
    if size < kMinLargeAlloc:
        return large_segment_size
    return kRoundLarge * ((size + kRoundLarge - 1) // kRoundLarge)


class Stat:
    """``c10::CachingAllocator::Stat``: current, peak, allocated (total up), freed (total down)."""

    __slots__ = ("current", "peak", "allocated", "freed")

    def __init__(self):
        self.current = self.peak = self.allocated = self.freed = 0

    def increase(self, amount: int) -> None:  # increase_stat
        self.current += amount
        self.peak = max(self.current, self.peak)
        self.allocated += amount

    def decrease(self, amount: int) -> None:  # decrease_stat
        self.current -= amount
        assert self.current >= 0, "Negative tracked stat in CUDA allocator (likely logic error)."
        self.freed += amount

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


class DeviceStats:
    """``DeviceStats``: a ``Stat`` per pool type for each field of :data:`STAT_ARRAYS`."""

    def __init__(self, max_split_size: int):
        for name in STAT_ARRAYS:
            setattr(self, name, [Stat() for _ in STAT_TYPES])
        self.oversize_allocations = Stat()
        self.oversize_segments = Stat()
        self.num_alloc_retries = self.num_ooms = self.num_sync_all_streams = 0
        self.num_device_alloc = self.num_device_free = self.num_oom_rejections = 0
        # int64_t: the unlimited default SIZE_MAX reads as -1, as on a real GPU
        self.max_split_size = max_split_size - 2**64 if max_split_size >= 2**63 else max_split_size

    def as_nested_dict(self) -> dict:
        """What ``torch._C._cuda_memoryStats`` returns (torch/csrc/cuda/Module.cpp)."""
        out = {
            k: getattr(self, k)
            for k in (
                "num_alloc_retries",
                "num_ooms",
                "max_split_size",
                "num_sync_all_streams",
                "num_device_alloc",
                "num_device_free",
                "num_oom_rejections",
            )
        }
        for name in STAT_ARRAYS:
            out[name] = {t: s.as_dict() for t, s in zip(STAT_TYPES, getattr(self, name))}
        out["oversize_allocations"] = self.oversize_allocations.as_dict()
        out["oversize_segments"] = self.oversize_segments.as_dict()
        return out


@dataclass(eq=False)
class Segment:
    """One ``cudaMalloc`` result: its address, size and the raw memory object, if any."""

    ptr: int
    size: int
    handle: object = None


@dataclass(eq=False)
class Block:
    """``Block``: a piece of a segment, allocated or cached; ``prev``/``next`` link the pieces."""

    stream: int
    size: int
    pool: BlockPool = field(repr=False)
    ptr: int
    segment: Segment = field(repr=False)
    requested_size: int = 0
    allocated: bool = False
    prev: Block | None = field(default=None, repr=False)
    next: Block | None = field(default=None, repr=False)
    # record_stream: the other streams that used the block, then the events still pending
    stream_uses: set = field(default_factory=set, repr=False)
    event_count: int = 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    @property
    def offset(self) -> int:
        """Where the block starts inside its segment, in bytes."""
        return self.ptr - self.segment.ptr

    def memory(self):
        """The block's bytes: a slice of the segment's raw memory (a device array)."""
        if self.segment.handle is None:
            raise RuntimeError(
                "this allocator hands out fake addresses only; create it with "
                "raw_malloc=numba_raw_malloc (or another raw_malloc) to back blocks with memory"
            )
        return self.segment.handle[self.offset : self.offset + self.size]


class BlockPool:
    """``BlockPool``: cached free blocks ordered as ``BlockComparatorSize`` orders them,
    by (stream, size, address)."""

    def __init__(self, small: bool):
        self.is_small = small
        self._keys: list[tuple[int, int, int]] = []
        self._blocks: dict[tuple[int, int, int], Block] = {}

    @staticmethod
    def _key(block: Block) -> tuple[int, int, int]:
        return (block.stream, block.size, block.ptr)

    def insert_into_blocks(self, block: Block) -> bool:
        key = self._key(block)
        if key in self._blocks:
            return False
        bisect.insort(self._keys, key)
        self._blocks[key] = block
        return True

    def erase(self, block: Block) -> int:
        key = self._key(block)
        if self._blocks.get(key) is not block:
            return 0
        del self._blocks[key]
        del self._keys[bisect.bisect_left(self._keys, key)]
        return 1

    def lower_bound(self, stream: int, size: int) -> int:
        """Index of the first block not ordered before the search key ``(stream, size, 0)``."""
        return bisect.bisect_left(self._keys, (stream, size, 0))

    def __getitem__(self, i: int) -> Block:
        return self._blocks[self._keys[i]]

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self):
        return (self._blocks[k] for k in list(self._keys))


@dataclass(eq=False)
class Event:
    """A CUDA event recorded on ``stream`` (``EventPool::Event``): in the model it completes
    when the allocator is told that the stream's work so far is done
    (:meth:`CUDACachingAllocator.stream_synchronize`)."""

    stream: int
    done: bool = False


@dataclass(eq=False)
class AllocParams:
    """``AllocParams``: one request on its way through ``malloc``."""

    size: int
    stream: int
    pool: BlockPool
    alloc_size: int
    stat_types: tuple[int, ...]
    block: Block | None = None


class CUDACachingAllocator:
    """``DeviceCachingAllocator`` for one device of ``device_memory_bytes`` bytes.

    ``raw_malloc(nbytes)`` stands for ``cudaMalloc``: it returns an object holding the memory
    (sliceable, like a Numba device array) or only the segment's address (an ``int``), or
    ``None`` / raises ``MemoryError`` when the device is full; ``raw_free(handle)`` stands for
    ``cudaFree`` (by default the handle is dropped). Without ``raw_malloc`` the addresses are
    fake, from a counter. The device also refuses a segment that would
    take the reserved total past ``device_memory_bytes``, as ``cudaMalloc`` fails on a full GPU.
    """

    def __init__(
        self,
        device_memory_bytes: int,
        raw_malloc=None,
        raw_free=None,
        *,
        max_split_size: int = SIZE_MAX,
        max_non_split_rounding_size: int = kLargeBuffer,
        roundup_power2_divisions: int = 0,
        large_segment_size: int = kLargeBuffer,
        device: int = 0,
    ):
        for name, value in [("max_split_size_mb", max_split_size),
                            ("max_non_split_rounding_mb", max_non_split_rounding_size)]:  # fmt: skip
            if value != SIZE_MAX and value < kLargeBuffer:  # the settings' parser's check
                raise ValueError(
                    f"CachingAllocator option {name} too small, must be >= "
                    f"{kLargeBuffer // 1048576}"
                )
        self.device = device
        self.device_memory_bytes = device_memory_bytes
        self.raw_malloc, self.raw_free = raw_malloc, raw_free
        self.max_split_size = max_split_size
        self.max_non_split_rounding_size = max_non_split_rounding_size
        self.roundup_power2_divisions = roundup_power2_divisions
        self.large_segment_size = large_segment_size
        self.large_blocks = BlockPool(small=False)
        self.small_blocks = BlockPool(small=True)
        self.active_blocks: set[Block] = set()
        # NativeCachingAllocator::allocated_blocks: what free() looks an address up in
        self.allocated_blocks: dict[int, Block] = {}
        self.total_allocated_memory = 0
        self.stats = DeviceStats(max_split_size)
        self._next_address = FAKE_BASE_ADDRESS
        # cuda_events: per stream, (event, block) pairs in the order they were recorded
        self.cuda_events: dict[int, deque] = {}
        self._recorded: dict[int, list[Event]] = {}  # the events on each stream, not yet done

    # -- public API: DeviceCachingAllocator::malloc / free / emptyCache / getStats / snapshot --

    def malloc(self, orig_size: int, stream: int = 0) -> Block:
        """Hand out a block of at least ``orig_size`` bytes usable on ``stream``."""
        if orig_size < 0:
            raise RuntimeError(f"cannot allocate a negative number of bytes ({orig_size})")
        self.process_events()  # blocks whose other streams have finished come back first
        size = round_size(orig_size, self.roundup_power2_divisions)
        pool = self.get_pool(size)
        alloc_size = get_allocation_size(size, self.large_segment_size)
        params = AllocParams(size, stream, pool, alloc_size, self.get_stat_types_for_pool(pool))
        block_found = self.get_free_block(params)
        if not block_found:
            block_found = (
                self.alloc_block(params, is_retry=False)
                or (
                    self.release_available_cached_blocks(params) and self.alloc_block(params, False)
                )
                or (self.release_cached_blocks() and self.alloc_block(params, is_retry=True))
            )
        if not block_found:
            self.stats.num_ooms += 1
            raise OutOfMemoryError(self._oom_message(params.alloc_size))
        split_remainder = self.should_split(params.block, params.size)
        return self.alloc_found_block(params, orig_size, split_remainder)

    def free(self, block: Block | int) -> None:
        """Return a block (or the address ``malloc`` handed out) to the cache."""
        ptr = block if isinstance(block, int) else block.ptr
        found = self.allocated_blocks.get(ptr)
        if found is None or (not isinstance(block, int) and found is not block):
            raise RuntimeError(f"invalid device pointer: {ptr:#x}")
        block = self.allocated_blocks.pop(ptr)
        block.allocated = False
        for t in self.get_stat_types_for_pool(block.pool):
            self.stats.allocation[t].decrease(1)
            self.stats.allocated_bytes[t].decrease(block.size)
        if block.size >= self.max_split_size:
            self.stats.oversize_allocations.decrease(1)
        if block.stream_uses:  # used on other streams: cached only once their work is done
            self.insert_events(block)
        else:
            self.free_block(block)

    # -- record_stream: a block used on other streams waits for their events ------------------

    def record_stream(self, block: Block, stream: int) -> None:
        """``recordStream`` (``Tensor.record_stream``): ``block`` is used on ``stream`` too;
        a use on the block's own stream needs no event and is ignored."""
        if stream != block.stream:
            block.stream_uses.add(stream)

    def insert_events(self, block: Block) -> None:
        """``insert_events``: record an event on each stream that used the freed block; the
        block stays out of every pool (still *active*, no longer *allocated*) until all have
        completed."""
        for stream in sorted(block.stream_uses):
            event = Event(stream)
            self._recorded.setdefault(stream, []).append(event)
            block.event_count += 1
            self.cuda_events.setdefault(stream, deque()).append((event, block))
        block.stream_uses = set()

    def process_events(self) -> None:
        """``process_events``, run at the start of every ``malloc``: per stream, pop the
        completed events from the front of the queue (a stream's first pending event stops
        that stream's queue, not the others'); a block whose last event completed is freed."""
        for stream in list(self.cuda_events):
            queue = self.cuda_events[stream]
            while queue and queue[0][0].done:  # cudaEventQuery(*event) == cudaSuccess
                _, block = queue.popleft()
                block.event_count -= 1
                if block.event_count == 0:
                    self.free_block(block)
            if not queue:
                del self.cuda_events[stream]

    def synchronize_and_free_events(self) -> None:
        """``synchronize_and_free_events``: wait for every pending event, then free its block
        (what ``empty_cache`` and the out-of-memory retry do first)."""
        self.stats.num_sync_all_streams += 1
        for queue in self.cuda_events.values():
            for event, block in queue:
                self.stream_synchronize(event.stream)  # cudaEventSynchronize(*event)
                block.event_count -= 1
                if block.event_count == 0:
                    self.free_block(block)
        self.cuda_events.clear()

    def stream_synchronize(self, stream: int) -> None:
        """The model's clock: the work queued on ``stream`` so far is done, so every event
        recorded on it has completed (``cudaStreamSynchronize``)."""
        for event in self._recorded.pop(stream, []):
            event.done = True

    def empty_cache(self) -> None:
        """``emptyCache``: give every fully free segment back to the device."""
        self.release_cached_blocks()

    def memory_stats_as_nested_dict(self) -> dict:
        return self.stats.as_nested_dict()

    def memory_stats(self) -> OrderedDict:
        """``torch.cuda.memory_stats``: the nested stats flattened to dotted, sorted keys."""
        result = []

        def add(prefix, obj):
            if isinstance(obj, dict):
                for k, v in obj.items():
                    add(f"{prefix}.{k}" if prefix else k, v)
            else:
                result.append((prefix, obj))

        add("", self.memory_stats_as_nested_dict())
        return OrderedDict(sorted(result))

    def memory_allocated(self) -> int:
        return self.stats.allocated_bytes[0].current

    def memory_reserved(self) -> int:
        return self.stats.reserved_bytes[0].current

    def reset_peak_memory_stats(self) -> None:  # resetPeakStats
        stats = [s for name in STAT_ARRAYS for s in getattr(self.stats, name)]
        for s in stats + [self.stats.oversize_allocations, self.stats.oversize_segments]:
            s.peak = s.current

    def cached_blocks(self) -> list[Block]:
        """Every cached free block, small pool first, each pool in its own order."""
        return list(self.small_blocks) + list(self.large_blocks)

    def memory_snapshot(self) -> list[dict]:
        """``snapshot()`` as ``torch.cuda.memory_snapshot()`` shows it: segments by address."""
        heads = [b for b in self.cached_blocks() + list(self.active_blocks) if b.prev is None]
        result = []
        for head in heads:
            seg = {
                "device": self.device,
                "address": head.ptr,
                "total_size": 0,
                "allocated_size": 0,
                "active_size": 0,
                "requested_size": 0,
                "stream": head.stream,
                "segment_type": "small" if head.pool.is_small else "large",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": [],
                "blocks": [],
            }
            block = head
            while block is not None:  # active: allocated, or freed with events pending
                active = block.allocated or block.event_count > 0 or bool(block.stream_uses)
                state = "active_allocated" if block.allocated else "active_pending_free"
                seg["blocks"].append(
                    {
                        "address": block.ptr,
                        "size": block.size,
                        "requested_size": block.requested_size,
                        "state": state if active else "inactive",
                        "frames": [],
                    }
                )
                seg["total_size"] += block.size
                if block.allocated:
                    seg["allocated_size"] += block.size
                if active:
                    seg["active_size"] += block.size
                    seg["requested_size"] += block.requested_size
                block = block.next
            result.append(seg)
        return sorted(result, key=lambda s: s["address"])

    # -- the steps of malloc and free, named and ordered as in the C++ --

    def get_pool(self, size: int) -> BlockPool:
        """``if (size <= kSmallSize) return small_blocks; else return large_blocks;``"""
        return self.small_blocks if size <= kSmallSize else self.large_blocks

    @staticmethod
    def get_stat_types_for_pool(pool: BlockPool) -> tuple[int, ...]:
        return (0, 1) if pool.is_small else (0, 2)

    def should_split(self, block: Block, size: int) -> bool:
        """Small pool: ``remaining >= kMinBlockSize``; large pool:
        ``(size < max_split_size()) && (remaining > kSmallSize)``."""
        remaining = block.size - size
        if block.pool.is_small:
            return remaining >= kMinBlockSize
        return size < self.max_split_size and remaining > kSmallSize

    def get_free_block(self, p: AllocParams) -> bool:
        """Best fit: ``pool.blocks.lower_bound(&p.search_key)``, the first block of the same stream
        at least ``p.size`` bytes large, unless the ``max_split_size`` rules turn it down."""
        pool = p.pool
        i = pool.lower_bound(p.stream, p.size)
        if i == len(pool) or pool[i].stream != p.stream:
            return False
        block = pool[i]
        # Do not return an oversized block for a large request
        if p.size < self.max_split_size and block.size >= self.max_split_size:
            return False
        # Allow oversized block size to be rounded up but within a limit
        if p.size >= self.max_split_size and (
            block.size >= p.size + self.max_non_split_rounding_size
        ):
            return False
        p.block = block
        pool.erase(block)
        return True

    def alloc_block(self, p: AllocParams, is_retry: bool) -> bool:
        """``cudaMalloc`` a new segment of ``p.alloc_size`` bytes as one unsplit block."""
        size = p.alloc_size
        if is_retry:
            self.stats.num_alloc_retries += 1
        segment = self._cuda_malloc(size)
        if segment is None:  # cudaErrorMemoryAllocation
            return False
        self.total_allocated_memory += size
        p.block = Block(p.stream, size, p.pool, segment.ptr, segment)
        for t in p.stat_types:
            self.stats.segment[t].increase(1)
            self.stats.reserved_bytes[t].increase(size)
        if size >= self.max_split_size:
            self.stats.oversize_segments.increase(1)
        self.stats.num_device_alloc += 1
        return True

    def alloc_found_block(self, p: AllocParams, orig_size: int, split_remainder: bool) -> Block:
        """Hand out ``p.block``; when splitting, the new block takes the front ``p.size`` bytes and
        the old ``Block`` object, shrunk, goes back to the pool as the remainder."""
        block, pool, stats = p.block, p.pool, self.stats
        already_split = block.is_split()
        if split_remainder:
            remaining = block
            block = Block(p.stream, p.size, pool, remaining.ptr, remaining.segment)
            block.prev = remaining.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = remaining
            remaining.prev = block
            remaining.ptr += p.size
            remaining.size -= p.size
            pool.insert_into_blocks(remaining)
            if already_split:  # an already-split inactive block shrinks by size bytes
                for t in p.stat_types:
                    stats.inactive_split_bytes[t].decrease(block.size)
            else:  # a new inactive split block of remaining.size bytes
                for t in p.stat_types:
                    stats.inactive_split_bytes[t].increase(remaining.size)
                    stats.inactive_split[t].increase(1)
        elif already_split:  # an already-split block becomes active
            for t in p.stat_types:
                stats.inactive_split_bytes[t].decrease(block.size)
                stats.inactive_split[t].decrease(1)
        block.allocated = True
        block.requested_size = orig_size
        self.active_blocks.add(block)
        self.allocated_blocks[block.ptr] = block
        for t in p.stat_types:
            stats.allocation[t].increase(1)
            stats.allocated_bytes[t].increase(block.size)
            stats.active[t].increase(1)
            stats.active_bytes[t].increase(block.size)
            stats.requested_bytes[t].increase(block.requested_size)
        if block.size >= self.max_split_size:
            stats.oversize_allocations.increase(1)
        return block

    def free_block(self, block: Block) -> None:
        """Merge the block with free neighbours (``prev`` then ``next``) and cache it."""
        original_block_size, requested_size = block.size, block.requested_size
        pool = block.pool
        net_blocks = net_bytes = 0
        for candidate in (block.prev, block.next):
            subsumed = self.try_merge_blocks(block, candidate, pool)
            if subsumed > 0:
                net_blocks -= 1
                net_bytes -= subsumed
        self.active_blocks.discard(block)
        inserted = pool.insert_into_blocks(block)
        assert inserted
        if block.is_split():
            net_blocks += 1
            net_bytes += block.size
        for t in self.get_stat_types_for_pool(pool):
            for stat, change in ((self.stats.inactive_split, net_blocks),
                                 (self.stats.inactive_split_bytes, net_bytes)):  # fmt: skip
                if change > 0:
                    stat[t].increase(change)
                elif change < 0:
                    stat[t].decrease(-change)
            self.stats.active[t].decrease(1)
            self.stats.active_bytes[t].decrease(original_block_size)
            self.stats.requested_bytes[t].decrease(requested_size)

    def try_merge_blocks(self, dst: Block, src: Block | None, pool: BlockPool) -> int:
        """Merge the free neighbour ``src`` into ``dst``; the bytes subsumed, or 0."""
        if src is None or src.allocated or src.event_count or src.stream_uses:  # in use
            return 0
        assert dst.is_split() and src.is_split()
        if dst.prev is src:  # [src dst]
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:  # [dst src]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        erased = pool.erase(src)
        assert erased == 1
        return src.size

    def release_available_cached_blocks(self, p: AllocParams) -> bool:
        """Free oversize cached segments (only with a ``max_split_size``), just enough of them."""
        if self.max_split_size == SIZE_MAX:
            return False
        pool = p.pool
        key_size = max(p.size, self.max_split_size)
        i = pool.lower_bound(p.stream, key_size)
        if i == len(pool) or pool[i].stream != p.stream:
            # No single block is large enough; free oversize blocks, starting with the largest
            if i == 0:
                return False
            released, i = 0, i - 1
            while (
                released < key_size
                and pool[i].size >= self.max_split_size
                and pool[i].stream == p.stream
            ):
                current = pool[i]
                released += current.size
                self.release_block(current)
                if i == 0:
                    break
                i -= 1
            if released < key_size:
                return False
        else:
            self.release_block(pool[i])
        return True

    def release_cached_blocks(self) -> bool:
        """``synchronize_and_free_events``, then ``release_blocks`` of the large and small pool."""
        self.synchronize_and_free_events()
        self.release_blocks(self.large_blocks)
        self.release_blocks(self.small_blocks)
        return True

    def release_blocks(self, pool: BlockPool) -> None:
        """``cudaFree`` every cached block that is a whole segment (``!prev && !next``)."""
        for block in pool:
            if block.prev is None and block.next is None:
                self.release_block(block)

    def release_block(self, block: Block) -> None:
        """``cudaFree`` one whole cached segment and drop it from the stats."""
        assert not block.is_split(), "only whole segments go back to the device"
        self.stats.num_device_free += 1
        self._cuda_free(block.segment)
        self.total_allocated_memory -= block.size
        for t in self.get_stat_types_for_pool(block.pool):
            self.stats.segment[t].decrease(1)
            self.stats.reserved_bytes[t].decrease(block.size)
        if block.size >= self.max_split_size:
            self.stats.oversize_segments.decrease(1)
        block.pool.erase(block)

    # -- the device underneath: cudaMalloc / cudaFree / cudaMemGetInfo --

    def _cuda_malloc(self, size: int) -> Segment | None:
        if self.total_allocated_memory + size > self.device_memory_bytes:
            return None
        handle = None
        if self.raw_malloc is not None:
            try:
                handle = self.raw_malloc(size)
            except MemoryError:
                return None
            if handle is None:
                return None
        ptr = _address_of(handle)
        if ptr is None:
            ptr = self._next_address
            self._next_address += size
        return Segment(ptr, size, handle)

    def _cuda_free(self, segment: Segment) -> None:
        if self.raw_free is not None and segment.handle is not None:
            self.raw_free(segment.handle)
        segment.handle = None

    def _oom_message(self, alloc_size: int) -> str:
        allocated, reserved = self.memory_allocated(), self.memory_reserved()
        device_free = self.device_memory_bytes - self.total_allocated_memory
        return (
            f"CUDA out of memory. Tried to allocate {format_size(alloc_size)}. GPU {self.device} "
            f"has a total capacity of {format_size(self.device_memory_bytes)} of which "
            f"{format_size(device_free)} is free. Of the allocated memory "
            f"{format_size(allocated)} is allocated by PyTorch, and "
            f"{format_size(reserved - allocated)} is reserved by PyTorch but unallocated. "
            "If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
            "See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )


def _address_of(handle) -> int | None:
    """The device address of a raw memory object (or the address itself, an ``int``), or
    ``None`` for fake addresses."""
    if handle is None:
        return None
    if isinstance(handle, int):
        return handle
    for attr in ("__cuda_array_interface__", "__array_interface__"):
        try:
            return getattr(handle, attr)["data"][0]
        except AttributeError:
            continue
    return None


def numba_raw_malloc(nbytes: int):
    """``cudaMalloc`` through Numba: a device array of ``nbytes`` uint8 (simulated without a GPU)."""
    import numpy as np
    from numba import cuda

    return cuda.device_array(nbytes, dtype=np.uint8)


class SameAddresses:
    """``raw_malloc`` / ``raw_free`` that put each segment of the model where another allocator
    has just put its own for the same request: the new segment of ``nbytes`` bytes in
    ``snapshot()``, a list of segments as ``torch.cuda.memory_snapshot()`` gives it (or another
    model's :meth:`CUDACachingAllocator.memory_snapshot`).

    ``get_free_block``'s best fit breaks ties between blocks of one size by address (torch's
    ``BlockComparatorSize`` orders by stream, size, then pointer). Two allocators whose
    segments lie in another order can take different blocks of the same size, then split and
    merge differently, and their statistics drift apart. So a model replayed beside
    ``torch.cuda`` needs torch's addresses to agree with it event by event: replay each event in
    the other allocator first, then in the model. Segments already in the snapshot when this
    is made are never handed out."""

    def __init__(self, snapshot):
        self.snapshot = snapshot
        self.taken = {s["address"] for s in snapshot()}

    def malloc(self, nbytes: int):
        new = [
            s["address"]
            for s in self.snapshot()
            if s["address"] not in self.taken and s["total_size"] == nbytes
        ]
        if len(new) != 1:
            raise RuntimeError(
                f"SameAddresses: the model asks cudaMalloc for a segment of {nbytes} bytes, and "
                f"the other allocator has {len(new)} new segments of that size (expected 1): "
                "the two made different decisions before this event, or the event was not "
                "replayed in the other allocator first"
            )
        self.taken.add(new[0])
        return new[0]

    def free(self, handle) -> None:
        self.taken.discard(_address_of(handle))


def storage_allocator(allocator: CUDACachingAllocator, stream: int = 0):
    """A ``fn(nbytes) -> device array`` for ``retorch.tensor.storage.set_cuda_allocator``:
    each array is a block's memory, and the block is freed when the array is collected (keep the
    array itself, not only slices of it, for as long as the memory is used).

    torch's allocator holds a mutex in ``malloc`` and ``free``. Here a free can also arrive in the
    middle of a ``malloc`` (the garbage collector may run there and collect a storage), so a free
    that finds the allocator busy waits in a list that the next call empties."""
    busy = threading.Lock()
    waiting: list[Block] = []

    def free_waiting() -> None:
        while waiting:
            allocator.free(waiting.pop())

    def free(block: Block) -> None:
        waiting.append(block)
        if busy.acquire(blocking=False):
            try:
                free_waiting()
            finally:
                busy.release()

    def allocate(nbytes: int):
        if nbytes == 0:  # NativeCachingAllocator::allocate: `if (size != 0) this->malloc(...)`
            return numba_raw_malloc(0)
        with busy:
            free_waiting()
            block = allocator.malloc(nbytes, _stream_of(allocator, nbytes, stream))
            free_waiting()  # the frees that arrived during malloc
        memory = block.memory()[:nbytes]
        weakref.finalize(memory, free, block)
        return memory

    def settle() -> None:
        """Apply the frees that are waiting (before reading the counters)."""
        with busy:
            free_waiting()

    allocate.settle = settle
    return allocate


# -- the allocator every CUDA storage uses: c10::cuda::CUDACachingAllocator::get() --

_caching_allocator: CUDACachingAllocator | None = None
_storage_allocate = None


def cuda_caching_allocator() -> CUDACachingAllocator:
    """The model every CUDA storage of ``retorch.tensor`` gets its bytes from, as every CUDA
    tensor's bytes come from ``c10::cuda::CUDACachingAllocator`` in torch. Made at first use,
    for the current device's memory (segments from :func:`numba_raw_malloc`)."""
    global _caching_allocator, _storage_allocate
    if _caching_allocator is None:
        from numba import cuda

        total = cuda.current_context().get_memory_info()[1]  # inf under the simulator
        _caching_allocator = CUDACachingAllocator(
            total, raw_malloc=numba_raw_malloc, device=getattr(cuda.get_current_device(), "id", 0)
        )
        _storage_allocate = storage_allocator(_caching_allocator, None)  # the current stream's
    return _caching_allocator


def cuda_storage_bytes(nbytes: int):
    """The default of ``retorch.tensor.storage``'s CUDA allocation: a block of the caching
    allocator, as a device array of ``nbytes`` uint8."""
    cuda_caching_allocator()
    return _kept_by_graph(_storage_allocate(nbytes))


def _settled() -> CUDACachingAllocator:
    a = cuda_caching_allocator()
    _storage_allocate.settle()
    return a


def memory_stats() -> dict:
    """``torch.cuda.memory_stats()`` of retorch's CUDA tensors: the caching allocator's counters."""
    return _settled().memory_stats()


def memory_allocated() -> int:
    """``torch.cuda.memory_allocated()``: bytes in blocks that tensors hold."""
    return _settled().memory_allocated()


def memory_reserved() -> int:
    """``torch.cuda.memory_reserved()``: bytes in segments the allocator holds."""
    return _settled().memory_reserved()


def memory_snapshot() -> list[dict]:
    """``torch.cuda.memory_snapshot()``: the segments and their blocks."""
    return _settled().memory_snapshot()


def empty_cache() -> None:
    """``torch.cuda.empty_cache()``: give every unused cached segment back (``cudaFree``)."""
    _settled().empty_cache()


# -- traces: record one from real torch, replay it through the model, plot the timeline --


class Trace(list):
    """A list of ``("alloc", id, nbytes)`` and ``("free", id)`` events; ``ops[id]`` names the
    aten op that allocated ``id`` (when the trace was recorded from torch)."""

    def __init__(self, events=(), ops=None):
        super().__init__(events)
        self.ops: dict[int, str] = dict(ops or {})


def record_trace(fn, *args, **kwargs) -> Trace:
    """Run ``fn(*args, **kwargs)`` under a ``TorchDispatchMode`` and record every storage that an
    aten op creates (its ``nbytes``) and the moment that storage dies.

    ``torch.cuda.memory._record_memory_history`` needs a GPU; this is its CPU stand-in at the
    level of storages. A storage is new when an op returns a tensor whose storage is neither an
    input's (views and in-place results are not allocations) nor already recorded; its death is
    seen by a ``weakref.finalize`` on the ``UntypedStorage`` object, which torch keeps alive as
    long as the C++ ``StorageImpl`` lives (so a storage saved for backward dies in backward, not
    when its last Python tensor goes). Garbage collection of cycles is paused while recording, so
    the trace is the same on every run. Not seen: scratch memory a kernel allocates and frees
    inside one op, and storages that are still alive when ``fn`` returns (they get no "free").
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    trace = Trace()
    live: dict[int, weakref.finalize] = {}  # StorageImpl address -> finalizer
    ids = itertools.count()
    recording = False

    def died(key: int, alloc_id: int) -> None:
        live.pop(key, None)
        if recording:
            trace.append(("free", alloc_id))

    def storages(tree):
        return [
            t.untyped_storage()
            for t in tree_flatten(tree)[0]
            if isinstance(t, torch.Tensor) and t.layout == torch.strided
        ]

    class AllocationRecorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not recording:
                return out
            inputs = {s._cdata for s in storages((args, kwargs))}
            for s in storages(out):
                key = s._cdata
                if key in inputs or key in live or s.nbytes() == 0:
                    continue
                alloc_id = next(ids)
                trace.append(("alloc", alloc_id, s.nbytes()))
                trace.ops[alloc_id] = str(func)
                live[key] = weakref.finalize(s, died, key, alloc_id)
            return out

    # The first dispatch through a Python mode in a process imports and caches helpers and
    # leaves reference cycles that hold the caller's frame; run one op first so that they do not
    # keep fn's last tensor alive, and collect them before the collector is paused.
    with AllocationRecorder():
        torch.ones(1).mul(2)
    recording = True
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        with AllocationRecorder():
            fn(*args, **kwargs)
    finally:
        recording = False
        for finalizer in list(live.values()):
            finalizer.detach()
        if gc_was_enabled:
            gc.enable()
    return trace


def random_trace(events: int = 300, seed: int = 0) -> Trace:
    """``events`` random requests and frees: each event frees a live allocation with probability
    0.45 (when one is live), else requests 1 byte up to 4 KiB, 1 MiB, 12 MiB or 48 MiB (each
    bound equally likely), so that both pools, splits and merges all occur. Allocations still
    live at the end get no "free"."""
    import numpy as np

    rng = np.random.default_rng(seed)
    trace, live, next_id = Trace(), [], 0
    for _ in range(events):
        if live and rng.random() < 0.45:
            trace.append(("free", live.pop(int(rng.integers(len(live))))))
        else:
            bound = [4096, 2**20, 12 * 2**20, 48 * 2**20][int(rng.integers(4))]
            trace.append(("alloc", next_id, int(rng.integers(1, bound))))
            live.append(next_id)
            next_id += 1
    return trace


@dataclass
class Timeline:
    """The allocator's state after each event of a replayed trace (one entry per event).

    ``fragmentation`` is external fragmentation of the cache: 1 - (largest cached free block /
    all cached free bytes), 0 when nothing is cached; ``inactive_split`` is torch's
    ``inactive_split_bytes.all.current`` (free bytes in segments that cannot be released) and
    ``inactive_split_blocks`` its ``inactive_split.all.current`` (how many such free blocks).
    """

    events: list
    allocated: list[int] = field(default_factory=list)
    reserved: list[int] = field(default_factory=list)
    inactive_split: list[int] = field(default_factory=list)
    inactive_split_blocks: list[int] = field(default_factory=list)
    largest_free: list[int] = field(default_factory=list)
    fragmentation: list[float] = field(default_factory=list)
    allocator: CUDACachingAllocator | None = field(default=None, repr=False)

    def record(self, allocator: CUDACachingAllocator) -> None:
        free = [b.size for b in allocator.cached_blocks()]
        cached, largest = sum(free), max(free, default=0)
        self.allocated.append(allocator.memory_allocated())
        self.reserved.append(allocator.memory_reserved())
        self.inactive_split.append(allocator.stats.inactive_split_bytes[0].current)
        self.inactive_split_blocks.append(allocator.stats.inactive_split[0].current)
        self.largest_free.append(largest)
        self.fragmentation.append(1 - largest / cached if cached else 0.0)


def replay(
    trace, allocator: CUDACachingAllocator | None = None, device_memory_bytes: int = 80 * 2**30
) -> Timeline:
    """Run ``trace`` through ``allocator`` (a fresh one of ``device_memory_bytes`` by default).

    Events: ``("alloc", id, nbytes)`` or ``("alloc", id, nbytes, stream)``, ``("free", id)`` and
    ``("empty_cache",)``. An allocation that does not fit raises :class:`OutOfMemoryError`.
    """
    allocator = allocator or CUDACachingAllocator(device_memory_bytes)
    timeline = Timeline(events=list(trace), allocator=allocator)
    live: dict[object, Block] = {}
    for i, event in enumerate(trace):
        kind = event[0]
        if kind == "alloc":
            alloc_id, nbytes = event[1], event[2]
            if alloc_id in live:
                raise ValueError(f"event {i}: id {alloc_id!r} is allocated twice without a free")
            live[alloc_id] = allocator.malloc(nbytes, event[3] if len(event) > 3 else 0)
        elif kind == "free":
            if event[1] not in live:
                raise KeyError(f"event {i}: free of id {event[1]!r}, which is not allocated")
            allocator.free(live.pop(event[1]))
        elif kind == "empty_cache":
            allocator.empty_cache()
        else:
            raise ValueError(
                f"event {i}: unknown kind {kind!r} (use 'alloc', 'free', 'empty_cache')"
            )
        timeline.record(allocator)
    return timeline


def plot_timeline(timeline: Timeline, ax=None, title: str | None = None):
    """Reserved against allocated MiB over the events, fragmentation on a second axis."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 3.5))
    mib = 1048576
    x = range(len(timeline.reserved))
    reserved = [r / mib for r in timeline.reserved]
    allocated = [a / mib for a in timeline.allocated]
    ax.step(x, reserved, where="post", color="tab:red", label="reserved (segments)")
    ax.step(x, allocated, where="post", color="tab:blue", label="allocated (blocks in use)")
    ax.fill_between(x, allocated, reserved, step="post", color="tab:red", alpha=0.15)
    ax.set_xlabel("trace event")
    ax.set_ylabel("MiB")
    ax.set_ylim(bottom=0)
    frag = ax.twinx()
    frag.step(x, timeline.fragmentation, where="post", color="0.4", ls=":", label="fragmentation")
    frag.set_ylim(0, 1)
    frag.set_ylabel("fragmentation of the cache")
    lines = ax.get_legend_handles_labels()
    more = frag.get_legend_handles_labels()
    ax.legend(
        lines[0] + more[0],
        lines[1] + more[1],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2),
        ncol=3,
        frameon=False,
        fontsize="small",
    )
    if title:
        ax.set_title(title)
    return ax


# -- streams (retorch/cuda_streams.py) and CUDA graphs (retorch/cuda_graphs.py) ---------------
# Kept at the end of the file: chapter 4 prints the line numbers of the functions above.

#: While a CUDA graph captures: ``fn(nbytes, stream id)`` before a CUDA storage's malloc,
#: raising for an allocation outside the graph's private pool, and ``fn(nbytes, sid, memory)``
#: after it, so the graph keeps the memory (static addresses).
_POOL_HOOK = None


def _stream_of(allocator: CUDACachingAllocator, nbytes: int, stream: int | None) -> int:
    """The stream a CUDA storage's block is for: ``stream``, or with ``None`` the current one
    (``retorch.cuda.current_stream()``), so each stream has its own pool, as torch keys blocks
    by stream (``BlockComparatorSize``). On a GPU, the first call makes ``record_stream``'s
    events real ones (:func:`_insert_real_events`)."""
    if stream is None:
        from ..cuda_streams import current_stream

        stream = current_stream().stream_id
    if _POOL_HOOK is not None:
        _POOL_HOOK(nbytes, stream)
    if "insert_events" not in vars(allocator) and not _simulated_cuda():
        allocator.insert_events = lambda block: _insert_real_events(allocator, block)
    return stream


def _kept_by_graph(memory):
    if _POOL_HOOK is not None:
        _POOL_HOOK(memory.shape[0], None, memory)
    return memory


def _simulated_cuda() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)


class _RealEvent(Event):
    """A model event with a real CUDA event behind it: done once ``cudaEventQuery`` says so."""

    @property
    def done(self) -> bool:
        if not self.__dict__["done"] and self.handle.query():
            self.__dict__["done"] = True
        return self.__dict__["done"]

    @done.setter
    def done(self, value: bool) -> None:
        self.__dict__["done"] = value


def _insert_real_events(allocator: CUDACachingAllocator, block: Block) -> None:
    """``insert_events`` on a GPU: the model's events, each with a real event recorded on its
    stream now (``cudaEventRecord(*event, stream)``), which ``process_events`` queries."""
    from ..cuda_streams import Event as CudaEvent
    from ..cuda_streams import stream_by_id

    streams = sorted(block.stream_uses)
    CUDACachingAllocator.insert_events(allocator, block)
    for stream in streams:
        event = allocator.cuda_events[stream][-1][0]
        event.__class__ = _RealEvent
        event.handle = CudaEvent()
        event.handle.record(stream_by_id(stream))


def record_stream_of(tensor, stream_id: int) -> None:
    """``CUDACachingAllocator::recordStream`` for a retorch CUDA tensor: its storage's block is
    used on ``stream_id`` too (a no-op for memory the caching allocator did not hand out)."""
    a = _settled()
    block = a.allocated_blocks.get(int(tensor.untyped_storage().data_ptr()))
    if block is not None:
        a.record_stream(block, stream_id)


# -- memory in practice: the history of retorch's CUDA storages, drawn as torch's viewer does --
import contextlib  # noqa: E402  (here, not at the top: chapter 4 lists the lines above)


@contextlib.contextmanager
def record_memory_history():
    """``torch.cuda.memory._record_memory_history`` for retorch's CUDA tensors: yields a list
    that receives ``("alloc", ptr, size)`` and ``("free", ptr, size)`` for each block the caching
    allocator hands out or takes back inside the block, in order. Garbage collection of cycles
    is paused meanwhile, so the history is the same on every run."""
    a = cuda_caching_allocator()
    history: list[tuple[str, int, int]] = []
    malloc, free = a.malloc, a.free

    def logged_malloc(size: int, stream: int = 0) -> Block:
        block = malloc(size, stream)
        history.append(("alloc", block.ptr, block.size))
        return block

    def logged_free(block) -> None:
        ptr = block if isinstance(block, int) else block.ptr
        size = a.allocated_blocks[ptr].size
        free(block)
        history.append(("free", ptr, size))

    gc.collect()
    _storage_allocate.settle()
    was_enabled = gc.isenabled()
    gc.disable()
    a.malloc, a.free = logged_malloc, logged_free
    try:
        yield history
        _storage_allocate.settle()
    finally:
        del a.malloc, a.free
        if was_enabled:
            gc.enable()


def plot_active_memory(history, ax=None, title: str | None = None):
    """The "Active Memory Timeline" of torch's memory viewer (``torch/cuda/_memory_viz.py``):
    each live block a band, stacked in the order the blocks were allocated; a free drops the
    bands above it down. x: the history's events, y: KiB."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 2.6))
    live: list[tuple[int, int]] = []  # (ptr, size), oldest first
    bands: dict[tuple[int, int], list] = {}  # (ptr, first event) -> [(x, bottom, size)]
    first: dict[int, int] = {}
    for x, (kind, ptr, size) in enumerate(history):
        if kind == "alloc":
            live.append((ptr, size))
            first[ptr] = x
        else:
            live.remove((ptr, size))
        bottom = 0
        for p, s in live:
            bands.setdefault((p, first[p]), []).append((x, bottom, s))
            bottom += s
    for i, points in enumerate(bands.values()):
        xs = [p[0] for p in points]
        lo = [p[1] / 1024 for p in points]
        hi = [(p[1] + p[2]) / 1024 for p in points]
        ax.fill_between(xs, lo, hi, step="post", color=plt.cm.tab20(i % 20), lw=0)
    ax.set_xlabel("allocator event")
    ax.set_ylabel("KiB allocated")
    if title:
        ax.set_title(title, fontsize=10)
    return ax


# -- peak statistics of retorch's CUDA tensors, as torch/cuda/memory.py's --


def reset_peak_memory_stats() -> None:
    """``torch.cuda.reset_peak_memory_stats()``: every peak counter starts again from its current
    value (``resetPeakStats``)."""
    _settled().reset_peak_memory_stats()


def max_memory_allocated() -> int:
    """``torch.cuda.max_memory_allocated()``: the peak of bytes in blocks that tensors hold since
    the start or the last :func:`reset_peak_memory_stats`."""
    return memory_stats()["allocated_bytes.all.peak"]

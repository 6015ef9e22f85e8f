"""Tests of retorch.tensor.allocator, the model of c10/cuda/CUDACachingAllocator.cpp.

The expected numbers come from torch's rules, quoted next to each test from
c10/cuda/CUDACachingAllocator.cpp (functions named as there) and from the headers torch 2.13
installs (torch/include/c10/core/AllocatorConfig.h, CachingDeviceAllocator.h): this CPU build has
no CUDA allocator to run, so ``torch.cuda.memory_stats()`` is compared only where a GPU is present.
"""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from retorch.tensor import allocator as A
from retorch.tensor.allocator import (
    SIZE_MAX,
    CUDACachingAllocator,
    OutOfMemoryError,
    SameAddresses,
    format_size,
    get_allocation_size,
    kLargeBuffer,
    kMinBlockSize,
    kMinLargeAlloc,
    kRoundLarge,
    kSmallBuffer,
    kSmallSize,
    random_trace,
    record_trace,
    replay,
    round_size,
    roundup_power2_next_division,
)

KiB, MiB, GiB = 1024, 1024**2, 1024**3


def stat(alloc, name):
    return alloc.memory_stats()[name]


# -- the constants and the rounding rules ------------------------------------------------------


def test_constants_equal_the_headers_torch_installs():
    header = Path(torch.__file__).parent / "include/c10/core/AllocatorConfig.h"
    found = dict(re.findall(r"constexpr size_t (k\w+) = (\d+);", header.read_text()))
    ours = {
        "kSmallBuffer": kSmallBuffer,
        "kMinBlockSize": kMinBlockSize,
        "kSmallSize": kSmallSize,
        "kMinLargeAlloc": kMinLargeAlloc,
        "kRoundLarge": kRoundLarge,
    }
    assert {k: int(found[k]) for k in ours} == ours
    # kLargeBuffer is the default of AcceleratorAllocatorConfig::large_segment_size_ in v2.13.0
    text = header.read_text()
    assert int(re.search(r"large_segment_size_\{(\d+)\}", text).group(1)) == kLargeBuffer
    assert "max_split_size_{std::numeric_limits<size_t>::max()}" in text and SIZE_MAX == 2**64 - 1


@pytest.mark.parametrize(
    "size, rounded",
    [
        # round_size: `if (size < kMinBlockSize) return kMinBlockSize;`
        (0, 512),
        (1, 512),
        (511, 512),
        # else `kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize)`
        (512, 512),
        (513, 1024),
        (1000, 1024),
        (MiB, MiB),
        (MiB + 1, MiB + 512),
        (10 * MiB - 1, 10 * MiB),
    ],
)
def test_round_size_rounds_up_to_512(size, rounded):
    assert round_size(size) == rounded


def test_roundup_power2_divisions():
    # the C++ comment's own example: "round-up 1200 and number of divisions is 4 ... return 1280"
    assert roundup_power2_next_division(1200, 4) == 1280
    assert roundup_power2_next_division(4096, 4) == 4096  # isPowerOf2_64: returned as is
    # round_size uses it only when `divisions > 1 && size > (kMinBlockSize * divisions)`
    assert round_size(1200, 4) == 1536  # 1200 <= 2048: plain 512 rounding
    assert round_size(3000, 4) == 3072  # 2048 + 2 * (2048 / 4)
    assert round_size(MiB + 1, 8) == MiB + 128 * KiB
    # between 4096 and 8192 the 4 divisions are 1024 apart: coarser than 512-byte rounding
    assert round_size(4200, 4) == 5120 and round_size(4200) == 4608
    with pytest.raises(RuntimeError, match="Only 2 or more divisions"):
        roundup_power2_next_division(1200, 1)


@pytest.mark.parametrize(
    "size, segment",
    [
        # get_allocation_size: `if (size <= kSmallSize) return kSmallBuffer;`
        (512, 2 * MiB),
        (MiB, 2 * MiB),
        # `else if (size < kMinLargeAlloc) return kLargeBuffer;`
        (MiB + 512, 20 * MiB),
        (10 * MiB - 512, 20 * MiB),
        # `else return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);`
        (10 * MiB, 10 * MiB),
        (10 * MiB + 512, 12 * MiB),
        (21 * MiB, 22 * MiB),
    ],
)
def test_get_allocation_size(size, segment):
    assert get_allocation_size(size) == segment


def test_large_segment_size_is_configurable():
    # PYTORCH_CUDA_ALLOC_CONF=large_segment_size_mb:40 in torch 2.13
    a = CUDACachingAllocator(GiB, large_segment_size=40 * MiB)
    a.malloc(5 * MiB)
    assert stat(a, "reserved_bytes.all.current") == 40 * MiB


@pytest.mark.parametrize(
    "size, text",
    [
        (0, "0 bytes"),
        (1024, "1024 bytes"),
        (1025, "1.00 KiB"),
        (MiB, "1024.00 KiB"),
        (2 * MiB, "2.00 MiB"),
        (GiB, "1024.00 MiB"),
        (80 * GiB, "80.00 GiB"),
    ],
)
def test_format_size(size, text):
    # format_size: `size <= 1024` bytes, `<= 1048576` KiB, `<= 1073741824` MiB, else GiB
    assert format_size(size) == text


# -- pools, splitting, best fit, streams, merging ------------------------------------------------


def test_pool_choice_and_first_segments():
    a = CUDACachingAllocator(GiB)
    small = a.malloc(MiB)  # get_pool: `if (size <= kSmallSize) return small_blocks;`
    large = a.malloc(MiB + 1)
    assert small.pool is a.small_blocks and large.pool is a.large_blocks
    s = a.memory_stats()
    assert s["segment.small_pool.current"] == 1 and s["segment.large_pool.current"] == 1
    assert s["reserved_bytes.small_pool.current"] == 2 * MiB
    assert s["reserved_bytes.large_pool.current"] == 20 * MiB
    assert s["allocated_bytes.all.current"] == MiB + MiB + 512
    assert s["requested_bytes.all.current"] == MiB + MiB + 1
    assert [seg["segment_type"] for seg in a.memory_snapshot()] == ["small", "large"]


def test_small_request_splits_a_2mib_segment():
    a = CUDACachingAllocator(GiB)
    b = a.malloc(100)
    # should_split, small pool: `return remaining >= kMinBlockSize;`
    assert (b.size, b.requested_size) == (512, 100)
    assert stat(a, "inactive_split_bytes.all.current") == 2 * MiB - 512
    assert stat(a, "inactive_split.small_pool.current") == 1
    a.free(b)  # free_block merges it back with its free neighbour
    assert stat(a, "inactive_split.all.current") == 0
    assert stat(a, "inactive_split_bytes.all.current") == 0
    assert [len(seg["blocks"]) for seg in a.memory_snapshot()] == [1]


def test_large_split_needs_more_than_1mib_left():
    a = CUDACachingAllocator(GiB)
    # 5 MiB < kMinLargeAlloc: a 20 MiB segment; 15 MiB left > kSmallSize: split
    five = a.malloc(5 * MiB)
    assert five.size == 5 * MiB and five.is_split()
    assert stat(a, "inactive_split_bytes.large_pool.current") == 15 * MiB
    # 19 MiB >= kMinLargeAlloc: a 20 MiB segment; 1 MiB left is not > kSmallSize: no split,
    # so the whole 20 MiB block counts as allocated
    nineteen = a.malloc(19 * MiB)
    assert nineteen.size == 20 * MiB and not nineteen.is_split()
    # 11 MiB fits the cached 15 MiB rest of the first segment, which splits again (4 MiB left)
    eleven = a.malloc(11 * MiB)
    assert eleven.segment is five.segment and eleven.size == 11 * MiB
    s = a.memory_stats()
    assert s["allocated_bytes.all.current"] == 36 * MiB
    assert s["requested_bytes.all.current"] == 35 * MiB
    assert s["reserved_bytes.all.current"] == 40 * MiB
    assert s["segment.all.current"] == 2
    assert s["inactive_split_bytes.all.current"] == 4 * MiB
    # with nothing cached, 11 MiB gets a 12 MiB segment and keeps the 1 MiB rest in its block
    assert CUDACachingAllocator(GiB).malloc(11 * MiB).size == 12 * MiB


def test_best_fit_then_lowest_address():
    a = CUDACachingAllocator(GiB)
    blocks = [a.malloc(n * MiB) for n in (16, 12, 14, 12)]
    for b in blocks:
        a.free(b)
    # get_free_block: lower_bound of (stream, size) in BlockComparatorSize order
    got = a.malloc(13 * MiB)
    assert got.ptr == blocks[2].ptr and got.size == 14 * MiB
    got12 = a.malloc(11 * MiB)  # two free 12 MiB blocks: the lower address wins
    assert got12.ptr == min(blocks[1].ptr, blocks[3].ptr)


def test_free_blocks_are_reused_only_on_their_stream():
    a = CUDACachingAllocator(GiB)
    b = a.malloc(4 * KiB, stream=0)
    ptr = b.ptr
    a.free(b)  # b merges with the rest of its segment; the Block object lives on in the cache
    other = a.malloc(4 * KiB, stream=1)
    assert stat(a, "segment.all.current") == 2
    assert a.memory_snapshot()[1]["stream"] == 1 and other.stream == 1
    same = a.malloc(4 * KiB, stream=0)
    assert same.ptr == ptr and stat(a, "segment.all.current") == 2


def test_merging_three_neighbours_in_any_order():
    a = CUDACachingAllocator(GiB)
    x, y, z = (a.malloc(512) for _ in range(3))
    assert y.ptr == x.ptr + 512 and z.ptr == y.ptr + 512
    a.free(x)
    a.free(z)  # z merges with the free rest of the segment
    assert [b["state"] for b in a.memory_snapshot()[0]["blocks"]] == [
        "inactive",
        "active_allocated",
        "inactive",
    ]
    assert stat(a, "inactive_split.all.current") == 2
    a.free(y)
    seg = a.memory_snapshot()[0]
    assert len(seg["blocks"]) == 1 and seg["blocks"][0]["size"] == 2 * MiB
    assert stat(a, "inactive_split.all.current") == 0
    assert stat(a, "inactive_split.all.freed") == stat(a, "inactive_split.all.allocated")


def test_empty_cache_releases_only_fully_free_segments():
    a = CUDACachingAllocator(GiB)
    keep = a.malloc(512)  # its 2 MiB segment stays split
    whole = a.malloc(12 * MiB)  # a 12 MiB segment
    gone = a.malloc(5 * MiB)  # a 20 MiB segment, split, merged whole again when freed
    a.free(gone)
    a.free(whole)
    before = a.memory_stats()
    a.empty_cache()
    s = a.memory_stats()
    assert s["reserved_bytes.all.current"] == 2 * MiB
    assert s["reserved_bytes.all.freed"] == 32 * MiB
    assert s["segment.all.current"] == 1 and s["num_device_free"] == 2
    assert s["num_sync_all_streams"] == before["num_sync_all_streams"] + 1
    assert s["reserved_bytes.all.peak"] == before["reserved_bytes.all.peak"] == 34 * MiB
    assert [seg["address"] for seg in a.memory_snapshot()] == [keep.segment.ptr]


# -- the out-of-memory path ----------------------------------------------------------------------


def test_oom_frees_the_cache_and_retries():
    a = CUDACachingAllocator(40 * MiB)
    a.free(a.malloc(5 * MiB))  # a cached 20 MiB segment
    big = a.malloc(30 * MiB)  # 20 + 30 > 40: release_cached_blocks, then the retry fits
    assert big.size == 30 * MiB
    s = a.memory_stats()
    assert (s["num_alloc_retries"], s["num_ooms"], s["num_device_free"]) == (1, 0, 1)
    assert s["reserved_bytes.all.current"] == 30 * MiB and s["reserved_bytes.all.peak"] == 30 * MiB


def test_oom_raises_torchs_error_and_message():
    a = CUDACachingAllocator(40 * MiB)
    held = a.malloc(30 * MiB)
    with pytest.raises(OutOfMemoryError) as info:
        a.malloc(11 * MiB)
    assert isinstance(info.value, RuntimeError)
    assert str(info.value).startswith(
        "CUDA out of memory. Tried to allocate 12.00 MiB. GPU 0 has a total capacity of "
        "40.00 MiB of which 10.00 MiB is free. Of the allocated memory 30.00 MiB is allocated "
        "by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    )
    s = a.memory_stats()
    assert (s["num_ooms"], s["num_alloc_retries"]) == (1, 1)
    assert s["allocated_bytes.all.current"] == held.size  # nothing changed


def test_max_split_size_keeps_oversize_blocks_whole():
    with pytest.raises(ValueError, match="max_split_size_mb too small, must be >= 20"):
        CUDACachingAllocator(GiB, max_split_size=20 * MiB - 1)
    CUDACachingAllocator(GiB, max_split_size=20 * MiB)  # torch 2.13 accepts 20
    a = CUDACachingAllocator(GiB, max_split_size=40 * MiB)
    assert stat(a, "max_split_size") == 40 * MiB
    assert stat(CUDACachingAllocator(GiB), "max_split_size") == -1  # SIZE_MAX as int64
    big = a.malloc(50 * MiB)
    assert stat(a, "oversize_segments.current") == 1
    assert stat(a, "oversize_allocations.current") == 1
    a.free(big)
    # get_free_block: "Do not return an oversized block for a large request"
    small = a.malloc(5 * MiB)
    assert small.segment is not big.segment
    # "Allow oversized block size to be rounded up but within a limit" (20 MiB)
    assert a.malloc(45 * MiB).ptr == big.ptr
    assert stat(a, "allocated_bytes.all.current") == 50 * MiB + 5 * MiB


def test_release_available_cached_blocks_frees_one_oversize_block():
    a = CUDACachingAllocator(90 * MiB, max_split_size=40 * MiB)
    held = a.malloc(30 * MiB)
    a.free(a.malloc(50 * MiB))  # cached, oversize
    # 21 MiB needs a 22 MiB segment: 80 + 22 > 90; the 50 MiB block is released first, so the
    # second try succeeds without counting a retry
    got = a.malloc(21 * MiB)
    s = a.memory_stats()
    assert (s["num_alloc_retries"], s["num_device_free"], s["num_ooms"]) == (0, 1, 0)
    assert s["reserved_bytes.all.current"] == held.size + got.size == 52 * MiB


def test_release_available_cached_blocks_frees_the_largest_first():
    a = CUDACachingAllocator(200 * MiB, max_split_size=40 * MiB)
    held = a.malloc(30 * MiB)
    cached = [a.malloc(n * MiB) for n in (26, 44, 50)]
    for b in cached:
        a.free(b)
    # 60 MiB: no cached block is large enough and 30 + 26 + 44 + 50 + 60 > 200. "No single block
    # is large enough; free multiple oversize blocks, starting with the largest": 50, then 44
    # (94 >= 60); the 26 MiB block is not oversize and stays
    a.malloc(60 * MiB)
    s = a.memory_stats()
    assert (s["num_alloc_retries"], s["num_device_free"]) == (0, 2)
    assert sorted(b.size for b in a.cached_blocks()) == [26 * MiB]
    assert s["reserved_bytes.all.current"] == held.size + 26 * MiB + 60 * MiB


def test_misuse_is_reported_as_torch_does():
    a = CUDACachingAllocator(GiB)
    b = a.malloc(4096)
    a.free(b.ptr)  # free by address, as NativeCachingAllocator::free(void*)
    with pytest.raises(RuntimeError, match="invalid device pointer: 0x"):
        a.free(b)
    with pytest.raises(RuntimeError, match="negative"):
        a.malloc(-1)
    with pytest.raises(RuntimeError, match="fake addresses only"):
        a.malloc(8).memory()


def test_memory_stats_names_are_torchs():
    keys = set(CUDACachingAllocator(GiB).memory_stats())
    metrics = ("current", "peak", "allocated", "freed")
    expected = {
        f"{name}.{pool}.{m}" for name in A.STAT_ARRAYS for pool in A.STAT_TYPES for m in metrics
    }
    expected |= {
        f"{name}.{m}" for name in ("oversize_allocations", "oversize_segments") for m in metrics
    }
    expected |= {
        "num_alloc_retries",
        "num_ooms",
        "max_split_size",
        "num_sync_all_streams",
        "num_device_alloc",
        "num_device_free",
        "num_oom_rejections",
    }
    assert keys == expected
    assert "allocated_bytes.all.current" in keys and "reserved_bytes.large_pool.peak" in keys
    # torch.cuda.memory_stats sorts the flattened keys
    assert list(CUDACachingAllocator(GiB).memory_stats()) == sorted(expected)


def test_reset_peak_memory_stats():
    a = CUDACachingAllocator(GiB)
    a.free(a.malloc(5 * MiB))
    assert stat(a, "allocated_bytes.all.peak") == 5 * MiB
    a.reset_peak_memory_stats()
    assert stat(a, "allocated_bytes.all.peak") == 0
    assert stat(a, "reserved_bytes.all.peak") == 20 * MiB


# -- random traces: the invariants -----------------------------------------------------------------


def check_invariants(a: CUDACachingAllocator, held: list, previous_peaks: dict) -> dict:
    """Check the allocator against the blocks the test holds; return the peaks for next time."""
    snap, s = a.memory_snapshot(), a.memory_stats()
    # every segment is tiled by its blocks, segments do not overlap
    end = None
    for seg in snap:
        assert end is None or seg["address"] >= end
        address = seg["address"]
        for b in seg["blocks"]:
            assert b["address"] == address
            address += b["size"]
        assert address - seg["address"] == seg["total_size"]
        end = address
        states = [b["state"] for b in seg["blocks"]]
        assert not any(x == y == "inactive" for x, y in zip(states, states[1:])), "unmerged"
    # the blocks the test holds do not overlap, and are exactly the allocated ones
    spans = sorted((b.ptr, b.ptr + b.size) for b in held)
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:])), "live blocks overlap"
    allocated = sorted(
        (b["address"], b["address"] + b["size"])
        for seg in snap
        for b in seg["blocks"]
        if b["state"] == "active_allocated"
    )
    assert allocated == spans
    # every byte is accounted for: allocated + cached free = reserved, per pool too
    for pool, kind in (("small_pool", "small"), ("large_pool", "large")):
        segs = [seg for seg in snap if seg["segment_type"] == kind]
        free = [b["size"] for seg in segs for b in seg["blocks"] if b["state"] == "inactive"]
        split_free = [
            b["size"]
            for seg in segs
            if len(seg["blocks"]) > 1
            for b in seg["blocks"]
            if b["state"] == "inactive"
        ]
        mine = [b for b in held if b.pool.is_small == (kind == "small")]
        reserved = sum(seg["total_size"] for seg in segs)
        assert s[f"reserved_bytes.{pool}.current"] == reserved
        assert s[f"allocated_bytes.{pool}.current"] == sum(b.size for b in mine)
        assert s[f"allocated_bytes.{pool}.current"] + sum(free) == reserved
        pool_obj = a.small_blocks if kind == "small" else a.large_blocks
        assert sorted(b.size for b in pool_obj) == sorted(free)
        assert s[f"requested_bytes.{pool}.current"] == sum(b.requested_size for b in mine)
        assert s[f"allocation.{pool}.current"] == len(mine) == s[f"active.{pool}.current"]
        assert s[f"active_bytes.{pool}.current"] == s[f"allocated_bytes.{pool}.current"]
        assert s[f"segment.{pool}.current"] == len(segs)
        assert s[f"inactive_split_bytes.{pool}.current"] == sum(split_free)
        assert s[f"inactive_split.{pool}.current"] == len(split_free)
    assert a.total_allocated_memory == s["reserved_bytes.all.current"] <= a.device_memory_bytes
    for name in A.STAT_ARRAYS:
        small, large = (f"{name}.small_pool.", f"{name}.large_pool.")
        for m in ("current", "allocated", "freed"):
            assert s[f"{name}.all.{m}"] == s[small + m] + s[large + m]
        # the pools peak at different moments
        assert max(s[small + "peak"], s[large + "peak"]) <= s[f"{name}.all.peak"]
        assert s[f"{name}.all.peak"] <= s[small + "peak"] + s[large + "peak"]
    # peaks never go down and are never below the current value
    peaks = {k: v for k, v in s.items() if k.endswith(".peak")}
    for k, v in peaks.items():
        assert v >= previous_peaks.get(k, 0) and v >= s[k[: -len("peak")] + "current"]
    return peaks


sizes = st.one_of(
    st.integers(0, 4096),
    st.integers(4097, MiB),
    st.integers(MiB + 1, 12 * MiB),
    st.integers(12 * MiB, 60 * MiB),
)


@pytest.mark.slow  # seconds long: make unit runs it, make check-fast does not
@given(
    data=st.data(),
    max_split_size=st.sampled_from([SIZE_MAX, 40 * MiB]),
    divisions=st.sampled_from([0, 4]),
)
def test_random_traces_keep_every_invariant(data, max_split_size, divisions):
    a = CUDACachingAllocator(
        160 * MiB, max_split_size=max_split_size, roundup_power2_divisions=divisions
    )
    held, peaks, ooms = [], {}, 0
    for _ in range(data.draw(st.integers(1, 60), label="steps")):
        op = data.draw(st.sampled_from(["alloc", "alloc", "free", "empty_cache"]))
        if op == "alloc":
            size, stream = data.draw(sizes), data.draw(st.integers(0, 1))
            try:
                b = a.malloc(size, stream)
            except OutOfMemoryError:
                ooms += 1
            else:
                assert b.size >= size and b.stream == stream
                held.append(b)
        elif op == "free" and held:
            a.free(held.pop(data.draw(st.integers(0, len(held) - 1))))
        elif op == "empty_cache":
            a.empty_cache()
            assert all(
                len(seg["blocks"]) > 1 or seg["allocated_size"] for seg in a.memory_snapshot()
            )
        peaks = check_invariants(a, held, peaks)
        assert stat(a, "num_ooms") == ooms
    for b in held:
        a.free(b)
    a.empty_cache()
    s = a.memory_stats()
    assert s["reserved_bytes.all.current"] == 0 and s["segment.all.current"] == 0
    assert s["inactive_split_bytes.all.current"] == 0
    assert s["num_device_alloc"] - s["num_device_free"] == 0


# -- real memory underneath ------------------------------------------------------------------------


def test_blocks_over_real_memory_do_not_clobber_each_other():
    freed = []
    a = CUDACachingAllocator(GiB, raw_malloc=lambda n: np.zeros(n, np.uint8), raw_free=freed.append)
    blocks = [a.malloc(n) for n in (100, 3000, 512, 2 * MiB, 5 * MiB, 700)]
    for i, b in enumerate(blocks):
        b.memory()[:] = i + 1
        assert b.ptr == b.memory().__array_interface__["data"][0]
    for i, b in enumerate(blocks):
        assert (b.memory() == i + 1).all()
    for b in blocks:
        a.free(b)
    a.empty_cache()
    # one small segment for 100, 3000, 512 and 700 bytes; one 20 MiB segment for 2 and 5 MiB
    assert len(freed) == 2 and stat(a, "reserved_bytes.all.current") == 0


def test_numba_device_memory_through_the_storage_hook():
    import gc

    a = CUDACachingAllocator(GiB, raw_malloc=A.numba_raw_malloc)
    allocate = A.storage_allocator(a)
    arrays = [allocate(n) for n in (40, 4000, 12)]
    for i, arr in enumerate(arrays):
        arr.copy_to_device(np.full(arr.shape, i + 7, np.uint8))
    assert [int(arr.copy_to_host()[0]) for arr in arrays] == [7, 8, 9]
    assert [arr.shape[0] for arr in arrays] == [40, 4000, 12]
    assert stat(a, "allocated_bytes.all.current") == 512 + 4096 + 512
    del arrays, arr
    gc.collect()
    assert stat(a, "allocated_bytes.all.current") == 0
    assert stat(a, "reserved_bytes.all.current") == 2 * MiB


def test_retorch_cuda_tensors_allocate_through_the_cache():
    import gc

    import retorch.tensor as rt
    from retorch.tensor import storage

    a = CUDACachingAllocator(GiB, raw_malloc=A.numba_raw_malloc)
    previous = storage.set_cuda_allocator(A.storage_allocator(a))
    try:
        x = rt.tensor(np.arange(1000, dtype=np.float32), device="cuda")
        assert stat(a, "allocated_bytes.all.current") == round_size(4000) == 4096
        assert x.data_ptr() in a.allocated_blocks
        assert (x.to("cpu").numpy() == np.arange(1000, dtype=np.float32)).all()
        address = x.data_ptr()
        del x
        gc.collect()
        assert stat(a, "allocated_bytes.all.current") == 0
        y = rt.tensor(np.ones(10, dtype=np.float32), device="cuda")
        assert y.data_ptr() == address  # the cached block is handed out again
        assert stat(a, "segment.all.current") == 1 and stat(a, "num_device_alloc") == 1
    finally:
        storage.set_cuda_allocator(previous)


def test_retorch_cuda_tensors_allocate_through_the_caching_allocator_by_default():
    import gc

    import retorch.tensor as rt

    gc.collect()
    before = A.memory_allocated()
    x = rt.empty(1000, device="cuda")
    assert x.data_ptr() in A.cuda_caching_allocator().allocated_blocks
    assert A.memory_allocated() - before == round_size(4000) == 4096
    assert A.memory_reserved() >= kSmallBuffer
    assert A.memory_stats()["allocated_bytes.all.current"] == A.memory_allocated()
    del x
    gc.collect()
    assert A.memory_allocated() == before
    A.empty_cache()
    assert A.memory_reserved() == sum(s["total_size"] for s in A.memory_snapshot())


def test_a_free_that_arrives_during_malloc_waits_for_it():
    """The garbage collector can run inside malloc and collect a storage: its free must wait
    until malloc is done (torch's allocator holds a mutex for both)."""
    a = CUDACachingAllocator(GiB, raw_malloc=A.numba_raw_malloc)
    allocate = A.storage_allocator(a)
    held = [allocate(1000)]
    real_malloc = a.malloc

    def malloc_with_a_collection(*args):
        held.clear()  # the last reference goes: the storage's finalizer frees its block now
        assert stat(a, "allocation.all.current") == 1, "a free ran inside malloc"
        return real_malloc(*args)

    a.malloc = malloc_with_a_collection
    kept = allocate(1000)
    assert stat(a, "allocation.all.current") == 1  # the waiting free was applied after malloc
    assert kept is not None


# -- traces: recorded from torch, replayed through the model ---------------------------------------


def test_record_trace_sees_allocations_views_and_frees():
    def step():
        a = torch.ones(10)
        b = a * 2
        del a
        c = b.view(2, 5)  # a view: no allocation
        b.add_(1)  # in place: no allocation
        return c.sum().item()

    trace = record_trace(step)
    assert trace == [
        ("alloc", 0, 40),
        ("alloc", 1, 40),
        ("free", 0),
        ("alloc", 2, 4),
        ("free", 2),
        ("free", 1),
    ]
    assert trace.ops == {0: "aten.ones.default", 1: "aten.mul.Tensor", 2: "aten.sum.default"}


def mlp_training_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))

    def step():
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()

    return step


@pytest.mark.slow  # (seconds: make unit runs it, check-fast stays under a minute)
def test_recorded_training_step_is_deterministic_and_well_formed():
    step = mlp_training_step()
    first, second = record_trace(step), record_trace(step)
    assert first == second and first.ops == second.ops
    born, dead = {}, set()
    for event in first:
        if event[0] == "alloc":
            assert event[1] not in born and event[2] > 0
            born[event[1]] = event[2]
        else:
            assert event[1] in born and event[1] not in dead
            dead.add(event[1])
    # the gradients are alive when the step ends: their allocations are never freed
    survivors = sorted(born[i] for i in born if i not in dead)
    assert survivors == sorted(4 * n for n in (64 * 32, 64, 10 * 64, 10))
    timeline = replay(first)
    assert timeline.allocated[-1] == sum(round_size(n) for n in survivors)
    assert timeline.reserved[-1] == 2 * MiB  # all of it fits one small segment


def test_replay_timeline_and_fragmentation():
    trace = [
        ("alloc", "a", 5 * MiB),
        ("alloc", "b", 5 * MiB),
        ("alloc", "c", 5 * MiB),
        ("free", "b"),
        ("alloc", "d", 300, 1),
        ("empty_cache",),
        ("free", "a"),
    ]
    t = replay(trace)
    assert t.allocated == [
        5 * MiB,
        10 * MiB,
        15 * MiB,
        10 * MiB,
        10 * MiB + 512,
        10 * MiB + 512,
        5 * MiB + 512,
    ]
    assert t.reserved == [20 * MiB] * 4 + [22 * MiB] * 3
    # after "free b": free blocks of 5 MiB (b) and 5 MiB (the tail): largest / cached = 1/2
    assert t.fragmentation[3] == 0.5 and t.largest_free[3] == 5 * MiB
    assert t.inactive_split[3] == 10 * MiB
    # after "free a": a merges with b into 10 MiB, the tail is 5 MiB, the small segment's rest
    assert t.largest_free[-1] == 10 * MiB
    assert t.fragmentation[-1] == pytest.approx(1 - 10 * MiB / (15 * MiB + 2 * MiB - 512))
    assert t.allocator.memory_stats()["num_device_alloc"] == 2


def test_replay_reports_bad_traces():
    with pytest.raises(KeyError, match="free of id 'x'"):
        replay([("free", "x")])
    with pytest.raises(ValueError, match="allocated twice"):
        replay([("alloc", 1, 8), ("alloc", 1, 8)])
    with pytest.raises(ValueError, match="unknown kind"):
        replay([("malloc", 1, 8)])
    with pytest.raises(OutOfMemoryError):
        replay([("alloc", 1, 8 * MiB)], device_memory_bytes=4 * MiB)


def test_plot_timeline_draws_reserved_allocated_and_fragmentation():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = A.plot_timeline(replay(record_trace(mlp_training_step())), title="one MLP step")
    labels = ax.get_legend().get_texts()
    assert [t.get_text() for t in labels] == [
        "reserved (segments)",
        "allocated (blocks in use)",
        "fragmentation",
    ]
    assert ax.get_title() == "one MLP step"
    plt.close(ax.figure)


# -- the real allocator, where there is one ---------------------------------------------------------


def random_trace_and_mlp_step() -> list:
    """300 random allocations and frees of 1 B to 48 MiB, the frees of what is left, then one
    recorded MLP step."""
    trace = random_trace(300, seed=0)
    freed = {e[1] for e in trace if e[0] == "free"}
    trace += [("free", e[1]) for e in trace if e[0] == "alloc" and e[1] not in freed]
    step = record_trace(mlp_training_step())
    return trace + [(e[0], ("mlp", e[1]), *e[2:]) for e in step]


STAT_NAMES = [f"{n}.{p}.current" for n in A.STAT_ARRAYS for p in A.STAT_TYPES]


class ShuffledAddresses:
    """A cudaMalloc that places segments at random addresses, not in increasing order."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def __call__(self, nbytes):
        return int(self.rng.integers(1, 2**20)) << 21  # raw_malloc may return an address


@pytest.mark.slow  # replays 12 address orders: in make unit, not in make check-fast
def test_the_same_trace_at_other_addresses_splits_differently_unless_the_model_follows_them():
    """Best fit breaks ties by address, so the model agrees with another allocator event by
    event only at that allocator's addresses: SameAddresses gives it them. (On an H100, the
    model with its own addresses differed from torch.cuda at event 249 by exactly this.)"""
    trace = random_trace_and_mlp_step()
    other = CUDACachingAllocator(80 * GiB, raw_malloc=ShuffledAddresses(0))
    same = SameAddresses(other.memory_snapshot)
    follows = CUDACachingAllocator(80 * GiB, same.malloc, same.free)
    own = CUDACachingAllocator(80 * GiB)  # addresses from a counter, in increasing order
    blocks = {a: {} for a in ("other", "follows", "own")}
    first_difference = None
    for i, event in enumerate(trace):
        for name, a in (("other", other), ("follows", follows), ("own", own)):  # other first
            if event[0] == "alloc":
                blocks[name][event[1]] = a.malloc(event[2])
            else:
                a.free(blocks[name].pop(event[1]))
        theirs = other.memory_stats()
        assert {n: follows.memory_stats()[n] for n in STAT_NAMES} == {
            n: theirs[n] for n in STAT_NAMES
        }, f"event {i} {event}: the model at the other allocator's addresses differs"
        diff = {n: (own.memory_stats()[n], theirs[n]) for n in STAT_NAMES
                if own.memory_stats()[n] != theirs[n]}  # fmt: skip
        if diff and first_difference is None:
            first_difference = (i, event, diff)
    assert first_difference == (
        249, ("free", 89),
        {"inactive_split.all.current": (27, 26), "inactive_split.small_pool.current": (11, 10)},
    )  # fmt: skip
    assert [s["address"] for s in follows.memory_snapshot()] == [
        s["address"] for s in other.memory_snapshot()
    ]


def test_same_addresses_refuses_an_event_the_other_allocator_has_not_seen():
    other = CUDACachingAllocator(80 * GiB)
    same = SameAddresses(other.memory_snapshot)
    model = CUDACachingAllocator(80 * GiB, same.malloc, same.free)
    with pytest.raises(RuntimeError, match="new segments of that size"):
        model.malloc(1000)  # not replayed in `other` first: it has no new segment
    other.malloc(1000)
    model.malloc(1000)
    assert model.memory_snapshot()[0]["address"] == other.memory_snapshot()[0]["address"]


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="compares the model with torch.cuda's real caching allocator, which needs a CUDA GPU; "
    "this machine has none (the CPU build's torch.cuda.memory_stats() is empty)",
)
def test_replay_matches_torch_cuda_memory_stats():
    trace = random_trace_and_mlp_step()
    stream = torch.cuda.Stream()  # a fresh stream: no block cached before this test is reused
    torch.cuda.synchronize()
    base = torch.cuda.memory_stats()
    same = SameAddresses(torch.cuda.memory_snapshot)  # segments where torch.cuda put its own
    model = CUDACachingAllocator(
        torch.cuda.get_device_properties(0).total_memory,
        same.malloc,
        same.free,
        max_split_size=base.get("max_split_size", -1) % 2**64,  # int64 -1 is SIZE_MAX
    )
    tensors, blocks = {}, {}
    with torch.cuda.stream(stream):
        for i, event in enumerate(trace):
            if event[0] == "alloc":  # torch.cuda first: the model takes its segment's address
                tensors[event[1]] = torch.empty(event[2], dtype=torch.uint8, device="cuda")
                blocks[event[1]] = model.malloc(event[2])
            else:
                del tensors[event[1]]
                model.free(blocks.pop(event[1]))
            real = torch.cuda.memory_stats()
            ours = model.memory_stats()
            diff = {
                n: (ours[n], real[n] - base[n]) for n in STAT_NAMES if ours[n] != real[n] - base[n]
            }
            assert not diff, f"event {i} {event}: (model, torch.cuda) differ: {diff}"


SETTINGS = [
    "max_split_size_mb:10",
    "max_split_size_mb:19",
    "max_split_size_mb:20",
    "max_split_size_mb:64,roundup_power2_divisions:4",
    "max_split_size_mb:abc",
    "max_split_size_mb:-1",
    "max_non_split_rounding_mb:10",
    "max_non_split_rounding_mb:20",
    "roundup_power2_divisions:0",
    "roundup_power2_divisions:1",
    "roundup_power2_divisions:3",
    "roundup_power2_divisions:16",
    "garbage_collection_threshold:0.5",
    "garbage_collection_threshold:1.5",
    "expandable_segments:True",
    "expandable_segments:maybe",
]


def _outcome(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e)
    return "ok"


@pytest.mark.parametrize("config", SETTINGS)
def test_settings_are_accepted_and_refused_as_torchs_parser_does(config):
    """torch's CPU build parses allocator settings too (``AcceleratorAllocatorConfig``, the
    same parser CUDA reads ``PYTORCH_ALLOC_CONF`` with): every setting is accepted or refused
    alike, with the same exception type and message."""
    ours = _outcome(lambda: CUDACachingAllocator(GiB, **A.parse_settings(config)))
    theirs = _outcome(lambda: torch._C._accelerator_setAllocatorSettings(config))
    assert ours == theirs


def test_parsed_settings_reach_the_model():
    a = CUDACachingAllocator(
        GiB, **A.parse_settings("max_split_size_mb:64,roundup_power2_divisions:4")
    )
    assert (a.max_split_size, a.roundup_power2_divisions) == (64 * MiB, 4)
    assert A.parse_settings("max_non_split_rounding_mb:30") == {
        "max_non_split_rounding_size": 30 * MiB
    }


# -- record_stream: insert_events / process_events -------------------------------------------


def test_a_block_used_on_another_stream_waits_for_its_event():
    alloc = CUDACachingAllocator(GiB)
    x = alloc.malloc(MiB, stream=0)
    alloc.record_stream(x, 1)
    alloc.free(x)
    assert (
        stat(alloc, "allocated_bytes.all.current"),
        stat(alloc, "active_bytes.all.current"),
    ) == (0, MiB)  # freed on the host, still active: stream 1 may be reading it
    states = [b["state"] for s in alloc.memory_snapshot() for b in s["blocks"]]
    assert states == ["active_pending_free", "inactive"]  # the 1 MiB, and the 2 MiB segment's rest
    y = alloc.malloc(MiB, stream=0)  # process_events: the event has not completed
    assert y.ptr != x.ptr and stat(alloc, "segment.all.current") == 1 and y.segment is x.segment
    z = alloc.malloc(MiB, stream=0)  # nothing cached fits: a new segment
    assert stat(alloc, "segment.all.current") == 2 and z.segment is not x.segment
    alloc.stream_synchronize(1)
    w = alloc.malloc(MiB, stream=0)  # the event completed: the block is freed, then reused
    assert w.ptr == x.ptr and stat(alloc, "active_bytes.all.current") == 3 * MiB


def test_every_stream_must_finish_and_each_queue_is_its_own():
    alloc = CUDACachingAllocator(GiB)
    a, b = alloc.malloc(20 * MiB), alloc.malloc(20 * MiB)
    for s in (1, 2):
        alloc.record_stream(a, s)
    alloc.record_stream(b, 2)
    alloc.record_stream(b, 0)  # its own stream: ignored, no event
    alloc.free(a)
    alloc.free(b)
    assert a.event_count == 2 and b.event_count == 1
    alloc.stream_synchronize(2)
    alloc.process_events()
    assert not a.allocated and a in alloc.active_blocks  # stream 1 still pending
    assert b not in alloc.active_blocks  # its only event done: cached
    alloc.stream_synchronize(1)
    alloc.process_events()
    assert a not in alloc.active_blocks and not alloc.cuda_events
    assert stat(alloc, "active_bytes.all.current") == 0


def test_a_neighbour_waiting_for_its_event_is_not_merged():
    """``try_merge_blocks`` skips a free neighbour whose events are pending, as torch's does
    (found by the random test below: the merge took a block that was in no pool)."""
    alloc = CUDACachingAllocator(GiB)
    a, b = alloc.malloc(512, stream=2), alloc.malloc(512, stream=2)
    alloc.record_stream(a, 0)
    alloc.free(a)  # pending: not in the pool
    alloc.free(b)  # its neighbour a must stay as it is
    assert a.event_count == 1 and a.size == 512 and b.prev is a


def test_empty_cache_waits_for_pending_events_first():
    alloc = CUDACachingAllocator(GiB)
    x = alloc.malloc(30 * MiB)
    alloc.record_stream(x, 7)
    alloc.free(x)
    alloc.empty_cache()  # synchronize_and_free_events, then release the whole segment
    assert stat(alloc, "reserved_bytes.all.current") == 0
    assert stat(alloc, "num_sync_all_streams") == 1 and not alloc.cuda_events


def test_the_oom_retry_frees_pending_blocks():
    alloc = CUDACachingAllocator(64 * MiB)
    x = alloc.malloc(40 * MiB)
    alloc.record_stream(x, 1)
    alloc.free(x)
    y = alloc.malloc(40 * MiB)  # no room beside the pending block: the retry syncs and frees
    assert stat(alloc, "num_alloc_retries") == 1 and y.size == 40 * MiB


@pytest.mark.slow  # (seconds: make unit runs it, check-fast stays under a minute)
@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["alloc", "free", "record", "sync", "empty"]),
            st.integers(0, 7),
            st.integers(0, 2),
        ),
        max_size=40,
    )
)
def test_a_block_is_never_handed_out_while_another_stream_may_use_it(steps):
    """Random programs: a pending block's bytes never overlap a new block's, and the counters
    agree (active = allocated + pending)."""
    alloc = CUDACachingAllocator(GiB)
    live, pending = [], []
    sizes = [512, 4096, MiB, 3 * MiB, 12 * MiB, 25 * MiB]
    for op, i, s in steps:
        if op == "alloc":
            b = alloc.malloc(sizes[i % len(sizes)], stream=s)
            for p in pending:
                if p.event_count:
                    assert b.ptr + b.size <= p.ptr or p.ptr + p.size <= b.ptr
            live.append(b)
        elif op == "free" and live:
            b = live.pop(i % len(live))
            alloc.free(b)
            pending.append(b)
        elif op == "record" and live:
            alloc.record_stream(live[i % len(live)], s)
        elif op == "sync":
            alloc.stream_synchronize(s)
        elif op == "empty":
            alloc.empty_cache()
        pending = [p for p in pending if p.event_count]
        waiting = sum(p.size for p in pending)
        assert (
            stat(alloc, "active_bytes.all.current")
            == stat(alloc, "allocated_bytes.all.current") + waiting
        )


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="compares the model's record_stream with torch.cuda's, which needs a CUDA GPU",
)
def test_record_stream_matches_torch_cuda():
    """On a GPU: a tensor recorded on a busy side stream is not reused by the next allocation
    of its size, and is reused once that stream has finished; the model agrees at each step."""
    side = torch.cuda.Stream()
    main = torch.cuda.Stream()
    torch.cuda.synchronize()
    base = torch.cuda.memory_stats()
    same = SameAddresses(torch.cuda.memory_snapshot)
    model = CUDACachingAllocator(
        torch.cuda.get_device_properties(0).total_memory, same.malloc, same.free
    )
    names = [
        "allocated_bytes.all.current",
        "active_bytes.all.current",
        "segment.all.current",
        "reserved_bytes.all.current",
    ]

    def agree(step):
        real = torch.cuda.memory_stats()
        ours = model.memory_stats()
        diff = {n: (ours[n], real[n] - base[n]) for n in names if ours[n] != real[n] - base[n]}
        assert not diff, f"{step}: (model, torch.cuda) differ: {diff}"

    sid = main.cuda_stream  # the model's stream numbers: torch's handles
    with torch.cuda.stream(main):
        x = torch.empty(MiB, dtype=torch.uint8, device="cuda")
        bx = model.malloc(MiB, stream=sid)
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)  # keep the side stream busy (~0.1 s)
        x.record_stream(side)
        model.record_stream(bx, side.cuda_stream)
        x_ptr = x.data_ptr()
        del x
        model.free(bx)
        agree("after free")
        y = torch.empty(MiB, dtype=torch.uint8, device="cuda")
        by = model.malloc(MiB, stream=sid)
        assert (y.data_ptr() == x_ptr) is False and by.ptr == y.data_ptr()
        agree("while the side stream runs")
        side.synchronize()
        model.stream_synchronize(side.cuda_stream)
        z = torch.empty(MiB, dtype=torch.uint8, device="cuda")
        bz = model.malloc(MiB, stream=sid)
        assert z.data_ptr() == x_ptr and bz.ptr == z.data_ptr()
        agree("after the side stream finished")
        del y, z
        model.free(by)
        model.free(bz)
    torch.cuda.synchronize()

"""``torch.cuda.memory``'s history and snapshot for retorch's CUDA tensors (issue 29).

Mirrors, in torch:

- ``torch/cuda/memory.py``: ``_record_memory_history(enabled, context, stacks, max_entries,
  ...)``, ``_snapshot()`` and ``_dump_snapshot(filename)``;
- ``torch/csrc/cuda/memory_snapshot.cpp`` (``_record_memory_history``'s option checks, and
  ``_memory_snapshot_pickled``, which names every key of the snapshot dictionary);
- ``c10/core/CachingDeviceAllocator.h`` (``parseTraceEntryAction``: the names ``skip_actions``
  accepts);
- ``c10/cuda/CUDACachingAllocator.cpp``: ``recordHistory``, ``record_trace`` (a ring buffer of
  ``TraceEntry``), where ``DeviceCachingAllocator`` calls it (``alloc_block``: SEGMENT_ALLOC;
  ``alloc_found_block``: ALLOC of the requested size; ``free``: FREE_REQUESTED; ``free_block``:
  FREE_COMPLETED, recorded before the block merges with its free neighbours; ``release_block``:
  SEGMENT_FREE; ``malloc``'s failure: OOM of the rounded size; ``snapshot()``: SNAPSHOT) and
  ``snapshot()`` (``SegmentInfo``, ``BlockInfo``).

A snapshot is two things: the allocator's state now (``segments``, each ``cudaMalloc``'d
segment with its blocks, allocated or free) and its history (``device_traces``, each action the
allocator took while recording). A free whose block another stream used (``record_stream``)
is FREE_REQUESTED at once and FREE_COMPLETED only when ``process_events`` finds that stream's
event done, which is what the two actions mean in torch. The snapshot goes to torch's own
``torch.cuda._memory_viz`` unchanged (``segsum``, ``trace``, ``segments``, ``trace_plot``).

Frames (``context``), as torch gathers them: ``malloc`` gathers at ``RecordContext::STATE``,
``free`` and ``empty_cache`` at ``ALL``; an entry keeps frames only from ``"alloc"`` on; a free
below ``"all"`` takes the block's allocation frames (``context ? context :
block->context_when_allocated``), a segment's free the segment's. A block's frames are dropped
when it is freed (``free_block``) and, here, when recording stops (torch keeps a live block's
frames until its free; retorch, unhooked, could not see that free). Frames are the caller's,
innermost first, as ``CapturedTraceback`` gives torch's; ``stacks="python"`` leaves out the
frames inside ``retorch/tensor/``, ``retorch/autograd/`` and ``retorch/dispatch/``, which stand
for torch's C++ (ATen, c10's allocator, the autograd engine); ``stacks="all"`` keeps them.

Backward: on CUDA torch runs the graph on the autograd engine's device thread, not on the
thread that called ``loss.backward()``; that thread has no Python stack, so a block allocated
in backward has no Python frames (PR #82146: "Things allocated during the backward pass have
no stack frames because they are run on another C++ thread"), only the frames of Python code
the engine calls (a custom ``Function``'s ``backward``, hooks). retorch's engine runs on the
calling thread; to give what torch gives, the frames outside the outermost
``retorch.autograd.engine.evaluate_function`` (the engine's loop and the user's
``backward()`` line) are cut off. The first gradient (``ones_like`` of the loss, made in
``_make_grads`` before the engine starts) keeps the user's frames in both.

The allocator model (``retorch/tensor/allocator.py``) is not edited: while history is recorded
the instance's class is a subclass whose ``malloc``, ``free``, ``empty_cache``, ``alloc_block``,
``alloc_found_block``, ``free_block`` and ``release_block`` record and call the model's; the
instance's own attributes are untouched, so ``allocator.record_memory_history()`` (which sets
and deletes ``malloc`` / ``free`` on the instance) can run inside or around it. While the CUDA
tensors' allocator records, garbage collection of cycles is paused (so the history is the same
on every run), and restored when it stops.

Left out: the legacy boolean form of ``_record_memory_history``, ``compile_context`` and
``global_record_annotations`` (accepted, no effect), expandable segments (``segment_map`` and
``segment_unmap`` are accepted in ``skip_actions`` and never recorded), and private pools
(``segment_pool_id`` is always ``(0, 0)``).
"""

from __future__ import annotations

import copy
import gc
import os
import pickle
import sys
import threading
import time
import weakref
from collections import Counter, deque

from .tensor import allocator as _alloc

#: ``TraceEntry::Action`` as ``_memory_snapshot_pickled`` names them (those the model makes).
ACTIONS = (
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "oom",
    "snapshot",
)
#: ``parseTraceEntryAction``'s table (c10/core/CachingDeviceAllocator.h): every name
#: ``skip_actions`` accepts, expandable segments' ``segment_map`` / ``segment_unmap`` included.
TRACE_ENTRY_ACTIONS = (
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "snapshot",
    "oom",
)
#: ``RecordContext``: NEVER < STATE < ALLOC < ALL.
_CONTEXT_LEVEL = {None: 0, "state": 1, "alloc": 2, "all": 3}
STATE, ALLOC, ALL = 1, 2, 3
#: The allocator's steps the recording subclass overrides.
_WRAPPED = (
    "malloc",
    "free",
    "empty_cache",
    "alloc_block",
    "alloc_found_block",
    "free_block",
    "release_block",
)
_RETORCH = os.path.dirname(os.path.abspath(__file__))
#: The packages that stand for torch's C++ (ATen and c10's allocator, the dispatcher, the
#: autograd engine and the C++ methods of Tensor): with ``stacks="python"`` their frames are
#: left out, as torch's Python frames stop where its C++ starts; ``stacks="all"`` keeps them,
#: as torch's adds its C++ frames.
CPP_DIRS = tuple(os.path.join(_RETORCH, d) + os.sep for d in ("tensor", "autograd", "dispatch"))
#: ``Engine::evaluate_function``: on CUDA torch runs it on the device thread (see above).
_ENGINE_FILE = os.path.join(_RETORCH, "autograd", "engine.py")
#: ``AllocatorConfig.cpp``'s ``kRoundUpPowerOfTwoIntervals``: the size bands (1 MiB, 2 MiB, ...)
#: of ``roundup_power2_divisions``, keyed "1", "2", ..., "32768" in the snapshot.
_ROUNDUP_INTERVALS = 16


class _History:
    """``recordHistory``'s state on one allocator: the trace ring buffer, what to gather, the
    frames of live blocks (``context_when_allocated``) and of segments
    (``context_when_segment_allocated``)."""

    def __init__(self, allocator):
        self._allocator = weakref.ref(allocator)  # _HISTORIES' value must not keep its key
        self.enabled = False
        self.level = 0
        self.max_entries = sys.maxsize
        self.stacks = "all"
        self.skip: set[str] = set()
        self.trace: deque = deque()
        self.block_frames: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.segment_frames: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.base_class: type | None = None  # the allocator's own class while hooked
        self.recording_class: type | None = None
        self.gc_was_enabled = gc.isenabled()
        self._local = threading.local()  # the context of the call being run, per thread

    @property
    def ctx(self):
        """The context gathered by the ``malloc`` / ``free`` / ``empty_cache`` being run on
        this thread (torch passes it down as an argument)."""
        return getattr(self._local, "ctx", None)

    @ctx.setter
    def ctx(self, value) -> None:
        self._local.ctx = value

    # -- RecordContext and CapturedTraceback::gather --------------------------------------------

    def gather(self, level: int):
        """``maybeGatherContext(level)``: the caller's frames, or ``None`` below ``level``."""
        if self.level < level:
            return None
        raw, f = [], sys._getframe(1)
        while f is not None:
            if f.f_code not in _HOOK_CODES:  # the recording subclass's own frames
                raw.append(f)
            f = f.f_back
        engine = [i for i, f in enumerate(raw) if f.f_code.co_name == "evaluate_function"
                  and os.path.abspath(f.f_code.co_filename) == _ENGINE_FILE]  # fmt: skip
        if engine:  # torch's device thread: its stack starts at the engine
            raw = raw[: engine[-1] + 1]
        skip = CPP_DIRS if self.stacks == "python" else ()
        frames = []
        for f in raw:
            filename = f.f_code.co_filename
            if not skip or not os.path.abspath(filename).startswith(skip):
                frames.append({"filename": filename, "line": f.f_lineno, "name": f.f_code.co_name})
        return frames

    def record(self, action, addr, size, stream, context=None) -> None:
        """``record_trace``: one ``TraceEntry``, its frames only from ``context="alloc"`` on;
        the oldest entries are overwritten past ``max_entries`` (``alloc_buffer``)."""
        if not self.enabled or action in self.skip:
            return
        entry = {"action": action}
        entry["device_free" if action == "oom" else "addr"] = int(addr)
        entry.update(size=int(size), stream=int(stream), pool_id=(0, 0))
        entry.update(compile_context="N/A", user_metadata="")
        if context is not None and self.level >= ALLOC:
            entry["frames"] = context
        entry["time_us"] = time.time_ns() // 1000
        self.trace.append(entry)
        while len(self.trace) > self.max_entries:
            self.trace.popleft()

    # -- the allocator's steps, overridden by a subclass while recording ------------------------

    def install(self) -> None:
        a = self._allocator()
        base = type(a)
        if base is self.recording_class:
            return
        if self.recording_class is None or self.base_class is not base:
            self.base_class, self.recording_class = base, _recording_class(base, self)
        a.__class__ = self.recording_class

    def hooked(self) -> bool:
        a = self._allocator()
        return (
            a is not None and self.recording_class is not None and (type(a) is self.recording_class)
        )

    def uninstall(self) -> None:
        a = self._allocator()
        if a is not None and type(a) is self.recording_class:
            a.__class__ = self.base_class
        self.block_frames.clear()
        self.segment_frames.clear()


def _recording_class(base: type, h: _History) -> type:
    """A subclass of the allocator's class whose steps record into ``h``, as
    ``DeviceCachingAllocator``'s call ``record_trace``. Each calls the base class's step by
    name, not ``super()``: a bound step kept by another logger (``record_memory_history``)
    still works after recording stops and the instance's class is the base again."""

    class Recording(base):
        def malloc(self, orig_size: int, stream: int = 0):
            outer, h.ctx = h.ctx, h.gather(STATE)
            try:
                return base.malloc(self, orig_size, stream)
            except _alloc.OutOfMemoryError:  # OOM: cudaMemGetInfo's free bytes, params.size()
                free = self.device_memory_bytes - self.total_allocated_memory
                size = _alloc.round_size(orig_size, self.roundup_power2_divisions)
                h.record("oom", free, size, stream, h.ctx)
                raise
            finally:
                h.ctx = outer

        def free(self, block):
            ptr = block if isinstance(block, int) else block.ptr
            found = self.allocated_blocks.get(ptr)
            outer, h.ctx = h.ctx, h.gather(ALL)
            try:
                if found is not None and (isinstance(block, int) or found is block):
                    frames = h.ctx if h.ctx is not None else h.block_frames.get(found)
                    h.record("free_requested", ptr, found.requested_size, found.stream, frames)
                return base.free(self, block)
            finally:
                h.ctx = outer

        def empty_cache(self):
            outer, h.ctx = h.ctx, h.gather(ALL)
            try:
                return base.empty_cache(self)
            finally:
                h.ctx = outer

        def alloc_block(self, p, is_retry):
            ok = base.alloc_block(self, p, is_retry)
            if ok:
                if h.ctx is not None:
                    h.segment_frames[p.block.segment] = h.ctx
                h.record("segment_alloc", p.block.ptr, p.block.size, p.stream, h.ctx)
            return ok

        def alloc_found_block(self, p, orig_size, split_remainder):
            block = base.alloc_found_block(self, p, orig_size, split_remainder)
            if h.ctx is not None:
                h.block_frames[block] = h.ctx
            else:
                h.block_frames.pop(block, None)
            h.record("alloc", block.ptr, orig_size, block.stream, h.ctx)
            return block

        def free_block(self, block):
            frames = h.block_frames.pop(block, None)  # context_when_allocated = nullptr
            ctx = h.ctx if h.ctx is not None else frames
            h.record("free_completed", block.ptr, block.requested_size, block.stream, ctx)
            return base.free_block(self, block)  # merges: block.ptr may move down after this

        def release_block(self, block):
            frames = h.segment_frames.pop(block.segment, None)
            ctx = h.ctx if h.ctx is not None else frames
            h.record("segment_free", block.ptr, block.size, block.stream, ctx)
            return base.release_block(self, block)

    Recording.__name__, Recording.__qualname__ = base.__name__, base.__qualname__
    Recording.__module__ = base.__module__
    _HOOK_CODES.update(getattr(Recording, name).__code__ for name in _WRAPPED)
    return Recording


_HOOK_CODES: set = set()
_HISTORIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _history(allocator=None) -> _History:
    a = allocator if allocator is not None else _alloc._settled()
    if a not in _HISTORIES:
        _HISTORIES[a] = _History(a)
    return _HISTORIES[a]


def _hooks_removed_error(h: _History) -> RuntimeError:
    a = h._allocator()
    return RuntimeError(
        "retorch.cuda_memory: the allocator's history hooks were removed while history was "
        f"recorded (its class is {type(a).__module__}.{type(a).__qualname__} without them): "
        "entries since then are missing; restart with _record_memory_history('all')"
    )


def _record_memory_history(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device=None,
    clear_history: bool = False,
    compile_context: bool = False,
    global_record_annotations: bool = False,
    skip_actions: list[str] | None = None,
    *,
    allocator=None,
) -> None:
    """``torch.cuda.memory._record_memory_history``: ``enabled="all"`` records every action
    (up to ``max_entries``, the newest kept), ``"state"`` only the frames of live blocks (one
    trace entry), ``None`` stops and clears the history. ``context``: ``"state"`` frames on live
    blocks, ``"alloc"`` also on alloc entries (and frees, with the allocation's frames),
    ``"all"`` frees with their own frames; ``None`` no frames. ``clear_history`` empties the
    trace; ``skip_actions`` names actions not to record (``parseTraceEntryAction``'s names).
    ``allocator`` (not torch's) is a :class:`~retorch.tensor.allocator.CUDACachingAllocator`
    model to record instead of the one retorch's CUDA tensors use.

    Unlike torch, every option is checked before anything changes (torch parses
    ``skip_actions`` inside ``recordHistory``, after setting ``record_history``)."""
    if isinstance(enabled, bool):
        raise NotImplementedError(
            "_record_memory_history's legacy boolean form is not modelled; "
            "use enabled='all', 'state' or None"
        )
    if enabled is not None and enabled not in ("state", "all"):
        raise RuntimeError("expected state to be 'state', 'all', or None")
    if context is not None and context not in ("state", "alloc", "all"):
        raise RuntimeError("expected context to be 'state', 'alloc', 'all', or None")
    if stacks not in ("python", "all"):
        raise RuntimeError("expected stacks to be 'python', or 'all'")
    for action in skip_actions or ():
        if action not in TRACE_ENTRY_ACTIONS:
            raise RuntimeError(f"Unknown TraceEntry action: {action}")
    h = _history(allocator)
    removed = h.enabled and not h.hooked()
    if enabled is not None and not h.enabled:
        if allocator is None:  # CUDA storages: their frees come from the collector
            gc.collect()
            _alloc._settled()
            h.gc_was_enabled = gc.isenabled()
            gc.disable()
        h.install()
    elif enabled is None and h.enabled:
        if allocator is None:
            _alloc._settled()  # the frees that arrived while recording are recorded
            if h.gc_was_enabled:
                gc.enable()
        h.uninstall()
    elif removed:  # still recording: hook it again, and say what was lost
        h.install()
    h.enabled = enabled is not None
    h.level = _CONTEXT_LEVEL[context] if h.enabled else 0
    h.max_entries = max_entries if enabled == "all" else 1
    h.skip = set(skip_actions or ())
    h.stacks = stacks
    if not h.enabled or clear_history:
        h.trace.clear()
    while len(h.trace) > h.max_entries:
        h.trace.popleft()
    if removed:
        raise _hooks_removed_error(h)


def _allocator_settings(a) -> dict:
    """``allocator_settings`` as ``_memory_snapshot_pickled`` writes them (same keys, same
    order), from the model's own settings: ``PYTORCH_CUDA_ALLOC_CONF`` is the string that
    :func:`~retorch.tensor.allocator.parse_settings` turns into them (torch's
    ``last_allocator_settings``, the string it last parsed)."""
    conf = []
    if a.max_split_size != _alloc.SIZE_MAX:
        conf.append(f"max_split_size_mb:{a.max_split_size // _alloc.MiB}")
    if a.max_non_split_rounding_size != _alloc.kLargeBuffer:
        conf.append(f"max_non_split_rounding_mb:{a.max_non_split_rounding_size // _alloc.MiB}")
    if a.roundup_power2_divisions:
        conf.append(f"roundup_power2_divisions:{a.roundup_power2_divisions}")
    return {
        "PYTORCH_CUDA_ALLOC_CONF": ",".join(conf),
        "max_split_size": a.stats.max_split_size,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": False,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "graph_capture_record_stream_reuse": False,
        "roundup_power2_divisions": {
            str(2**i): a.roundup_power2_divisions for i in range(_ROUNDUP_INTERVALS)
        },
    }


def _snapshot(device=None, augment_with_fx_traces: bool = False, *, allocator=None) -> dict:
    """``torch.cuda.memory._snapshot()``: ``{"segments", "device_traces", "allocator_settings",
    "external_annotations"}`` with the keys and value types of ``_memory_snapshot_pickled``.
    As torch's, it takes the trace first and then records a ``snapshot`` entry (size: the
    active bytes of every segment), which the next snapshot's trace shows."""
    if augment_with_fx_traces:
        raise NotImplementedError("augment_with_fx_traces: retorch has no FX-generated frames")
    a = allocator if allocator is not None else _alloc._settled()
    h = _HISTORIES.get(a)
    if h is not None and h.enabled and not h.hooked():
        raise _hooks_removed_error(h)
    segments = a.memory_snapshot()
    heads = {b.ptr: b for b in a.cached_blocks() + list(a.active_blocks) if b.prev is None}
    for seg in segments:
        block = heads[seg["address"]]
        seg["frames"] = list(h.segment_frames.get(block.segment, [])) if h else []
        for info in seg["blocks"]:
            assert info["address"] == block.ptr
            live = info["state"] != "inactive"
            info["frames"] = list(h.block_frames.get(block, [])) if (h and live) else []
            block = block.next
    traces = copy.deepcopy(list(h.trace)) if h else []
    if h is not None:
        h.record("snapshot", 0, sum(s["active_size"] for s in segments), 0)
    return {
        "segments": segments,
        "device_traces": [traces],
        "allocator_settings": _allocator_settings(a),
        "external_annotations": [],
    }


def _dump_snapshot(
    filename: str = "dump_snapshot.pickle", augment_with_fx_traces=False, *, allocator=None
) -> None:
    """``torch.cuda.memory._dump_snapshot``: ``_snapshot()`` pickled into ``filename``, which
    pytorch.org/memory_viz and ``python -m torch.cuda._memory_viz`` open."""
    s = _snapshot(augment_with_fx_traces=augment_with_fx_traces, allocator=allocator)
    with open(filename, "wb") as f:
        pickle.dump(s, f)


# -- reading a snapshot: the figures a test or the GPU comparison checks ---------------------


def action_counts(snapshot: dict) -> dict[str, int]:
    """How many trace entries of each action the snapshot's first device recorded."""
    counts = Counter(e["action"] for e in snapshot["device_traces"][0])
    return {action: counts.get(action, 0) for action in ACTIONS}


def peak_from_trace(snapshot: dict, start: int = 0) -> int:
    """The peak of requested bytes live over the trace, counted from ``start`` (0: the rise
    over what was live before recording began): alloc adds its size, free_completed takes it
    off. (``_memory_viz.trace`` prints a ``TOTAL MEM`` line, but its loop reuses that counter as
    the entry's index, so that figure is not a running total of bytes.)"""
    live = peak = start
    for e in snapshot["device_traces"][0]:
        if e["action"] == "alloc":
            live += e["size"]
        elif e["action"] == "free_completed":
            live -= e["size"]
        peak = max(peak, live)
    return peak


# -- the GPU comparison: one training step, torch's history beside retorch's -------------------

MLP_SHAPES = {"w1": (64, 256), "b1": (256,), "w2": (256, 32), "b2": (32,)}
#: Chapter 8c's model: what the simulator runs in a second (a Python thread per CUDA thread).
TINY_SHAPES = {"w1": (3, 4), "b1": (4,), "w2": (4, 2), "b2": (2,)}


def _mlp_step(lib, p: dict, x, target) -> None:
    """One SGD step of a two-layer MLP, the same code for torch tensors and retorch's
    (``retorch.autograd`` tensors over ``retorch.tensor``); ``lib`` names the library."""
    h = (x @ p["w1"] + p["b1"]).relu() @ p["w2"] + p["b2"]
    loss = ((h - target) * (h - target)).sum()
    loss.backward()
    for t in p.values():
        if lib == "torch":
            import torch

            with torch.no_grad():
                t -= t.grad * 0.01
        else:
            import retorch.tensor as rt

            rt.sub(t.data, rt.mul(t.grad.data, 0.01), out=t.data)
        t.grad = None


#: What the GPU comparison expects, stored with its figures (``expected`` in the JSON).
EXPECTED = (
    "One warm-up step per library before recording: torch's first matmul creates the cuBLAS "
    "handle of each thread (the caller's for forward, the autograd device thread's for "
    "backward) and its workspace, taken from the caching allocator and kept for the process "
    "(CublasHandlePool.cpp, getNewWorkspace); retorch's compiles its kernels. A warm step "
    "allocates only temporaries and frees them all: in each library alloc == free_requested "
    "== free_completed and no segment_alloc (the cached segments serve it). Not expected "
    "equal: the counts and peaks across libraries, which split the step into different ops "
    "(torch: addmm, fused backward formulas; retorch: chapter 5's ops, one block per result). "
    "Frames: torch's backward allocations have no Python frames (the engine's device thread "
    "has no Python stack), retorch's neither (its stack is cut at the engine), so "
    "allocs_without_frames counts backward's blocks in both."
)


def _step_figures(snap: dict, max_allocated_rise: int) -> dict:
    counts = action_counts(snap)
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    return {
        "counts": counts,
        "trace_peak_requested_bytes": peak_from_trace(snap),
        "max_memory_allocated_rise_rounded_bytes": max_allocated_rise,
        "allocs_without_frames": sum(not e.get("frames") for e in allocs),
        "alloc_equals_free_completed": counts["alloc"]
        == counts["free_completed"]
        == counts["free_requested"],
        "no_segment_alloc": counts["segment_alloc"] == 0,
    }


def compare_training_step(batch: int = 16, shapes: dict | None = None, seed: int = 0) -> dict:
    """Record one warm training step of the same MLP with torch's ``_record_memory_history``
    (on a GPU) and retorch's (on a GPU, or under the simulator), after one unrecorded warm-up
    step each, and return per library: the count of each trace action, the peak of requested
    bytes over the trace (the rise from what was live before the step, bytes as asked for),
    the rise of ``max_memory_allocated`` over the step (bytes of blocks, rounded to 512), the
    number of allocs without frames, and whether the expectations of :data:`EXPECTED` hold.
    torch's entry is ``None`` with a reason when torch has no GPU (``"torch_skipped"``)."""
    import numpy as np

    shapes = shapes or MLP_SHAPES
    rng = np.random.default_rng(seed)
    params = {k: (rng.standard_normal(s) * 0.1).astype(np.float32) for k, s in shapes.items()}
    x = rng.standard_normal((batch, shapes["w1"][0])).astype(np.float32)
    y = rng.standard_normal((batch, shapes["w2"][1])).astype(np.float32)
    out: dict = {"batch": batch, "shapes": {k: list(s) for k, s in shapes.items()}}
    out["expected"] = EXPECTED

    import torch

    if torch.cuda.is_available():
        from torch.cuda import memory as tm

        p = {k: torch.tensor(v, device="cuda", requires_grad=True) for k, v in params.items()}
        tx, ty = torch.tensor(x, device="cuda"), torch.tensor(y, device="cuda")
        _mlp_step("torch", p, tx, ty)  # warm-up: cuBLAS handles and workspaces
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        tm._record_memory_history("all", stacks="python")
        try:
            _mlp_step("torch", p, tx, ty)
            torch.cuda.synchronize()
            snap = tm._snapshot()
        finally:
            tm._record_memory_history(None)
        out["torch"] = _step_figures(snap, torch.cuda.max_memory_allocated() - before)
    else:
        out["torch"], out["torch_skipped"] = None, "torch has no GPU here"

    import retorch.autograd as ra
    import retorch.tensor as rt

    backend = ra.get_array_backend()
    ra.set_array_backend("retorch")  # chapter 5's autograd over retorch.tensor's arrays
    try:
        p = {k: ra.tensor(rt.tensor(v, device="cuda"), requires_grad=True)
             for k, v in params.items()}  # fmt: skip
        rx, ry = ra.tensor(rt.tensor(x, device="cuda")), ra.tensor(rt.tensor(y, device="cuda"))
        _mlp_step("retorch", p, rx, ry)  # warm-up: kernels compiled, segments cached
        before = _alloc.memory_allocated()
        _alloc.reset_peak_memory_stats()
        _record_memory_history("all", stacks="python")
        try:
            _mlp_step("retorch", p, rx, ry)
            snap = _snapshot()
        finally:
            _record_memory_history(None)
    finally:
        ra.set_array_backend(backend)
    out["retorch"] = _step_figures(snap, _alloc.max_memory_allocated() - before)
    return out

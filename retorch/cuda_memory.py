"""``torch.cuda.memory``'s history and snapshot for retorch's CUDA tensors (issue 29).

Mirrors, in torch:

- ``torch/cuda/memory.py``: ``_record_memory_history(enabled, context, stacks, max_entries,
  ...)``, ``_snapshot()`` and ``_dump_snapshot(filename)``;
- ``torch/csrc/cuda/memory_snapshot.cpp`` (``_record_memory_history``'s option checks, and
  ``_memory_snapshot_pickled``, which names every key of the snapshot dictionary);
- ``c10/cuda/CUDACachingAllocator.cpp``: ``recordHistory``, ``record_trace`` (a ring buffer of
  ``TraceEntry``), where ``DeviceCachingAllocator`` calls it (``alloc_block``: SEGMENT_ALLOC;
  ``alloc_found_block``: ALLOC of the requested size; ``free``: FREE_REQUESTED; ``free_block``:
  FREE_COMPLETED; ``release_block``: SEGMENT_FREE; ``malloc``'s failure: OOM) and
  ``snapshot()`` (``SegmentInfo``, ``BlockInfo``).

A free whose block another stream used (``record_stream``) is FREE_REQUESTED at once and
FREE_COMPLETED only when ``process_events`` finds that stream's event done, which is what the
two actions mean in torch. The snapshot goes to torch's own ``torch.cuda._memory_viz`` unchanged
(``segsum``, ``trace``, ``segments``, ``trace_plot``: none of them needs a GPU).

The allocator model (``retorch/tensor/allocator.py``) is not edited: while history is recorded,
its instance's ``malloc``, ``free``, ``alloc_block``, ``alloc_found_block``, ``free_block`` and
``release_block`` are wrapped on the instance (the class's are untouched), and restored when
recording stops. Frames are the caller's, innermost first, as ``CapturedTraceback`` gives
torch's. With ``stacks="python"`` the frames inside ``retorch/tensor/``, ``retorch/autograd/``
and ``retorch/dispatch/`` are left out: they stand for torch's C++ (ATen, c10's allocator, the
autograd engine), which has no Python frames, so an allocation points at the user's line, as
torch's does; ``stacks="all"`` keeps them, as torch's adds its C++ frames (``at::native::mm``,
``MmBackward0::apply``). While the CUDA tensors' allocator records, garbage collection of
cycles is paused (so the history is the same on every run), and restored when it stops.

Left out: the legacy boolean form of ``_record_memory_history``, ``compile_context`` and
``global_record_annotations`` (accepted, no effect), expandable segments' ``segment_map``, the
``snapshot`` action, and private pools (``segment_pool_id`` is always ``(0, 0)``).
"""

from __future__ import annotations

import copy
import gc
import os
import pickle
import sys
import time
import weakref
from collections import Counter, deque

from .tensor import allocator as _alloc

#: ``TraceEntry::Action`` as ``_memory_snapshot_pickled`` names them (those the model makes).
ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom")
#: ``RecordContext``: NEVER < STATE < ALLOC < ALL.
_CONTEXT_LEVEL = {None: 0, "state": 1, "alloc": 2, "all": 3}
_WRAPPED = ("malloc", "free", "alloc_block", "alloc_found_block", "free_block", "release_block")
_RETORCH = os.path.dirname(os.path.abspath(__file__))
#: The packages that stand for torch's C++ (ATen and c10's allocator, the dispatcher, the
#: autograd engine and the C++ methods of Tensor): with ``stacks="python"`` their frames are
#: left out, as torch's Python frames stop where its C++ starts; ``stacks="all"`` keeps them,
#: as torch's adds its C++ frames.
CPP_DIRS = tuple(os.path.join(_RETORCH, d) + os.sep for d in ("tensor", "autograd", "dispatch"))


class _History:
    """``recordHistory``'s state on one allocator: the trace ring buffer, what to gather, the
    frames of live blocks (``context_when_allocated``) and of segments."""

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
        self.saved: dict = {}
        self.gc_was_enabled = gc.isenabled()
        self.ctx = None  # the context gathered by the malloc / free being run

    # -- RecordContext and CapturedTraceback::gather --------------------------------------------

    def gather(self, level: int):
        """``maybeGatherContext(level)``: the caller's frames, or ``None`` below ``level``."""
        if self.level < level:
            return None
        frames, f = [], sys._getframe(2)  # the wrapper's caller: not gather, not the wrapper
        skip = CPP_DIRS if self.stacks == "python" else ()
        while f is not None:
            filename = f.f_code.co_filename
            if not skip or not os.path.abspath(filename).startswith(skip):
                frames.append({"filename": filename, "line": f.f_lineno, "name": f.f_code.co_name})
            f = f.f_back
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
        if context is not None and self.level >= _CONTEXT_LEVEL["alloc"]:
            entry["frames"] = context
        entry["time_us"] = time.time_ns() // 1000
        self.trace.append(entry)
        while len(self.trace) > self.max_entries:
            self.trace.popleft()

    # -- the allocator's steps, wrapped on the instance -----------------------------------------

    def install(self) -> None:
        a = self._allocator()
        self.saved = {name: vars(a)[name] for name in _WRAPPED if name in vars(a)}
        inner = {name: getattr(a, name) for name in _WRAPPED}

        def malloc(orig_size: int, stream: int = 0):
            outer, self.ctx = self.ctx, self.gather(_CONTEXT_LEVEL["state"])
            try:
                return inner["malloc"](orig_size, stream)
            except _alloc.OutOfMemoryError:
                free = a.device_memory_bytes - a.total_allocated_memory
                size = _alloc.round_size(max(orig_size, 0), a.roundup_power2_divisions)
                self.record("oom", free, size, stream, self.ctx)
                raise
            finally:
                self.ctx = outer

        def alloc_block(p, is_retry):
            ok = inner["alloc_block"](p, is_retry)
            if ok:
                self.segment_frames[p.block.segment] = self.ctx or []
                self.record("segment_alloc", p.block.ptr, p.block.size, p.stream, self.ctx)
            return ok

        def alloc_found_block(p, orig_size, split_remainder):
            block = inner["alloc_found_block"](p, orig_size, split_remainder)
            self.block_frames[block] = self.ctx or []
            self.record("alloc", block.ptr, orig_size, block.stream, self.ctx)
            return block

        def free(block):
            ptr = block if isinstance(block, int) else block.ptr
            found = a.allocated_blocks.get(ptr)
            outer, self.ctx = self.ctx, self.gather(_CONTEXT_LEVEL["all"])
            try:
                if found is not None:
                    self.record("free_requested", ptr, found.requested_size, found.stream, self.ctx)
                return inner["free"](block)
            finally:
                self.ctx = outer

        def free_block(block):
            frames = self.block_frames.pop(block, None)
            self.record(
                "free_completed", block.ptr, block.requested_size, block.stream, self.ctx or frames
            )
            return inner["free_block"](block)

        def release_block(block):
            frames = self.segment_frames.pop(block.segment, None)
            self.record("segment_free", block.ptr, block.size, block.stream, self.ctx or frames)
            return inner["release_block"](block)

        for name, fn in zip(_WRAPPED, (malloc, free, alloc_block, alloc_found_block, free_block,
                                       release_block)):  # fmt: skip
            setattr(a, name, fn)

    def uninstall(self) -> None:
        a = self._allocator()
        for name in _WRAPPED:
            vars(a).pop(name, None)
        for name, fn in self.saved.items():
            setattr(a, name, fn)
        self.saved = {}


_HISTORIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _history(allocator=None) -> _History:
    a = allocator if allocator is not None else _alloc._settled()
    if a not in _HISTORIES:
        _HISTORIES[a] = _History(a)
    return _HISTORIES[a]


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
    blocks, ``"alloc"`` also on alloc entries, ``"all"`` also on frees; ``None`` no frames.
    ``allocator`` (not torch's) is a :class:`~retorch.tensor.allocator.CUDACachingAllocator`
    model to record instead of the one retorch's CUDA tensors use."""
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
    unknown = sorted(set(skip_actions or ()) - set(ACTIONS) - {"snapshot"})
    if unknown:
        raise RuntimeError(f"skip_actions: unknown action types {unknown}, expected {ACTIONS}")
    h = _history(allocator)
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
    h.enabled = enabled is not None
    h.level = _CONTEXT_LEVEL[context] if h.enabled else 0
    h.max_entries = max_entries if enabled == "all" else 1
    h.skip = set(skip_actions or ())
    h.stacks = stacks
    if not h.enabled or clear_history:
        h.trace.clear()
    while len(h.trace) > h.max_entries:
        h.trace.popleft()


def _snapshot(device=None, augment_with_fx_traces: bool = False, *, allocator=None) -> dict:
    """``torch.cuda.memory._snapshot()``: ``{"segments", "device_traces", "allocator_settings",
    "external_annotations"}`` with the keys and value types of ``_memory_snapshot_pickled``."""
    if augment_with_fx_traces:
        raise NotImplementedError("augment_with_fx_traces: retorch has no FX-generated frames")
    a = allocator if allocator is not None else _alloc._settled()
    h = _HISTORIES.get(a)
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
    settings = {
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "max_split_size": a.stats.max_split_size,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": False,
        "roundup_power2_divisions": {},
    }
    traces = copy.deepcopy(list(h.trace)) if h else []
    return {
        "segments": segments,
        "device_traces": [traces],
        "allocator_settings": settings,
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
    """The peak of requested bytes live over the trace: alloc adds its size, free_completed
    takes it off (what ``_memory_viz.trace``'s ``TOTAL MEM`` counts), from ``start`` bytes."""
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


def compare_training_step(batch: int = 16, shapes: dict | None = None, seed: int = 0) -> dict:
    """Record one training step of the same MLP with torch's ``_record_memory_history`` (on a
    GPU) and retorch's (on a GPU, or under the simulator) and return, per library, the count of
    each trace action, the peak of requested bytes over the trace (from what was live before
    the step) and ``max_memory_allocated`` during the step; torch's entry is ``None`` with a
    reason when torch has no GPU (``"torch_skipped"``)."""
    import numpy as np

    shapes = shapes or MLP_SHAPES
    rng = np.random.default_rng(seed)
    params = {k: (rng.standard_normal(s) * 0.1).astype(np.float32) for k, s in shapes.items()}
    x = rng.standard_normal((batch, shapes["w1"][0])).astype(np.float32)
    y = rng.standard_normal((batch, shapes["w2"][1])).astype(np.float32)
    out: dict = {"batch": batch, "shapes": {k: list(s) for k, s in shapes.items()}}

    import torch

    if torch.cuda.is_available():
        from torch.cuda import memory as tm

        p = {k: torch.tensor(v, device="cuda", requires_grad=True) for k, v in params.items()}
        tx, ty = torch.tensor(x, device="cuda"), torch.tensor(y, device="cuda")
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        tm._record_memory_history("all", stacks="python")
        _mlp_step("torch", p, tx, ty)
        torch.cuda.synchronize()
        snap = tm._snapshot()
        tm._record_memory_history(None)
        out["torch"] = {
            "counts": action_counts(snap),
            "trace_peak_bytes": peak_from_trace(snap),
            "max_memory_allocated": torch.cuda.max_memory_allocated() - before,
        }
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
    out["retorch"] = {
        "counts": action_counts(snap),
        "trace_peak_bytes": peak_from_trace(snap),
        "max_memory_allocated": _alloc.max_memory_allocated() - before,
    }
    return out

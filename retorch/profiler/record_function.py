"""RecordFunction: the ranges the profiler records, and where they are opened.

Mirrors ``aten/src/ATen/record_function.h`` / ``record_function.cpp``: while a profiler is on,
the dispatcher opens a ``RecordFunction`` around every *call* of an operator (not a
*redispatch*: ``Dispatcher::call`` checks ``at::getStepCallbacksUnlessEmpty`` and takes
``callWithDispatchKeySlowPath``; ``retorch/dispatch/dispatcher.py`` reads one global,
``step_callbacks``, which :func:`start` sets and :func:`stop` clears). The range is named as
torch names it (``aten::add``: the operator without its overload), with the input shapes of the
full argument stack (defaults included, ``[]`` for a non-tensor) when ``record_shapes`` is on.

Two more places open ranges, as in torch:

- the autograd engine, around each node it runs (``torch/csrc/autograd/engine.cpp``,
  ``Engine::evaluate_function`` records ``autograd::engine::evaluate_function: <name>``, and
  ``Node::operator()`` (``function.h``) a range named after the node): retorch wraps chapter 3's
  ``engine.call_function`` while a profile runs;
- the allocator (``c10/core/Allocator.h``, ``reportMemoryUsageToProfiler``): each storage
  allocated adds its bytes to the innermost open range (``self_cpu_memory_usage``) and each
  storage freed subtracts them; with no range open it is a ``[memory]`` event of its own.
  retorch wraps ``Storage.allocate`` while a ``profile_memory`` profile runs.

``record_function(name)`` opens a range by hand (``torch.autograd.profiler.record_function``).
On a GPU (the CUDA simulator off) an op with a CUDA tensor among its inputs is bracketed by two
CUDA events on the current stream; their ``elapsed_time`` is the op's device time, read when
the profile stops (torch reads kernel times from CUPTI; events time the op's kernels and the
gaps between them).
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref

from .profiler_util import FunctionEvent


class _State:
    """One profile's recording: open ranges (a stack), finished events, memory records."""

    def __init__(self, record_shapes: bool, profile_memory: bool, use_cuda: bool):
        self.record_shapes, self.profile_memory, self.use_cuda = (
            record_shapes, profile_memory, use_cuda,
        )  # fmt: skip
        self.events: list[FunctionEvent] = []
        self.stack: list[FunctionEvent] = []
        self.memory: list[tuple] = []  # (ts µs, bytes, total allocated, thread)
        self.allocated = 0
        self.cuda_pairs: list = []  # (event, start, end) CUDA event pairs, on a GPU
        self.next_id = 0
        self.thread = threading.get_native_id()

    def open(self, name: str, shapes=None) -> FunctionEvent:
        evt = FunctionEvent(self.next_id, name, self.thread, time.perf_counter_ns() / 1e3, shapes)
        self.next_id += 1
        if self.stack:
            evt.cpu_parent = self.stack[-1]
            self.stack[-1].cpu_children.append(evt)
        self.stack.append(evt)
        self.events.append(evt)
        return evt

    def close(self, evt: FunctionEvent) -> None:
        evt.end_us = time.perf_counter_ns() / 1e3
        self.stack.pop()

    def memory_event(self, nbytes: int) -> None:
        self.allocated += nbytes
        self.memory.append((time.perf_counter_ns() / 1e3, nbytes, self.allocated, self.thread))
        if self.stack:
            self.stack[-1].self_cpu_memory_usage += nbytes
        else:  # outside every range: an event of its own, as torch's "[memory]" rows
            evt = self.open("[memory]")
            evt.self_cpu_memory_usage = nbytes
            self.close(evt)


_state: _State | None = None


def _shape_of(value):
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dim"):
        return list(shape)
    if isinstance(value, (list, tuple)) and value and all(hasattr(v, "dim") for v in value):
        return [list(v.shape) for v in value]
    return []


def _input_shapes(handle, args, kwargs, stack) -> list:
    if stack is None:
        try:
            stack = handle.schema.bind(args, kwargs)  # the full stack, defaults included
        except Exception:
            stack = list(args) + list(kwargs.values())
    return [_shape_of(v) for v in stack]


def _is_cuda(args, kwargs, stack) -> bool:
    values = stack if stack is not None else [*args, *kwargs.values()]
    return any(getattr(getattr(v, "data", None), "device", None) == "cuda" for v in values)


def _dispatcher_callback(handle, kernel, ks, args, kwargs, stack):
    """The slow path of ``Dispatcher.call``: the op's range around its kernel."""
    state = _state
    name = handle.name.split(".")[0]  # "aten::add.Tensor" -> "aten::add", as torch names it
    shapes = _input_shapes(handle, args, kwargs, stack) if state.record_shapes else None
    evt = state.open(name, shapes)
    pair = None
    if state.use_cuda and _is_cuda(args or (), kwargs or {}, stack):
        from numba import cuda

        pair = (evt, cuda.event(timing=True), cuda.event(timing=True))
        pair[1].record()
    try:
        if stack is not None:
            kernel.call_boxed(handle, ks, stack)
            return None
        return kernel.call(handle, ks, args, kwargs)
    finally:
        if pair is not None:
            pair[2].record()
            state.cuda_pairs.append(pair)
        state.close(evt)


def _profiled_call_function(original):
    def call_function(fn, inputs):
        state = _state
        outer = state.open(f"autograd::engine::evaluate_function: {fn.name()}")
        inner = state.open(fn.name())
        try:
            return original(fn, inputs)
        finally:
            state.close(inner)
            state.close(outer)

    return call_function


def _profiled_allocate(original):
    def allocate(cls, nbytes, device="cpu"):
        storage = original.__func__(cls, nbytes, device)
        state = _state
        if state is not None and device != "meta":
            state.memory_event(nbytes)
            weakref.finalize(storage, _freed, state, nbytes)
        return storage

    return classmethod(allocate)


def _freed(state: _State, nbytes: int) -> None:
    if state is _state:  # a storage freed after its profile stopped is not reported
        state.memory_event(-nbytes)


_saved: dict = {}


def start(record_shapes: bool, profile_memory: bool, use_cuda: bool) -> _State:
    """Turn recording on: the dispatcher's switch, the engine's and the allocator's wrappers."""
    global _state
    if _state is not None:
        raise RuntimeError("Profiler is already enabled on this thread")
    from retorch.autograd import engine
    from retorch.dispatch import dispatcher
    from retorch.tensor.storage import Storage

    _state = _State(record_shapes, profile_memory, use_cuda)
    _saved["call_function"] = engine.call_function
    engine.call_function = _profiled_call_function(engine.call_function)
    if profile_memory:
        _saved["allocate"] = Storage.__dict__["allocate"]
        Storage.allocate = _profiled_allocate(_saved["allocate"])
    dispatcher.step_callbacks = _dispatcher_callback
    return _state


def stop() -> _State:
    """Turn recording off and restore what :func:`start` wrapped; returns the recording."""
    global _state
    from retorch.autograd import engine
    from retorch.dispatch import dispatcher
    from retorch.tensor.storage import Storage

    state, _state = _state, None
    dispatcher.step_callbacks = None
    engine.call_function = _saved.pop("call_function")
    if "allocate" in _saved:
        Storage.allocate = _saved.pop("allocate")
    if state.cuda_pairs:
        from numba import cuda

        cuda.synchronize()
        for evt, begin, end in state.cuda_pairs:
            evt.device_time_total = begin.elapsed_time(end) * 1e3  # ms -> µs
    return state


@contextlib.contextmanager
def record_function(name: str):
    """A labelled range (``torch.autograd.profiler.record_function``); nothing when off."""
    state = _state
    if state is None:
        yield
        return
    evt = state.open(name)
    try:
        yield evt
    finally:
        state.close(evt)

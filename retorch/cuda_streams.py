"""Streams and events of retorch's CUDA tensors (issue 29), over Numba-CUDA's.

Mirrors, in torch:

- ``torch/cuda/streams.py`` (``Stream``: ``wait_event``, ``wait_stream``, ``record_event``,
  ``query``, ``synchronize``; ``Event``: ``record``, ``wait``, ``query``, ``synchronize``,
  ``elapsed_time`` with ``enable_timing``);
- ``torch/cuda/__init__.py`` (``current_stream``, ``default_stream``, ``set_stream``, the
  ``stream(s)`` context ``StreamContext``, ``synchronize``);
- ``c10/cuda/CUDAStream.h`` (a current stream per thread, the default stream's id 0) and
  ``aten/src/ATen/cuda/CUDAEvent.h`` (an event created lazily at its first record; the
  checks of ``elapsed_time``).

Every retorch kernel launches through :func:`retorch.cuda_launch.launch`, which asks
:func:`retorch.cuda_launch.current_stream`: inside ``with stream(s):`` that is ``s``'s Numba
stream, outside it the stream torch's current stream names (the default stream).

Under the simulator every launch runs to completion before it returns, so a stream's work is
always done; the caching allocator (``retorch/tensor/allocator.py``) still keeps its own clock
for ``record_stream``'s events: an event it records completes when the host synchronises with
that stream (:meth:`Stream.synchronize`, :meth:`Event.synchronize` or :func:`synchronize`),
never earlier, which is the latest a GPU's would. On a GPU the allocator queries real events.
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref

from numba import cuda

from . import cuda as rcuda

_ids = itertools.count(1)  # stream ids: 0 is the default stream, as c10's
_order = itertools.count()  # the order in which events are recorded (the simulator's clock)
_local = threading.local()  # the current stream is per thread, as c10's
_BY_ID: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _allocator():
    from .tensor import allocator

    return allocator._caching_allocator  # None until the first CUDA tensor


def _host_synchronized(stream_id: int | None) -> None:
    """Tell the caching allocator that the host has waited for ``stream_id``'s work (every
    stream when ``None``): its ``record_stream`` events on that stream have completed."""
    a = _allocator()
    if a is None:
        return
    if stream_id is None:
        for sid in list(a._recorded):
            a.stream_synchronize(sid)
    else:
        a.stream_synchronize(stream_id)


class Stream:
    """``torch.cuda.Stream``: an ordered queue of kernels and copies on the device.

    ``Stream()`` makes a new stream (``cudaStreamCreateWithPriority``); the default stream,
    id 0, is :func:`default_stream`."""

    def __init__(self, device=None, priority: int = 0, *, _default: bool = False):
        if device not in (None, 0, "cuda", "cuda:0"):
            raise ValueError(f"retorch has one CUDA device, cuda:0; got device={device!r}")
        self.priority = priority
        self.device_index = 0
        if _default:
            self.stream_id = 0
            self._numba = None  # follows torch's current stream: cuda_launch decides
        else:
            self.stream_id = next(_ids)
            self._numba = cuda.stream()
        _BY_ID[self.stream_id] = self

    @property
    def numba_stream(self):
        """The Numba stream kernels launched on this stream are queued on."""
        if self._numba is None:
            from .cuda_launch import default_numba_stream

            return default_numba_stream()
        return self._numba

    @property
    def cuda_stream(self) -> int:
        """The ``cudaStream_t`` as an int (under the simulator, the stream's id)."""
        if rcuda.simulator_enabled():
            return self.stream_id
        handle = self.numba_stream.handle
        return int(getattr(handle, "value", handle) or 0)

    @property
    def device(self) -> str:
        return "cuda:0"

    def wait_event(self, event: Event) -> None:
        """Work queued on this stream from now on waits for ``event`` (``cudaStreamWaitEvent``)."""
        event.wait(self)

    def wait_stream(self, stream: Stream) -> None:
        """Work queued on this stream from now on waits for all of ``stream``'s work so far."""
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event

    def query(self) -> bool:
        """True when all work queued on the stream has completed."""
        if rcuda.simulator_enabled():
            return True
        return self.record_event().query()

    def synchronize(self) -> None:
        """The host waits until the stream's work is done (``cudaStreamSynchronize``)."""
        from . import cuda_graphs

        cuda_graphs.check_not_capturing("Stream.synchronize()")
        self.numba_stream.synchronize()
        _host_synchronized(self.stream_id)

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return hash(("retorch.cuda.Stream", self.stream_id))

    def __repr__(self) -> str:
        return f"<retorch.cuda.Stream device=cuda:0 cuda_stream={self.cuda_stream:#x}>"


_DEFAULT = None


def default_stream(device=None) -> Stream:
    """``torch.cuda.default_stream``: the stream with id 0."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Stream(device, _default=True)
    return _DEFAULT


def stream_by_id(stream_id: int) -> Stream:
    """The live stream with ``stream_id`` (0: the default stream)."""
    return default_stream() if stream_id == 0 else _BY_ID[stream_id]


def current_stream(device=None) -> Stream:
    """``torch.cuda.current_stream``: this thread's current stream (the default one at first)."""
    return getattr(_local, "stream", None) or default_stream(device)


def set_stream(stream: Stream) -> None:
    """``torch.cuda.set_stream``: make ``stream`` this thread's current stream."""
    if stream is None:
        return
    if not isinstance(stream, Stream):
        raise TypeError(f"set_stream expects a retorch.cuda.Stream, got {type(stream).__name__}")
    _local.stream = stream


class StreamContext:
    """``torch.cuda.StreamContext``: the current stream is ``stream`` inside the block and the
    previous one again after it, however the block ends; ``None`` changes nothing."""

    def __init__(self, stream: Stream | None):
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(
                f"stream() expects a retorch.cuda.Stream or None, got {type(stream).__name__}"
            )
        self.stream = stream
        self.prev = None

    def __enter__(self):
        if self.stream is None:
            return None
        self.prev = getattr(_local, "stream", None)
        _local.stream = self.stream
        return self.stream

    def __exit__(self, *exc) -> None:
        if self.stream is not None:
            _local.stream = self.prev


#: ``torch.cuda.stream(s)``: ``with stream(s):`` launches every kernel and copy on ``s`` (torch's
#: function returns ``StreamContext(s)``; here it is the class itself, called the same way).
stream = StreamContext


def synchronize(device=None) -> None:
    """``torch.cuda.synchronize``: the host waits for all work on every stream."""
    from . import cuda_graphs

    cuda_graphs.check_not_capturing("synchronize()")
    cuda.synchronize()
    _host_synchronized(None)


#: When set (a list), every Event.record and Event.wait appends an entry: the timeline figure.
EVENT_LOG: list | None = None


class Event:
    """``torch.cuda.Event``: a marker in a stream's queue; created at its first record."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False):  # fmt: skip
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.interprocess = interprocess
        self._numba = None
        self.stream: Stream | None = None
        self.order: int | None = None  # when it was recorded, in record order
        self._host_time: float | None = None

    @property
    def recorded(self) -> bool:
        return self.order is not None

    def record(self, stream: Stream | None = None) -> None:
        """Queue the event on ``stream`` (the current stream by default): it completes when the
        work queued before it has."""
        stream = current_stream() if stream is None else stream
        if self._numba is None:  # CUDAEvent::createEvent, at the first record
            self._numba = (
                cuda.event() if rcuda.simulator_enabled() else cuda.event(self.enable_timing)
            )
        self._numba.record(stream.numba_stream)
        self.stream, self.order = stream, next(_order)
        self._host_time = time.perf_counter()  # the simulator's only clock (synchronous)
        if EVENT_LOG is not None:
            EVENT_LOG.append(("record", stream.stream_id, self))

    def wait(self, stream: Stream | None = None) -> None:
        """Work queued on ``stream`` from now on waits for this event (a no-op if never
        recorded, as ``CUDAEvent::block``)."""
        stream = current_stream() if stream is None else stream
        if self.recorded:
            self._numba.wait(stream.numba_stream)
            if EVENT_LOG is not None:
                EVENT_LOG.append(("wait", stream.stream_id, self))

    def query(self) -> bool:
        """True when the work before the event has completed (or it was never recorded)."""
        if not self.recorded or rcuda.simulator_enabled():
            return True
        return bool(self._numba.query())

    def synchronize(self) -> None:
        """The host waits for the event."""
        from . import cuda_graphs

        cuda_graphs.check_not_capturing("Event.synchronize()")
        if self.recorded:
            self._numba.synchronize()
            _host_synchronized(self.stream.stream_id)

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds from this event to ``end_event`` (both recorded, completed and made
        with ``enable_timing=True``, checked in ``CUDAEvent::elapsed_time``'s order)."""
        if not (self.recorded and end_event.recorded):
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        if not (self.query() and end_event.query()):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if rcuda.simulator_enabled():  # numba's simulated events return -1.0
            return (end_event._host_time - self._host_time) * 1e3
        return float(self._numba.elapsed_time(end_event._numba))

    def __repr__(self) -> str:
        state = f"order={self.order}" if self.recorded else "uninitialized"
        return f"<retorch.cuda.Event {state}>"


def record_stream(tensor, stream: Stream) -> None:
    """``Tensor.record_stream(stream)``: ``tensor``'s memory is in use on ``stream`` too, so
    when the tensor is freed the caching allocator hands its block out again only after the
    work queued on ``stream`` up to then has completed (``CUDACachingAllocator::recordStream``)."""
    from .tensor import allocator

    if not isinstance(stream, Stream):
        raise TypeError(f"record_stream(): argument 'stream' must be Stream, not "
                        f"{type(stream).__name__}")  # fmt: skip
    if getattr(tensor, "device", None) is None or str(tensor.device).split(":")[0] != "cuda":
        raise RuntimeError("record_stream needs a CUDA tensor")  # CPU tensors have no streams
    allocator.record_stream_of(tensor, stream.stream_id)

"""CUDA graphs of retorch's launches (issue 29): capture once, replay many times.

Mirrors ``torch/cuda/graphs.py`` (``CUDAGraph`` with ``capture_begin`` / ``capture_end`` /
``replay`` / ``reset`` / ``pool``, and the ``graph()`` context) and the capture rules that
torch's ``CUDAGraph`` (its C++ half, ``torch._C._CUDAGraph``) and
``c10/cuda/CUDACachingAllocator.cpp`` enforce.

What a CUDA graph is to the host: the list of launches (kernel, grid, block, device
arguments) made while capturing, replayed later with no Python op, dispatcher or autograd
work in between. That list is what this module records: during capture every launch through
``retorch.cuda_launch.launch`` is recorded, NOT run (a capturing stream runs nothing), and
:meth:`CUDAGraph.replay` launches the list again. The same code runs under the simulator and
on a GPU; the driver's own capture (``cuStreamBeginCapture`` through ``cuda.bindings``, one
``cuGraphLaunch`` per replay) is not written here.

The rules capture imposes, each checked:

- capture on a non-default stream (``capture_begin`` raises on the default stream, as torch's);
- no host synchronisation while capturing (``synchronize()``, ``Stream.synchronize()``,
  ``Event.synchronize()`` raise: torch's ``operation not permitted when stream is capturing``);
- no allocation outside the graph's private pool: a CUDA storage allocated on another stream
  while capturing raises; those on the capturing stream are kept by the graph for its
  lifetime, so their addresses stay the graph's (static addresses);
- static shapes and addresses: replay reads and writes the captured tensors, so new inputs
  are copied into the static input tensors, and scalars that change each step (lr, step
  count) live in device tensors, not in the launch arguments (a Python float in a launch is
  frozen at its captured value).
"""

from __future__ import annotations

from . import cuda_launch
from .tensor import allocator as _allocator

_CAPTURING: CUDAGraph | None = None


def is_current_stream_capturing() -> bool:
    """``torch.cuda.is_current_stream_capturing``."""
    return _CAPTURING is not None


def check_not_capturing(what: str) -> None:
    """Raise as a capturing stream does when the host would wait for the device."""
    if _CAPTURING is not None:
        raise RuntimeError(
            f"CUDA error: operation not permitted when stream is capturing ({what} during "
            "CUDA graph capture: the host cannot wait for work that has not run)"
        )


class CUDAGraph:
    """``torch.cuda.CUDAGraph``."""

    def __init__(self):
        self.launches: list[tuple] = []
        self.kept: list = []  # the graph's private pool: storages allocated during capture
        self.stream_id: int | None = None
        self.captured = False

    def capture_begin(self, pool=None, capture_error_mode: str = "global") -> None:
        global _CAPTURING
        from .cuda_streams import current_stream

        if self.captured or self.launches:
            raise RuntimeError("This CUDAGraph instance already owns a captured graph. "
                               "To capture a new graph, create a new instance.")  # fmt: skip
        if _CAPTURING is not None:
            raise RuntimeError("another CUDA graph is capturing: captures cannot nest")
        sid = current_stream().stream_id
        if sid == 0:
            raise RuntimeError(
                "CUDA graphs must be captured on a non-default stream. (However, after "
                "capture, it's ok to replay them on the default stream.)"
            )
        self.stream_id = sid
        _CAPTURING = self
        cuda_launch.CAPTURE = self._record
        _allocator._POOL_HOOK = self._allocation

    def capture_end(self) -> None:
        global _CAPTURING
        if _CAPTURING is not self:
            raise RuntimeError("capture_end() without this graph's capture_begin()")
        _CAPTURING = None
        cuda_launch.CAPTURE = None
        _allocator._POOL_HOOK = None
        self.captured = True

    def _record(self, kernel, grid, block, args) -> None:
        self.launches.append((kernel, grid, block, args))

    def _allocation(self, nbytes: int, stream_id: int | None, memory=None) -> None:
        if memory is None and stream_id != self.stream_id:
            raise RuntimeError(
                f"allocation of {nbytes} bytes on stream {stream_id} while a CUDA graph captures "
                f"on stream {self.stream_id}: outside the graph's private pool"
            )
        if memory is not None:
            self.kept.append(memory)

    def replay(self) -> None:
        """Launch every captured kernel again, in order, on the current stream."""
        if not self.captured:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")
        for kernel, grid, block, args in self.launches:
            cuda_launch.configured(kernel, grid, block)(*args)

    def reset(self) -> None:
        """Drop the captured launches and give the private pool's memory back."""
        self.launches, self.kept, self.captured = [], [], False

    def pool(self) -> int:
        return id(self)


class graph:
    """``torch.cuda.graph(g, stream=None)``: capture the block into ``g`` on ``stream`` (a new
    side stream by default, as torch's), with the current stream restored after it."""

    def __init__(self, cuda_graph: CUDAGraph, pool=None, stream=None):
        from .cuda_streams import Stream

        self.cuda_graph = cuda_graph
        self.capture_stream = stream if stream is not None else Stream()
        self.ctx = None

    def __enter__(self):
        from .cuda_streams import stream, synchronize

        synchronize()  # torch.cuda.synchronize() and empty_cache before capture, as torch's
        self.ctx = stream(self.capture_stream)
        self.ctx.__enter__()
        try:
            self.cuda_graph.capture_begin()
        except BaseException:  # the block never runs: put the previous stream back now
            self.ctx.__exit__(None, None, None)
            raise

    def __exit__(self, *exc) -> None:
        try:
            self.cuda_graph.capture_end()
        finally:
            self.ctx.__exit__(*exc)

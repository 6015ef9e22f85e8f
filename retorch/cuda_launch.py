"""The one launch path of retorch's CUDA kernels (issue 28, "Host cost per op").

What torch does around a kernel launch, and what this module does in its place:

- the device's properties are read once per device (``at::cuda::getCurrentDeviceProperties``,
  ``aten/src/ATen/cuda/CUDAContext.cpp``, caches ``cudaDeviceProp``): :func:`device_attributes`;
- a kernel runs on the *current stream* (``c10/cuda/CUDAStream.h``, ``getCurrentCUDAStream``):
  :func:`current_stream` wraps torch's current stream handle in ONE cached
  ``numba.cuda.external_stream`` per handle, so retorch's kernels queue behind torch's work
  without a synchronisation;
- ``kernel<<<grid, block, 0, stream>>>(args)`` is a C call: numba-cuda's ``kernel[grid, block,
  stream]`` builds a launch configuration object each time, so :func:`launch` caches it per
  (kernel, grid, block, stream);
- kernels are compiled for the signatures they use before the first launch
  (:func:`compile_eagerly`), as torch's kernels are compiled ahead of time;
- nothing on the path synchronises the host or allocates (``C10_CUDA_KERNEL_LAUNCH_CHECK``
  only reads the last error): ``tests/test_cuda_launch.py`` makes those entry points raise
  during a launch.

Under the simulator the same kernels run through the same calls: the stream is the
simulator's default stream (it has no external streams) and the attributes are fixed.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

from numba import cuda

from . import cuda as rcuda
from . import cuda_streams as _streams

#: While a CUDA graph captures (retorch/cuda_graphs.py): ``fn(kernel, grid, block, args)``
#: receives each launch instead of the device, as a capturing stream does.
CAPTURE = None


@dataclass(frozen=True)
class DeviceAttributes:
    """What launch geometry needs of the device, read once (``cudaDeviceProp``)."""

    name: str
    multiprocessor_count: int
    max_threads_per_block: int
    warp_size: int
    max_grid_dim_x: int


@functools.cache
def device_attributes() -> DeviceAttributes:
    """The current device's attributes, read on first use and cached for the process."""
    if rcuda.simulator_enabled():
        return DeviceAttributes("CUDA simulator", 1, 1024, 32, 2**31 - 1)
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return DeviceAttributes(
        name,
        dev.MULTIPROCESSOR_COUNT,
        dev.MAX_THREADS_PER_BLOCK,
        dev.WARP_SIZE,
        dev.MAX_GRID_DIM_X,
    )


#: torch stream handle -> its numba stream (one ``external_stream`` per handle, ever).
_STREAMS: dict[int, object] = {}


def torch_stream_handle() -> int:
    """The handle (``cudaStream_t`` as an int) of torch's current stream; 0, the legacy
    default stream, where torch has no CUDA or is not loaded (retorch.tensor runs without torch:
    a process that never imported torch has no torch stream to follow)."""
    torch = sys.modules.get("torch")
    if torch is None or rcuda.simulator_enabled() or not torch.cuda.is_available():
        return 0
    return torch.cuda.current_stream().cuda_stream


def current_stream():
    """The numba stream of retorch's current stream (``with retorch.cuda.stream(s):``), else
    the one for torch's current stream."""
    s = getattr(_streams._local, "stream", None)
    if s is None or s._numba is None:
        return default_numba_stream()
    return s._numba


def default_numba_stream():
    """The numba stream for torch's current stream, created once per handle."""
    handle = torch_stream_handle()
    stream = _STREAMS.get(handle)
    if stream is None:
        if rcuda.simulator_enabled() or handle == 0:
            stream = cuda.default_stream()
        else:
            stream = cuda.external_stream(handle)
        _STREAMS[handle] = stream
    return stream


#: (kernel id, grid, block, stream id) -> (kernel, stream, configured launcher).
_CONFIGURED: dict[tuple, tuple] = {}


def configured(kernel, grid, block, stream=None):
    """``kernel[grid, block, stream]``, built once per (kernel, grid, block, stream)."""
    stream = current_stream() if stream is None else stream
    if rcuda.simulator_enabled():  # the simulator's kernel[...] configures the kernel object
        return kernel[grid, block, stream]  # itself and returns it: nothing to cache
    key = (id(kernel), grid, block, id(stream))
    entry = _CONFIGURED.get(key)
    if entry is None:  # the kernel and stream are kept alive with their ids
        entry = _CONFIGURED[key] = (kernel, stream, kernel[grid, block, stream])
    return entry[2]


def launch(kernel, grid, block, *args, stream=None) -> None:
    """Launch ``kernel`` over ``grid`` blocks of ``block`` threads on the current stream (or
    ``stream``), asynchronously: no host synchronisation, no allocation."""
    if CAPTURE is not None and stream is None:
        CAPTURE(kernel, grid, block, args)
        return
    configured(kernel, grid, block, stream)(*args)


def compile_eagerly(kernel, signatures) -> None:
    """Compile ``kernel`` for each Numba signature string before its first launch (a no-op
    under the simulator, which interprets the Python function)."""
    if rcuda.simulator_enabled():
        return
    for signature in signatures:
        kernel.compile(signature)

"""The bottom layer, rebuilt once as a taste: ``add`` as a Numba-CUDA kernel.

torch 2.13 generates its add kernels from one header, ``aten/src/ATen/native/ufunc/add.h``
(``add.out`` in ``native_functions.yaml`` names it as its ``ufunc_inner_loop``):

* CPU: the generated ``build/aten/src/ATen/UfuncCPUKernel_add.cpp`` (template
  ``aten/src/ATen/templates/UfuncCPUKernel.cpp``) runs add.h's vector body,
  ``vec::fmadd(other, alpha, self)``, through ``cpu_kernel_vec``
  (``aten/src/ATen/native/cpu/Loops.h``): ``self + alpha * other`` with ONE rounding;
* CUDA: the generated ``build/aten/src/ATen/UfuncCUDA_add.cu`` (template
  ``aten/src/ATen/templates/UfuncCUDA.cu``) runs add.h's scalar body through ``gpu_kernel``
  (``aten/src/ATen/native/cuda/Loops.cuh`` and ``CUDALoops.cuh``), which nvcc contracts to
  an ``fma`` instruction.

Here: :func:`fma32` is that single-rounding ``x * y + z`` for float32, written with float64
arithmetic so that it runs the same on a GPU, the CUDA simulator and the CPU;
:func:`add_kernel` is a grid-stride loop over it; :func:`launch_geometry` picks blocks and
threads as a CUDA programmer would; :func:`launch_add` is ``torch.add(a, b, alpha=alpha)``
for same-shape float32 tensors.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from numba import cuda, njit, prange
from numba.core.errors import NumbaPerformanceWarning

from ..cuda import device_function, kernel, simulator_enabled


def fma32(x, y, z):
    """``x * y + z`` for float32 values, rounded once (as ``vec::fmadd`` and CUDA's ``fma``).

    The product of two float32 values is exact in float64 (24 + 24 bits fit in 53), but the
    float64 sum is rounded, and rounding it again to float32 rounds twice. That differs from
    one rounding only when the float64 sum lands exactly halfway between two float32 values
    while the exact sum was not there: then the error of the sum (Knuth's TwoSum) says which
    neighbour the exact value is nearer to.
    """
    p = np.float64(x) * np.float64(y)  # exact
    s = p + np.float64(z)  # rounded once, to float64
    v = s - p
    err = (p - (s - v)) + (np.float64(z) - v)  # TwoSum: exact sum = s + err
    r = np.float32(s)  # rounded to nearest float32, ties to even
    other = 2.0 * s - np.float64(r)  # the float32 on s's far side, if s is a tie
    if err != 0.0 and other != np.float64(r) and np.float64(np.float32(other)) == other:
        if (err > 0.0) == (other > np.float64(r)):
            return np.float32(other)
    return r


#: (a, b, alpha) where rounding twice goes wrong: alpha * b is exact in float64 and a little
#: over 2**-24, so the float64 sum rounds to 1 + 2**-24, exactly halfway between two float32
#: values, and ties-to-even then rounds down; the exact sum is over halfway, so one rounding
#: (an FMA) rounds up.
TIE = (
    1.0,
    float(np.float32((1 - 2895 * 2.0**-23) * 2.0**-24)),
    float(np.float32(1 + 2896 * 2.0**-23)),
)

fma32_device = device_function("float32(float32, float32, float32)")(fma32)
fma32_cpu = njit(cache=True)(fma32)


@kernel("void(float32[:], float32[:], float32, float32[:])")
def add_kernel(a, b, alpha, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.size, stride):  # grid-stride: any grid covers any size
        out[i] = fma32_device(alpha, b[i], a[i])


#: Threads per block: 8 warps, a common choice for a memory-bound elementwise kernel.
THREADS = 256
#: Blocks per SM on a GPU: enough resident blocks to keep every SM's memory pipeline busy.
BLOCKS_PER_SM = 32


def sm_count() -> int:
    """The GPU's number of streaming multiprocessors; the simulator counts as one."""
    if simulator_enabled():
        return 1
    return cuda.get_current_device().MULTIPROCESSOR_COUNT


def launch_geometry(n: int, threads: int = THREADS) -> tuple[int, int]:
    """(blocks, threads) for :func:`add_kernel` over ``n`` elements.

    Never more blocks than elements need; otherwise ``BLOCKS_PER_SM`` blocks for each SM (a
    multiple of the SM count), each thread striding through the rest.
    """
    needed = max(1, (n + threads - 1) // threads)
    return min(needed, BLOCKS_PER_SM * sm_count()), threads


def _as_array(t: torch.Tensor):
    # A CUDA tensor goes to Numba as a device array through __cuda_array_interface__
    # (no copy); a CPU tensor as a NumPy view of its memory.
    return cuda.as_cuda_array(t) if t.is_cuda else t.numpy()


def launch_add(
    a: torch.Tensor,
    b: torch.Tensor,
    alpha: float = 1.0,
    blocks: int | None = None,
    threads: int = THREADS,
) -> torch.Tensor:
    """``torch.add(a, b, alpha=alpha)`` for float32 tensors of one shape."""
    if a.dtype != torch.float32 or b.dtype != torch.float32:
        raise TypeError(
            f"launch_add takes float32 tensors (no type promotion here); got {a.dtype} and "
            f"{b.dtype}"
        )
    if a.shape != b.shape:  # torch raises RuntimeError where shapes do not broadcast
        raise RuntimeError(
            f"launch_add: the shapes {tuple(a.shape)} and {tuple(b.shape)} differ, and this "
            "kernel does no broadcasting (torch.add would, where the shapes broadcast)"
        )
    if a.device != b.device:
        raise RuntimeError(
            f"launch_add: both tensors must be on one device; got {a.device} and {b.device}"
        )
    x, y = a.contiguous().view(-1), b.contiguous().view(-1)
    out = torch.empty_like(x)
    if blocks is None:
        blocks, threads = launch_geometry(out.numel(), threads)
    xs, ys, outs = (_as_array(t) for t in (x, y, out))
    with warnings.catch_warnings():
        # On a GPU, Numba warns that a small grid under-fills it and that host arrays are
        # copied; both are what a teaching-size launch on CPU tensors does on purpose.
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        add_kernel[blocks, threads](xs, ys, np.float32(alpha), outs)
    return out.view(a.shape)


@njit(parallel=True, cache=True)
def add_cpu(a, b, alpha, out):
    """The same loop on the CPU: Numba compiles it to machine code over its threads."""
    for i in prange(out.size):
        out[i] = fma32_cpu(alpha, b[i], a[i])

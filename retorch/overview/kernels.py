"""The bottom layer, rebuilt once as a taste: ``add`` as a Numba-CUDA kernel.

torch's CPU add ends in ``aten/src/ATen/native/cpu/BinaryOpsKernel.cpp`` (``add_kernel``,
vectorised by ``cpu_kernel_vec``); its CUDA add in ``aten/src/ATen/native/cuda/BinaryAddSubKernel.cu``
(``add_kernel`` through ``gpu_kernel_with_scalars``): one thread per output element computing
``a + alpha * b``. This is that loop body, one CUDA thread per element.

torch's CPU loop computes ``a + alpha * b`` as a fused multiply-add: one rounding, not two.
Both loops here get the same bits by working in float64: the product of two float32 values
is exact in float64, so only the final conversion to float32 rounds.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import cuda, njit, prange

from ..cuda import kernel


@kernel("void(float32[:], float32[:], float32, float32[:])")
def add_kernel(a, b, alpha, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = np.float64(a[i]) + np.float64(alpha) * np.float64(b[i])


def launch_add(
    a: torch.Tensor, b: torch.Tensor, alpha: float = 1.0, threads: int = 128
) -> torch.Tensor:
    """``torch.add(a, b, alpha=alpha)`` for same-shape float32 tensors, through :func:`add_kernel`."""
    if a.shape != b.shape or a.dtype != torch.float32 or b.dtype != torch.float32:
        raise TypeError(
            "launch_add takes two float32 tensors of the same shape (no broadcasting here)"
        )
    x, y = a.contiguous().view(-1).numpy(), b.contiguous().view(-1).numpy()
    out = np.empty_like(x)
    blocks = (out.size + threads - 1) // threads
    add_kernel[blocks, threads](x, y, np.float32(alpha), out)
    return torch.from_numpy(out).view(a.shape)


@njit(parallel=True, cache=True)
def add_cpu(a, b, alpha, out):
    """The same loop on the CPU: Numba compiles it to vectorised machine code over 2 threads."""
    for i in prange(out.size):
        out[i] = np.float64(a[i]) + np.float64(alpha) * np.float64(b[i])

"""The bottom layer, rebuilt once as a taste: ``add`` as a Numba-CUDA kernel.

torch's CPU add ends in ``aten/src/ATen/native/cpu/BinaryOpsKernel.cpp`` (``add_kernel``,
vectorised by ``cpu_kernel_vec``); its CUDA add in ``aten/src/ATen/native/cuda/BinaryAddSubKernel.cu``
(``add_kernel`` through ``gpu_kernel_with_scalars``): one thread per output element computing
``a + alpha * b``. This is that loop body, one CUDA thread per element.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import cuda

from ..cuda import kernel


@kernel("void(float32[:], float32[:], float32, float32[:])")
def add_kernel(a, b, alpha, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + alpha * b[i]


def launch_add(a: torch.Tensor, b: torch.Tensor, alpha: float = 1.0, threads: int = 128) -> torch.Tensor:
    """``torch.add(a, b, alpha=alpha)`` for same-shape float32 tensors, through :func:`add_kernel`."""
    if a.shape != b.shape or a.dtype != torch.float32 or b.dtype != torch.float32:
        raise TypeError("launch_add takes two float32 tensors of the same shape (no broadcasting here)")
    x, y = a.contiguous().view(-1).numpy(), b.contiguous().view(-1).numpy()
    out = np.empty_like(x)
    blocks = (out.size + threads - 1) // threads
    add_kernel[blocks, threads](x, y, np.float32(alpha), out)
    return torch.from_numpy(out).view(a.shape)

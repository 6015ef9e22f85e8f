"""Chapter 5's custom operator, ``mylib::softplus``, made twice: with retorch's ``custom_op``
and with ``torch.library.custom_op``.

Mirrors the examples of ``torch/_library/custom_ops.py`` (``numpy_sin``: a NumPy CPU kernel,
``register_fake``, ``register_autograd``). softplus(x) = log(1 + exp(beta x)) / beta, computed
as max(beta x, 0) + log1p(exp(-|beta x|)) so that exp never overflows; its derivative is
sigmoid(beta x). retorch's op has a CPU kernel (NumPy), a CUDA kernel (Numba-CUDA, declared
with ``retorch.cuda.kernel``), a fake kernel and a backward; torch's (a CPU-only build here)
has the CPU kernel, the fake kernel and the backward.
"""

import math

import numpy as np
import torch
from numba import cuda

import retorch.tensor as rt
from retorch import cuda as rcuda
from retorch.tensor.cuda_kernels import launch_config

from ._tensor import Tensor
from .custom_ops import custom_op


def softplus_np(x: np.ndarray, beta: float) -> np.ndarray:
    """The CPU computation both ops share (NumPy)."""
    bx = beta * x
    return (np.maximum(bx, 0) + np.log1p(np.exp(-np.abs(bx)))) / beta


@rcuda.kernel(
    "void(float32[:], float32[:], float64, int64)", "void(float64[:], float64[:], float64, int64)"
)
def softplus_kernel(x, out, beta, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):  # grid-stride loop
        bx = beta * x[i]
        out[i] = (max(bx, 0.0) + math.log1p(math.exp(-abs(bx)))) / beta


def _flat(t: rt.Tensor):
    """The elements of a contiguous tensor as a 1-D array of its storage (device or host)."""
    impl = t._impl
    return impl.storage.typed(impl.dtype.np)[impl.storage_offset : impl.storage_offset + t.numel()]


def make_retorch_softplus(name: str = "mylib::softplus", fake: bool = True):
    """retorch's op: CPU, CUDA and (with ``fake``) Meta kernels, and its backward."""

    @custom_op(name, mutates_args=(), device_types="cpu")
    def softplus(x: Tensor, beta: float = 1.0) -> Tensor:
        return Tensor(rt.from_numpy(softplus_np(x.numpy(), beta)))

    @softplus.register_kernel("cuda")
    def _(x, beta=1.0):
        src = x.data.contiguous()
        out = rt.empty(*src.shape, dtype=src.dtype, device="cuda")
        blocks, threads = launch_config(src.numel())
        softplus_kernel[blocks, threads](_flat(src), _flat(out), beta, src.numel())
        return Tensor(out)

    if fake:

        @softplus.register_fake
        def _(x, beta=1.0):
            return x.new_empty(x.shape)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.beta = inputs[1]

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / ((x * -ctx.beta).exp() + 1), None  # grad * sigmoid(beta x); beta: none

    softplus.register_autograd(backward, setup_context=setup_context)
    return softplus


def make_torch_softplus(name: str = "mylib::softplus", fake: bool = True):
    """torch's op, written the same way with ``torch.library.custom_op``."""

    @torch.library.custom_op(name, mutates_args=(), device_types="cpu")
    def softplus(x: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
        return torch.from_numpy(softplus_np(x.numpy(), beta))

    if fake:

        @softplus.register_fake
        def _(x, beta=1.0):
            return torch.empty_like(x)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.beta = inputs[1]

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x * ctx.beta), None

    softplus.register_autograd(backward, setup_context=setup_context)
    return softplus

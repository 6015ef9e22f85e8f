"""Fused GELU, tanh approximation: one kernel forward, one backward, on each device.

Mirrors torch's ``aten/src/ATen/native/cpu/Activation.cpp``: ``GeluKernelImpl`` (registered
to ``GeluKernel``, the dispatch stub that ``gelu_out_cpu`` calls in
``aten/src/ATen/native/Activation.cpp``) and ``GeluBackwardKernelImpl`` (``GeluBackwardKernel``,
called by ``gelu_backward_out_cpu``), for ``approximate="tanh"``. Here the stubs are
``stub("gelu")`` and ``stub("gelu_backward")``, each with a CPU kernel (Numba) and a CUDA
kernel (Numba-CUDA, one thread per element over a grid-stride loop, as torch's
``GeluCUDAKernelImpl`` in ``aten/src/ATen/native/cuda/ActivationGeluKernel.cu``).

The forward is torch's, operation for operation, in the input's own precision
(``scalar_t``: float for float32, double for float64)::

    x_cube = x * x * x
    inner  = kBeta * (x + kKappa * x_cube)          kBeta = sqrt(2) * 2/sqrt(pi) * 0.5
    y      = 0.5 * x * (1 + tanh(inner))            kKappa = 0.044715

and the backward recomputes ``tanh(inner)`` from the saved *input* (torch's ``gelu_backward``
takes ``grad`` and ``self``, not the output)::

    dx = dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kBeta * (1 + 3 * kKappa * x * x))

Each direction reads its inputs once and writes one tensor: the composed version
(``retorch.models.functional.GeluTanh``, chapter 4's elementwise ops one after the other)
allocates a tensor per op, 9 in the forward and 14 in the backward.

Torch's CPU kernel runs the same formula on vectors (``Vectorized<float>::tanh`` is Sleef's
``tanhf_u10``, within 1 ulp), so float32 results agree with torch's to a few ulps, not bit
for bit; float64 likewise (``Sleef_tanhd4_u10``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, njit, prange

from .. import cuda as rcuda
from ..cuda_launch import launch
from .cpu_kernels import _jit, _pick
from .cuda_kernels import launch_config
from .dispatch_stub import stub
from .tensor_factories import empty
from .tensor_shape import contiguous

FLOATS = ("float32", "float64")

#: ``M_SQRT2 * M_2_SQRTPI * 0.5`` (sqrt(2 / pi)) and ``0.044715``, as Activation.cpp writes them
K_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5
K_KAPPA = 0.044715


# ---- CPU ----------------------------------------------------------------------------------------
@njit(parallel=True, **_jit)
def cpu_gelu_tanh(x, out, n, beta, kappa, half, one):
    """``out[i] = 0.5 x (1 + tanh(kBeta (x + kKappa x^3)))``, ``GeluKernelImpl``'s lambda."""
    for i in prange(n):
        xi = x[i]
        x_cube = xi * xi * xi
        inner = beta * (xi + kappa * x_cube)
        out[i] = half * xi * (one + np.tanh(inner))


@njit(parallel=True, **_jit)
def cpu_gelu_tanh_backward(dy, x, dx, n, beta, kappa, half, one, three):
    """``dx[i] = dy (left_derivative + right_derivative)``, ``GeluBackwardKernelImpl``'s."""
    for i in prange(n):
        xi = x[i]
        x_sq = xi * xi
        x_cube = x_sq * xi
        inner = beta * (xi + kappa * x_cube)
        tanh_inner = np.tanh(inner)
        left = half * xi
        right = one + tanh_inner
        left_derivative = half * right
        tanh_derivative = one - tanh_inner * tanh_inner
        inner_derivative = beta * (one + three * kappa * x_sq)
        right_derivative = left * tanh_derivative * inner_derivative
        dx[i] = dy[i] * (left_derivative + right_derivative)


# ---- CUDA ---------------------------------------------------------------------------------------
def _sig(t, backward):
    arrays = f"{t}[:], {t}[:], {t}[:]" if backward else f"{t}[:], {t}[:]"
    consts = f"{t}, {t}, {t}, {t}, {t}" if backward else f"{t}, {t}, {t}, {t}"
    return f"void({arrays}, int64, {consts})"


@rcuda.kernel(*(_sig(t, False) for t in FLOATS))
def gelu_tanh_kernel(x, out, n, beta, kappa, half, one):
    """One thread per element, grid-stride: the forward of :func:`cpu_gelu_tanh`."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, n, stride):
        xi = x[i]
        x_cube = xi * xi * xi
        inner = beta * (xi + kappa * x_cube)
        out[i] = half * xi * (one + math.tanh(inner))


@rcuda.kernel(*(_sig(t, True) for t in FLOATS))
def gelu_tanh_backward_kernel(dy, x, dx, n, beta, kappa, half, one, three):
    """One thread per element, grid-stride: the backward of :func:`cpu_gelu_tanh_backward`."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, n, stride):
        xi = x[i]
        x_sq = xi * xi
        inner = beta * (xi + kappa * (x_sq * xi))
        tanh_inner = math.tanh(inner)
        left_derivative = half * (one + tanh_inner)
        tanh_derivative = one - tanh_inner * tanh_inner
        inner_derivative = beta * (one + three * kappa * x_sq)
        dx[i] = dy[i] * (left_derivative + half * xi * tanh_derivative * inner_derivative)


# ---- the stubs' kernels and the entry points ----------------------------------------------------
def _flat(t):
    """The elements of a contiguous tensor, as a 1-d (host or device) array."""
    impl = t._impl
    return impl.storage.typed(impl.dtype.np)[impl.storage_offset : impl.storage_offset + t.numel()]


def _consts(dtype, backward=False):
    typ = dtype.np.type
    c = (typ(K_BETA), typ(K_KAPPA), typ(0.5), typ(1.0))
    return c + (typ(3.0),) if backward else c


@stub("gelu").register("cpu")
def gelu_cpu(out, x):
    n = x.numel()
    _pick(cpu_gelu_tanh, n)(_flat(x), _flat(out), n, *_consts(x.dtype))


@stub("gelu_backward").register("cpu")
def gelu_backward_cpu(grad_input, grad, x):
    n = x.numel()
    loop = _pick(cpu_gelu_tanh_backward, n)
    loop(_flat(grad), _flat(x), _flat(grad_input), n, *_consts(x.dtype, True))


@stub("gelu").register("cuda")
def gelu_cuda(out, x):
    n = x.numel()
    launch(gelu_tanh_kernel, *launch_config(n), _flat(x), _flat(out), n, *_consts(x.dtype))


@stub("gelu_backward").register("cuda")
def gelu_backward_cuda(grad_input, grad, x):
    n = x.numel()
    launch(gelu_tanh_backward_kernel, *launch_config(n), _flat(grad), _flat(x),
           _flat(grad_input), n, *_consts(x.dtype, True))  # fmt: skip


def _check(x, approximate, name):
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")
    if approximate != "tanh":
        raise NotImplementedError(
            f"retorch's {name} has the tanh approximation only (retorch.tensor has no erf "
            "kernel): pass approximate='tanh'"
        )
    if x.dtype.name not in FLOATS:  # torch's kernels also take BFloat16 and Half; these do not
        raise NotImplementedError(f"\"{name}\" not implemented for '{x.dtype.scalar_name}'")


def gelu(x, approximate="tanh"):
    """``torch.ops.aten.gelu(x, approximate="tanh")`` on a raw ``retorch.tensor`` tensor:
    a new contiguous tensor of ``x``'s shape, dtype and device, from one kernel."""
    _check(x, approximate, "GeluKernelImpl")
    x = contiguous(x)
    out = empty(*x.shape, dtype=x.dtype, device=x.device)
    if x.numel():
        stub("gelu")(x.device, out, x)
    return out


def gelu_backward(grad, x, approximate="tanh"):
    """``torch.ops.aten.gelu_backward(grad, x, approximate="tanh")``: the input's gradient
    from the output's and the saved input, from one kernel."""
    _check(x, approximate, "GeluBackwardKernelImpl")
    if tuple(grad.shape) != tuple(x.shape):
        raise RuntimeError(
            f"gelu_backward: grad_output {list(grad.shape)} must have the input's shape "
            f"{list(x.shape)}"
        )
    if grad.dtype != x.dtype or grad.device != x.device:
        raise RuntimeError(
            f"gelu_backward: grad_output ({grad.dtype}, {grad.device}) and input ({x.dtype}, "
            f"{x.device}) must have the same dtype and device"
        )
    grad, x = contiguous(grad), contiguous(x)
    grad_input = empty(*x.shape, dtype=x.dtype, device=x.device)
    if x.numel():
        stub("gelu_backward")(x.device, grad_input, grad, x)
    return grad_input

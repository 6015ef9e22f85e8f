"""One Adam/AdamW step as a single Numba kernel, as torch's ``fused=True`` does.

Mirrors aten/src/ATen/native/cpu/FusedAdamKernel.cpp (CPU) and
aten/src/ATen/native/cuda/fused_adam_impl.cu (CUDA): instead of one pass over memory per
operation of the formula (about ten for the foreach version), each element is read once,
updated in registers, and written once.

* CPU: ``fused_adam_cpu`` runs over all parameters of a group at once. The tensors are passed
  as typed lists and cut into chunks of ``CHUNK`` elements; ``prange`` spreads the chunks over
  the cores, like ATen's ``multi_tensor_apply`` does over CUDA blocks.
* CUDA: ``fused_adam_cuda_kernel`` is the same update, one thread per element of flat buffers.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, njit, prange
from numba.typed import List

from ..cuda import device_function, kernel

CHUNK = 65536


@njit(inline="always")
def _update(p, g, m, v, vmax, c, amsgrad, maximize, adamw):
    # c: float32 constants (1 - lr*wd, wd, 1 - beta1, beta2, 1 - beta2, eps, step_size, sqrt(bc2)),
    # so the arithmetic stays in float32 and vectorises as wide as the machine allows.
    if maximize:
        g = -g
    if adamw:
        p = p * c[0]
    else:
        g = g + c[1] * p
    m = m + c[2] * (g - m)
    v = c[3] * v + c[4] * g * g
    if amsgrad:
        vmax = max(vmax, v)
        denom = np.sqrt(vmax) / c[7] + c[5]
    else:
        denom = np.sqrt(v) / c[7] + c[5]
    return p - c[6] * m / denom, m, v, vmax


@njit(parallel=True, cache=True)
def fused_adam_cpu(
    params,
    grads,
    exp_avgs,
    exp_avg_sqs,
    max_exp_avg_sqs,
    chunk_tensor,
    chunk_start,
    consts,
    amsgrad,
    maximize,
    adamw,
):
    for c in prange(chunk_tensor.size):
        t, start = chunk_tensor[c], chunk_start[c]
        end = min(start + CHUNK, params[t].size)
        # Slicing first gives the inner loop plain local arrays, which LLVM vectorises.
        p, g, m = params[t][start:end], grads[t][start:end], exp_avgs[t][start:end]
        v, vm = exp_avg_sqs[t][start:end], max_exp_avg_sqs[t][start:end]
        for i in range(p.size):
            vmax = vm[i] if amsgrad else np.float32(0)
            p[i], m[i], v[i], vmax = _update(
                p[i], g[i], m[i], v[i], vmax, consts, amsgrad, maximize, adamw
            )
            if amsgrad:
                vm[i] = vmax


def _constants(step, lr, beta1, beta2, eps, weight_decay):
    bc1, bc2 = 1 - beta1**step, 1 - beta2**step
    values = [
        1 - lr * weight_decay,
        weight_decay,
        1 - beta1,
        beta2,
        1 - beta2,
        eps,
        lr / bc1,
        math.sqrt(bc2),
    ]
    return np.array(values, dtype=np.float32)


def adam_step_cpu(
    params,
    grads,
    exp_avgs,
    exp_avg_sqs,
    max_exp_avg_sqs,
    *,
    step,
    lr,
    beta1,
    beta2,
    eps,
    weight_decay,
    amsgrad,
    maximize,
    adamw,
):
    """Update lists of flat float32 numpy arrays in place with one kernel launch."""
    sizes = [p.size for p in params]
    chunk_tensor = np.array(
        [t for t, n in enumerate(sizes) for _ in range(0, n, CHUNK)], dtype=np.int64
    )
    chunk_start = np.array([s for n in sizes for s in range(0, n, CHUNK)], dtype=np.int64)
    maxes = max_exp_avg_sqs if amsgrad else params  # an unused placeholder keeps the types fixed
    fused_adam_cpu(
        List(params),
        List(grads),
        List(exp_avgs),
        List(exp_avg_sqs),
        List(maxes),
        chunk_tensor,
        chunk_start,
        _constants(step, lr, beta1, beta2, eps, weight_decay),
        amsgrad,
        maximize,
        adamw,
    )


@device_function("float32(float32, float32)")
def _fmax(a, b):
    return a if a > b else b


@kernel(
    "void(float32[:], float32[:], float32[:], float32[:], float32[:], float32[:], boolean, boolean, boolean)"
)
def fused_adam_cuda_kernel(
    param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, c, amsgrad, maximize, adamw
):
    i = cuda.grid(1)
    if i >= param.size:
        return
    p, g, m, v = param[i], grad[i], exp_avg[i], exp_avg_sq[i]
    if maximize:
        g = -g
    if adamw:
        p = p * c[0]
    else:
        g = g + c[1] * p
    m = m + c[2] * (g - m)
    v = c[3] * v + c[4] * g * g
    if amsgrad:
        vmax = _fmax(max_exp_avg_sq[i], v)
        max_exp_avg_sq[i] = vmax
        denom = math.sqrt(vmax) / c[7] + c[5]
    else:
        denom = math.sqrt(v) / c[7] + c[5]
    param[i] = p - c[6] * m / denom
    exp_avg[i] = m
    exp_avg_sq[i] = v


def adam_step_cuda(
    param,
    grad,
    exp_avg,
    exp_avg_sq,
    max_exp_avg_sq,
    *,
    step,
    lr,
    beta1,
    beta2,
    eps,
    weight_decay,
    amsgrad,
    maximize,
    adamw,
    threads: int = 256,
):
    """One launch over flat float32 buffers (device arrays, or host arrays under the simulator)."""
    blocks = (param.size + threads - 1) // threads
    consts = _constants(step, lr, beta1, beta2, eps, weight_decay)
    fused_adam_cuda_kernel[blocks, threads](
        param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, consts, amsgrad, maximize, adamw
    )

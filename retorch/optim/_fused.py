"""One Adam/AdamW step over a whole list of tensors as a single Numba kernel (``fused=True``).

Mirrors aten/src/ATen/native/cpu/FusedAdamKernel.cpp (CPU) and
aten/src/ATen/native/cuda/fused_adam_impl.cu with its ``multi_tensor_apply`` (CUDA). The loop
and foreach versions make one pass over memory per operation of the formula (about ten); a
fused kernel reads each element of param, grad and both moments once, updates it in
registers, and writes it back once.

Both kernels see the tensor list the way ATen's ``multi_tensor_apply`` does: as a table of
tensors cut into chunks of ``CHUNK`` elements, each chunk an independent unit of work (a
``prange`` iteration on the CPU, a thread block on the GPU) that knows its tensor and its start.

* CPU, ``fused_adam_cpu``: the table holds each tensor's *address* (``tensor.data_ptr()``),
  which the kernel turns back into an array. Passing numpy views in ``numba.typed.List``
  objects instead costs tens of microseconds per tensor per step (4 ms a step for 100
  tensors, more than the update of their 1M parameters itself).
* CUDA, ``fused_adam_cuda_kernel``: Numba-CUDA kernels take arrays, not addresses, so the
  tensors are laid end to end in flat buffers and the table holds offsets into them.

Each tensor has its own row of constants, because tensors that missed a gradient at some step
have a smaller step count and so a different bias correction.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from llvmlite import ir
from numba import carray, cuda, njit, prange, types
from numba.extending import intrinsic

from ..cuda import device_function, kernel

#: Elements per unit of work: 64K float32 = 256 KiB per buffer, big enough to amortise the
#: per-chunk overhead, small enough that a few tensors still keep every core busy.
CHUNK = 65536

#: Columns of the per-tensor constants table.
WD_MUL, WD, ONE_MINUS_BETA1, BETA2, ONE_MINUS_BETA2, EPS, STEP_SIZE, BC2_SQRT = range(8)

#: Rows of the address table, in the order of ``adam_step_cpu``'s tensor lists.
PARAM, GRAD, EXP_AVG, EXP_AVG_SQ, MAX_EXP_AVG_SQ = range(5)


def adam_constants(steps, lr, beta1, beta2, eps, weight_decay) -> np.ndarray:
    """The float32 scalars of one step, one row per tensor, computed in float64 as ATen does."""
    steps = np.asarray(steps, dtype=np.float64)
    table = np.empty((steps.size, 8), dtype=np.float64)
    table[:, WD_MUL] = 1 - lr * weight_decay
    table[:, WD] = weight_decay
    table[:, ONE_MINUS_BETA1] = 1 - beta1
    table[:, BETA2] = beta2
    table[:, ONE_MINUS_BETA2] = 1 - beta2
    table[:, EPS] = eps
    table[:, STEP_SIZE] = lr / (1 - beta1**steps)
    table[:, BC2_SQRT] = np.sqrt(1 - beta2**steps)
    return table.astype(np.float32)


def chunk_table(numels) -> tuple[np.ndarray, np.ndarray]:
    """``(tensor index, first element)`` of every chunk, like ``multi_tensor_apply``'s metadata."""
    numels = np.asarray(numels, dtype=np.int64)
    per_tensor = (numels + CHUNK - 1) // CHUNK
    tensor = np.repeat(np.arange(numels.size, dtype=np.int64), per_tensor)
    first_chunk = np.cumsum(per_tensor) - per_tensor
    start = (np.arange(tensor.size, dtype=np.int64) - first_chunk[tensor]) * CHUNK
    return tensor, start


def adam_math(p, g, m, v, vmax, c, amsgrad, maximize, adamw):
    """One element's update, in the order of operations of ``_single_tensor_adam``.

    ``c`` is the tensor's row of constants. Compiled twice below: for the CPU kernel and as a
    CUDA device function.
    """
    if maximize:
        g = -g
    if adamw:
        p = p * c[WD_MUL]
    else:
        g = g + c[WD] * p
    # lerp_ as ATen computes it when the weight 1 - beta1 is below 0.5, as it is in practice.
    # ATen fuses this multiply-add into one rounding: one reason fused and loop results differ
    # in the last bit.
    m = m + c[ONE_MINUS_BETA1] * (g - m)
    v = v * c[BETA2] + c[ONE_MINUS_BETA2] * g * g
    if amsgrad:
        vmax = max(vmax, v)
        denom = math.sqrt(vmax) / c[BC2_SQRT] + c[EPS]
    else:
        denom = math.sqrt(v) / c[BC2_SQRT] + c[EPS]
    return p - (c[STEP_SIZE] * m) / denom, m, v, vmax


_adam_math_cpu = njit(inline="always")(adam_math)
_adam_math_cuda = device_function(
    "UniTuple(float32, 4)(float32, float32, float32, float32, float32, float32[::1], "
    "boolean, boolean, boolean)"
)(adam_math)


@intrinsic
def _float32_pointer(typingctx, address):
    """An integer address (``tensor.data_ptr()``) as a ``float32*``, for ``numba.carray``."""

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], ir.PointerType(ir.FloatType()))

    return types.CPointer(types.float32)(types.int64), codegen


@functools.cache
def fused_adam_cpu(amsgrad: bool, maximize: bool, adamw: bool):
    """The CPU kernel for one combination of flags, compiled (and cached on disk) at first use.

    The flags are compile-time constants of the kernel, as ``ADAM_MODE`` is a template
    parameter of ATen's: tested at run time inside the inner loop, they stop LLVM from
    vectorising it, which makes the step about eight times slower.

    ``fastmath`` stays off: the loop vectorises without it (there is no reduction to
    reassociate), and it would let LLVM reorder and contract the float32 operations, so the
    kernel would no longer compute what ``adam_math`` says.
    """

    @njit(parallel=True, cache=True)
    def fused_adam_cpu_kernel(addresses, numels, chunk_tensor, chunk_start, consts):
        # addresses[k, t]: where tensor t of list k (PARAM, GRAD, ...) starts in memory.
        for c in prange(chunk_tensor.size):
            t, start = chunk_tensor[c], chunk_start[c]
            n, end = numels[t], min(start + CHUNK, numels[t])
            p = carray(_float32_pointer(addresses[PARAM, t]), n)[start:end]
            g = carray(_float32_pointer(addresses[GRAD, t]), n)[start:end]
            m = carray(_float32_pointer(addresses[EXP_AVG, t]), n)[start:end]
            v = carray(_float32_pointer(addresses[EXP_AVG_SQ, t]), n)[start:end]
            vm = carray(_float32_pointer(addresses[MAX_EXP_AVG_SQ, t]), n)[start:end]
            for i in range(end - start):
                vmax = vm[i] if amsgrad else np.float32(0)
                p[i], m[i], v[i], vmax = _adam_math_cpu(
                    p[i], g[i], m[i], v[i], vmax, consts[t], amsgrad, maximize, adamw
                )
                if amsgrad:
                    vm[i] = vmax

    return fused_adam_cpu_kernel


def adam_step_cpu(
    params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, *, steps, lr, beta1, beta2,
    eps, weight_decay, amsgrad, maximize, adamw,
):  # fmt: skip
    """Update lists of contiguous float32 CPU tensors in place, in one kernel launch.

    The caller keeps the tensors alive and checks that they are contiguous float32: the
    kernel sees only their addresses.
    """
    numels = np.array([p.numel() for p in params], dtype=np.int64)
    # Without amsgrad the fifth row is never read; the exp_avg_sqs fill it.
    lists = (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs if amsgrad else exp_avg_sqs)
    addresses = np.array([[t.data_ptr() for t in ts] for ts in lists], dtype=np.int64)
    chunk_tensor, chunk_start = chunk_table(numels)
    consts = adam_constants(steps, lr, beta1, beta2, eps, weight_decay)
    fused_adam_cpu(amsgrad, maximize, adamw)(addresses, numels, chunk_tensor, chunk_start, consts)


@kernel(
    "void(float32[:], float32[:], float32[:], float32[:], float32[:], int64[:], int64[:], "
    "int64[:], int64[:], float32[:, ::1], boolean, boolean, boolean)"
)
def fused_adam_cuda_kernel(
    param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, offsets, numels, chunk_tensor,
    chunk_start, consts, amsgrad, maximize, adamw,
):  # fmt: skip
    # One block per chunk; its threads stride through the chunk, so neighbouring threads touch
    # neighbouring elements (coalesced loads) whatever the block size.
    c = cuda.blockIdx.x
    t = chunk_tensor[c]
    first = offsets[t] + chunk_start[c]
    last = offsets[t] + min(chunk_start[c] + CHUNK, numels[t])
    for i in range(first + cuda.threadIdx.x, last, cuda.blockDim.x):
        vmax = max_exp_avg_sq[i] if amsgrad else np.float32(0)
        param[i], exp_avg[i], exp_avg_sq[i], vmax = _adam_math_cuda(
            param[i], grad[i], exp_avg[i], exp_avg_sq[i], vmax, consts[t], amsgrad, maximize,
            adamw,
        )  # fmt: skip
        if amsgrad:
            max_exp_avg_sq[i] = vmax


def adam_step_cuda(
    param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, numels, *, steps, lr, beta1, beta2,
    eps, weight_decay, amsgrad, maximize, adamw, threads: int = 256,
):  # fmt: skip
    """One launch over flat float32 buffers holding ``len(numels)`` tensors end to end.

    The buffers are anything ``numba.cuda`` launches on: CUDA tensors or device arrays on a
    GPU, numpy arrays under the simulator.
    """
    numels = np.asarray(numels, dtype=np.int64)
    offsets = np.cumsum(numels) - numels
    chunk_tensor, chunk_start = chunk_table(numels)
    consts = adam_constants(steps, lr, beta1, beta2, eps, weight_decay)
    fused_adam_cuda_kernel[chunk_tensor.size, threads](
        param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, offsets, numels, chunk_tensor,
        chunk_start, consts, amsgrad, maximize, adamw,
    )  # fmt: skip

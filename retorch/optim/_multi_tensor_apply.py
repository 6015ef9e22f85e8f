"""Multi-tensor Adam on pointer tables, as ATen's ``multi_tensor_apply`` launches it.

Mirrors ``aten/src/ATen/native/cuda/MultiTensorApply.cuh`` (``TensorListMetadata``: the
addresses of each list's tensors, their sizes, and for each block the tensor and chunk it
works on; ``kChunkSize`` = 65,536 elements, ``kBlockSize`` = 512 threads, ``kILP`` = 4) and
``aten/src/ATen/native/cuda/fused_adam_utils.cuh`` (``FusedAdamMathFunctor``: each thread
loads ``kILP`` elements of every list before it computes, with one 16-byte load per list where
the chunk allows it, ``load_store``; the step count read on the device through
``state_steps_addresses``).

Chapter 2's CUDA fused Adam (``_fused.py``) moves a group's tensors into flat buffers, because
a Numba-CUDA kernel takes arrays, not addresses. ``retorch.cuda_ptr.array_at`` lifts that:
here the parameters, gradients and moments stay where they are, and the kernel turns each
table entry back into an array. torch passes its table as a kernel argument and launches once
per full table; a Numba-CUDA kernel takes no structs, so the table lives in device memory,
built once and rebuilt only when an address changes (:class:`PointerTable`): parameters and
state do not move between steps, and a gradient kept between steps
(``zero_grad(set_to_none=False)``) does not either.

:func:`fused_adam_` has the signature of ``torch._fused_adam_`` (which the step counts have
already been increased for, as ``torch.optim.adam._fused_adam`` does with
``torch._foreach_add_``), so the two can be run on the same lists.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, float64

from ..cuda import kernel, simulator_enabled
from ..cuda_launch import launch
from ..cuda_ptr import aligned, array_at, load4, store4
from ._fused import (
    BC2_SQRT,
    BETA2,
    EPS,
    ONE_MINUS_BETA1,
    ONE_MINUS_BETA2,
    STEP_SIZE,
    WD,
    WD_MUL,
    _adam_math_cuda,
)

#: ``kChunkSize``: elements of a tensor per block.
CHUNK = 65536
#: ``kBlockSize``: threads per block (32 under the simulator, where a thread is a Python one).
THREADS = 32 if simulator_enabled() else 512
#: ``kILP``: elements a thread loads, of every list, before it computes on any.
ILP = 4
#: Rows of the address table: the five lists of ``_fused_adam_``, then the step counts.
PARAM, GRAD, EXP_AVG, EXP_AVG_SQ, MAX_EXP_AVG_SQ, STEP = range(6)


@kernel(
    "void(int64[:, ::1], int64[::1], int64[::1], int64[::1], int64, float64, float64, float64, "
    "float64, float64, boolean, boolean, boolean, boolean)"
)
def multi_tensor_adam_kernel(
    addresses, numels, block_to_tensor, block_to_chunk, chunk_size, lr, beta1, beta2, eps,
    weight_decay, amsgrad, maximize, adamw, vectorize,
):  # fmt: skip
    """One block per (tensor, chunk) of the table. ``vectorize`` (all addresses 16-byte
    aligned, every size and the chunk a multiple of ILP): each thread moves ILP consecutive
    elements per list with one 16-byte load and store; otherwise ILP elements a block apart,
    each bounds-checked (``FusedAdamMathFunctor``'s two paths)."""
    b = cuda.blockIdx.x
    t, chunk = block_to_tensor[b], block_to_chunk[b]
    n = numels[t]
    zero = float32(0)
    param = array_at(addresses[PARAM, t], n, zero)
    grad = array_at(addresses[GRAD, t], n, zero)
    exp_avg = array_at(addresses[EXP_AVG, t], n, zero)
    exp_avg_sq = array_at(addresses[EXP_AVG_SQ, t], n, zero)
    vmax_all = array_at(addresses[MAX_EXP_AVG_SQ, t], n if amsgrad else 0, zero)
    s = float64(array_at(addresses[STEP, t], 1, zero)[0])  # *step_count, on the device
    k = cuda.local.array(8, float32)
    k[WD_MUL] = 1 - lr * weight_decay
    k[WD] = weight_decay
    k[ONE_MINUS_BETA1] = 1 - beta1
    k[BETA2] = beta2
    k[ONE_MINUS_BETA2] = 1 - beta2
    k[EPS] = eps
    k[STEP_SIZE] = lr / (1 - beta1**s)
    k[BC2_SQRT] = math.sqrt(1 - beta2**s)
    start = chunk * chunk_size
    end = min(start + chunk_size, n)
    rp = cuda.local.array(ILP, float32)
    rg = cuda.local.array(ILP, float32)
    rm = cuda.local.array(ILP, float32)
    rv = cuda.local.array(ILP, float32)
    rx = cuda.local.array(ILP, float32)
    tid, threads = cuda.threadIdx.x, cuda.blockDim.x
    if vectorize:
        for i in range(start + tid * ILP, end, threads * ILP):  # all loads, then the math
            rp[0], rp[1], rp[2], rp[3] = load4(param, i)
            rg[0], rg[1], rg[2], rg[3] = load4(grad, i)
            rm[0], rm[1], rm[2], rm[3] = load4(exp_avg, i)
            rv[0], rv[1], rv[2], rv[3] = load4(exp_avg_sq, i)
            for ii in range(ILP):
                rx[ii] = vmax_all[i + ii] if amsgrad else zero
            for ii in range(ILP):
                rp[ii], rm[ii], rv[ii], rx[ii] = _adam_math_cuda(
                    rp[ii], rg[ii], rm[ii], rv[ii], rx[ii], k, amsgrad, maximize, adamw
                )
            store4(param, i, rp[0], rp[1], rp[2], rp[3])
            store4(exp_avg, i, rm[0], rm[1], rm[2], rm[3])
            store4(exp_avg_sq, i, rv[0], rv[1], rv[2], rv[3])
            if amsgrad:
                for ii in range(ILP):
                    vmax_all[i + ii] = rx[ii]
        return
    for base in range(start, end, threads * ILP):
        for ii in range(ILP):  # every load of the ILP elements first ...
            i = base + tid + ii * threads
            if i < end:
                rp[ii], rg[ii], rm[ii], rv[ii] = param[i], grad[i], exp_avg[i], exp_avg_sq[i]
                rx[ii] = vmax_all[i] if amsgrad else zero
            else:  # past the end: zeros, computed on and never stored (as load_args does)
                rp[ii] = rg[ii] = rm[ii] = rv[ii] = rx[ii] = zero
        for ii in range(ILP):  # ... then the math on registers ...
            rp[ii], rm[ii], rv[ii], rx[ii] = _adam_math_cuda(
                rp[ii], rg[ii], rm[ii], rv[ii], rx[ii], k, amsgrad, maximize, adamw
            )
        for ii in range(ILP):  # ... then the stores
            i = base + tid + ii * threads
            if i < end:
                param[i], exp_avg[i], exp_avg_sq[i] = rp[ii], rm[ii], rv[ii]
                if amsgrad:
                    vmax_all[i] = rx[ii]


def _to_device(array: np.ndarray):
    return cuda.to_device(np.ascontiguousarray(array))


class PointerTable:
    """``TensorListMetadata`` in device memory: the addresses (one row per list), the sizes,
    and each block's tensor and chunk; ``vectorize`` says whether every address is 16-byte
    aligned and every size a multiple of ILP. Kept per list of addresses, rebuilt when one
    changes."""

    def __init__(self, lists, chunk_size: int = CHUNK) -> None:
        ptrs = np.array([[t.data_ptr() for t in row] for row in lists], dtype=np.int64)
        numels = np.array([t.numel() for t in lists[PARAM]], dtype=np.int64)
        per = (numels + chunk_size - 1) // chunk_size
        self.key = (ptrs.tobytes(), numels.tobytes(), chunk_size)
        self.blocks = int(per.sum())
        self.vectorize = bool(
            all(aligned(int(p)) for p in ptrs[:STEP].ravel())
            and (numels % ILP == 0).all()
            and chunk_size % ILP == 0
        )
        self.addresses = _to_device(ptrs)
        self.numels = _to_device(numels)
        self.block_to_tensor = _to_device(np.repeat(np.arange(numels.size, dtype=np.int64), per))
        self.block_to_chunk = _to_device(
            np.concatenate([np.arange(c, dtype=np.int64) for c in per])
            if numels.size else np.zeros(0, np.int64)
        )  # fmt: skip


_TABLES: dict = {}


def table_for(lists, chunk_size: int = CHUNK) -> PointerTable:
    """The device table of these tensor lists: built on first use, reused while no tensor has
    moved (the key is every address and size)."""
    ptrs = tuple(t.data_ptr() for row in lists for t in row)
    sizes = tuple(t.numel() for t in lists[PARAM])
    key = (ptrs, sizes, chunk_size)
    table = _TABLES.get(key)
    if table is None:
        if len(_TABLES) > 16:  # a few groups at most; a moved tensor leaves a stale entry
            _TABLES.clear()
        table = _TABLES[key] = PointerTable(lists, chunk_size)
    return table


def fused_adam_(
    params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
    weight_decay, eps, amsgrad, maximize, adamw=False, chunk_size: int = CHUNK,
    threads: int | None = None,
):  # fmt: skip
    """``torch._fused_adam_`` (``adamw=True``: ``torch._fused_adamw_``) on float32 tensors in
    place, in one launch per group: the steps in ``state_steps`` (float32, one element each)
    must already count this step."""
    lists = [params, grads, exp_avgs, exp_avg_sqs,
             max_exp_avg_sqs if amsgrad else params, state_steps]  # fmt: skip
    if not params:
        return
    for name, row in zip(("params", "grads", "exp_avgs", "exp_avg_sqs"), lists, strict=False):
        if len(row) != len(params) or any(t.dtype != params[0].dtype for t in row):
            raise RuntimeError(f"_fused_adam_: {name} must hold one tensor of the params' "
                               f"dtype per parameter")  # fmt: skip
    if str(params[0].dtype) != "torch.float32":
        raise NotImplementedError("retorch's multi-tensor Adam handles float32 tensors only")
    table = table_for(lists, chunk_size)
    if table.blocks == 0:
        return
    launch(multi_tensor_adam_kernel, table.blocks, threads or THREADS, table.addresses,
           table.numels, table.block_to_tensor, table.block_to_chunk, chunk_size, float(lr),
           float(beta1), float(beta2), float(eps), float(weight_decay), bool(amsgrad),
           bool(maximize), bool(adamw), table.vectorize)  # fmt: skip

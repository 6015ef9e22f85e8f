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
* CUDA, ``fused_adam_cuda_kernel``: Numba-CUDA kernels take arrays, not addresses, so each
  group's tensors live end to end in flat device buffers that the parameters, gradients and
  the optimizer's state view (``FlatAdamBuffers``, as apex and FSDP do); the chunk table holds
  offsets into them and stays on the device. Tensors reach the kernel through
  ``as_cuda_array`` (``__cuda_array_interface__``), on a GPU and under the simulator alike.

Each tensor has its own step count, because tensors that missed a gradient at some step have
a smaller one and so a different bias correction: a row of the constants table on the CPU, an
entry of a step buffer on the device (read by the kernel, as ATen reads ``*step_count``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math

import numpy as np
import torch
from llvmlite import ir
from numba import carray, cuda, float32, float64, njit, prange, types
from numba.extending import intrinsic

from ..cuda import device_function, kernel, simulator_enabled

#: Elements per unit of work: 64K float32 = 256 KiB per buffer, big enough to amortise the
#: per-chunk overhead, small enough that a few tensors still keep every core busy.
CHUNK = 65536

#: Threads per block of the CUDA kernel: ATen's kBlockSize on a GPU; under the simulator, where
#: every simulated thread costs about 0.1 ms, fewer threads each take more elements.
THREADS = 32 if simulator_enabled() else 512

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
    """The CPU kernel for one combination of flags, compiled (and cached on disk) at first
    use.

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


def cuda_array_interface(t) -> dict:
    """``t.__cuda_array_interface__``: what a CUDA tensor tells Numba about its memory.

    Under the simulator the tensors live on the CPU, where torch refuses the attribute; the
    same dictionary is built from the CPU tensor, so both runs take the same path below.
    """
    if t.is_cuda:
        return t.__cuda_array_interface__
    if not simulator_enabled():
        raise TypeError(
            f"a {t.device.type} tensor has no __cuda_array_interface__: the CUDA path of the "
            "fused step needs CUDA tensors (or the CUDA simulator, NUMBA_ENABLE_CUDASIM=1)"
        )
    strides = None if t.is_contiguous() else tuple(s * t.element_size() for s in t.stride())
    typestr = {torch.float32: "<f4", torch.float64: "<f8", torch.int64: "<i8"}[t.dtype]
    return {"shape": tuple(t.shape), "strides": strides, "typestr": typestr,
            "data": (t.data_ptr(), False), "version": 3}  # fmt: skip


def _simulated_as_cuda_array(t):
    """The simulator's stand-in for ``cuda.as_cuda_array``, which it lacks: a fake device array
    over the memory that the interface describes (no copy: the kernel writes the tensor)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    iface = cuda_array_interface(t)
    dtype = np.dtype(iface["typestr"])
    count = int(np.prod(iface["shape"]))
    buffer = (ctypes.c_byte * (count * dtype.itemsize)).from_address(iface["data"][0])
    array = np.frombuffer(buffer, dtype=dtype, count=count).reshape(iface["shape"])
    device_array = FakeCUDAArray(array)
    device_array.owner = t  # as as_cuda_array does: the array keeps the tensor alive
    return device_array


def as_cuda_array(t):
    """A torch tensor as the Numba device array a kernel launch takes, sharing its memory.

    On a GPU this is ``numba.cuda.as_cuda_array(t)``, which reads
    ``t.__cuda_array_interface__``; under the simulator the same interface is read from the
    CPU tensor. Kernels never receive torch tensors: Numba would not know their type (and
    ``t.size`` is a method, not a number).
    """
    if simulator_enabled():
        return _simulated_as_cuda_array(t)
    return cuda.as_cuda_array(t, sync=False)


@kernel(
    "void(float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], "
    "int64[::1], int64[::1], int64[::1], int64[::1], int64, float64, float64, float64, float64, "
    "float64, boolean, boolean, boolean)"
)
def fused_adam_cuda_kernel(
    param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, offsets, numels, chunk_tensor,
    chunk_start, chunk_size, lr, beta1, beta2, eps, weight_decay, amsgrad, maximize, adamw,
):  # fmt: skip
    # One block per chunk (multi_tensor_apply's blockIdx.x -> block_to_tensor/block_to_chunk).
    c = cuda.blockIdx.x
    t = chunk_tensor[c]
    # The tensor's constants, from its step count on the device: ATen reads *step_count in
    # the kernel too, so a step never copies anything from the host.
    s = float64(step[t])
    k = cuda.local.array(8, float32)
    k[WD_MUL] = 1 - lr * weight_decay
    k[WD] = weight_decay
    k[ONE_MINUS_BETA1] = 1 - beta1
    k[BETA2] = beta2
    k[ONE_MINUS_BETA2] = 1 - beta2
    k[EPS] = eps
    k[STEP_SIZE] = lr / (1 - beta1**s)
    k[BC2_SQRT] = math.sqrt(1 - beta2**s)
    # Its threads stride through the chunk, so neighbouring threads touch neighbouring
    # elements (coalesced loads) whatever the block size.
    first = offsets[t] + chunk_start[c]
    last = offsets[t] + min(chunk_start[c] + chunk_size, numels[t])
    for i in range(first + cuda.threadIdx.x, last, cuda.blockDim.x):
        vmax = max_exp_avg_sq[i] if amsgrad else float32(0)
        param[i], exp_avg[i], exp_avg_sq[i], vmax = _adam_math_cuda(
            param[i], grad[i], exp_avg[i], exp_avg_sq[i], vmax, k, amsgrad, maximize, adamw
        )
        if amsgrad:
            max_exp_avg_sq[i] = vmax


class FlatAdamBuffers:
    """One group's tensors laid end to end in flat device buffers that the tensors view.

    The GPU form of the fused step, as apex's contiguous buffers and FSDP's
    ``FlatParameter`` do it: Numba-CUDA kernels take arrays, not lists of tensor
    addresses, so the parameters, gradients, both moments and the step counts each live
    in one flat buffer, and ``param.data``, ``p.grad`` and the optimizer's ``state`` are
    views of it. One launch then covers the whole group, with a chunk table like
    ``multi_tensor_apply``'s (``TensorListMetadata``: the tensor and first element of each
    block) built once and kept on the device. A step copies nothing from the host.
    """

    def __init__(self, params, amsgrad: bool):
        self.params = list(params)
        self.index = {id(p): i for i, p in enumerate(self.params)}
        self.numels = [p.numel() for p in self.params]
        self.offsets = (np.cumsum(self.numels) - self.numels).tolist()
        total, device = sum(self.numels), self.params[0].device
        self.param = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.grad = torch.zeros(total, device=device)
        self.exp_avg = torch.zeros(total, device=device)
        self.exp_avg_sq = torch.zeros(total, device=device)
        # Without amsgrad the kernel never reads it; one element keeps a valid pointer.
        self.max_exp_avg_sq = torch.zeros(total if amsgrad else 1, device=device)
        self.step = torch.zeros(len(self.params), dtype=torch.float32, device=device)
        for p in self.params:  # the parameters now live in the flat buffer
            p.data = self.view(self.param, p)
        # Tables that never change go to the device once.
        self.tables = {
            "offsets": torch.tensor(self.offsets, dtype=torch.int64, device=device),
            "numels": torch.tensor(self.numels, dtype=torch.int64, device=device),
        }
        self.arrays = {
            name: as_cuda_array(t)
            for name, t in [("param", self.param), ("grad", self.grad),
                            ("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq),
                            ("max_exp_avg_sq", self.max_exp_avg_sq), ("step", self.step),
                            *self.tables.items()]
        }  # fmt: skip
        self._chunks: dict = {}
        self._moved_grads: list = []

    def adopt(self, p, state) -> None:
        """Make ``p``, its state and (at ``gather_grads``) its gradient views of the flat
        buffers.

        Copies only what is not a view yet: fresh state, state just loaded by
        ``load_state_dict``, a parameter whose ``.data`` was replaced, a new gradient.
        """
        for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"):
            if key in state:
                flat = self.step if key == "step" else getattr(self, key)
                view = self.view(flat, p)
                if state[key].data_ptr() != view.data_ptr():
                    view.copy_(state[key])
                    state[key] = view
        view = self.view(self.param, p)
        if p.data_ptr() != view.data_ptr():
            view.copy_(p.detach())
            p.data = view
        view = self.view(self.grad, p)
        if p.grad.data_ptr() != view.data_ptr():
            self._moved_grads.append((p, view))

    def gather_grads(self) -> None:
        """Copy the gradients that are not views of ``self.grad`` into it, in one foreach
        copy, and make them views: a loop that keeps its gradients
        (``zero_grad(set_to_none=False)``, accumulation) copies nothing at later steps."""
        if self._moved_grads:
            params, views = zip(*self._moved_grads)
            torch._foreach_copy_(list(views), [p.grad for p in params])
            for p, view in self._moved_grads:
                p.grad = view
            self._moved_grads.clear()

    def view(self, flat, p):
        """The part of ``flat`` that belongs to ``p``, shaped like it (a step: 0-d)."""
        i = self.index[id(p)]
        if flat is self.step:
            return flat[i]
        return flat[self.offsets[i] : self.offsets[i] + self.numels[i]].view_as(p)

    def chunks(self, present: tuple[int, ...]):
        """Device arrays ``(chunk_tensor, chunk_start)`` for the tensors ``present``: built
        and uploaded once per set of tensors with gradients (usually one for a run)."""
        key = (present, CHUNK)
        if key not in self._chunks:
            tensor, start = chunk_table([self.numels[i] for i in present])
            tensor = np.asarray(present, dtype=np.int64)[tensor]
            device = self.param.device
            tables = [torch.tensor(a, dtype=torch.int64, device=device)
                      for a in (tensor, start)]  # fmt: skip
            if len(self._chunks) > 8:  # a few patterns of frozen parameters at most
                self._chunks.clear()
            self._chunks[key] = (tables, [as_cuda_array(t) for t in tables])
        return self._chunks[key][1]


#: Set by ``simulated_cuda_path``: CPU tensors take the CUDA path, under the simulator.
_SIMULATED_CUDA_PATH = False


def on_cuda_path(p) -> bool:
    """Whether a fused step on ``p`` takes the CUDA path (flat buffers, one CUDA launch)."""
    return p.is_cuda or _SIMULATED_CUDA_PATH


@contextlib.contextmanager
def simulated_cuda_path():
    """Within this block, fused steps on CPU tensors run the CUDA path under the simulator:
    the same buffers, conversions and launch as on a GPU (tests and chapter 2 use it)."""
    global _SIMULATED_CUDA_PATH
    if not simulator_enabled():
        raise RuntimeError("simulated_cuda_path needs the CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
    _SIMULATED_CUDA_PATH = True
    try:
        yield
    finally:
        _SIMULATED_CUDA_PATH = False


def adam_step_cuda(
    buffers: FlatAdamBuffers, present, *, lr, beta1, beta2, eps, weight_decay, amsgrad,
    maximize, adamw, threads: int | None = None,
):  # fmt: skip
    """One launch over the tensors ``present`` (indices into ``buffers``), whose gradients are
    already in ``buffers.grad`` and whose steps are already counted in ``buffers.step``.

    Constants go to the kernel as scalars; the bias corrections come from the step counts on
    the device. ATen launches 512 threads per 65,536-element chunk too (``kBlockSize``,
    ``kChunkSize`` in MultiTensorApply.cuh).
    """
    chunk_tensor, chunk_start = buffers.chunks(tuple(present))
    a = buffers.arrays
    fused_adam_cuda_kernel[chunk_tensor.shape[0], threads or THREADS](
        a["param"], a["grad"], a["exp_avg"], a["exp_avg_sq"], a["max_exp_avg_sq"], a["step"],
        a["offsets"], a["numels"], chunk_tensor, chunk_start, CHUNK, float(lr), float(beta1),
        float(beta2), float(eps), float(weight_decay), bool(amsgrad), bool(maximize),
        bool(adamw),
    )  # fmt: skip

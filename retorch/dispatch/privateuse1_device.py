"""A device of our own inside real torch: PrivateUse1 carrying chapter 4's kernels.

Chapter 5's :mod:`torch_privateuse1` showed the mechanism (PrivateUse1 renamed ``"retorch"``
from Python, kernels registered with ``torch.library``); here the device carries real work, the
way an out-of-tree backend does. It mirrors torch's reference out-of-tree backend, OpenReg
(``test/cpp_extensions/open_registration_extension/torch_openreg``):

- **memory** (``csrc/runtime/OpenRegDeviceAllocator.cpp``): every storage on the device is a
  block of chapter 4's caching allocator (``retorch/tensor/allocator.py``,
  :class:`CUDACachingAllocator`) whose segments are 64-byte aligned host buffers. The torch
  tensor's storage points at the block (``torch._C._construct_storage_from_data_pointer``);
  the block goes back to the allocator once torch has freed the storage (a weak reference to
  the ``StorageImpl``, checked before each allocation, stands for the ``DataPtr``'s deleter);
- **metadata kernels** (``csrc/aten/OpenRegMinimal.cpp`` registers ``at::native::view``,
  ``as_strided_tensorimpl``, ``set_``...): view ops only make a new ``TensorImpl`` over the same
  storage, so, as OpenReg does, they reuse torch's native CPU functions (a redispatch to the CPU
  key: no data is read);
- **compute kernels**: chapter 4's ``retorch.tensor`` ops (``TensorIterator``, Numba loops),
  run on ``retorch.tensor.Tensor`` views of the device's bytes, their result copied into a new
  block of the device (a C++ backend would write in place);
- **the CPU fallback** (``aten/src/ATen/native/CPUFallback.cpp``, ``cpu_fallback``): an op with
  no kernel is registered nowhere, so the PrivateUse1 fallback catches it, copies its tensor
  arguments to the CPU, runs torch's CPU kernel, copies mutated arguments back and the results
  to the device. As OpenReg's wrapper of it (``csrc/aten/native/Minimal.cpp``) records each
  fallback with its tracer, ours counts them per op (:meth:`RetorchDevice.report`).

The op list came from running the GPT (``retorch.models.gpt``, over ``torch.nn``) with
``install(kernels=set())``: every compute op fell back, 426 calls a training step. With the
kernels below, a step (forward, backward, ``torch.optim.AdamW``) makes 421 calls to chapter
4's kernels and none to the fallback (``train_on_device``'s reports). A kernel that meets a
variant chapter 4 cannot compute (GELU with ``erf``, class weights in ``nll_loss``...) raises
:class:`NoKernel` and the call falls back, counted.

Usage::

    dev = install()                                   # PrivateUse1 "retorch", kernels, fallback
    run = train_on_device(build_gpt(config, torch.nn), batches, loss_fn)
    run["losses"], run["reports"][-1]                 # {"kernels": {...}, "fallbacks": {...}}

PrivateUse1 is renamed once per process and set up before the process's first backward
(``torch_privateuse1.setup_torch_backend``), so this device shares chapter 5's name,
``"retorch"``. torch.library lets one Python kernel per (op, key): the device and chapter 5's
``TorchArenaBackend`` cannot be registered at once; :func:`install` says so and
``TorchArenaBackend.destroy()`` / :func:`uninstall` hand the device over.
"""

from __future__ import annotations

import collections
import ctypes
import math
import time

import numpy as np
import torch

import retorch.tensor as rt
from retorch.tensor import allocator as _allocator
from retorch.tensor.storage import Storage, _aligned_empty
from retorch.tensor.tensor_impl import TensorImpl

from .torch_privateuse1 import setup_torch_backend

NAME = "retorch"
_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_DTYPES = {
    torch.float32: rt.float32,
    torch.float64: rt.float64,
    torch.float16: rt.float16,
    torch.bfloat16: rt.bfloat16,
    torch.int64: rt.int64,
    torch.int32: rt.int32,
    torch.bool: rt.bool,
}


# ---------------------------------------------------------------------------------------------
# memory: chapter 4's caching allocator over host segments (OpenRegDeviceAllocator)


def _host_malloc(nbytes: int) -> np.ndarray:
    """``cudaMalloc`` of the device: a 64-byte aligned host buffer (c10's CPU alignment)."""
    return _aligned_empty(nbytes)[0]


class DeviceAllocator:
    """The device's allocator: chapter 4's :class:`CUDACachingAllocator` handing out blocks of
    host segments, and the weak references that free a block when its storage dies."""

    def __init__(self, device_memory_bytes: int = 1 << 34) -> None:
        self.caching = _allocator.CUDACachingAllocator(device_memory_bytes, _host_malloc)
        self._live: dict[int, tuple[int, object]] = {}  # data_ptr -> (weak ref, block)

    def storage(self, nbytes: int) -> torch.UntypedStorage:
        """A new storage of ``nbytes`` on the device (``Allocator::allocate``)."""
        self.collect()
        if nbytes == 0:
            return torch._C._construct_storage_from_data_pointer(0, torch.device(NAME, 0), 0)
        block = self.caching.malloc(nbytes)
        storage = torch._C._construct_storage_from_data_pointer(
            block.ptr, torch.device(NAME, 0), nbytes
        )
        self._live[block.ptr] = (storage._weak_ref(), block)
        return storage

    def collect(self) -> None:
        """Give back the blocks whose storages torch has freed (the ``DataPtr`` deleters)."""
        dead = [p for p, (ref, _) in self._live.items() if torch.UntypedStorage._expired(ref)]
        for ptr in dead:
            ref, block = self._live.pop(ptr)
            torch.UntypedStorage._free_weak_ref(ref)
            self.caching.free(block)

    def memory_stats(self) -> dict:
        """``torch.cuda.memory_stats()``'s flat counters, for the device."""
        self.collect()
        return dict(self.caching.memory_stats())


# ---------------------------------------------------------------------------------------------
# tensors on the device, and chapter 4's view of them


def _bytes_at(address: int, nbytes: int) -> np.ndarray:
    return np.frombuffer((ctypes.c_uint8 * nbytes).from_address(address), dtype=np.uint8)


def _nbytes(size, stride, dtype) -> int:
    if any(s == 0 for s in size):
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(size, stride))) * dtype.itemsize


def _contiguous_strides(size) -> tuple:
    strides, acc = [], 1
    for s in reversed(tuple(size)):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def as_retorch(t: torch.Tensor) -> rt.Tensor:
    """A ``retorch.tensor.Tensor`` over the same bytes as ``t`` (device or CPU): chapter 4's
    kernels read and write the torch tensor's memory through it."""
    if not isinstance(t, torch.Tensor):
        return t
    st = t.untyped_storage()
    if st.nbytes() == 0 and t.numel():
        raise RuntimeError(
            f"a {t.device.type} tensor without memory ({tuple(t.shape)}): tensors of chapter 5's "
            "TorchArenaBackend keep their values outside torch's storage"
        )
    storage = Storage.from_buffer(t, st.data_ptr(), st.nbytes())  # t keeps the bytes alive
    impl = TensorImpl(storage, _DTYPES[t.dtype], tuple(t.shape), t.stride(), t.storage_offset())
    return rt.Tensor(impl)


class RetorchDevice:
    """The ``"retorch"`` device: its allocator, its kernels, its counted CPU fallback."""

    def __init__(self, kernels: bool | set = True, device_memory_bytes: int = 1 << 34) -> None:
        self.allocator = DeviceAllocator(device_memory_bytes)
        self.calls: collections.Counter = collections.Counter()  # kernels that ran, by op
        self.fallbacks: collections.Counter = collections.Counter()  # ops that fell back
        self.kernels = _compute_kernels(self)
        if kernels is not True:
            self.kernels = {k: v for k, v in self.kernels.items() if kernels and k in kernels}
        self.library = self.global_library = None

    # -- allocation -----------------------------------------------------------------------

    def empty_strided(self, size, stride, dtype=None) -> torch.Tensor:
        dtype = dtype or torch.get_default_dtype()
        size, stride = tuple(size), tuple(stride)
        nbytes = _nbytes(size, stride, dtype)
        out = torch._C._acc.create_empty_tensor((0,), dtype)
        return out.set_(self.allocator.storage(nbytes), 0, size, stride)

    def empty(self, size, dtype=None) -> torch.Tensor:
        return self.empty_strided(size, _contiguous_strides(size), dtype)

    def to_device(self, value: rt.Tensor) -> torch.Tensor:
        """A new device tensor holding a ``retorch.tensor`` result."""
        dtype = next(k for k, v in _DTYPES.items() if v is value.dtype)
        out = self.empty(value.shape, dtype)
        rt.copy_(as_retorch(out), value)
        return out

    # -- the counted CPU fallback (CPUFallback.cpp) ---------------------------------------

    def cpu_fallback(self, op, *args, **kwargs):
        """``at::native::cpu_fallback``, its four steps: tensor arguments to the CPU
        (``at::_to_cpu``), torch's CPU kernel, mutated arguments
        copied back (``at::_copy_from_and_resize``), results that alias a mutated argument
        returned as that argument and the others copied to the device. A view op raises (its
        ``error_on_views=True``): a copy cannot share the device tensor's storage.

        One addition: the devices are checked as the device's own kernel would
        (:func:`check_same_device`); ``cpu_fallback`` hands the CPU kernel CPU tensors only,
        so a device tensor mixed with a CPU tensor would otherwise run silently."""
        self.fallbacks[_op_name(op)] += 1
        check_same_device(*args, *kwargs.values())
        schema = op._schema
        if any(a.alias_info is not None and not a.alias_info.is_write for a in schema.returns):
            raise NotImplementedError(
                f"The operator {schema.name} appears to be a view operator, but it has no "
                f'implementation for the backend "{NAME}:0". View operators don\'t support '
                "falling back to run on the CPU, since the tensor's storage cannot be shared "
                "across devices."
            )

        def to_cpu(a):
            if isinstance(a, torch.Tensor) and a.device.type == NAME:
                return a.cpu()
            if isinstance(a, (list, tuple)):
                return type(a)(to_cpu(x) for x in a)
            return a

        cpu_args = [to_cpu(a) for a in args]
        cpu_kwargs = {k: to_cpu(v) for k, v in kwargs.items()}
        # op.redispatchBoxed(CPU, stack): a call with CPU tensors reaches the same CPU kernel
        # (autograd is already below us). Not op.redispatch: torch hands a Python kernel its
        # wrapped-number tensors as Python numbers, which only the full call's parser accepts
        out = op(*cpu_args, **cpu_kwargs)
        # mutated arguments: the CPU result copied back into the device tensor
        originals = {}  # alias set (the `a` of `Tensor(a!)`) -> the device argument
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is None or not arg.alias_info.is_write:
                continue
            original = args[i] if i < len(args) else kwargs.get(arg.name)
            cpu = cpu_args[i] if i < len(args) else cpu_kwargs.get(arg.name)
            pairs = zip(original, cpu) if isinstance(cpu, (list, tuple)) else [(original, cpu)]
            for o, c in pairs:
                if isinstance(o, torch.Tensor):
                    torch.ops.aten._copy_from_and_resize(c, o)
            originals[frozenset(arg.alias_info.before_set)] = original
        # results: a mutable alias is its device argument; the others are copied over
        results = out if len(schema.returns) > 1 else (out,)
        back = []
        for ret, r in zip(schema.returns, results):
            if ret.alias_info is not None and ret.alias_info.is_write:
                back.append(originals[frozenset(ret.alias_info.before_set)])
            elif isinstance(r, torch.Tensor):
                back.append(r.to(NAME))
            elif isinstance(r, (list, tuple)):
                back.append(type(r)(x.to(NAME) for x in r))
            else:
                back.append(r)
        return tuple(back) if len(schema.returns) > 1 else back[0] if back else None

    # -- registration ---------------------------------------------------------------------

    def install(self) -> RetorchDevice:
        """Register the kernels and the fallback for PrivateUse1 (named ``"retorch"``)."""
        setup_torch_backend(NAME)
        # (aten's only: torch's own Python libraries register PrivateUse1 kernels for their
        # ops once imported, e.g. torch.distributed.fsdp's fsdp::chunk_cat)
        taken = sorted(k for k in torch.library._impls
                       if k.startswith("aten/") and k.endswith("/PrivateUse1"))  # fmt: skip
        if taken:
            raise RuntimeError(
                f"PrivateUse1 already has Python kernels ({', '.join(taken[:3])}...): another "
                "backend (chapter 5's TorchArenaBackend?) is registered; destroy() it first"
            )
        self.library = torch.library.Library("aten", "IMPL", "PrivateUse1")
        for op, fn in {**_metadata_kernels(self), **self.kernels}.items():
            self.library.impl(op, fn)
        self.global_library = torch.library.Library("_", "IMPL")
        self.global_library.fallback(self.cpu_fallback, "PrivateUse1")
        return self

    def uninstall(self) -> None:
        for lib in (self.library, self.global_library):
            if lib is not None:
                lib._destroy()
        self.library = self.global_library = None

    def report(self) -> dict:
        """The ops that ran a kernel of the device and those that fell back, with counts."""
        return {"kernels": dict(self.calls), "fallbacks": dict(self.fallbacks)}

    def op_list(self) -> dict:
        """Every op of the device: ``"kernel"`` (chapter 4's), ``"metadata"`` (torch's
        native function reused) or ``"fallback"`` (those that fell back so far)."""
        table = {op: "metadata" for op in _metadata_kernels(self)}
        table.update({op: "kernel" for op in self.kernels})
        table.update({op: "fallback" for op in self.fallbacks})
        return table

    def reset_counts(self) -> None:
        self.calls.clear()
        self.fallbacks.clear()


# ---------------------------------------------------------------------------------------------
# metadata kernels: torch's native CPU functions reused (OpenRegMinimal.cpp)


def _op_name(op) -> str:
    """``aten.gelu.out`` -> ``"gelu.out"``, ``aten.zero_.default`` -> ``"zero_"``: the names
    ``torch.library`` registers kernels under."""
    overload = op._overloadname
    return op._opname if overload == "default" else f"{op._opname}.{overload}"


def _redispatch_to_cpu(op):
    overload = op

    def kernel(*args, **kwargs):
        return overload.redispatch(_CPU, *args, **kwargs)

    return kernel


#: OpenReg's ``OpenRegMinimal.cpp`` list (``at::native::view``, ``at::cpu::as_strided``,
#: ``at::cpu::set_``, ``_local_scalar_dense_cpu``...) and ``unfold``: metadata only, or (for
#: ``_local_scalar_dense``, ``.item()``) one read of memory the host can address.
_VIEW_OPS = [
    "view",
    "as_strided",
    "_reshape_alias",
    "unfold",
    "set_.source_Tensor",
    "set_.source_Storage",
    "set_.source_Storage_storage_offset",
    "_local_scalar_dense",
]


def _metadata_kernels(device: RetorchDevice) -> dict:
    aten = torch.ops.aten

    def empty_memory_format(size, dtype=None, **_):  # layout, device, pin_memory, format
        return device.empty(size, dtype)

    def empty_strided(size, stride, dtype=None, **_):
        return device.empty_strided(size, stride, dtype)

    def copy_from(src, dst, non_blocking=False):
        """Between devices (``.to``, ``.cpu()``) and within one: chapter 4's ``copy_``."""
        rt.copy_(as_retorch(dst), as_retorch(src))
        return dst

    def copy_(dst, src, non_blocking=False):
        if src.device.type != NAME and src.device.type != "cpu":
            raise RuntimeError(f"copy_ from {src.device} to the {NAME} device is not supported")
        return copy_from(src, dst)

    def resize_(self, size, memory_format=None):
        stride = _contiguous_strides(size)
        need = (
            _nbytes(tuple(size), stride, self.dtype) + self.storage_offset() * self.dtype.itemsize
        )
        if need > self.untyped_storage().nbytes():
            old = self.untyped_storage()
            new = device.allocator.storage(need)
            keep = min(old.nbytes(), need)
            if keep:  # the bytes it had move to the new block (StorageImpl::set_nbytes)
                np.copyto(_bytes_at(new.data_ptr(), keep), _bytes_at(old.data_ptr(), keep))
            self.set_(new, self.storage_offset(), tuple(size), stride)
            return self
        return self.set_(self.untyped_storage(), self.storage_offset(), tuple(size), stride)

    def copy_from_and_resize(src, dst):
        """``_copy_from_and_resize``: what the fallback writes a mutated argument back with."""
        if dst.shape != src.shape:
            dst.resize_(src.shape)
        return copy_from(src, dst)

    kernels = {name: _redispatch_to_cpu(getattr(aten, name.split(".")[0]).__getattr__(
        name.split(".")[1] if "." in name else "default")) for name in _VIEW_OPS}  # fmt: skip
    kernels.update({
        "empty.memory_format": empty_memory_format,
        "empty_strided": empty_strided,
        "_copy_from": copy_from,
        "_copy_from_and_resize": copy_from_and_resize,
        "copy_": copy_,
        "resize_": resize_,
    })  # fmt: skip
    return kernels


# ---------------------------------------------------------------------------------------------
# compute kernels: chapter 4's ops


class NoKernel(Exception):
    """Raised by a kernel for a variant chapter 4 cannot compute (e.g. GELU with ``erf``):
    the call goes to the counted CPU fallback instead."""


def _rt_dtype(dtype):
    return None if dtype is None else _DTYPES[dtype]


#: The device's compute kernels: aten op -> chapter 4's function on ``retorch.tensor`` views.
#: torch's structured ops reach a backend without a functional kernel through their ``out=``
#: variant (``RegisterCompositeExplicitAutogradNonFunctional.cpp`` allocates, then calls it),
#: so an ``.out`` kernel serves ``add``, ``add_`` and ``add(out=)`` at once.
OUT_KERNELS = {
    "add.out": lambda a, b, alpha=1: rt.add(a, b, alpha=alpha),
    "sub.out": lambda a, b, alpha=1: rt.sub(a, b, alpha=alpha),
    "mul.out": lambda a, b: rt.mul(a, b),
    "div.out": lambda a, b: rt.div(a, b),
    "pow.Tensor_Scalar_out": lambda a, e: rt.pow(a, e),
    "mm.out": lambda a, b: rt.mm(a, b),
    "bmm.out": lambda a, b: rt.bmm(a, b),
    "addmm.out": lambda c, a, b, beta=1, alpha=1: rt.addmm(c, a, b, beta=beta, alpha=alpha),
    "_softmax.out": lambda a, dim, half_to_float: rt.softmax(a, dim),
    "_log_softmax.out": lambda a, dim, half_to_float: rt.log_softmax(a, dim),
    "sum.IntList_out": lambda a, dim, keepdim=False, dtype=None: rt.sum(
        a, dim if dim else None, keepdim, _rt_dtype(dtype)
    ),
    "where.self_out": lambda c, a, b: rt.where(c, a, b),
    # the backward of softmax and log_softmax (``SoftMax.cpp``'s formulas)
    "_softmax_backward_data.out": lambda g, y, dim, input_dtype: rt.mul(
        y, rt.sub(g, rt.sum(rt.mul(g, y), dim, keepdim=True))
    ),
    "_log_softmax_backward_data.out": lambda g, y, dim, input_dtype: rt.sub(
        g, rt.mul(rt.exp(y), rt.sum(g, dim, keepdim=True))
    ),
    # the causal mask of SDPA's math path (``attention.cpp``: ``ones(L, S).tril()``) and its
    # check for rows with every score -inf (``isneginf``, ``all``)
    "tril.out": lambda a, diagonal=0: _tril(a, diagonal),
    "isneginf.out": lambda a: rt.eq(a, -math.inf),
    "all.out": lambda a, dim, keepdim=False: rt.eq(rt.sum(rt.eq(a, 0), dim, keepdim), 0),
    # GELU (tanh approximation) and its backward, GeluKernel.cpp's formulas
    "gelu.out": lambda a, approximate="none": _gelu(a, approximate),
    "gelu_backward.grad_input": lambda g, a, approximate="none": _gelu_backward(g, a, approximate),
    # torch.optim.AdamW's update, composed of chapter 4's ops in the order of torch's CPU
    # kernels (``PointwiseOpsKernel.cpp``, ``LerpKernel.cpp``); torch's vectorized loops may
    # fuse a multiply-add (one rounding) where these round twice
    "sqrt.out": lambda a: rt.pow(a, 0.5),
    "addcmul.out": lambda a, t1, t2, value=1: rt.add(a, rt.mul(rt.mul(t1, value), t2)),
    "addcdiv.out": lambda a, t1, t2, value=1: rt.add(a, rt.div(rt.mul(t1, value), t2)),
    "lerp.Scalar_out": lambda a, end, weight: (
        rt.add(a, rt.mul(rt.sub(end, a), weight))
        if abs(weight) < 0.5
        else rt.sub(end, rt.mul(rt.sub(end, a), 1 - weight))
    ),
}
#: Kernels that return a new tensor (ops with a CPU kernel of their own, not structured).
FUNCTIONAL_KERNELS = {
    "index_select": lambda a, dim, index: rt.index_select(a, dim, index),
    "where.self": lambda c, a, b: rt.where(c, a, b),
    "embedding_dense_backward": lambda g, index, num_weights, padding_idx, by_freq: (
        _embedding_dense_backward(g, index, num_weights, padding_idx, by_freq)
    ),
    "native_layer_norm": lambda x, shape, weight, bias, eps: _layer_norm(
        x, shape, weight, bias, eps
    ),
    "native_layer_norm_backward": lambda *args: _layer_norm_backward(*args),
    "nll_loss_forward": lambda *args: _nll_loss_forward(*args),
    "nll_loss_backward": lambda *args: _nll_loss_backward(*args),
}


def _tril(a, diagonal):
    """``a`` where ``column - row <= diagonal``, else 0 (``TriangularOps.cpp``)."""
    rows, cols = a.shape[-2:]
    keep = rt.le(rt.sub(rt.arange(cols).reshape(1, cols), rt.arange(rows).reshape(rows, 1)),
                 diagonal)  # fmt: skip
    return rt.where(keep, a, rt.zeros((), dtype=a.dtype))


_MEAN, _SUM = 1, 2  # at::Reduction::Mean, Sum


def _nll_checks(target, weight, reduction, ignore_index):
    if weight is not None or reduction not in (_MEAN, _SUM) or target.dim() != 1:
        raise NoKernel  # class weights, reduction="none", or a (N, d...) target
    if rt.any(rt.eq(target, ignore_index)).item():
        raise NoKernel  # ignored targets


def _nll_loss_forward(log_probs, target, weight, reduction, ignore_index):
    """``nll_loss_forward`` for (N, C) inputs, no class weights: the loss, and the total weight
    (here the number of targets) that its backward divides by."""
    _nll_checks(target, weight, reduction, ignore_index)
    loss = rt.nll_loss(log_probs, target, "mean" if reduction == _MEAN else "sum")
    return loss, rt.full((), float(target.shape[0]), dtype=log_probs.dtype)


def _nll_loss_backward(grad, log_probs, target, weight, reduction, ignore_index, total_weight):
    """``-grad / total_weight`` (``-grad`` for a sum) at each row's target, 0 elsewhere."""
    _nll_checks(target, weight, reduction, ignore_index)
    g = rt.neg(grad if reduction == _SUM else rt.div(grad, total_weight))
    out = rt.zeros(*log_probs.shape, dtype=log_probs.dtype)
    rows = log_probs.shape[0]
    return rt.scatter_(out, 1, target.reshape(rows, 1), rt.expand(g.reshape(1, 1), rows, 1))


_K_BETA = 2**0.5 * (2 / math.pi**0.5) * 0.5  # M_SQRT2 * M_2_SQRTPI * 0.5
_K_KAPPA = 0.044715


def _gelu(x, approximate):
    """``GeluKernel.cpp``, ``approximate="tanh"``: ``0.5 x (1 + tanh(kBeta (x + kKappa x^3)))``
    (the exact GELU needs ``erf``, which chapter 4 lacks)."""
    if approximate != "tanh":
        raise NoKernel
    inner = rt.mul(rt.add(x, rt.mul(rt.mul(rt.mul(x, x), x), _K_KAPPA)), _K_BETA)
    return rt.mul(rt.mul(x, 0.5), rt.add(rt.tanh(inner), 1))


def _gelu_backward(dy, x, approximate):
    if approximate != "tanh":
        raise NoKernel
    x_sq = rt.mul(x, x)
    inner = rt.mul(rt.add(x, rt.mul(rt.mul(x_sq, x), _K_KAPPA)), _K_BETA)
    t = rt.tanh(inner)
    left_derivative = rt.mul(rt.add(t, 1), 0.5)
    inner_derivative = rt.mul(rt.add(rt.mul(x_sq, 3 * _K_KAPPA), 1), _K_BETA)
    right_derivative = rt.mul(rt.mul(rt.mul(x, 0.5), rt.sub(1, rt.mul(t, t))), inner_derivative)
    return rt.mul(dy, rt.add(left_derivative, right_derivative))


def _layer_norm(x, normalized_shape, weight, bias, eps):
    """``native_layer_norm``: the output, and the mean and 1/std of each row (biased variance,
    as ``LayerNormKernel.cpp``), kept with the normalized dims as 1s, as torch's CPU kernel."""
    dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
    mean = rt.mean(x, dims, keepdim=True)
    centered = rt.sub(x, mean)
    var = rt.mean(rt.mul(centered, centered), dims, keepdim=True)
    rstd = rt.reciprocal(rt.pow(rt.add(var, eps), 0.5))
    y = rt.mul(centered, rstd)
    if weight is not None:
        y = rt.mul(y, weight)
    if bias is not None:
        y = rt.add(y, bias)
    return y, mean, rstd


def _layer_norm_backward(dy, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    """``native_layer_norm_backward``: ``dx = rstd (g - mean(g) - xhat mean(g xhat))`` with
    ``g = dy * weight``; ``dweight = sum(dy xhat)``, ``dbias = sum(dy)`` over the rows."""
    axis = x.dim() - len(normalized_shape)
    dims, rows = tuple(range(axis, x.dim())), tuple(range(axis))
    xhat = rt.mul(rt.sub(x, mean), rstd)
    dx = dw = db = None
    if output_mask[0]:
        g = dy if weight is None else rt.mul(dy, weight)
        mean_g = rt.mean(g, dims, keepdim=True)
        mean_gx = rt.mean(rt.mul(g, xhat), dims, keepdim=True)
        dx = rt.mul(rt.sub(rt.sub(g, mean_g), rt.mul(xhat, mean_gx)), rstd)
    if not rows:
        raise NoKernel  # one row: nothing to sum over
    if output_mask[1] and weight is not None:
        dw = rt.sum(rt.mul(dy, xhat), rows)
    if output_mask[2] and bias is not None:
        db = rt.sum(dy, rows)
    return dx, dw, db


def _embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    """``embedding_dense_backward_cpu`` (``Embedding.cpp``): each row of ``grad`` added to
    the row of the weight its index names, in order (``index_add_``); the padding row gets
    nothing."""
    if scale_grad_by_freq:
        raise NoKernel
    c = grad.shape[-1]
    out = rt.zeros(num_weights, c, dtype=grad.dtype)
    rt.index_add_(out, 0, indices.reshape(-1), grad.reshape(-1, c))
    if 0 <= padding_idx < num_weights:
        rt.fill_(rt.select(out, 0, padding_idx), 0)
    return out


#: In-place kernels: they write ``self`` and return it.
INPLACE_KERNELS = {
    "fill_.Scalar": lambda a, value: rt.fill_(a, value),
    "zero_": lambda a: rt.zero_(a),
}


def check_same_device(*args) -> None:
    """``TensorIterator::compute_types``' check: every tensor on one device, except CPU
    scalars (0-dim tensors), which any device's kernel reads as numbers."""
    common = None
    for t in _tensors(args):
        if t.device.type == "cpu" and t.dim() == 0:
            continue
        if common is None:
            common = t.device
        elif t.device != common:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, {common} and {t.device}!"
            )


def _tensors(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from _tensors(a)


def _overload(op: str):
    name, _, overload = op.partition(".")
    return getattr(torch.ops.aten, name).__getattr__(overload or "default")


def _compute_kernels(device: RetorchDevice) -> dict:
    """aten op -> a kernel that runs ``retorch.tensor`` on views of the device's bytes. A
    variant chapter 4 lacks (:class:`NoKernel`) goes to the counted fallback instead."""

    def fallback(op, args, kwargs):
        device.calls[op] -= 1
        if not device.calls[op]:
            del device.calls[op]
        return device.cpu_fallback(_overload(op), *args, **kwargs)

    def on_device(value):
        if isinstance(value, tuple):
            return tuple(None if v is None else device.to_device(v) for v in value)
        return device.to_device(value)

    def functional(op, fn):
        def kernel(*args, **kwargs):
            device.calls[op] += 1
            check_same_device(*args)
            try:
                return on_device(fn(*map(as_retorch, args), **kwargs))
            except NoKernel:
                return fallback(op, args, kwargs)

        return kernel

    def out_variant(op, fn):
        (out_name,) = [a.name for a in _overload(op)._schema.arguments if a.is_out]

        def kernel(*args, **kwargs):
            out = kwargs[out_name]
            device.calls[op] += 1
            check_same_device(out, *args)
            try:
                value = fn(*map(as_retorch, args), **{k: v for k, v in kwargs.items()
                                                      if k != out_name})  # fmt: skip
            except NoKernel:
                return fallback(op, args, kwargs)
            if tuple(out.shape) != tuple(value.shape):
                out.resize_(value.shape)  # at::native::resize_output
            rt.copy_(as_retorch(out), value)
            return out

        return kernel

    def inplace(op, fn):
        def kernel(self, *args, **kwargs):
            device.calls[op] += 1
            check_same_device(self, *args)
            fn(as_retorch(self), *map(as_retorch, args), **kwargs)
            return self

        return kernel

    return {
        **{op: out_variant(op, fn) for op, fn in OUT_KERNELS.items()},
        **{op: functional(op, fn) for op, fn in FUNCTIONAL_KERNELS.items()},
        **{op: inplace(op, fn) for op, fn in INPLACE_KERNELS.items()},
    }


# ---------------------------------------------------------------------------------------------
# the module-level device and training on it

_DEVICE: list[RetorchDevice] = []


def install(kernels: bool | set = True) -> RetorchDevice:
    """The process's ``"retorch"`` device, registered (once; again: the same one)."""
    if _DEVICE and _DEVICE[0].library is not None:
        return _DEVICE[0]
    device = RetorchDevice(kernels).install()
    _DEVICE[:] = [device]
    return device


def uninstall() -> None:
    if _DEVICE:
        _DEVICE[0].uninstall()
        _DEVICE.clear()


def to_device(model: torch.nn.Module, device: str = NAME) -> torch.nn.Module:
    """``model.to(device)`` keeping tied parameters tied.

    ``Module._apply`` swaps a parameter's data in place (``param.data = ...``) only when
    ``torch._has_compatible_shallow_copy_type`` says the CPU tensor and the new one share a
    layout, and its list of dense backends (``is_dense`` in ``c10/core/TensorImpl.h``)
    leaves PrivateUse1 out: every parameter becomes a new ``Parameter``, and the GPT's output
    layer no longer shares the token embedding. Swapping the tensors
    (``torch.__future__.set_swap_module_params_on_conversion``) keeps each Parameter object."""
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        return model.to(device)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)


def train_on_device(model, batches, loss_fn, *, lr=1e-3, warmup=2, device: str = NAME):
    """Train the unmodified torch ``model`` on ``device`` with torch's autograd and
    ``torch.optim.AdamW`` (``retorch.models.train``'s loop and schedule). Returns the losses,
    the seconds of each step, and, on the ``"retorch"`` device, the kernels and fallbacks of
    each step (``RetorchDevice.report``) and the blocks and bytes the device holds after it."""
    from retorch.models.train import make_optimizer

    model = to_device(model, device)
    opt, sched = make_optimizer(torch.optim, model.parameters(), lr, warmup, len(batches))
    dev = _DEVICE[0] if device == NAME and _DEVICE else None
    losses, seconds, reports = [], [], []
    for x, y in batches:
        if dev is not None:
            dev.reset_counts()
        start = time.perf_counter()
        loss = loss_fn(model, x.to(device), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        seconds.append(time.perf_counter() - start)
        if dev is not None:
            stats = dev.allocator.memory_stats()
            reports.append({**dev.report(), "blocks": stats["allocation.all.current"],
                            "bytes": stats["allocated_bytes.all.current"]})  # fmt: skip
    return {"model": model, "losses": losses, "seconds": seconds, "reports": reports}

"""The ``aten`` operators retorch.Tensor uses: schemas, backend kernels, composite kernels.

Mirrors ``aten/src/ATen/native/native_functions.yaml`` (each schema string is torch's, checked
against ``torch._C._dispatch_dump``) and the registration files torch's build generates from it
(``build/aten/src/ATen/RegisterCPU_0.cpp``...): one ``TORCH_LIBRARY(aten, m)`` that defines
the operators, and ``TORCH_LIBRARY_IMPL(aten, CPU, m)`` blocks that register the kernels.

- *backend kernels* (CPU, CUDA, Meta) compute with ``retorch.tensor``, whose DispatchStub picks
  the Numba CPU loop, the Numba-CUDA kernel or the shape-only meta function by device; they never
  look at autograd and return tensors without history;
- *CompositeExplicitAutograd* kernels work for every backend (``t``, ``clone``, ``detach``);
- *CompositeImplicitAutograd* kernels (``matmul``, ``linear``, ``softmax``, ``cross_entropy``,
  ``reshape``) call other operators through the dispatcher, so autograd comes from the ops they
  decompose into, as in torch.

The autograd kernels live in ``variable_type.py``; importing this module registers both.
"""

from __future__ import annotations

import retorch.tensor as rt
from retorch.autograd.tensor import Tensor as AutogradTensor
from retorch.tensor import ops as _o
from retorch.tensor.dtype import as_dtype
from retorch.tensor.tensor import normalize_device

from ._ops import ops
from ._tensor import Tensor
from .library import Library

SCHEMAS = [
    "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
    "sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "mul.Tensor(Tensor self, Tensor other) -> Tensor",
    "mul_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)",
    "div.Tensor(Tensor self, Tensor other) -> Tensor",
    "div_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)",
    "neg(Tensor self) -> Tensor",
    "pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
    "sqrt(Tensor self) -> Tensor",
    "relu(Tensor self) -> Tensor",
    "exp(Tensor self) -> Tensor",
    "log(Tensor self) -> Tensor",
    "addcmul_(Tensor(a!) self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor(a!)",
    "addcdiv_(Tensor(a!) self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor(a!)",
    "lerp_.Scalar(Tensor(a!) self, Tensor end, Scalar weight) -> Tensor(a!)",
    "zero_(Tensor(a!) self) -> Tensor(a!)",
    "copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)",
    "clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor",
    "detach(Tensor(a) self) -> Tensor(a)",
    "_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor",
    "to.dtype_layout(Tensor(a) self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)",
    "sum(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "mean(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "mm(Tensor self, Tensor mat2) -> Tensor",
    "addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
    "matmul(Tensor self, Tensor other) -> Tensor",
    "linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
    "t(Tensor(a) self) -> Tensor(a)",
    "view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
    "reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)",
    "_unsafe_view(Tensor self, SymInt[] size) -> Tensor",
    "_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
    "_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
    "softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
    "log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
    "nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index) -> (Tensor output, Tensor total_weight)",
    "nll_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=1, SymInt ignore_index=-100) -> Tensor",
    "cross_entropy_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=1, SymInt ignore_index=-100, float label_smoothing=0.0) -> Tensor",
]  # fmt: skip


def _r(x):
    """The raw ``retorch.tensor.Tensor`` of an argument (numbers pass through)."""
    return x.data if isinstance(x, AutogradTensor) else x


#: A kernel's raw result wrapped as a ``retorch.Tensor`` (the class itself: no call between).
_w = Tensor


def _inplace(fn):
    def kernel(self, *args, **kwargs):
        fn(self.data, *args, **kwargs)
        return self

    return kernel


def _addcmul_(x, t1, t2, value=1):
    _o.add_(x, _o.mul(_r(t1), _r(t2)), alpha=value)


def _addcdiv_(x, t1, t2, value=1):
    _o.add_(x, _o.div(_r(t1), _r(t2)), alpha=value)


def _lerp_(x, end, weight):
    # at::lerp's formula: from self for weight < 0.5, from end otherwise (fewer roundings)
    diff = _o.sub(_r(end), x)
    if abs(weight) < 0.5:
        _o.add_(x, diff, alpha=weight)
    else:
        _o.copy_(x, _o.sub(_r(end), _o.mul(diff, 1 - weight)))


def _nll_loss_forward(self, target, weight, reduction, ignore_index):
    if weight is not None or reduction != 1:
        raise NotImplementedError(
            "retorch's nll_loss_forward supports reduction='mean' without class weights only"
        )
    if ignore_index != -100:
        raise NotImplementedError("retorch's nll_loss_forward supports ignore_index=-100 only")
    out = _o.nll_loss(self.data, target.data, reduction="mean")
    total = rt.scalar_tensor(self.shape[0], dtype=self.data.dtype, device=self.data.device)
    return _w(out), _w(total)


def _sum(self, dtype=None):
    return _w(_o.sum(self.data, dtype=dtype))


def _sum_dim(self, dim, keepdim=False, dtype=None):
    return _w(_o.sum(self.data, dim=tuple(dim) if dim else None, keepdim=keepdim, dtype=dtype))


def _mean(self, dtype=None):
    return _w(_o.mean(self.data))


def _mean_dim(self, dim, keepdim=False, dtype=None):
    return _w(_o.mean(self.data, dim=tuple(dim) if dim else None, keepdim=keepdim))


#: Backend kernels: one function serves CPU, CUDA and Meta (retorch.tensor's stubs pick).
BACKEND = {
    "add.Tensor": lambda self, other, alpha=1: _w(_o.add(_r(self), _r(other), alpha=alpha)),
    "add_.Tensor": _inplace(lambda x, other, alpha=1: _o.add_(x, _r(other), alpha=alpha)),
    "sub.Tensor": lambda self, other, alpha=1: _w(_o.sub(_r(self), _r(other), alpha=alpha)),
    "mul.Tensor": lambda self, other: _w(_o.mul(_r(self), _r(other))),
    "mul_.Tensor": _inplace(lambda x, other: _o.mul_(x, _r(other))),
    "div.Tensor": lambda self, other: _w(_o.div(_r(self), _r(other))),
    "div_.Tensor": _inplace(lambda x, other: _o.copy_(x, _o.div(x, _r(other)))),
    "neg": lambda self: _w(_o.neg(self.data)),
    "pow.Tensor_Scalar": lambda self, exponent: _w(_o.pow(self.data, exponent)),
    "sqrt": lambda self: _w(_o.pow(self.data, 0.5)),
    "relu": lambda self: _w(_o.relu(self.data)),
    "exp": lambda self: _w(_o.exp(self.data)),
    "log": lambda self: _w(_o.log(self.data)),
    "addcmul_": _inplace(_addcmul_),
    "addcdiv_": _inplace(_addcdiv_),
    "lerp_.Scalar": _inplace(_lerp_),
    "zero_": _inplace(_o.zero_),
    "sum.dim_IntList": _sum_dim,
    "mean.dim": _mean_dim,
    "mm": lambda self, mat2: _w(_o.mm(self.data, mat2.data)),
    "addmm": lambda self, mat1, mat2, beta=1, alpha=1: _w(
        _o.addmm(self.data, mat1.data, mat2.data, beta=beta, alpha=alpha)
    ),
    "view": lambda self, size: _w(self.data.view(tuple(size))),
    "_softmax": lambda self, dim, half_to_float: _w(_o.softmax(self.data, dim)),
    "_log_softmax": lambda self, dim, half_to_float: _w(_o.log_softmax(self.data, dim)),
    "nll_loss_forward": _nll_loss_forward,
}

#: CompositeExplicitAutograd kernels: written once for every backend, still need autograd.
EXPLICIT = {
    "t": lambda self: _w(self.data.t()),
    "clone": lambda self, memory_format=None: _w(
        _o.clone(self.data) if memory_format is None else _o.clone(self.data).contiguous()
    ),
    "detach": lambda self: _w(self.data),
    "_unsafe_view": lambda self, size: _w(self.data.view(tuple(size))),
    "copy_": _inplace(lambda x, src, non_blocking=False: _o.copy_(x, _r(src))),
    "sum": _sum,  # torch: CompositeExplicitAutograd, plus a Meta kernel
    "mean": _mean,  # the same
    "_to_copy": lambda self, dtype=None, layout=None, device=None, **_: _w(
        _to_copy(self.data, device, dtype)
    ),
}


def _to_copy(raw, device, dtype):
    """``at::_to_copy`` (TensorConversions.cpp): always a new tensor, on ``device`` (a name or
    a torch.device) in ``dtype``; between devices, ``retorch.tensor``'s ``to`` copies the bytes
    in one transfer."""
    out = raw.to(device=device, dtype=_as_dtype(dtype))
    return _o.clone(out) if out is raw else out


def _as_dtype(dtype):
    """``None`` or a retorch dtype, from a retorch or torch dtype (``retorch.tensor``'s rule)."""
    return None if dtype is None else as_dtype(dtype)


# ---------------------------------------------------------------- CompositeImplicitAutograd
def _matmul(self, other):
    """``at::matmul`` for the cases an MLP needs: 2-D @ 2-D is mm; N-D @ 2-D folds the batch
    into mm rows (LinearAlgebra.cpp: _matmul_impl)."""
    a, b = self.dim(), other.dim()
    if a == 2 and b == 2:
        return ops.aten.mm(self, other)
    if a >= 3 and b == 2:
        lead = tuple(self.shape[:-1])
        folded = ops.aten.reshape(self, [-1, self.shape[-1]])
        # (_unsafe_view, as _matmul_impl: the product is a new tensor, not a view of one)
        return ops.aten._unsafe_view(ops.aten.mm(folded, other), list(lead) + [other.shape[1]])
    raise NotImplementedError(
        f"retorch's matmul handles 2-D @ 2-D and N-D @ 2-D, got {a}-D @ {b}-D"
    )


def _linear(input, weight, bias=None):
    """``at::native::linear`` (``aten/src/ATen/native/Linear.cpp``): with a bias, a 2-D input
    is one ``addmm``; a contiguous input of other ranks (and a 1-D bias) is flattened to 2-D
    for it and viewed back (``_flatten_nd_linear``). Otherwise ``matmul``, then the bias added
    (torch adds it in place unless the bias is a tensor subclass; here out of place)."""
    if bias is not None:
        if input.dim() == 2:
            return ops.aten.addmm(bias, input, ops.aten.t(weight))
        if input.is_contiguous() and (input.dim() == 3 or bias.dim() == 1):
            sizes = list(input.shape)
            rows = 1
            for s in sizes[:-1]:  # (not -1: a size-0 dim makes -1 ambiguous)
                rows *= s
            flat = ops.aten.reshape(input, [rows, sizes[-1]])
            out = ops.aten.addmm(bias, flat, ops.aten.t(weight))
            return ops.aten.view(out, sizes[:-1] + [out.shape[1]])
    out = ops.aten.matmul(input, ops.aten.t(weight))
    return out if bias is None else ops.aten.add.Tensor(out, bias)


def _reshape(self, shape):
    shape = list(shape)
    if -1 in shape:
        known = 1
        for n in shape:
            known *= n if n != -1 else 1
        shape[shape.index(-1)] = self.numel() // known
    if self.is_contiguous():
        return ops.aten.view(self, shape)
    # torch: _unsafe_view of a row-major clone (UnsafeViewBackward0, a new tensor, no view)
    return ops.aten._unsafe_view(ops.aten.clone(self, memory_format="contiguous_format"), shape)


def _to(self, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
        copy=False, memory_format=None):  # fmt: skip
    """``at::to`` → ``to_impl`` (TensorConversions.cpp): ``self`` itself when nothing would
    change (``to_will_alias``), else ``_to_copy``, whose autograd kernel records the move."""
    same_device = device is None or normalize_device(device) == self.device
    same_dtype = dtype is None or _as_dtype(dtype) is self.data.dtype
    if same_device and same_dtype and not copy:
        return self
    return ops.aten._to_copy(self, dtype=dtype, device=device, non_blocking=non_blocking)


def _as(self, dtype):
    return self if dtype is None else ops.aten._to_copy(self, dtype=dtype)


IMPLICIT = {
    "to.dtype_layout": _to,
    "matmul": _matmul,
    "linear": _linear,
    "reshape": _reshape,
    # SoftMax.cpp's softmax(input, dim, dtype): the input converted to dtype first when given
    "softmax.int": lambda self, dim, dtype=None: ops.aten._softmax(_as(self, dtype), dim, False),
    "log_softmax.int": lambda self, dim, dtype=None: ops.aten._log_softmax(
        _as(self, dtype), dim, False
    ),
    "nll_loss": lambda self, target, weight=None, reduction=1, ignore_index=-100: (
        ops.aten.nll_loss_forward(self, target, weight, reduction, ignore_index)[0]
    ),
    "cross_entropy_loss": lambda self, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0: (  # noqa: E501
        ops.aten.nll_loss(
            ops.aten.log_softmax.int(self, 1), target, weight, reduction, ignore_index
        )
    ),
}


#: The backend ops whose ``native_functions.yaml`` entry keeps the device check: the others
#: say ``device_check: NoCheck`` (a TensorIterator op checks devices itself, and lets a 0-dim
#: CPU tensor join CUDA ones). tests/test_dispatch_device.py reads the yaml torch ships.
DEVICE_CHECK = ("mm", "addmm", "_softmax", "_log_softmax", "nll_loss_forward")


def _device_checked(schema: str, fn):
    """The CUDA wrapper torchgen writes around a kernel (``wrapper_CUDA_mm`` in
    ``RegisterCUDA.cpp``): every tensor argument on the device of the first, through
    ``check_and_update_common_device`` (``aten/src/ATen/core/adaption.cpp``), before the kernel
    runs. A CPU tensor mixed with a CUDA one dispatches to CUDA (the higher backend bit) and
    stops here. CPU wrappers have no device guard and no check, as torch's."""
    name, params = schema.split("(", 1)
    method = "wrapper_CUDA_" + name.replace(".", "_")
    positional = [p.split()[-1].split("=")[0] for p in params.split(") ->")[0].split(", ")]

    def kernel(*args, **kwargs):
        common = None
        for arg, value in [*zip(positional, args), *kwargs.items()]:
            if isinstance(value, AutogradTensor):
                device = value.data.device
                if common is None:
                    common = device
                elif device != common:
                    raise RuntimeError(
                        f"Expected all tensors to be on the same device, but got {arg} is on "
                        f"{_device_name(device)}, different from other tensors on "
                        f"{_device_name(common)} (when checking argument in method {method})"
                    )
        return fn(*args, **kwargs)

    return kernel


def _device_name(device: str) -> str:
    return "cuda:0" if device == "cuda" else device


def _register() -> list:
    lib = Library("aten", "DEF")
    for schema in SCHEMAS:
        lib.define(schema)
    by_name = {s.split("(")[0]: s for s in SCHEMAS}
    for name, fn in BACKEND.items():
        for key in ("CPU", "CUDA", "Meta"):
            checked = key == "CUDA" and name in DEVICE_CHECK
            lib.impl(name, _device_checked(by_name[name], fn) if checked else fn, key)
    for name, fn in EXPLICIT.items():
        lib.impl(name, fn, "CompositeExplicitAutograd")
    lib.impl("sum", _sum, "Meta")
    lib.impl("mean", _mean, "Meta")
    lib.impl("_unsafe_view", EXPLICIT["_unsafe_view"], "Meta")  # torch: _meta_registrations.py
    for name, fn in IMPLICIT.items():
        lib.impl(name, fn, "CompositeImplicitAutograd")
    from . import autocast_mode, variable_type

    return [lib] + variable_type.register() + autocast_mode.register()


LIBRARIES = _register()  # kept alive: destroying them would deregister the kernels
aten = ops.aten

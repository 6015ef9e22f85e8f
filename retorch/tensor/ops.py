"""The ops: device-independent front ends that check arguments, build a TensorIterator (or
lay the data out for a reduction or matmul) and call the op's dispatch stub for the device.

Mirrors the structured kernels of ``aten/src/ATen/native/BinaryOps.cpp`` (``add``, ``sub``,
``mul``, ``div``, ``pow``, ``maximum``, comparisons, with their argument checks),
``UnaryOps.cpp``, ``TensorCompare.cpp`` (``where``), ``Copy.cpp`` (``copy_``),
``ReduceOps.cpp`` (``sum``, ``mean``, ``amax``, ``max``), ``SoftMax.cpp``,
``TensorAdvancedIndexing.cpp`` (``index_select``, ``gather``) and ``LinearAlgebra.cpp``
(``mm``, ``bmm``, ``matmul``). Kernels live in ``cpu_kernels.py`` and ``cuda_kernels.py``.
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from . import cpu_kernels as _cpu  # noqa: F401  (registers the CPU kernels)
from . import cuda_kernels as _cuda  # noqa: F401  (registers the CUDA kernels)
from . import meta as _meta
from . import scalar_ops as S
from . import tensor_iterator
from .dispatch_stub import stub
from .dtype import as_dtype, bool_, int64, is_half
from .expand_utils import infer_size
from .tensor import Tensor, _wrap
from .tensor_factories import (  # noqa: F401  (re-exported)
    empty,
    empty_generic,
    empty_like,
    empty_strided,
    full,
    ones,
    ones_like,
    scalar_tensor,
    zeros,
    zeros_like,
)
from .tensor_impl import TensorImpl, storage_nbytes
from .tensor_iterator import TensorIterator, TensorIteratorConfig, resize_output
from .tensor_shape import alias, contiguous
from .wrap_dim_utils import dim_list_to_bitset, maybe_wrap_dim

_py_max, _py_sum = builtins.max, builtins.sum
_meta.register_meta_kernels()  # on "meta" every stub's kernel does nothing: shapes only
_binary_stub = stub("binary")


def _is_meta(*tensors) -> bool:
    return _py_sum(isinstance(t, Tensor) and t.device == "meta" for t in tensors) > 0


def _as_tensor(x):
    return x if isinstance(x, Tensor) else _wrap(x, None)


# ---- elementwise binary -----------------------------------------------------------------------
def _binary(name, self, other, out=None, alpha=1, integer_to_float=False):
    a = self if isinstance(self, Tensor) else _wrap(self, None)  # (_as_tensor, inlined: this
    b = other if isinstance(other, Tensor) else _wrap(other, None)  # runs for every binary op)
    it = TensorIterator.fast_op(out, (a, b), None, integer_to_float)  # one shape, contiguous
    if it is None:
        it = _build_binary(a, b, out, integer_to_float)
    op = S.BINARY[name]
    if alpha != 1:
        op, alpha = S.ADD_ALPHA, (alpha if name == "add" else -alpha)
    _binary_stub(it.device, it, op, alpha)
    if it._out_copy_back:
        it.finish()
    if it.device == "meta" and out is None:
        return _meta.restride_output(it.output(), a, b)
    return it.operands[0].tensor  # (it.output())


def _build_binary(a, b, out, integer_to_float):
    """``build_borrowing_binary_op``: the TensorIterator of a binary op, every step run."""
    if _is_meta(a, b):
        _meta.broadcast_shapes(a.shape, b.shape)
    if out is not None:
        shape = infer_size(a.shape, b.shape)
        if out.shape != shape:  # torch checks overlap before it resizes; otherwise the
            _check_overlap(out, a, b)  # iterator's own check below is the same check
            resize_output(out, shape)
    cfg = TensorIteratorConfig().add_output(out).add_input(a).add_input(b)
    cfg.promote_inputs_to_common_dtype_ = True
    cfg.cast_common_dtype_to_outputs_ = True
    cfg.enforce_safe_casting_to_output_ = True
    cfg.promote_integer_inputs_to_float_ = integer_to_float
    return cfg.build()


def _check_alpha(a, b, alpha):
    if type(alpha) is int:  # valid for every dtype: skip working out the result's dtype
        return
    if type(alpha) is float and isinstance(a, Tensor) and isinstance(b, Tensor):
        da = a._impl.dtype
        if da is b._impl.dtype and da.is_floating_point:  # (an optimizer's add(alpha=lr))
            return
    from .type_promotion import result_type

    dt = result_type(_as_tensor(a), _as_tensor(b))
    if isinstance(alpha, bool) and dt is not bool_:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if not dt.is_floating_point and isinstance(alpha, float):
        raise RuntimeError(
            "For integral input tensors, argument alpha must not be a floating point number."
        )


def add(input, other, alpha=1, out=None):
    """``input + alpha * other`` (``torch.add``), into ``out`` when given."""
    if type(alpha) is not int:  # (an int alpha is valid for every dtype)
        _check_alpha(input, other, alpha)
    return _binary("add", input, other, out, alpha)


def sub(input, other, alpha=1, out=None):
    a, b = _as_tensor(input), _as_tensor(other)
    if _is_meta(a, b):  # torch's ref for sub broadcasts before it checks the dtypes
        _meta.broadcast_shapes(a.shape, b.shape)
    if a.dtype is bool_ and b.dtype is bool_:
        raise RuntimeError(
            "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` "
            "or `logical_xor()` operator instead."
        )
    if a.dtype is bool_ or b.dtype is bool_:
        raise RuntimeError(
            "Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
            "trying to invert a mask, use the `~` or `logical_not()` operator instead."
        )
    _check_alpha(a, b, alpha)
    return _binary("sub", a, b, out, alpha)


def mul(input, other, out=None):
    return _binary("mul", input, other, out)


def div(input, other, out=None):
    """True division: integer inputs give the default float dtype, as torch's."""
    return _binary("div", input, other, out, integer_to_float=True)


def pow(input, exponent, out=None):  # noqa: A001
    a, b = _as_tensor(input), _as_tensor(exponent)
    from .type_promotion import result_type

    if not result_type(a, b).is_floating_point and not _is_meta(b) and _any(lt(b, 0)):
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    return _binary("pow", a, b, out)


def _tensor_args(name, **args):
    """torch.maximum and friends take tensors only (no Python numbers)."""
    for pos, (arg, value) in enumerate(args.items(), 1):
        if not isinstance(value, Tensor):
            raise TypeError(
                f"{name}(): argument '{arg}' (position {pos}) must be Tensor, not "
                f"{type(value).__name__}"
            )


def maximum(input, other, out=None):
    _tensor_args("maximum", input=input, other=other)
    return _binary("maximum", input, other, out)


def minimum(input, other, out=None):
    _tensor_args("minimum", input=input, other=other)
    return _binary("minimum", input, other, out)


def _compare(name, self, other, out=None):
    a, b = _as_tensor(self), _as_tensor(other)
    if _is_meta(a, b):
        _meta.broadcast_shapes(a.shape, b.shape)
    if out is not None:
        shape = infer_size(a.shape, b.shape)
        if out.shape != shape:  # torch checks overlap before it resizes; otherwise the
            _check_overlap(out, a, b)  # iterator's own check below is the same check
            resize_output(out, shape)
    cfg = TensorIteratorConfig().add_output(out).add_input(a).add_input(b)
    cfg.promote_inputs_to_common_dtype_ = True
    cfg.static_dtype = bool_
    it = cfg.build()
    stub("compare")(it.device, it, S.COMPARE[name])
    it.finish()
    if it.device == "meta" and out is None:
        return _meta.restride_output(it.output(), a, b)
    return it.output()


def gt(input, other, out=None):
    return _compare("gt", input, other, out)


def lt(input, other, out=None):
    return _compare("lt", input, other, out)


def ge(input, other, out=None):
    return _compare("ge", input, other, out)


def le(input, other, out=None):
    return _compare("le", input, other, out)


def eq(input, other, out=None):
    return _compare("eq", input, other, out)


def ne(input, other, out=None):
    return _compare("ne", input, other, out)


def logical_and(input, other):
    """``torch.logical_and``: a bool tensor, true where both are nonzero (``a != 0`` times
    ``b != 0``: a product of bools is their and)."""
    out = mul(ne(input, 0), ne(other, 0))
    return _meta.restride_output(out, input, other) if out.device == "meta" else out


def bitwise_and(input, other):
    """``&`` on bool tensors (``torch.bitwise_and``), where it is a logical and; retorch.tensor
    has no integer bitwise kernels."""
    a, b = _as_tensor(input), _as_tensor(other)
    from .type_promotion import result_type

    dt = result_type(a, b)
    if dt.is_floating_point:
        raise NotImplementedError(f"\"bitwise_and_cpu\" not implemented for '{dt.scalar_name}'")
    if dt is not bool_:
        raise NotImplementedError(
            f"retorch.tensor computes & on bool tensors only, got {dt.scalar_name}: compare "
            "first (x != 0) or use logical_and"
        )
    out = logical_and(a, b)
    return _meta.restride_output(out, a, b) if out.device == "meta" else out


def _any(t: Tensor) -> bool:
    return bool(t.cpu().numpy().any())


# ---- elementwise unary --------------------------------------------------------------------------
def _unary(name, x, integer_to_float=True):
    cfg = TensorIteratorConfig().add_output(None).add_input(x)
    cfg.promote_inputs_to_common_dtype_ = True
    cfg.promote_integer_inputs_to_float_ = integer_to_float
    it = cfg.build()
    stub("unary")(it.device, it, S.UNARY[name])
    return it.output()


def neg(x):
    if x.dtype is bool_:
        raise RuntimeError(
            "Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
            "to invert a mask, use the `~` or `logical_not()` operator instead."
        )
    return _unary("neg", x, integer_to_float=False)


def relu(x):
    if x.dtype is bool_:
        raise RuntimeError("Boolean inputs not supported for relu")
    return _unary("relu", x, integer_to_float=False)


def exp(x):
    return _unary("exp", x)


def log(x):
    return _unary("log", x)


def tanh(x):
    return _unary("tanh", x)


def sigmoid(x):
    return _unary("sigmoid", x)


def reciprocal(x):
    return _unary("reciprocal", x)


def where(condition, input, other):
    c, a, b = _as_tensor(condition), _as_tensor(input), _as_tensor(other)
    if c.dtype is not bool_:
        raise RuntimeError(
            "where expected condition to be a boolean tensor, but got a tensor with dtype "
            f"{c.dtype.scalar_name}"
        )
    if _is_meta(c, a, b):
        _meta.broadcast_shapes(c.shape, a.shape, b.shape)
    from .type_promotion import result_type

    dt = result_type(a, b)
    a, b = (a if a.dtype is dt else a.to(dtype=dt)), (b if b.dtype is dt else b.to(dtype=dt))
    cfg = TensorIteratorConfig().add_output(None).add_input(c).add_input(a).add_input(b)
    cfg.static_dtype = dt
    it = cfg.build()
    stub("where")(it.device, it)
    if it.device == "meta":
        return _meta.restride_output(it.output(), c, a, b)
    return it.output()


# ---- copies and conversions ---------------------------------------------------------------------
def copy_(dst: Tensor, src) -> Tensor:
    """``dst.copy_(src)``: ``src`` broadcast to ``dst``'s shape, converted to its dtype."""
    src = _as_tensor(src)
    if src.device == "meta" and dst.device != "meta":
        raise NotImplementedError(_meta.NO_DATA)
    if dst.device == "meta" and src.device != "meta":
        src = to(src, "meta")
    if src.device != dst.device and src.dim() > 0:
        src = to(src, dst.device)
    src = src.expand(dst.shape) if src.shape != dst.shape else src
    if dst.numel() == 0:
        return dst
    cfg = TensorIteratorConfig().add_output(dst).add_input(src)
    cfg.static_dtype = dst.dtype
    cfg.check_mem_overlap = src._impl.storage is not dst._impl.storage or src.dim() > 0
    it = cfg.build()
    stub("copy")(it.device, it)
    return dst


def clone(x: Tensor) -> Tensor:
    out = empty_like(x)
    return copy_(out, x)


def to(x: Tensor, device=None, dtype=None) -> Tensor:
    """``x.to(device, dtype)``: ``x`` itself when nothing changes, else a copy that keeps a
    dense layout's strides (``preserve_format``)."""
    device = device or x.device
    dtype = x.dtype if dtype is None else as_dtype(dtype)
    if device == x.device and dtype is x.dtype:
        return x
    if device == "meta":  # the layout without the values (as torch's x.to("meta"))
        return empty_like(x, dtype=dtype, device="meta")
    if x.device == "meta":
        raise NotImplementedError(_meta.NO_DATA)
    if device == x.device == "cpu" and x.dim() == 0 and not is_half(dtype) | is_half(x.dtype):
        # a 0-dim CPU tensor (often a Python number being promoted): convert on the host,
        # no kernel launch (the value is cast as the copy loop would, by C rules)
        out, i = empty_generic((), dtype, "cpu"), x._impl
        out._impl.storage.typed(dtype.np)[0] = i.storage.typed(i.dtype.np)[i.storage_offset]
        return out
    if device == x.device:
        return copy_(empty_like(x, dtype=dtype), x)
    if x.device == "cuda":  # the host waits for the device: refused while a graph captures
        from retorch.cuda_graphs import check_not_capturing

        check_not_capturing(f"a copy to {device}")
    out = empty_like(x, dtype=dtype, device=device)
    if x.numel() == 0:
        return out
    # lay the data out on the source device exactly as it will be on the target, then
    # move the bytes in one transfer (cudaMemcpy in torch's copy_kernel_cuda)
    src = x
    if (
        src.stride() != out.stride()
        or dtype is not x.dtype
        or not src._impl.is_non_overlapping_and_dense()
    ):
        src = empty_strided(out.shape, out.stride(), dtype, x.device)
        copy_(src, x)
    nbytes = storage_nbytes(out.shape, out.stride(), dtype.itemsize)
    start = src.storage_offset() * dtype.itemsize
    lo = out.storage_offset() * dtype.itemsize
    src_bytes = src._impl.storage._data[start : start + nbytes]
    dst_bytes = out._impl.storage._data[lo : lo + nbytes]
    if device == "cuda":
        dst_bytes.copy_to_device(np.ascontiguousarray(src_bytes))
    else:
        dst_bytes[:] = src_bytes.copy_to_host()
    return out


# ---- in place --------------------------------------------------------------------------------------
def _check_inplace(x, other):
    """torch's order of errors for ``x.op_(other)``: memory overlap, then the broadcast shape.
    With ``other`` of ``x``'s shape, or 0-dim (a Python number, wrapped or not), the shape
    cannot fail, and the iterator's own ``compute_mem_overlaps`` raises the same overlap
    errors: nothing to do."""
    if not isinstance(other, Tensor) or not other._impl.sizes or other._impl.sizes == x._impl.sizes:
        return
    if _is_meta(x, other):
        return _meta.check_inplace_broadcast(x.shape, _as_tensor(other).shape)
    _check_overlap(x, other)
    shape = infer_size(x.shape, _as_tensor(other).shape)
    if shape != x.shape:
        raise RuntimeError(
            f"output with shape {list(x.shape)} doesn't match the broadcast shape {list(shape)}"
        )


def _check_overlap(out, *inputs):
    """torch checks memory overlap before it resizes ``out`` or checks an in-place shape."""
    cfg = TensorIteratorConfig().add_output(out)
    for t in inputs:
        cfg.add_input(_as_tensor(t))
    tensor_iterator.check_mem_overlaps(cfg)


def add_(x, other, alpha=1):
    _check_inplace(x, other)
    return add(x, other, alpha=alpha, out=x)


def mul_(x, other):
    _check_inplace(x, other)
    return mul(x, other, out=x)


def fill_(x, value):
    return copy_(x, scalar_tensor(value, dtype=x.dtype) if not isinstance(value, Tensor) else value)


def zero_(x):
    return fill_(x, 0)


# ---- reductions -------------------------------------------------------------------------------------
def _zero_numel_check_dims(x, dim, name):
    """``zero_numel_check_dims`` (ReduceOps.cpp): no max over an empty dim."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        raise RuntimeError(
            f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument."
        )
    for d in dim if isinstance(dim, (tuple, list)) else (dim,):
        if x.size(d) == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _reduce_layout(x, dim, keepdim, name):
    """(x with reduced dims moved last and made contiguous, outer, inner, output shape)."""
    n = x.dim()
    if name in ("amax", "max") and x.numel() == 0 and x.device == "meta" and dim is not None:
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        wrapped = [maybe_wrap_dim(d, n) for d in dims] if dims else list(range(n))
        _meta.check_reduction_dims(x, wrapped)
    elif name in ("amax", "max") and x.numel() == 0:
        _zero_numel_check_dims(x, dim, name)
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        if n and x.is_contiguous():  # all of a contiguous tensor: one row, as TensorIterator's
            return x, 1, x.numel(), (1,) * n if keepdim else ()  # coalesce_dimensions makes it
        reduced = [True] * _py_max(n, 1)
    else:
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        reduced = dim_list_to_bitset(dims, n)
    sizes = list(x.shape) if n else [1]
    kept = [d for d in range(len(sizes)) if not reduced[d]]
    gone = [d for d in range(len(sizes)) if reduced[d]]
    xs = x if n else x.reshape(1)
    order = kept + gone
    xp = contiguous(xs if order == sorted(order) else xs.permute(*order))
    outer = math.prod(sizes[d] for d in kept)
    inner = math.prod(sizes[d] for d in gone)
    if keepdim:
        shape = [1 if reduced[d] else sizes[d] for d in range(len(sizes))] if n else []
    else:
        shape = [sizes[d] for d in kept] if n else []
    return xp, outer, inner, tuple(shape)


def review_reduce_result(result, ndim, mask, keepdim):
    """``review_reduce_result`` (``aten/src/ATen/native/ReduceOpsUtils.h``): the result seen
    with the input's ``ndim`` dims, size 1 and stride 0 on each reduced one."""
    if ndim == 0:
        return result
    shape, stride = list(result.shape), list(result.stride())
    for d in range(ndim):
        if mask[d]:
            if keepdim:
                stride[d] = 0
            else:
                shape.insert(d, 1)
                stride.insert(d, 0)
    return result.as_strided(shape, stride)


def make_reduction(name, x, dim, keepdim, out_dtype, trace=False):
    """``make_reduction`` (``ReduceOpsUtils.h``): the result, allocated contiguous with the
    reduced dims gone (or kept as 1), and the reduction TensorIterator over the input in
    place, its output the result seen by :func:`review_reduce_result`. (``name`` names the op,
    as torch's argument does for its messages.)"""
    n = x.dim()
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        mask = [True] * n  # make_dim_mask: no dims means every dim
    else:
        mask = dim_list_to_bitset(dim if isinstance(dim, (tuple, list)) else (dim,), n)
    shape = tuple(1 if mask[d] else x.shape[d] for d in range(n) if keepdim or not mask[d])
    result = empty_generic(shape, out_dtype, x.device)
    xin = x if x.dtype is out_dtype else to(x, dtype=out_dtype)
    viewed = review_reduce_result(result, n, mask, keepdim)
    return result, tensor_iterator.reduce_op(viewed, xin, trace=trace)


def sum(x, dim=None, keepdim=False, dtype=None):  # noqa: A001
    """``torch.sum`` (``sum_out`` in ``ReduceOps.cpp``): integer and bool inputs sum in int64,
    as torch's. On the CPU (and meta) through a reduction TensorIterator that reads ``x`` at
    its own strides, as torch's ``sum_stub`` does; retorch's CUDA kernel still sums
    contiguous rows, so there the reduced dims are first moved last and copied."""
    if dtype is None:
        dtype = x.dtype if x.dtype.is_floating_point else int64
    else:
        dtype = as_dtype(dtype)
    if x.device == "cuda":
        return _sum_rows(x, dim, keepdim, dtype)
    result, it = make_reduction("sum", x, dim, keepdim, dtype)
    if it.numel() == 0:
        return fill_(result, 0)  # torch: `if (iter.numel() == 0) result.zero_();`
    stub("sum")(x.device, it)
    return result


def _sum_rows(x, dim, keepdim, dtype):
    """The CUDA sum: reduced dims moved last and made contiguous, one row per output."""
    xp, outer, inner, shape = _reduce_layout(x, dim, keepdim, "sum")
    if xp.dtype is not dtype:
        xp = to(xp, dtype=dtype)
    out = empty_generic(shape, dtype, x.device)
    if outer == 0:
        return out
    if inner == 0:
        return fill_(out, 0)
    stub("sum_rows")(x.device, xp, out, outer, inner)
    return out


def mean(x, dim=None, keepdim=False):
    if not x.dtype.is_floating_point:
        raise RuntimeError(
            "mean(): could not infer output dtype. Input dtype must be either a floating point "
            "or complex dtype. Got: "
            + (f"torch.{x.dtype.name}" if x.device == "meta" else x.dtype.scalar_name)
        )
    sizes = list(x.shape) or [1]
    inner = math.prod(sizes[d] for d in _reduced_dims(x, dim)[1])  # no copy of x to count
    # sum, then divide in place, as ATen's mean_out: `at::sum_out(result, ...).div_(dim_prod)`
    # (so the result keeps the sum's contiguous layout, also where it has no elements)
    result = sum(x, dim, keepdim)
    return div(result, inner, out=result)


def _max_impl(x, dim, keepdim, name):
    """On the CPU the input is read in place, at its own strides (torch's ``max`` and
    ``amax`` copy nothing either); on CUDA and meta the reduced dims are moved last and
    made contiguous first."""
    if x.device == "cpu":
        return _max_in_place(x, dim, keepdim, name)
    xp, outer, inner, shape = _reduce_layout(x, dim, keepdim, name)
    values = empty_generic(shape, x.dtype, x.device)
    indices = empty_generic(shape, int64, x.device)
    if outer:
        stub("max")(x.device, xp, values, indices, outer, inner)
    return values, indices


def _reduced_dims(x, dim):
    """(kept dims, reduced dims) of ``x`` (a 0-d tensor counts as one dim of size 1)."""
    n = x.dim()
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        reduced = [True] * _py_max(n, 1)
    else:
        reduced = dim_list_to_bitset(dim if isinstance(dim, (tuple, list)) else (dim,), n)
    reduced = reduced if n else [True]
    return ([d for d in range(len(reduced)) if not reduced[d]],
            [d for d in range(len(reduced)) if reduced[d]])  # fmt: skip


def _max_in_place(x, dim, keepdim, name):
    if x.numel() == 0:
        _zero_numel_check_dims(x, dim, name)
    kept, gone = _reduced_dims(x, dim)
    n, sizes = x.dim(), list(x.shape)
    if keepdim and n:
        shape = tuple(sizes[d] if d in kept else 1 for d in range(n))
    else:
        shape = tuple(sizes[d] for d in kept) if n else ()
    values = empty_generic(shape, x.dtype, x.device)
    indices = empty_generic(shape, int64, x.device)
    if values.numel():
        stub("max_strided")(x.device, x, values, indices, kept, gone)
    return values, indices


def amax(x, dim=(), keepdim=False):
    return _max_impl(x, dim, keepdim, "amax")[0]


def max(x, dim=None, keepdim=False):  # noqa: A001
    """``torch.max(x)`` (the largest element) or ``torch.max(x, dim)`` -> (values, indices)."""
    if dim is None:
        return _max_impl(x, None, False, "max")[0]
    # max.dim wraps its single dim before checking it (amax checks the dims as given)
    return _max_impl(x, maybe_wrap_dim(dim, x.dim()), keepdim, "max")


def _check_float(x, name):
    if not x.dtype.is_floating_point:
        raise NotImplementedError(
            f"\"{name}_lastdim_kernel_impl\" not implemented for '{x.dtype.scalar_name}'"
        )


def softmax(x, dim):
    """``exp(x - max) / sum(exp(x - max))`` along ``dim``: subtracting the max keeps exp from
    overflowing and leaves the result unchanged (``aten/src/ATen/native/cpu/SoftMaxKernel.cpp``)."""
    _check_float(x, "softmax")
    dim = maybe_wrap_dim(dim, x.dim())
    if x.device == "meta":  # softmax's meta function: a row-major output of x's size
        return empty(x.shape, dtype=x.dtype, device="meta")
    x = contiguous(x)  # the output is row-major whatever the input's layout, as torch's
    if _lastdim_kernel(x, dim):
        out = empty(x.shape, dtype=x.dtype)
        stub("softmax_lastdim")("cpu", x, out, False)
        return out
    e = exp(sub(x, amax(x, dim, keepdim=True)))
    return div(e, sum(e, dim, keepdim=True))


def _lastdim_kernel(x, dim) -> bool:
    """Whether ``host_softmax``'s CPU kernel for the last dim runs: one pass per row
    (``softmax_lastdim_kernel``); other dims, devices and half types compose the ops."""
    return x.device == "cpu" and dim == x.dim() - 1 and not is_half(x.dtype) and x.numel() > 0


def log_softmax(x, dim):
    """``x - max - log(sum(exp(x - max)))`` along ``dim``."""
    _check_float(x, "log_softmax")
    dim = maybe_wrap_dim(dim, x.dim())
    if x.device == "meta":
        return empty(x.shape, dtype=x.dtype, device="meta")
    x = contiguous(x)
    if _lastdim_kernel(x, dim):
        out = empty(x.shape, dtype=x.dtype)
        stub("softmax_lastdim")("cpu", x, out, True)
        return out
    shifted = sub(x, amax(x, dim, keepdim=True))
    return sub(shifted, log(sum(exp(shifted), dim, keepdim=True)))


# ---- indexing ----------------------------------------------------------------------------------------
def _gather_launch(src, dim, index, out_shape):
    """Restride ``src`` so ``dim`` has stride 0 and let the index add ``i * stride[dim]``.
    The output is contiguous whatever ``src``'s layout, as torch allocates it
    (``set_output_raw_strided(0, index.sizes(), {}, self.options())`` in
    ``aten/src/ATen/native/TensorAdvancedIndexing.cpp``)."""
    strides = list(src.stride())
    dim_stride = strides[dim] if src.dim() else 0
    if src.dim():
        strides[dim] = 0
    src_r = Tensor(
        TensorImpl(src._impl.storage, src.dtype, out_shape, strides, src.storage_offset())
    )
    out = empty(tuple(out_shape), dtype=src.dtype, device=src.device)
    cfg = TensorIteratorConfig().add_output(out).add_input(src_r).add_input(index)
    cfg.static_dtype = src.dtype
    it = cfg.build()
    stub("gather")(it.device, it, dim_stride)
    return it.output()


def _index_bounds(index):
    """(smallest, largest) index; on meta there are no values to check: (0, -1)."""
    if index.device == "meta":
        return 0, -1
    v = index.numpy() if index.device == "cpu" else index.cpu().numpy()
    return (int(v.min()), int(v.max())) if v.size else (0, -1)


def index_select(x, dim, index):
    if index.dtype.name not in ("int64", "int32"):
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    dim = maybe_wrap_dim(dim, x.dim())
    size = x.shape[dim] if x.dim() else 1
    lo, hi = _index_bounds(index)
    if lo < 0 or hi >= size:
        raise IndexError("index out of range in self")
    k = index.numel()
    index = index.to(dtype=int64).reshape(k)
    shape = list(x.shape)
    if not shape:
        return _gather_launch(x, 0, index.reshape(()), ())
    shape[dim] = k
    idx_strides = [0] * len(shape)
    idx_strides[dim] = index.stride(0)
    idx_r = alias(index, shape, idx_strides)
    return _gather_launch(x, dim, idx_r, tuple(shape))


def gather(x, dim, index):
    if index.dtype.name not in ("int64", "int32"):
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    dim = maybe_wrap_dim(dim, x.dim())
    if index.dim() != x.dim() and not (x.dim() <= 1 and index.dim() <= 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    for d in range(index.dim()):
        if d != dim and index.shape[d] > x.shape[d]:
            raise RuntimeError(
                f"Size does not match at dimension {d} expected index {list(index.shape)} to be "
                f"no larger than self {list(x.shape)} apart from dimension {dim}"
            )
    size = x.shape[dim] if x.dim() else 1
    lo, hi = _index_bounds(index)
    for v in (lo, hi) if lo <= hi else ():
        if index.numel() and (v < 0 or v >= size):
            raise RuntimeError(f"index {v} is out of bounds for dimension {dim} with size {size}")
    return _gather_launch(x, dim, index.to(dtype=int64), index.shape)


def _scatter_launch(out, dim, index, src, add):
    """Write (or add) ``src`` into ``out`` at ``index`` along ``dim``: ``out`` is restrided
    to the index's shape with stride 0 along ``dim``, and the index adds ``i * stride``."""
    strides = list(out.stride())
    dim_stride = strides[dim] if out.dim() else 0
    if out.dim():
        strides[dim] = 0
    out_r = Tensor(
        TensorImpl(out._impl.storage, out.dtype, index.shape, strides, out.storage_offset())
    )
    cfg = TensorIteratorConfig().add_input(out_r).add_input(src).add_input(index)
    cfg.static_dtype = out.dtype
    it = cfg.build()
    stub("scatter")(it.device, it, dim_stride, add)
    return out


def scatter_(x, dim, index, value):
    """``x.scatter_(dim, index, value)``: ``x[i][index[i][j]] = value`` (for dim 1)."""
    dim = maybe_wrap_dim(dim, x.dim())
    if index.dtype is not int64:
        raise RuntimeError("scatter(): Expected dtype int64 for index")
    size = x.shape[dim] if x.dim() else 1
    lo, hi = _index_bounds(index)
    for v in (lo, hi) if lo <= hi else ():
        if index.numel() and (v < 0 or v >= size):
            raise RuntimeError(f"index {v} is out of bounds for dimension {dim} with size {size}")
    src = value if isinstance(value, Tensor) else scalar_tensor(value, dtype=x.dtype)
    src = src.to(x.device).expand(index.shape) if src.shape != index.shape else src
    return _scatter_launch(x, dim, index, src.to(dtype=x.dtype), add=False)


def scatter(x, dim, index, value):
    return scatter_(clone(x), dim, index, value)


def index_add_(x, dim, index, source, alpha=1):
    """``x.index_add_(dim, index, source)``: ``x[..., index[j], ...] += source[..., j, ...]``;
    repeated indices accumulate."""
    if index.dtype.name not in ("int64", "int32") or index.dim() > 1:
        raise RuntimeError("index_add_(): Index is supposed to be a vector")
    dim = maybe_wrap_dim(dim, x.dim())
    size = x.shape[dim] if x.dim() else 1
    lo, hi = _index_bounds(index)
    if lo < 0 or hi >= size:
        raise IndexError("index out of range in self")
    src = source if alpha == 1 else mul(source, alpha)
    index = index.to(dtype=int64).reshape(index.numel())
    shape = list(src.shape)
    if not shape:
        return _scatter_launch(x, 0, index.reshape(()), src.to(dtype=x.dtype), add=True)
    idx_strides = [0] * len(shape)
    idx_strides[dim] = index.stride(0)
    idx_r = alias(index, shape, idx_strides)
    return _scatter_launch(x, dim, idx_r, src.to(dtype=x.dtype), add=True)


def isnan(x):
    return ne(x, x)


def any(x):  # noqa: A001
    """``torch.any`` over every element: a 0-dim bool tensor."""
    return gt(sum(ne(x, 0)), 0)


def nll_loss(log_probs, target, reduction="mean"):
    """``F.nll_loss`` for (N, C) log-probabilities and (N,) class indices, no weights:
    ``-log_probs[i, target[i]]``, averaged (or summed, or kept)."""
    picked = neg(gather(log_probs, 1, target.unsqueeze(1)).squeeze(1))
    if reduction == "none":
        return picked
    return sum(picked) if reduction == "sum" else mean(picked)


# ---- matmul --------------------------------------------------------------------------------------------
def _mm_dtype_check(a, b, n1="m1", n2="m2"):
    if a.dtype is not b.dtype:
        raise RuntimeError(
            f"expected {n1} and {n2} to have the same dtype, but got: "
            f"{_c_name(a.dtype)} != {_c_name(b.dtype)}"
        )
    if a.dtype is bool_:
        raise NotImplementedError("\"addmm_impl_cpu_\" not implemented for 'Bool'")


def _c_name(d):
    return {"float32": "float", "float64": "double", "int64": "long int", "int32": "int"}.get(
        d.name, d.name
    )


def bmm(a, b):
    if a.dim() != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if b.dim() != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    batch, m, k = a.shape
    if b.shape[0] != batch or b.shape[1] != k:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: [{batch}, {k}] but "
            f"got: [{b.shape[0]}, {b.shape[1]}]."
        )
    _mm_dtype_check(a, b)
    out = empty(batch, m, b.shape[2], dtype=a.dtype, device=a.device)
    if out.numel() == 0:
        return out
    if k == 0:
        return zero_(out)
    # the CPU kernel reads any strides (it packs what it cannot read in place)
    stub("bmm")(a.device, a if a.device == "cpu" else contiguous(a), b, out)
    return out


def mm(a, b):
    if _is_meta(a, b):
        _meta.check_mm(a, b)
    if a.dim() != 2:
        raise RuntimeError("self must be a matrix")
    if b.dim() != 2:
        raise RuntimeError("mat2 must be a matrix")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and "
            f"{b.shape[0]}x{b.shape[1]})"
        )
    return bmm(a.unsqueeze(0), b.unsqueeze(0)).squeeze(0)


def mv(a, v):
    if _is_meta(a, v):
        _meta.check_mv(a, v)
    if a.dim() != 2 or v.dim() != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {a.dim()}, {v.dim()}")
    if a.shape[1] != v.shape[0]:
        raise RuntimeError(
            f"size mismatch, got input ({a.shape[0]}), mat ({a.shape[0]}x{a.shape[1]}), "
            f"vec ({v.shape[0]})"
        )
    return mm(a, v.unsqueeze(1)).squeeze(1)


def dot(a, b):
    if _is_meta(a, b):
        _meta.check_dot(a, b)
    if a.dim() != 1 or b.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.dim()}D and {b.dim()}D tensors")
    if a.numel() != b.numel():
        raise RuntimeError(
            f"inconsistent tensor size, expected tensor [{a.numel()}] and src [{b.numel()}] to "
            f"have the same number of elements, but got {a.numel()} and {b.numel()} elements "
            "respectively"
        )
    _mm_dtype_check(a, b, "self", "other")
    return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape(())


def _should_fold(a, b) -> bool:
    """``should_fold`` (LinearAlgebra.cpp) for tensors without grad: fold the batch of the
    >=3-d operand into mm/mv rows when the other is 1- or 2-d and the folding needs no copy
    (a 2-d ``a`` with a batched ``b`` would need the transposed result copied: no fold)."""
    transpose = b.dim() > a.dim()
    t1 = b.transpose(-2, -1) if transpose and b.dim() >= 2 else (b if transpose else a)
    small = a if transpose else b
    if not (t1.dim() >= 3 and small.dim() <= 2):
        return False
    if a.dim() == 2:
        return False
    if t1.numel() == 0:
        return True
    st, sz = t1.stride(), t1.shape
    return all(st[i] == st[i + 1] * sz[i + 1] for i in range(t1.dim() - 2))


def matmul(a, b):
    """``at::matmul`` (LinearAlgebra.cpp): dot, mv, mm, or a batched mm over broadcast batch
    dims; a >=3-d operand with a 1- or 2-d other is folded into one mm or mv when
    :func:`_should_fold` says so."""
    da, db = a.dim(), b.dim()
    if da == 0 or db == 0:
        raise RuntimeError(
            f"both arguments to matmul need to be at least 1D, but they are {da}D and {db}D"
        )
    if da == 1 and db == 1:
        return dot(a, b)
    if da == 2 and db == 1:
        return mv(a, b)
    if da == 1 and db == 2:
        return mm(a.unsqueeze(0), b).squeeze(0)
    if da == 2 and db == 2:
        return mm(a, b)
    if _should_fold(a, b):
        transpose = db > da  # 1-d @ batched: fold b^T, then one mv
        t1, t2 = (b.transpose(-2, -1), a) if transpose else (a, b)
        shape = t1.shape[:-1]
        folded = t1.reshape(int(np.prod(shape)), t1.shape[-1])
        if t2.dim() == 1:
            return mv(folded, t2).view(shape)
        return mm(folded, t2).view(shape + (t2.shape[1],))
    # batched: broadcast the batch dims, then one bmm
    a2 = a.unsqueeze(0) if da == 1 else a
    b2 = b.unsqueeze(-1) if db == 1 else b
    n, m1 = a2.shape[-2], a2.shape[-1]
    m2, p = b2.shape[-2], b2.shape[-1]
    batch = infer_size(a2.shape[:-2], b2.shape[:-2])
    nb = int(np.prod(batch)) if batch else 1
    ae = a2.expand(batch + (n, m1)).reshape(nb, n, m1)
    be = b2.expand(batch + (m2, p)).reshape(nb, m2, p)
    if m1 != m2:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: [{nb}, {m1}] but "
            f"got: [{nb}, {m2}]."
        )
    out = bmm(ae, be).view(batch + (n, p))
    if da == 1:
        out = out.squeeze(-2)
    if db == 1:
        out = out.squeeze(-1)
    return out


__all__ = [
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "maximum",
    "minimum",
    "gt",
    "lt",
    "ge",
    "le",
    "eq",
    "ne",
    "logical_and",
    "bitwise_and",
    "neg",
    "relu",
    "exp",
    "log",
    "tanh",
    "sigmoid",
    "reciprocal",
    "where",
    "copy_",
    "clone",
    "to",
    "add_",
    "mul_",
    "fill_",
    "zero_",
    "sum",
    "mean",
    "amax",
    "max",
    "softmax",
    "log_softmax",
    "index_select",
    "gather",
    "scatter_",
    "scatter",
    "index_add_",
    "isnan",
    "any",
    "nll_loss",
    "bmm",
    "mm",
    "mv",
    "dot",
    "matmul",
    "empty",
    "empty_like",
    "empty_strided",
    "full",
    "ones",
    "ones_like",
    "scalar_tensor",
    "zeros",
    "zeros_like",
]


def addmm(self, mat1, mat2, beta=1, alpha=1):
    """``torch.addmm``: ``beta * self + alpha * (mat1 @ mat2)``, ``self`` broadcast to the
    product's shape; what ``F.linear`` calls for a layer with a bias (``Linear.cpp``). Checks
    in the order of ``TORCH_META_FUNC(addmm)`` (``LinearAlgebra.cpp``). torch's CPU kernel
    copies the expanded ``self`` into the result and lets the GEMM accumulate onto it; here
    the product is computed first and ``self`` added into it in place: one output, one
    rounding of each sum, as the GEMM's for a single block of ``k``. ``beta=0`` ignores
    ``self`` (NaN included), as BLAS does."""
    if mat1.dim() != 2:
        raise RuntimeError(f"mat1 must be a matrix, got {mat1.dim()}-D tensor")
    if mat2.dim() != 2:
        raise RuntimeError(f"mat2 must be a matrix, got {mat2.dim()}-D tensor")
    for name, t in (("self", self), ("mat1", mat1)):
        if t.dtype is not mat2.dtype:
            raise RuntimeError(
                f"{name} and mat2 must have the same dtype, but got {t.dtype.scalar_name} and "
                f"{mat2.dtype.scalar_name}"
            )
    out = mm(mat1, mat2)
    bias = self.expand(*out.shape)  # (raises torch's message for a bias of the wrong size)
    if alpha != 1:
        mul_(out, alpha)
    if beta != 0:
        add_(out, bias, alpha=beta)
    return out


__all__ += ["addmm"]

"""Views: new sizes, strides and offset over the same storage. Mirrors
``aten/src/ATen/native/TensorShape.cpp`` (``view``, ``_reshape_alias``/``reshape``,
``transpose``, ``permute``, ``expand``, ``squeeze``, ``unsqueeze``, ``narrow``, ``slice``,
``select``, ``unfold``, ``as_strided``, ``flatten``) and ``torch/csrc/autograd/
python_variable_indexing.cpp`` (``x[...]`` as a chain of slice/select/unsqueeze).

Every function here only computes metadata and calls :func:`alias`, the counterpart of
``alias_with_sizes_and_strides``: no element is read or written, except ``reshape`` and
``contiguous``, which copy when no view exists.
"""

from __future__ import annotations

import builtins

from .expand_utils import infer_expand_geometry
from .tensor_impl import TensorImpl, check_in_bounds
from .tensor_utils import compute_stride, infer_size
from .wrap_dim_utils import maybe_wrap_dim

_VIEW_ERROR = (
    "view size is not compatible with input tensor's size and stride (at least one dimension "
    "spans across two contiguous subspaces). Use .reshape(...) instead."
)


_Tensor = _ops = None


def _late_imports():
    """``Tensor`` and ``ops``, which import this module: bound on first use, once (an import
    statement in a function costs a microsecond at every call)."""
    global _Tensor, _ops
    from . import ops
    from .tensor import Tensor

    _Tensor, _ops = Tensor, ops
    return Tensor, ops


def _shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(s) for s in shape)


def alias(self, sizes, strides, storage_offset=None):
    """A new tensor over ``self``'s storage (``alias_with_sizes_and_strides``)."""
    Tensor = _Tensor or _late_imports()[0]  # noqa: N806  (tensor.py imports this module)
    impl = self._impl
    off = impl.storage_offset if storage_offset is None else storage_offset
    return Tensor(TensorImpl(impl.storage, impl.dtype, sizes, strides, off), base=self)


def view(self, *shape):
    shape = infer_size(_shape_arg(shape), self.numel())
    stride = compute_stride(self._impl.sizes, self._impl.strides, shape)
    if stride is None:
        raise RuntimeError(_VIEW_ERROR)
    return alias(self, shape, stride)


def reshape(self, *shape):
    """A view when :func:`compute_stride` finds one, else a contiguous copy (``reshape``)."""
    shape = infer_size(_shape_arg(shape), self.numel())
    stride = compute_stride(self._impl.sizes, self._impl.strides, shape)
    if stride is not None:
        return alias(self, shape, stride)
    # ``_reshape_copy``: ``at::_unsafe_view(self.clone(contiguous), shape)``, a tensor of its
    # own (no ``_base``), not a view of the temporary copy
    from .tensor import Tensor
    from .tensor_impl import contiguous_strides

    copy = contiguous(self, copy=True)._impl
    return Tensor(TensorImpl(copy.storage, copy.dtype, shape, contiguous_strides(shape), 0))


def transpose(self, dim0, dim1):
    n = self.dim()
    dim0, dim1 = maybe_wrap_dim(dim0, n), maybe_wrap_dim(dim1, n)
    if dim0 == dim1 or n == 0:
        return alias(self, self._impl.sizes, self._impl.strides)
    sizes, strides = list(self._impl.sizes), list(self._impl.strides)
    sizes[dim0], sizes[dim1] = sizes[dim1], sizes[dim0]
    strides[dim0], strides[dim1] = strides[dim1], strides[dim0]
    return alias(self, sizes, strides)


def t(self):
    if self.dim() > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.dim()}D")
    return transpose(self, 0, 0 if self.dim() < 2 else 1)


def permute(self, *dims):
    dims = _shape_arg(dims)
    n = self.dim()
    if len(dims) != n:
        raise RuntimeError(
            "permute(sparse_coo): number of dimensions in the tensor input does not match the "
            f"length of the desired ordering of dimensions i.e. input.dim() = {n} is not equal "
            f"to len(dims) = {len(dims)}"
        )
    wrapped = [maybe_wrap_dim(d, n) for d in dims]
    if len(set(wrapped)) != n:
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    sizes, strides = self._impl.sizes, self._impl.strides
    return alias(self, [sizes[d] for d in wrapped], [strides[d] for d in wrapped])


def expand(self, *sizes):
    sizes = _shape_arg(sizes)
    s, st = infer_expand_geometry(
        self._impl.sizes, self._impl.strides, sizes, type_name=self.type()
    )
    return alias(self, s, st)


def expand_as(self, other):
    return expand(self, other.shape)


def squeeze(self, dim=None):
    sizes, strides = self._impl.sizes, self._impl.strides
    if dim is None:
        keep = [d for d in range(len(sizes)) if sizes[d] != 1]
    else:
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        drop = {maybe_wrap_dim(d, len(sizes)) for d in dims}
        keep = [d for d in range(len(sizes)) if not (d in drop and sizes[d] == 1)]
    return alias(self, [sizes[d] for d in keep], [strides[d] for d in keep])


def unsqueeze(self, dim):
    n = self.dim()
    dim = maybe_wrap_dim(dim, n + 1)
    sizes, strides = list(self._impl.sizes), list(self._impl.strides)
    # inferUnsqueezeGeometry: the new dim's stride is what stepping over the dims after it costs
    new_stride = 1 if dim >= n else sizes[dim] * strides[dim]
    sizes.insert(dim, 1)
    strides.insert(dim, new_stride)
    return alias(self, sizes, strides)


def slice(self, dim=0, start=None, end=None, step=1):  # noqa: A001  (aten::slice)
    """``at::slice``: start/end clamped into range, as Python slicing does."""
    if step <= 0:
        raise ValueError("step must be greater than zero")
    dim = maybe_wrap_dim(dim, self.dim())
    size = self._impl.sizes[dim]
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    sizes, strides = list(self._impl.sizes), list(self._impl.strides)
    offset = self._impl.storage_offset + start * strides[dim]
    sizes[dim] = (end - start + step - 1) // step
    strides[dim] *= step
    return alias(self, sizes, strides, offset)


def narrow(self, dim, start, length):
    if self.dim() == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    dim = maybe_wrap_dim(dim, self.dim())
    cur = self._impl.sizes[dim]
    if not (-cur <= start <= cur):
        raise IndexError(
            f"start out of range (expected to be in range of [{-cur}, {cur}], but got {start})"
        )
    if start < 0:
        start += cur
    if start > cur - length:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({cur}).")
    return slice(self, dim, start, start + length, 1)


def select(self, dim, index):
    n = self.dim()
    if n == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    dim = maybe_wrap_dim(dim, n)
    size = self._impl.sizes[dim]
    if size <= -1 - index or size <= index:
        raise IndexError(
            f"select(): index {index} out of range for tensor of size {list(self._impl.sizes)} "
            f"at dimension {dim}"
        )
    if index < 0:
        index += size
    sizes, strides = list(self._impl.sizes), list(self._impl.strides)
    offset = self._impl.storage_offset + index * strides[dim]
    del sizes[dim], strides[dim]
    return alias(self, sizes, strides, offset)


def unfold(self, dimension, size, step):
    """Windows of ``size`` every ``step`` along ``dimension``, as a new last dim (a view)."""
    n = self.dim()
    d = maybe_wrap_dim(dimension, n)
    sizes, strides = list(self._impl.sizes), list(self._impl.strides)
    max_size = 1 if n == 0 else sizes[d]
    if size > max_size:
        raise RuntimeError(
            f"maximum size for tensor at dimension {d} is {max_size} but size is {size}"
        )
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    new_sizes, new_strides = sizes + [size], strides + [1 if n == 0 else strides[d]]
    if d < n:
        new_sizes[d] = (sizes[d] - size) // step + 1
        new_strides[d] = step * strides[d]
    return alias(self, new_sizes, new_strides)


def as_strided(self, size, stride, storage_offset=None):
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride):
        raise RuntimeError(
            f"mismatch in length of strides and shape: sizes has {len(size)} elements but "
            f"strides has {len(stride)}"
        )
    if any(s < 0 for s in stride):
        raise RuntimeError(
            f"as_strided: Negative strides are not supported at the moment, got strides: "
            f"{list(stride)}"
        )
    off = self._impl.storage_offset if storage_offset is None else storage_offset
    check_in_bounds(self._impl.storage, size, stride, off, self.element_size())
    return alias(self, size, stride, off)


def flatten(self, start_dim=0, end_dim=-1):
    n = self.dim()
    start, end = maybe_wrap_dim(start_dim, n), maybe_wrap_dim(end_dim, n)
    if start > end:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if n == 0:
        return reshape(self, (1,))
    if start == end:
        return self
    sizes = list(self._impl.sizes)
    numel = 1
    for s in sizes[start : end + 1]:
        numel *= s
    return reshape(self, sizes[:start] + [numel] + sizes[end + 1 :])


def contiguous(self, memory_format="contiguous_format", copy=False):
    """``self`` if already laid out so, else a copy in row-major (or channels_last) order."""
    ops = _ops or _late_imports()[1]
    fmt = _memory_format(memory_format)
    if not copy and self.is_contiguous(memory_format=fmt):
        return self
    out = ops.empty_like(self, memory_format=fmt)
    ops.copy_(out, self)
    return out


_FORMATS = ("contiguous_format", "channels_last", "preserve_format")


def _memory_format(fmt) -> str:
    if type(fmt) is str and fmt in _FORMATS:  # the common case, with no string to build
        return fmt
    name = getattr(fmt, "__str__", None) and str(fmt).replace("torch.", "")
    if name not in _FORMATS:
        raise RuntimeError(f"unsupported memory format {fmt!r}")
    return name


def is_contiguous(self, memory_format="contiguous_format") -> bool:
    if memory_format == "contiguous_format":
        return self._impl.is_contiguous_  # computed when the sizes and strides were set
    fmt = _memory_format(memory_format)
    if fmt == "channels_last":
        return self._impl.is_channels_last_contiguous()
    return self._impl.is_contiguous_


def getitem(self, key):
    """``x[key]`` for ints, slices with positive steps, ``None`` and ``...`` (basic indexing).

    As ``applySlicing`` in python_variable_indexing.cpp: walk the key left to right keeping
    the dim it applies to; an int selects (the dim goes away), a slice narrows, ``None``
    inserts a size-1 dim, ``...`` skips the dims the rest of the key does not name.
    """
    if not isinstance(key, tuple):
        key = (key,)
    for k in key:
        ok = k is None or k is Ellipsis or isinstance(k, (int, builtins.slice))
        if not ok or isinstance(k, bool):
            raise IndexError(
                "retorch.tensor supports basic indexing only (ints, slices, None, ...); "
                f"got {type(k).__name__}. Use index_select or gather for tensor indices."
            )
    specified = sum(1 for k in key if k is not None and k is not Ellipsis)
    if specified > self.dim():
        raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
    # torch's error names the position in the key (``real_dim`` in applySlicing)
    result, dim = self, 0
    for real_dim, k in enumerate(key):
        if k is Ellipsis:
            dim += self.dim() - specified
        elif k is None:
            result = unsqueeze(result, dim)
            dim += 1
        elif isinstance(k, int):
            size = result._impl.sizes[dim]
            if k < -size or k >= size:
                raise IndexError(
                    f"index {k} is out of bounds for dimension {real_dim} with size {size}"
                )
            result = select(result, dim, k)
        else:
            if k.step == 0:
                raise ValueError("slice step cannot be zero")
            result = slice(result, dim, k.start, k.stop, 1 if k.step is None else k.step)
            dim += 1
    if result is self:
        result = alias(self, self._impl.sizes, self._impl.strides)
    return result

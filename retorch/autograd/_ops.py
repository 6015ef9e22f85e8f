"""The op interface: every computation the autograd engine and its formulas do on raw data.

Nothing else in ``retorch.autograd`` touches the array type. ``Tensor`` (tensor.py), the
derivative formulas (derivatives.py), the engine and gradcheck compute through these
functions only, so a later chapter can swap the array type underneath: reimplement this module
over the rebuilt strided tensor and the engine runs unchanged. By default ``Array`` is
``torch.Tensor`` and most entries are torch's own functions; ``set_array_backend("retorch")``
(backend.py) rebinds every name below to ``_ops_retorch.py``'s, over ``retorch.tensor.Tensor``.

The contract, for arrays ``x`` (every function takes and returns raw arrays, never autograd
Tensors; "like" arrays only give the dtype and device of a new one):

- an ``Array`` has ``.shape`` (a tuple of ints), ``.dtype``, ``.device``, ``.dim()``,
  ``.item()`` and a ``repr``; broadcasting follows NumPy's rules;
- elementwise: ``add sub mul div neg pow exp log tanh sigmoid relu reciprocal gt le eq where``;
- reductions and linear algebra: ``sum mean amax max`` (``max(x, dim, keepdim)`` returns
  values and indices), ``mm mv dot bmm softmax log_softmax nll_loss``;
- shapes: ``view reshape expand permute transpose t unsqueeze squeeze clone index
  index_select contiguous as_strided``, plus ``is_contiguous``, ``strides``, ``geometry``
  and ``view_if_possible``;
- in place (the only mutation, each bumps nothing: versions live in autograd): ``add_ mul_
  zero_ copy_``;
- creation and inspection: ``zeros zeros_like ones_like empty_strided scalar as_array scatter_value
  scatter_into_zeros index_add_zeros numel tolist any_nan type_name``.
"""

from __future__ import annotations

import torch

Array = torch.Tensor

# elementwise
add = torch.add
sub = torch.sub
mul = torch.mul
div = torch.div
neg = torch.neg
pow = torch.pow
exp = torch.exp
log = torch.log
tanh = torch.tanh
sigmoid = torch.sigmoid
relu = torch.relu
reciprocal = torch.reciprocal
gt = torch.gt
le = torch.le
eq = torch.eq
where = torch.where

# reductions and linear algebra
sum = torch.sum
mean = torch.mean
amax = torch.amax
max = torch.max
mm = torch.mm
mv = torch.mv
dot = torch.dot
bmm = torch.bmm
softmax = torch.softmax
log_softmax = torch.log_softmax
nll_loss = torch.nn.functional.nll_loss

# shapes
view = torch.Tensor.view
reshape = torch.reshape
expand = torch.Tensor.expand
permute = torch.permute
transpose = torch.transpose
t = torch.t
unsqueeze = torch.unsqueeze
squeeze = torch.squeeze
clone = torch.clone
index_select = torch.index_select


def index(x: Array, key) -> Array:
    """``x[key]`` for basic indexing (ints and slices): a view."""
    return x[key]


def is_contiguous(x: Array) -> bool:
    return x.is_contiguous()


def strides(x: Array) -> tuple[int, ...]:
    """The step, in elements, between neighbours along each dimension."""
    return tuple(x.stride())


def is_non_overlapping_and_dense(x: Array) -> bool:
    """Every element at its own address, no gaps, in some order of the dims (c10's flag)."""
    from torch._prims_common import is_non_overlapping_and_dense_or_false as dense

    return dense(x)


def geometry(x: Array) -> tuple:
    """``(sizes, strides, storage_offset)``: where ``x``'s elements sit in its storage."""
    return tuple(x.shape), tuple(x.stride()), x.storage_offset()


def as_strided(x: Array, geometry: tuple, base_offset: int = 0) -> Array:
    """The view of ``x``'s storage with ``geometry``, offsets counted from ``base_offset``."""
    sizes, strides, offset = geometry
    return x.as_strided(sizes, strides, offset - base_offset)


def empty_strided(geometry: tuple, like: Array) -> Array:
    """An uninitialised array laid out as ``geometry`` (sizes and strides), offset 0."""
    return torch.empty_strided(geometry[0], geometry[1], dtype=like.dtype, device=like.device)


def copy_(x: Array, src: Array) -> Array:
    """Write ``src`` into ``x`` (broadcast), in place."""
    return x.copy_(src)


def contiguous(x: Array) -> Array:
    """A copy of ``x`` laid out row-major (``x`` itself if it already is)."""
    return x.contiguous()


def view_if_possible(x: Array, shape) -> Array | None:
    """``x`` seen in ``shape`` without a copy, if its strides allow it (ATen's computeStride)."""
    try:
        return x.view(shape)
    except RuntimeError:
        return None


# in place
def add_(x: Array, other: Array, alpha: float = 1) -> Array:
    """``x += alpha * other``."""
    return x.add_(other, alpha=alpha)


def mul_(x: Array, other: Array) -> Array:
    return x.mul_(other)


def zero_(x: Array) -> Array:
    return x.zero_()


# creation and inspection
def zeros(shape, like: Array) -> Array:
    return torch.zeros(shape, dtype=like.dtype, device=like.device)


def zeros_like(x: Array) -> Array:
    return torch.zeros_like(x)


def ones_like(x: Array) -> Array:
    return torch.ones_like(x)


def scalar(value, like: Array) -> Array:
    """A 0-d array holding ``value``, in ``like``'s dtype and device."""
    return torch.as_tensor(value, dtype=like.dtype, device=like.device)


def as_array(value, dtype=None) -> Array:
    """``value`` (an array, a number or nested lists) as an array, in ``dtype`` if given."""
    return torch.as_tensor(value, dtype=dtype)


def scatter_value(shape, like: Array, dim: int, index: Array, value: float) -> Array:
    """Zeros of ``shape`` with ``value`` at ``index`` along ``dim`` (one-hot gradients)."""
    return torch.zeros(shape, dtype=like.dtype, device=like.device).scatter(dim, index, value)


def scatter_into_zeros(shape, like: Array, key, src: Array) -> Array:
    """Zeros of ``shape`` with ``src`` written at ``key`` (the gradient of select and slice)."""
    out = torch.zeros(shape, dtype=like.dtype, device=like.device)
    out[key] = src
    return out


def index_add_zeros(shape, like: Array, dim: int, index: Array, src: Array) -> Array:
    """Zeros of ``shape`` with ``src`` added at ``index`` along ``dim`` (the gradient of indexing)."""
    return torch.zeros(shape, dtype=like.dtype, device=like.device).index_add_(dim, index, src)


def numel(x: Array) -> int:
    return x.numel()


def tolist(x: Array) -> list:
    return x.tolist()


def any_nan(x: Array) -> bool:
    return bool(torch.isnan(x).any())


def type_name(x: Array) -> str:
    """The name torch's error messages use, e.g. ``torch.FloatTensor``."""
    return x.type()

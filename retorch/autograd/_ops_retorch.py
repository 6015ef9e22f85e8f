"""The op interface of ``_ops.py``, implemented over chapter 4's ``retorch.tensor.Tensor``.

Every name of the contract in ``_ops.py`` has its counterpart here, computed by
``retorch.tensor``'s ops (TensorIterator, Numba CPU loops, Numba-CUDA kernels): after
``retorch.autograd.set_array_backend("retorch")`` (``backend.py``) the engine, the derivative
formulas, forward-mode AD and gradcheck run unchanged with no torch kernel underneath.

In torch the same cut is the dispatcher's: an op first hits the Autograd key
(``torch/csrc/autograd/generated/VariableType_*.cpp``: record the node), then redispatches
below it to a backend key (CPU, CUDA, Meta), whose kernels only compute
(``aten/src/ATen/core/dispatch/Dispatcher.h``, the keys of ``c10/core/DispatchKey.h``). This
module is the backend below chapter 3's autograd; ``_ops.py``'s torch functions are the other.

Layering: this module is imported only by ``backend.set_array_backend`` (never at package
import), so ``retorch.autograd`` does not depend on ``retorch.tensor`` until asked to.
"""

from __future__ import annotations

import numpy as np

import retorch.tensor as rt
from retorch.tensor import ops as _o
from retorch.tensor.dtype import from_numpy_dtype

Array = rt.Tensor

# elementwise
add = _o.add
sub = _o.sub
mul = _o.mul
div = _o.div
neg = _o.neg
pow = _o.pow  # noqa: A001
exp = _o.exp
log = _o.log
tanh = _o.tanh
sigmoid = _o.sigmoid
relu = _o.relu
reciprocal = _o.reciprocal
gt = _o.gt
le = _o.le
eq = _o.eq
where = _o.where

# reductions and linear algebra
sum = _o.sum  # noqa: A001
mean = _o.mean
amax = _o.amax
max = _o.max  # noqa: A001
mm = _o.mm
mv = _o.mv
dot = _o.dot
bmm = _o.bmm
softmax = _o.softmax
log_softmax = _o.log_softmax
nll_loss = _o.nll_loss

# shapes
transpose = rt.transpose
t = rt.t
unsqueeze = rt.unsqueeze
clone = _o.clone
index_select = _o.index_select


def view(x: Array, shape) -> Array:
    return x.view(shape)


def reshape(x: Array, shape) -> Array:
    return x.reshape(shape)


def expand(x: Array, sizes) -> Array:
    return x.expand(sizes)


def permute(x: Array, dims) -> Array:
    return x.permute(dims)


def squeeze(x: Array, dim=None) -> Array:
    return x.squeeze(dim)


def index(x: Array, key) -> Array:
    """``x[key]`` for basic indexing (ints and slices): a view."""
    return x[key]


def is_contiguous(x: Array) -> bool:
    return x.is_contiguous()


def strides(x: Array) -> tuple[int, ...]:
    return tuple(x.stride())


def is_non_overlapping_and_dense(x: Array) -> bool:
    return x._impl.is_non_overlapping_and_dense()


def geometry(x: Array) -> tuple:
    """``(sizes, strides, storage_offset)``: where ``x``'s elements sit in its storage."""
    return tuple(x.shape), tuple(x.stride()), x.storage_offset()


def as_strided(x: Array, geometry: tuple, base_offset: int = 0) -> Array:
    sizes, strides, offset = geometry
    return x.as_strided(sizes, strides, offset - base_offset)


def empty_strided(geometry: tuple, like: Array) -> Array:
    return rt.empty_strided(geometry[0], geometry[1], like.dtype, like.device)


def copy_(x: Array, src: Array) -> Array:
    return _o.copy_(x, src)


def contiguous(x: Array) -> Array:
    return x.contiguous()


def view_if_possible(x: Array, shape) -> Array | None:
    """``x`` seen in ``shape`` without a copy, if its strides allow it (ATen's computeStride)."""
    try:
        return x.view(shape)
    except RuntimeError:
        return None


# in place
def add_(x: Array, other: Array, alpha: float = 1) -> Array:
    return _o.add_(x, other, alpha=alpha)


def mul_(x: Array, other: Array) -> Array:
    return _o.mul_(x, other)


def zero_(x: Array) -> Array:
    return _o.zero_(x)


# creation and inspection
def zeros(shape, like: Array) -> Array:
    return rt.zeros(tuple(shape), dtype=like.dtype, device=like.device)


def zeros_like(x: Array) -> Array:
    return rt.zeros_like(x)


def ones_like(x: Array) -> Array:
    return rt.ones_like(x)


def scalar(value, like: Array) -> Array:
    """A 0-d array holding ``value``, in ``like``'s dtype and device."""
    return rt.scalar_tensor(value, dtype=like.dtype, device=like.device)


def _host_values(value):
    """An object from outside retorch (a torch tensor, say) as NumPy values, read once."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch.Tensor, duck-typed
        return value.detach().cpu().numpy()
    return value


def as_array(value, dtype=None) -> Array:
    """``value`` as a ``retorch.tensor.Tensor`` (as ``torch.as_tensor``): a tensor is returned
    as is (converted to ``dtype`` if given), a NumPy array shares its memory where it can,
    anything else (numbers, nested lists, a torch tensor's values) is copied in."""
    if isinstance(value, rt.Tensor):
        return value if dtype is None else value.to(dtype=dtype)
    value = _host_values(value)
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        arr = rt.from_numpy(value) if _shareable(value) else rt.tensor(value)
        return arr if dtype is None else arr.to(dtype=dtype)
    return rt.tensor(value, dtype=dtype)


def _shareable(arr: np.ndarray) -> bool:
    try:
        from_numpy_dtype(arr.dtype)
    except TypeError:
        return False
    return all(s >= 0 and s % arr.itemsize == 0 for s in arr.strides)


def scatter_value(shape, like: Array, dim: int, index: Array, value: float) -> Array:
    """Zeros of ``shape`` with ``value`` at ``index`` along ``dim`` (one-hot gradients)."""
    return _o.scatter_(zeros(shape, like), dim, index, value)


def scatter_into_zeros(shape, like: Array, key, src: Array) -> Array:
    """Zeros of ``shape`` with ``src`` written at ``key`` (the gradient of select and slice)."""
    out = zeros(shape, like)
    out[key] = src
    return out


def index_add_zeros(shape, like: Array, dim: int, index: Array, src: Array) -> Array:
    """Zeros of ``shape`` with ``src`` added at ``index`` along ``dim``."""
    return _o.index_add_(zeros(shape, like), dim, index, src)


def numel(x: Array) -> int:
    return x.numel()


def tolist(x: Array) -> list:
    return x.tolist()


def any_nan(x: Array) -> bool:
    return bool(_o.any(_o.isnan(x)))


def type_name(x: Array) -> str:
    """The name torch's error messages use, e.g. ``torch.FloatTensor``."""
    return x.type()

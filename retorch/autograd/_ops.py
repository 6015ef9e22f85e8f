"""The op interface: every computation the autograd engine and its formulas do on raw data.

The engine never calls torch directly. ``Tensor`` (tensor.py) and the derivative formulas
(derivatives.py) compute through this module's small set of primitives, so that a later
chapter can swap the array type underneath: replace these functions with ones over the
rebuilt strided tensor, and the engine runs unchanged. Today the array type is ``torch.Tensor``.

Every function takes and returns raw arrays (never autograd Tensors).
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
eq = torch.eq
where = torch.where
isnan = torch.isnan

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
gather = torch.gather

# shapes
expand = torch.Tensor.expand
view = torch.Tensor.view
reshape = torch.reshape
permute = torch.permute
transpose = torch.transpose
unsqueeze = torch.unsqueeze
squeeze = torch.squeeze
clone = torch.clone
select = torch.select
narrow = torch.narrow
index_select = torch.index_select


def sum_to(x: Array, shape: tuple[int, ...]) -> Array:
    """Sum ``x`` down to ``shape`` (reverse broadcasting), as ``at::sum_to`` does."""
    if tuple(x.shape) == tuple(shape):
        return x
    lead = x.dim() - len(shape)
    dims = list(range(lead)) + [
        lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1
    ]
    out = x.sum(dim=dims, keepdim=True) if dims else x
    return out.view(shape) if lead else out


def zeros(shape, like: Array) -> Array:
    return torch.zeros(shape, dtype=like.dtype, device=like.device)


def ones_like(x: Array) -> Array:
    return torch.ones_like(x)


def zeros_like(x: Array) -> Array:
    return torch.zeros_like(x)


def scalar(value, like: Array) -> Array:
    return torch.as_tensor(value, dtype=like.dtype, device=like.device)


def as_array(value) -> Array:
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)


def index_add_zeros(shape, like: Array, dim: int, index: Array, src: Array) -> Array:
    """Zeros of ``shape`` with ``src`` added at ``index`` along ``dim`` (the gradient of indexing)."""
    return torch.zeros(shape, dtype=like.dtype, device=like.device).index_add_(dim, index, src)


def scatter_into_zeros(shape, like: Array, key, src: Array) -> Array:
    """Zeros of ``shape`` with ``src`` written at ``key`` (the gradient of select and slice)."""
    out = torch.zeros(shape, dtype=like.dtype, device=like.device)
    out[key] = src
    return out


def any_nan(x: Array) -> bool:
    return bool(torch.isnan(x).any())


def is_contiguous(x: Array) -> bool:
    return x.is_contiguous()


def scatter_value(shape, like: Array, dim: int, index: Array, value: float) -> Array:
    """Zeros of ``shape`` with ``value`` at ``index`` along ``dim`` (one-hot gradients)."""
    return torch.zeros(shape, dtype=like.dtype, device=like.device).scatter(dim, index, value)


def numel(x: Array) -> int:
    return x.numel()


def type_name(x: Array) -> str:
    """The name torch's error messages use, e.g. ``torch.FloatTensor``."""
    return x.type()

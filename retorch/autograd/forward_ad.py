"""Forward-mode AD with dual tensors. Mirrors torch/autograd/forward_ad.py (the Python API) and,
for the formulas, the forward-derivative (``result:``) entries of tools/autograd/derivatives.yaml.

Reverse mode gives vector-Jacobian products, one backward pass per output; forward mode gives
Jacobian-vector products, one forward pass per input direction. Inside ``dual_level()``,
``make_dual(primal, tangent)`` returns a tensor that carries ``tangent``; every op then computes
its output's tangent from its inputs' tangents with a forward formula (``JVP_FORMULAS``), and
``unpack_dual`` reads it. As in torch, one level is active at a time, and leaving it drops
every tangent made in it.

Tangents are raw arrays and the formulas compute on them through ``_ops``: forward-over-reverse
(a tangent that itself requires grad) is not rebuilt.
"""

from __future__ import annotations

import itertools
from typing import Callable, NamedTuple

from . import _ops

#: The active level (None outside ``dual_level``); a tangent is tagged with the level it was
#: made at and is invisible at any other.
_current_level: int | None = None
_levels = itertools.count()


class dual_level:
    """``with dual_level():`` — the scope in which dual tensors exist (torch's dual_level)."""

    def __enter__(self) -> int:
        global _current_level
        if _current_level is not None:
            raise RuntimeError("Nested forward mode AD is not supported at the moment")
        _current_level = next(_levels)
        return _current_level

    def __exit__(self, *exc) -> None:
        global _current_level
        _current_level = None


class UnpackedDualTensor(NamedTuple):
    primal: object
    tangent: object


def make_dual(tensor, tangent, *, level: int | None = None):
    """A tensor with the value of ``tensor`` that carries ``tangent`` (its directional
    derivative) at the current level."""
    from .tensor import Tensor

    level = _current_level if level is None else level
    if level is None:
        raise RuntimeError(
            "Trying to create a dual Tensor for forward AD but no level exists, make sure to "
            "enter_dual_level() first."
        )
    tangent = tangent.data if isinstance(tangent, Tensor) else tangent
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise RuntimeError(
            "Trying to set a forward gradient that has a different size than that of the "
            f"original Tensor, this is not supported. Tensor is of size {list(tensor.shape)} "
            f"while the given forward gradient is of size {list(tangent.shape)}."
        )
    dual = tensor.view(*tensor.shape) if tensor.requires_grad else tensor.detach()
    dual._fw_grad = (level, tangent)
    return dual


def tangent_of(tensor):
    """The tangent ``tensor`` carries at the active level, or None."""
    fw = tensor._fw_grad
    return fw[1] if fw is not None and fw[0] == _current_level else None


def unpack_dual(tensor, *, level: int | None = None) -> UnpackedDualTensor:
    """``(primal, tangent)``: the value without its tangent, and the tangent (or None)."""
    from .tensor import Tensor

    if level is not None and level != _current_level:
        return UnpackedDualTensor(tensor, None)
    tangent = tangent_of(tensor)
    return UnpackedDualTensor(tensor.detach(), None if tangent is None else Tensor(tangent))


def propagate(op: str, inputs: tuple, out, attrs: dict) -> None:
    """Give ``out`` its tangent if any input has one (what each op's forward formula does)."""
    tangents = [tangent_of(t) for t in inputs]
    if all(t is None for t in tangents):
        return
    formula = JVP_FORMULAS.get(op)
    if formula is None:
        raise NotImplementedError(
            f"Trying to use forward AD with {op} that does not support it: retorch has no "
            "forward formula for it (JVP_FORMULAS in retorch/autograd/forward_ad.py)."
        )
    x = [t.data for t in inputs]
    # A missing tangent is a zero one: each formula is linear in the tangents.
    t = [_ops.zeros_like(d) if tan is None else tan for d, tan in zip(x, tangents)]
    out._fw_grad = (_current_level, formula(x, t, out.data, attrs))


def _linear(fn: Callable) -> Callable:
    """The formula of an op that is linear in its one input: the same op on the tangent."""
    return lambda x, t, y, a: fn(t[0], y, a)


def _reshaped(t, y, a):
    return _ops.reshape(t, tuple(y.shape))


JVP_FORMULAS: dict[str, Callable] = {
    "add": lambda x, t, y, a: _ops.add(t[0], t[1], alpha=a.get("alpha", 1)),
    "sub": lambda x, t, y, a: _ops.sub(t[0], t[1], alpha=a.get("alpha", 1)),
    "rsub": lambda x, t, y, a: _ops.neg(t[0]),
    "neg": lambda x, t, y, a: _ops.neg(t[0]),
    "mul": lambda x, t, y, a: t[0] * x[1] + x[0] * t[1],
    "div": lambda x, t, y, a: (t[0] - y * t[1]) / x[1],
    "exp": lambda x, t, y, a: t[0] * y,
    "log": lambda x, t, y, a: t[0] / x[0],
    "tanh": lambda x, t, y, a: t[0] * (1 - y * y),
    "sigmoid": lambda x, t, y, a: t[0] * y * (1 - y),
    "relu": lambda x, t, y, a: _ops.where(_ops.gt(y, 0), t[0], _ops.zeros_like(t[0])),
    "reciprocal": lambda x, t, y, a: -t[0] * y * y,
    "pow_scalar": lambda x, t, y, a: t[0] * a["exponent"] * x[0] ** (a["exponent"] - 1),
    "clone": lambda x, t, y, a: t[0],
    "sum": _linear(lambda t, y, a: _ops.sum(t)),
    "sum_dim": _linear(lambda t, y, a: _ops.sum(t, dim=a["dim"] or None, keepdim=a["keepdim"])),
    "mean": _linear(lambda t, y, a: _ops.mean(t)),
    "mean_dim": _linear(lambda t, y, a: _ops.mean(t, dim=a["dim"] or None, keepdim=a["keepdim"])),
    "view": _linear(_reshaped),
    "unsafe_view": _linear(_reshaped),
    "reshape_alias": _linear(_reshaped),
    "squeeze": _linear(_reshaped),
    "squeeze_dim": _linear(_reshaped),
    "squeeze_inplace": _linear(_reshaped),
    "unsqueeze": _linear(lambda t, y, a: _ops.unsqueeze(t, a["dim"])),
    "expand": _linear(lambda t, y, a: _ops.expand(t, tuple(y.shape))),
    "transpose": _linear(lambda t, y, a: _ops.transpose(t, a["dim0"], a["dim1"])),
    "t": _linear(lambda t, y, a: _ops.t(t)),
    "permute": _linear(lambda t, y, a: _ops.permute(t, a["dims"])),
    "select": _linear(lambda t, y, a: _ops.index(t, a["key"])),
    "slice": _linear(lambda t, y, a: _ops.index(t, a["key"])),
    "mm": lambda x, t, y, a: _ops.mm(t[0], x[1]) + _ops.mm(x[0], t[1]),
    "mv": lambda x, t, y, a: _ops.mv(t[0], x[1]) + _ops.mv(x[0], t[1]),
    "dot": lambda x, t, y, a: _ops.dot(t[0], x[1]) + _ops.dot(x[0], t[1]),
    "bmm": lambda x, t, y, a: _ops.bmm(t[0], x[1]) + _ops.bmm(x[0], t[1]),
    "softmax": lambda x, t, y, a: y * (t[0] - _ops.sum(y * t[0], dim=a["dim"], keepdim=True)),
    "log_softmax": lambda x, t, y, a: (
        t[0] - _ops.sum(_ops.exp(y) * t[0], dim=a["dim"], keepdim=True)
    ),
}

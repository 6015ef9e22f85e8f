"""Sharding propagation for pointwise ops and ``sum``: the output placement torch gives.

Mirrors three torch files:

- torch/distributed/tensor/_ops/_pointwise_ops.py: a pointwise op's *single-dim strategies*,
  one list ``[output, *inputs]`` per rule for ONE mesh dim: all-Replicate; for each output
  dim d, every input sharded on the dim that broadcasts to d (or Replicate where it was
  broadcast); plus the op's Partial rules (add/sub: P+P -> P, P(avg)+R -> P(avg); mul:
  P*R -> P, and P*scalar -> P for sum/avg; relu: P(max)/P(min) kept, monotone; neg:
  P(max) -> P(min); gelu: none, so a Partial input is reduced first);
- torch/distributed/tensor/_ops/single_dim_strategy.py: the Shard rules exist only when some
  input is sharded (``_fill_single_dim_strategy_placeholders``); the rules are combined over
  the mesh dims (``_expand_single_dim_strategy_to_mesh``; the file's Dijkstra search is not
  called in 2.13) and torch/distributed/tensor/_sharding_prop.py's ``_select_min_cost_strategy``
  picks one by the cost of the redistributions it needs (``_ops.redistribute_cost``);
- torch/distributed/tensor/_ops/_math_ops.py: ``sum`` follows its input; a dim sharded and
  reduced becomes Partial("sum"); a Partial of another reduce op (avg, max) is reduced first,
  and so are the shards on the reduced dims (``common_reduction_strategy``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._api import DTensor
from ._ops import _expand, _select, _spec
from .placement_types import Partial, Replicate

__all__ = ["add", "div", "gelu", "mul", "neg", "relu", "sub", "sum"]

# ---- the Partial rules of _pointwise_ops.py ([output, *inputs], one mesh dim) -------------

_UNARY_LINEAR = [[Partial("sum"), Partial("sum")], [Partial("avg"), Partial("avg")]]
_BINARY_ADDITIVE = [
    [Partial("sum"), Partial("sum"), Partial("sum")],
    [Partial("avg"), Partial("avg"), Partial("avg")],
    [Partial("avg"), Partial("avg"), Replicate()],  # P(x) + R stays P(x), but not for sum
    [Partial("max"), Partial("max"), Replicate()],
    [Partial("min"), Partial("min"), Replicate()],
    [Partial("avg"), Replicate(), Partial("avg")],
]
_MUL = _UNARY_LINEAR + [
    [Partial("sum"), Partial("sum"), Replicate()],
    [Partial("avg"), Partial("avg"), Replicate()],
    [Partial("sum"), Replicate(), Partial("sum")],
    [Partial("avg"), Replicate(), Partial("avg")],
]
_DIV = _UNARY_LINEAR + [
    [Partial("sum"), Partial("sum"), Replicate()],
    [Partial("avg"), Partial("avg"), Replicate()],
]
_NON_DECREASING = [[Partial("max"), Partial("max")], [Partial("min"), Partial("min")]]
_NEG = _UNARY_LINEAR + [[Partial("min"), Partial("max")], [Partial("max"), Partial("min")]]


def _pointwise_rules(shapes, extra) -> list[list]:
    """``_common_pointwise_single_dim_strategy``: one Shard rule per output dim (("S", d) is
    torch's ``_ShardingPlaceholder(d)``), then the Partial rules that fit the tensor count."""
    out_shape = torch.broadcast_shapes(*shapes)
    rules = []
    for i in range(len(out_shape)):
        rule = [("S", i)]
        for shape in shapes:  # infer_broadcast_dims_map: output dim i is input dim j
            j = i - (len(out_shape) - len(shape))
            rule.append(("S", j) if j >= 0 and shape[j] == out_shape[i] else Replicate())
        rules.append(rule)
    rules += [r for r in extra if len(r) == 1 + len(shapes)]
    return rules


# ---- the ops -------------------------------------------------------------------------------


def _pointwise(fn, args, extra) -> DTensor:
    """Propagate, redistribute the DTensor arguments, run ``fn`` on the pieces."""
    inputs = [a for a in args if isinstance(a, DTensor)]
    if any(isinstance(a, torch.Tensor) for a in args):
        raise RuntimeError(
            "aten op got mixed torch.Tensor and DTensor, need to convert all torch.Tensor "
            "to DTensor before calling distributed operators!"
        )
    if any(x.device_mesh != inputs[0].device_mesh for x in inputs):
        raise ValueError("Cannot run a pointwise op on inputs with different meshes")
    shapes = [tuple(x.shape) for x in inputs]
    rules = _expand(_pointwise_rules(shapes, extra), inputs)
    out, wanted = _select(inputs, rules)
    moved = iter([x._redistribute(w) for x, w in zip(inputs, wanted, strict=True)])
    local = fn(*[next(moved).to_local() if isinstance(a, DTensor) else a for a in args])
    return DTensor(local, _spec(inputs[0], out, torch.broadcast_shapes(*shapes)))


def add(a, b) -> DTensor:
    return _pointwise(torch.add, (a, b), _BINARY_ADDITIVE)


def sub(a, b) -> DTensor:
    return _pointwise(torch.sub, (a, b), _BINARY_ADDITIVE)


def mul(a, b) -> DTensor:
    return _pointwise(torch.mul, (a, b), _MUL)


def div(a, b) -> DTensor:
    return _pointwise(torch.div, (a, b), _DIV)


def neg(a: DTensor) -> DTensor:
    return _pointwise(torch.neg, (a,), _NEG)


def relu(a: DTensor) -> DTensor:
    return _pointwise(torch.relu, (a,), _NON_DECREASING)


def gelu(a: DTensor) -> DTensor:
    return _pointwise(F.gelu, (a,), [])


def sum(x: DTensor, dim=None, keepdim: bool = False) -> DTensor:  # noqa: A001 - torch's name
    """``linear_reduction_strategy`` and ``common_reduction_strategy`` for ``sum``."""
    ndim = x.ndim
    if dim is None:
        dims = list(range(ndim))
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        for d in dims:  # torch's DTensor reports it from sharding propagation: RuntimeError
            if not -max(ndim, 1) <= d < max(ndim, 1):
                raise RuntimeError(
                    f"Dimension out of range (expected to be in range of "
                    f"[{-max(ndim, 1)}, {max(ndim, 1) - 1}], but got {d})"
                )
        dims = sorted({d % ndim for d in dims})
    placements = list(x.placements)
    if any(p.is_partial() and not p.is_partial("sum") for p in placements):  # not linear
        placements = [Replicate() if p.is_partial() or (p.is_shard() and p.dim in dims)
                      else p for p in placements]  # fmt: skip
        x = x._redistribute(placements)
    new_dim = {}  # _infer_reduce_dims_map: input dim -> output dim, or dropped
    for d in range(ndim):
        if keepdim or d not in dims:
            new_dim[d] = len(new_dim)
    out = [Partial("sum") if p.is_shard() and p.dim in dims
           else p.__class__(new_dim[p.dim], **p._cut()) if p.is_shard() else p
           for p in placements]  # fmt: skip
    local = x.to_local().sum(dim=dims, keepdim=keepdim) if dims else x.to_local().clone()
    shape = [1 if d in dims else s for d, s in enumerate(x.shape) if keepdim or d not in dims]
    return DTensor(local, _spec(x, out, shape))

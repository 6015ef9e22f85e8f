"""Reductions by max and min: the sharding propagation that makes ``Partial("max")``.

Mirrors torch/distributed/tensor/_ops/_math_ops.py:

- ``amax``, ``amin``, ``max()``, ``min()`` are in torch's ``LINEAR_REDUCTION_OP_MAP`` (as
  ``aten.amax.default: "max"``...): ``linear_reduction_strategy`` calls
  ``common_reduction_strategy`` with ``reduction_linear=True``, so the input keeps its
  placements (no message), except a Partial of another reduce op (a pending sum cannot wait
  behind a max), which ``replicate_reduction_dims`` turns to Replicate with the shards on the
  reduced dims; then ``map_placements_after_reduction``: a dim sharded and reduced becomes
  ``Partial("max")`` (``get_placement_from_reduction_op``), a dim kept stays Shard (renumbered),
  Replicate and Partial stay. So ``x.amax(0)`` of a Shard(0) tensor sends nothing: each rank
  holds the max of its rows; ``full_tensor()`` all-reduces by MAX, ``redistribute`` to
  Shard reduce-scatters by MAX (``reduce_ops.py``).
- ``max(dim)`` and ``min(dim)`` also return indices, local to each piece, which no max over
  ranks can combine: ``max_min_dim_single_dim_strategy`` shards only the dims kept, so a
  sharded reduced dim is gathered first (all-gather) and the output is Replicate there.

Where a rank's piece is empty (5 rows on 4 ranks: the fourth has none), torch's DTensor runs
the local ``amax`` on it and that rank raises (IndexError for ``amax(0)``, RuntimeError for
``max()``), as ``torch.amax`` of an empty tensor does; so does this rebuild.
"""

from __future__ import annotations

from collections import namedtuple

import torch

from ._api import DTensor
from ._ops import _expand, _select, _spec
from ._strided_shard import _StridedShard
from .placement_types import Partial, Placement, Replicate, Shard

__all__ = [
    "amax",
    "amin",
    "common_reduction_strategy",
    "map_placements_after_reduction",
    "max",
    "min",
    "replicate_reduction_dims",
]

#: what ``max(dim)`` returns (torch: ``torch.return_types.max``)
MaxMin = namedtuple("MaxMin", ["values", "indices"])


def _reduction_dims(ndim: int, dim) -> list[int]:
    """``_infer_reduction_dims``: ``None`` or ``()`` reduces every dim; torch's DTensor reports
    a dim out of range from sharding propagation, as a RuntimeError."""
    if dim is None or (not isinstance(dim, int) and len(dim) == 0):
        return list(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    bound = builtins_max(ndim, 1)
    for d in dims:
        if not -bound <= d < bound:
            raise RuntimeError(
                f"Dimension out of range (expected to be in range of [{-bound}, {bound - 1}], "
                f"but got {d})"
            )
    return sorted({d % bound for d in dims})


def builtins_max(a: int, b: int) -> int:  # this module's ``max`` is the DTensor op
    return a if a >= b else b


def replicate_reduction_dims(placements, reduction_dims) -> tuple[Placement, ...]:
    """Every Partial, and every Shard on a reduced dim, to Replicate."""
    return tuple(
        Replicate() if p.is_partial() or (p.is_shard() and p.dim in reduction_dims) else p
        for p in placements
    )


def map_placements_after_reduction(placements, reduction_dims, reduction_dims_map,
                                   reduction_op: str) -> tuple[Placement, ...]:  # fmt: skip
    """The output's placements: a reduced Shard dim -> ``Partial(reduction_op)``, a kept one
    -> Shard of its new index (``reduction_dims_map``: -1 where the dim is gone), a kept
    ``_StridedShard`` -> the same cut of its new index."""
    out = []
    for p in placements:
        if not p.is_shard():
            out.append(p)
        elif reduction_dims_map[p.dim] == -1 or p.dim in reduction_dims:
            out.append(Partial(reduction_op))
        elif isinstance(p, _StridedShard):  # the same cut, on the dim's new index
            out.append(_StridedShard(reduction_dims_map[p.dim], split_factor=p.split_factor))
        else:
            out.append(Shard(reduction_dims_map[p.dim]))
    return tuple(out)


def _infer_reduce_dims_map(reduction_dims, ndim: int, keep_dim: bool) -> list[int]:
    """Input dim -> output dim, -1 for a dim dropped."""
    out, next_dim = [], 0
    for d in range(ndim):
        if d in reduction_dims and not keep_dim:
            out.append(-1)
        else:
            out.append(next_dim)
            next_dim += 1
    return out


def common_reduction_strategy(placements, reduce_dims, ndim: int, keep_dim: bool = False,
                              reduction_linear: bool = True, reduction_op: str = "sum"):  # fmt: skip
    """(input placements wanted, output placements) for a reduction of an input lying as
    ``placements``; a Partial of another reduce op makes the reduction non-linear."""
    if any(p.is_partial() and p.reduce_op != reduction_op for p in placements):
        reduction_linear = False
    wanted = tuple(placements)
    if not reduction_linear:
        wanted = replicate_reduction_dims(wanted, reduce_dims)
    dims_map = _infer_reduce_dims_map(reduce_dims, ndim, keep_dim)
    return wanted, map_placements_after_reduction(wanted, reduce_dims, dims_map, reduction_op)


def _linear_reduction(x: DTensor, local_fn, reduction_op: str, dim, keepdim: bool) -> DTensor:
    """``linear_reduction_strategy``: propagate, redistribute if a pending reduction of
    another op must go first, reduce the piece."""
    dims = _reduction_dims(x.ndim, dim)
    wanted, out = common_reduction_strategy(x.placements, dims, x.ndim, keepdim,
                                            reduction_linear=True, reduction_op=reduction_op)  # fmt: skip
    x = x._redistribute(wanted)
    local = x.to_local()
    # the local op gets the dims as the caller wrote them (its error on an empty piece names
    # them so, as torch's does)
    local = local_fn(local, dims if dim is None else dim, keepdim) if local.ndim else local.clone()
    shape = [1 if d in dims else s for d, s in enumerate(x.shape) if keepdim or d not in dims]
    return DTensor(local, _spec(x, out, shape))


def amax(x: DTensor, dim=(), keepdim: bool = False) -> DTensor:
    """``torch.amax`` of a DTensor: a sharded dim reduced gives ``Partial("max")``."""
    return _linear_reduction(x, lambda t, d, k: torch.amax(t, d, k), "max", dim, keepdim)


def amin(x: DTensor, dim=(), keepdim: bool = False) -> DTensor:
    """``torch.amin`` of a DTensor: a sharded dim reduced gives ``Partial("min")``."""
    return _linear_reduction(x, lambda t, d, k: torch.amin(t, d, k), "min", dim, keepdim)


def _full(x: DTensor, fn, reduction_op: str) -> DTensor:
    """``aten.max.default``: every dim reduced; the local op raises on an empty piece."""
    return _linear_reduction(x, lambda t, d, k: fn(t), reduction_op, None, False)


def _max_min_dim(x: DTensor, dim: int, keepdim: bool, fn) -> MaxMin:
    """``max_min_dim_single_dim_strategy``: shard only the dims kept (one rule per kept dim,
    values and indices alike), besides all-Replicate; the cheapest is chosen."""
    (d_red,) = _reduction_dims(x.ndim, dim)
    rules = []
    for d in range(x.ndim):
        if d != d_red:
            out_d = d if keepdim or d < d_red else d - 1
            rules.append([("S", out_d), ("S", d)])
    out, (want,) = _select([x], _expand(rules, [x]))
    x = x._redistribute(want)
    values, indices = fn(x.to_local(), d_red, keepdim)
    shape = [1 if d == d_red else s for d, s in enumerate(x.shape) if keepdim or d != d_red]
    return MaxMin(DTensor(values, _spec(x, out, shape)),
                  DTensor(indices, _spec(x, out, shape)))  # fmt: skip


def max(x: DTensor, dim: int | None = None, keepdim: bool = False):  # noqa: A001 - torch's name
    """``x.max()``: a ``Partial("max")`` where sharded; ``x.max(dim)``: (values, indices)."""
    if dim is None:
        return _full(x, torch.max, "max")
    return _max_min_dim(x, dim, keepdim, torch.max)


def min(x: DTensor, dim: int | None = None, keepdim: bool = False):  # noqa: A001 - torch's name
    """``x.min()``: a ``Partial("min")`` where sharded; ``x.min(dim)``: (values, indices)."""
    if dim is None:
        return _full(x, torch.min, "min")
    return _max_min_dim(x, dim, keepdim, torch.min)

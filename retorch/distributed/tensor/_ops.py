"""Sharding propagation: which placements an op's inputs must have, and its output's.

Mirrors torch/distributed/tensor/_sharding_prop.py and the strategies of
torch/distributed/tensor/_ops/ (``_matrix_ops.py``'s ``gen_single_dim_einsum_strategies`` for
``mm``, ``_pointwise_ops.py``, ``_math_ops.py``'s reductions, ``_tensor_ops.py``'s views):

- an op lists *strategies*: for one mesh dimension, an output placement and the input
  placements that produce it (for ``mm`` "mk,kn->mn": all Replicate; both inputs sharded on
  k -> Partial; A sharded on m -> Shard(0); B sharded on n -> Shard(1); one input Partial,
  the other Replicate -> Partial); the Shard rules only when some input is sharded
  (``single_dim_strategy.py``: with none, mm of two Partial/Replicate inputs never shards
  them); a mesh of n dims takes every combination;
- each strategy costs the redistributions its inputs need (``redistribute_cost``: torch's
  cost model of all-gather, all-reduce and reduce-scatter in microseconds, from the bytes and
  the mesh, in ``_collective_utils.py``); ``_select`` picks as ``_select_min_cost_strategy``:
  one that moves nothing, else the first free one, else the cheapest, the first on a tie;
- the inputs are redistributed (each collective counted) and the op runs on the pieces.

The pointwise ops (relu among them) and ``sum`` are in ``_pointwise_ops.py``.
"""

from __future__ import annotations

import itertools
import math

import torch

from ._api import DTensor, DTensorSpec
from ._redistribute import transform_infos
from .placement_types import Partial, Placement, Replicate, Shard

__all__ = ["mm", "redistribute_cost"]


# ---- torch's cost model (torch/distributed/tensor/_collective_utils.py) -----------------------


def _mesh_topo(mesh) -> tuple[list[int], list[float], list[float]]:
    """``MeshTopoInfo.build_from_mesh``: devices, bandwidth (GB/s) and latency (us) per mesh
    dim; a dim that reaches past one host's devices is slower (on CPU a host has 1 device)."""
    per_host = torch.cpu.device_count() if mesh.device_type == "cpu" else 8
    devices, bandwidth, latency, total = [1] * mesh.ndim, [87.7] * mesh.ndim, [0.6] * mesh.ndim, 1
    for d in reversed(range(mesh.ndim)):
        devices[d] = mesh.size(d)
        total *= mesh.size(d)
        if total > per_host:
            bandwidth[d] *= 0.22
            latency[d] = 2.7
    return devices, bandwidth, latency


def _collective_cost(hops_per_device: int, gb: float, topo, d: int) -> float:
    devices, bandwidth, latency = topo
    hops = hops_per_device * (devices[d] - 1)
    return 6.6 + hops * latency[d] + gb * hops / devices[d] / bandwidth[d] * 1e6


def redistribute_cost(spec: DTensorSpec, placements) -> float:
    """Microseconds torch's model gives the redistribution from ``spec`` to ``placements``."""
    if all(p.is_replicate() for p in spec.placements) or tuple(placements) == spec.placements:
        return 0.0
    topo = _mesh_topo(spec.mesh)
    gb = spec.dtype.itemsize * math.prod(spec.shape) / spec.num_shards / 1024**3
    cost = 0.0
    for info in transform_infos(spec, placements):
        cur, tgt = info.src_dst_placements
        d, n = info.mesh_dim, topo[0][info.mesh_dim]
        if cur.is_shard() and tgt.is_replicate():
            gb *= n
            cost += _collective_cost(1, gb, topo, d)
        elif cur.is_shard() and tgt.is_shard():
            cost += _collective_cost(1, gb, topo, d) + 1.0
        elif cur.is_partial() and tgt.is_replicate():
            cost += _collective_cost(2, gb, topo, d)
        elif cur.is_partial() and tgt.is_shard():
            cost += _collective_cost(1, gb, topo, d)
            gb /= n
        elif tgt.is_partial() and not cur.is_replicate():
            return float("inf")
        elif cur.is_replicate() and tgt.is_shard():
            gb /= n
    return cost


# ---- strategies ----------------------------------------------------------------------------


def _mm_single_dim() -> list[tuple[Placement, Placement, Placement]]:
    """(output, A, B) per mesh dim for "mk,kn->mn", in torch's order (all-Replicate first)."""
    R = Replicate()
    return [
        (R, R, R),
        (Partial(), Shard(1), Shard(0)),  # k sharded in both: partial sums
        (Shard(0), Shard(0), R),  # m: rows of A
        (Shard(1), R, Shard(1)),  # n: columns of B
        (Partial("sum"), Partial("sum"), R),  # linear in each input
        (Partial("sum"), R, Partial("sum")),
        (Partial("avg"), Partial("avg"), R),
        (Partial("avg"), R, Partial("avg")),
    ]


def _shardable(shape, placements, mesh) -> bool:
    """``is_tensor_shardable``: every tensor dim at least as long as the pieces it is cut in."""
    shards = [1] * len(shape)
    for i, p in enumerate(placements):
        if p.is_shard():
            if p.dim >= len(shape):
                return False
            shards[p.dim] *= mesh.size(i)
            if shape[p.dim] < shards[p.dim]:
                return False
    return True


def _expand(rules, inputs: list[DTensor]) -> list[list[Placement]]:
    """All-Replicate first (``_insert_single_dim_replication_strategy``); the Shard rules
    only if some input has a Shard placement, once per kind of shard the inputs have (Shard,
    ``_StridedShard`` of each split factor: ``_fill_single_dim_strategy_placeholders``)."""
    n = 1 + len(inputs)
    if not any(all(p == Replicate() for p in r) for r in rules):
        rules = [[Replicate()] * n] + rules
    kinds = {}  # each kind of shard among the inputs: Shard, or a _StridedShard of one factor
    for p in (p for x in inputs for p in x.placements if p.is_shard()):
        kinds.setdefault(getattr(p, "split_factor", None), p)
    out = []
    for r in rules:
        if any(isinstance(p, tuple) for p in r):
            for kind in kinds.values():  # (torch's _fill_single_dim_strategy_placeholders)
                out.append([kind.__class__(p[1], **kind._cut()) if isinstance(p, tuple) else p
                            for p in r])  # fmt: skip
        else:
            out.append(list(r))
    return out


def _mixed_partial(placements) -> bool:
    """A placement list with Partials of two reduce ops (other than sum with avg): skipped."""
    ops = {p.reduce_op for p in placements if p.is_partial()}
    return len(ops) > 1 and ops != {"sum", "avg"}


def _select(inputs: list[DTensor], rules, uneven: bool = True):
    """(output placements, input placements): every combination of the rules over the mesh
    dims (``expand_to_full_mesh_op_strategy``), less the inputs not shardable so (a layout
    already held may be uneven) and the mixed Partials; then ``_select_min_cost_strategy``:
    the last strategy that moves nothing, else the first that costs 0 (Replicate -> Shard or
    -> Partial is local), else the first of least cost (``redistribute_cost``)."""
    mesh = inputs[0].device_mesh
    kept, costs = [], []
    for combo in itertools.product(rules, repeat=mesh.ndim):
        specs = [[r[i] for r in combo] for i in range(1 + len(inputs))]
        if any(_mixed_partial(s) for s in specs):
            continue
        if not all(_shardable(x.shape, s, mesh) or (uneven and tuple(s) == x.placements)
                   for x, s in zip(inputs, specs[1:], strict=True)):  # fmt: skip
            continue
        kept.append(specs)
        costs.append(sum(redistribute_cost(x._spec, s)
                         for x, s in zip(inputs, specs[1:], strict=True)))  # fmt: skip
    if not kept:
        raise RuntimeError("no sharding strategy fits the inputs")
    still = [
        i
        for i, s in enumerate(kept)
        if all(tuple(w) == x.placements for x, w in zip(inputs, s[1:], strict=True))
    ]
    free = [i for i, c in enumerate(costs) if c == 0]
    best = still[-1] if still else free[0] if free else costs.index(min(costs))
    return kept[best][0], kept[best][1:]


def _spec(like: DTensor, placements, shape) -> DTensorSpec:
    shape = tuple(shape)
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= max(s, 1)
    return DTensorSpec(like.device_mesh, tuple(placements), shape, tuple(reversed(strides)),
                       like.dtype)  # fmt: skip


def mm(a: DTensor, b: DTensor) -> DTensor:
    """``torch.mm`` of two DTensors: choose a strategy, redistribute, multiply the pieces."""
    placeholders = [[("S", p.dim) if p.is_shard() else p for p in r] for r in _mm_single_dim()]
    rules = _expand(placeholders, [a, b])
    out, (want_a, want_b) = _select([a, b], rules, uneven=False)
    a, b = a._redistribute(want_a), b._redistribute(want_b)
    local = torch.mm(a.to_local(), b.to_local())
    return DTensor(local, _spec(a, out, (a.shape[0], b.shape[1])))


# ---- the ops a Linear layer needs ----------------------------------------------------------


def t(x: DTensor) -> DTensor:
    """``x.t()`` of a 2-D DTensor: a view; Shard(0) and Shard(1) swap (``_view_ops.py``)."""
    swap = {0: 1, 1: 0}
    placements = [Shard(swap[p.dim]) if p.is_shard() else p for p in x.placements]
    return DTensor(x.to_local().t(), _spec(x, placements, tuple(reversed(x.shape))))


def _bias_placement(out: Placement) -> Placement:
    """Where a bias of shape (n,) must lie to be added to an (m, n) output lying as ``out``:
    the columns' pieces for Shard(1), its terms (b/n each) for Partial, else whole."""
    if out.is_shard(1):
        return Shard(0)
    return out if out.is_partial() else Replicate()


def add_bias(y: DTensor, b: DTensor) -> DTensor:
    """``y + b`` for a bias broadcast over the rows, as addmm's bias strategy places it."""
    want = [_bias_placement(p) for p in y.placements]
    if any(w.is_partial() and not p.is_replicate() for w, p in zip(want, b.placements)):
        b = b._redistribute([Replicate()] * len(want))  # Shard -> Partial goes through R
    b = b._redistribute(want)
    return DTensor(y.to_local() + b.to_local(), y._spec)


def linear(x: DTensor, w: DTensor, b: DTensor | None = None) -> DTensor:
    """``F.linear``: ``x @ w.t() + b`` (torch decomposes it to ``t`` and ``addmm``)."""
    y = mm(x, t(w))
    return y if b is None else add_bias(y, b)

"""Sharding propagation: which placements an op's inputs must have, and its output's.

Mirrors torch/distributed/tensor/_sharding_prop.py and the strategies of
torch/distributed/tensor/_ops/ (``_matrix_ops.py``'s ``gen_single_dim_einsum_strategies`` for
``mm``, ``_pointwise_ops.py``, ``_math_ops.py``'s reductions, ``_tensor_ops.py``'s views):

- an op lists *strategies*: for one mesh dimension, an output placement and the input
  placements that produce it (for ``mm`` "mk,kn->mn": all Replicate; both inputs sharded on
  k -> Partial; A sharded on m -> Shard(0); B sharded on n -> Shard(1); one input Partial,
  the other Replicate -> Partial); a mesh of n dims takes every combination;
- each strategy costs the redistributions its inputs need (``redistribute_cost``: torch's
  cost model of all-gather, all-reduce and reduce-scatter in microseconds, from the bytes and
  the mesh, in ``_collective_utils.py``); the cheapest wins, the first on a tie;
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


def _valid(x: DTensor, wanted) -> bool:
    """torch's filter (``expand_to_full_mesh_op_strategy`` with ``allow_uneven_sharding``
    off, as for ``mm``): every input must be shardable as the strategy wants it, even one that
    already lies so."""
    return _shardable(x.shape, wanted, x.device_mesh)


def _choose(inputs: list[DTensor], single_dim) -> tuple[list, list]:
    """The cheapest strategy over the whole mesh: (output placements, input placements)."""
    mesh = inputs[0].device_mesh
    best, best_cost = None, float("inf")
    for combo in itertools.product(single_dim, repeat=mesh.ndim):
        out = [c[0] for c in combo]
        wanted = [[c[1 + i] for c in combo] for i in range(len(inputs))]
        if not all(_valid(x, w) for w, x in zip(wanted, inputs, strict=True)):
            continue
        cost = sum(redistribute_cost(x._spec, w) for x, w in zip(inputs, wanted, strict=True))
        if cost < best_cost:
            best, best_cost = (out, wanted), cost
    return best


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
    out, (want_a, want_b) = _choose([a, b], _mm_single_dim())
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

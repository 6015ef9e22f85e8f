"""Redistribution: from one list of placements to another, one mesh dimension at a time.

Mirrors torch/distributed/tensor/_redistribute.py: ``generate_greedy_transform_infos``
plans the steps (the planner torch uses by default; not for a ``_StridedShard``, see
``transform_infos``), ``redistribute_local_tensor`` runs them, and the ``Redistribute``
autograd function sends the gradient back the other way (``_redistribute_backward``: a
gradient never becomes Partial, it is Replicate instead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from .placement_types import Partial, Placement, Replicate, Shard

__all__ = ["redistribute_local_tensor", "transform_infos"]


@dataclass(frozen=True)
class _TransformInfo:
    mesh_dim: int
    src_dst_placements: tuple[Placement, Placement]
    #: the tensor's shape as this mesh dimension sees it (after the outer dims' sharding):
    #: what tells an uneven piece how much padding it needs
    logical_shape: tuple[int, ...]


def transform_infos(spec, target_placements) -> list[_TransformInfo]:
    """The steps from ``spec``'s placements to ``target_placements`` (torch's greedy plan).

    Not torch's plan for a spec holding a ``_StridedShard``: torch 2.13 plans those with its
    graph-based planner (``_gen_transform_infos_non_cached``), which this rebuild does not
    have; it rewrites ``(_S(0, 2), S(0))`` as two plain Shards with a shard order (the tp cut
    first) and gathers over mesh dim 0 first (a plain Shard of the tp piece), then mesh dim 1.
    This plan gathers mesh dim 1 first, then the ``_StridedShard`` (its own
    ``_to_replicate_tensor``, sized by ``_local_shard_size_and_offset`` on the logical shape
    of its mesh dim). Both give each rank the same pieces and the same whole; the order of the
    all-gathers and their sizes differ (``tests/test_strided_shard.py`` pins both plans)."""
    mesh, src = spec.mesh, list(spec.placements)
    target = list(target_placements)
    shape = list(spec.shape)
    if mesh.ndim == 1:
        return [_TransformInfo(0, (src[0], target[0]), tuple(shape))] if src != target else []
    logical = [tuple(shape)]  # per mesh dim: the shape after the outer dims' sharding
    for i, p in enumerate(src[:-1]):
        current = list(logical[i])
        if isinstance(p, Shard):
            current[p.dim] = p._local_shard_size_and_offset(
                current[p.dim], mesh.size(i), mesh.get_local_rank(i)
            )[0]
        logical.append(tuple(current))
    infos = []
    if math.prod(mesh.size(i) for i, p in enumerate(src) if isinstance(p, Shard)) > 1:
        # inner to outer: a target Shard whose tensor dim is sharded differently on the
        # outer mesh dims (nested sharding) goes to Replicate first
        for mesh_dim in reversed(range(len(src))):
            current, want = src[mesh_dim], target[mesh_dim]
            if isinstance(want, Shard):
                before_now = [i for i in range(mesh_dim) if src[i].is_shard(want.dim)]
                before_then = [i for i in range(mesh_dim) if target[i].is_shard(want.dim)]
                if before_now != before_then:
                    want = Replicate()
            if current != want:
                infos.append(_TransformInfo(mesh_dim, (current, want), logical[mesh_dim]))
                src[mesh_dim] = want
    for mesh_dim, (current, want) in enumerate(zip(src, target, strict=True)):  # outer to inner
        if current != want:
            infos.append(_TransformInfo(mesh_dim, (current, want), logical[mesh_dim]))
            src[mesh_dim] = want
    return infos


def redistribute_local_tensor(local: torch.Tensor, spec, target_placements) -> torch.Tensor:
    """This rank's piece after redistributing from ``spec`` to ``target_placements``."""
    mesh = spec.mesh
    for info in transform_infos(spec, target_placements):
        i, (current, target) = info.mesh_dim, info.src_dst_placements
        if mesh.size(i) == 1:
            continue
        if target.is_replicate():
            if current.is_partial():
                local = current._reduce_value(local, mesh, i)
            else:
                local = current._to_replicate_tensor(local, mesh, i, info.logical_shape)
        elif target.is_shard():
            if current.is_partial():
                local = current._reduce_shard_value(local, mesh, i, target)
            elif current.is_replicate():
                local = target._replicate_to_shard(local, mesh, i, mesh.get_local_rank(i))
            elif current.dim != target.dim:
                local = current._to_new_shard_dim(local, mesh, i, info.logical_shape, target.dim)
        elif target.is_partial():
            if current.is_replicate():
                local = target._partition_value(local, mesh, i)
            elif current.is_shard():
                raise RuntimeError(f"redistribute from {current} to {target} not supported yet")
            else:
                raise AssertionError(
                    f"Redistribution from one partial type ({current}) to another ({target}) "
                    "is unsupported."
                )
    return local


class Redistribute(torch.autograd.Function):
    """The redistribution as one autograd node on the local pieces."""

    @staticmethod
    def forward(ctx, local, spec, target_spec):
        ctx.spec, ctx.target_spec = spec, target_spec
        return redistribute_local_tensor(local, spec, target_spec.placements)

    @staticmethod
    def backward(ctx, grad):
        # The gradient of a Partial tensor is Replicate: each term's gradient is the whole
        # gradient (so Replicate -> Partial, a division by n forward, passes it unchanged). It
        # goes back to the input's placements, a Partial input getting a Replicate gradient.
        now = tuple(Replicate() if q.is_partial() else q for q in ctx.target_spec.placements)
        back = tuple(Replicate() if p.is_partial() else p for p in ctx.spec.placements)
        return (
            redistribute_local_tensor(grad, replace(ctx.target_spec, placements=now), back),
            None,
            None,
        )


def _check_no_partial_target(src, placements) -> None:
    for current, target in zip(src, placements, strict=True):
        if isinstance(target, Partial) and current != target:
            raise RuntimeError(
                f"Can not redistribute from {current} to {target}, redistributing to Partial "
                "is for internal use only!"
            )

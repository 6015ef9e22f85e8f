"""Lab 7's DTensor exercises (5 to 7): the graders' torch oracles, and retorch's own
redistribution planner, shard sizes and mm strategy checked against them.

The graders run torch's DTensor on its fake process group in this process
(``distributed_lab.fake_world``); these tests pin what they read from torch and compare
chapter 7's rebuild (``retorch.distributed.tensor``) with it on the lab's cases, which the
chapter does not print (2-D and 3-D meshes, nested sharding, size-1 mesh dims, dims shorter
than the world)."""

from __future__ import annotations

import math
import types

import pytest
import torch
import torch.distributed as dist

from retorch.distributed.tensor import _ops, _redistribute
from retorch.distributed.tensor import placement_types as rp
from retorch.distributed.tensor._api import DTensorSpec
from retorch.testing import distributed_lab as lab

NAMES = {"PR": "all_reduce", "PS": "reduce_scatter_tensor", "SR": "all_gather_into_tensor",
         "SS": "shard_dim_alltoall", "RS": "chunk"}  # fmt: skip


def _kind(p) -> str:
    return "P" if p.is_partial() else "S" if p.is_shard() else "R"


def _mesh(shape):
    """What the planner and the cost model read of a mesh, for rank 0."""
    return types.SimpleNamespace(ndim=len(shape), size=lambda i: shape[i],
                                 get_local_rank=lambda i: 0, device_type="cpu")  # fmt: skip


def _ours(code: str):
    return {"r": rp.Replicate(), "p": rp.Partial(), "s0": rp.Shard(0), "s1": rp.Shard(1)}[code]


def _retorch_steps(mesh_shape, src, dst, shape=(12, 10)):
    spec = DTensorSpec(_mesh(mesh_shape), tuple(_ours(c) for c in src.split()), shape,
                       (shape[1], 1), torch.float32)  # fmt: skip
    infos = _redistribute.transform_infos(spec, [_ours(c) for c in dst.split()])
    return [(i.mesh_dim, NAMES[_kind(i.src_dst_placements[0]) + _kind(i.src_dst_placements[1])])
            for i in infos if mesh_shape[i.mesh_dim] > 1]  # fmt: skip


def _torch(codes: str):
    return [lab._placement(c) for c in codes.split()]


def test_fake_world_leaves_no_process_group():
    with lab.fake_world(3):
        assert dist.get_world_size() == 3
    assert not dist.is_initialized()


def test_torch_redistribute_steps_on_a_nested_case():
    """torch's greedy planner on (S0, S0) -> (R, S0): the inner dim is gathered first, then
    the outer, then cut again (the nested Shard(0) differs from a first one)."""
    with lab.fake_world(4):
        steps = lab.torch_redistribute_steps((2, 2), _torch("s0 s0"), _torch("r s0"))
    assert steps == [(1, "all_gather_into_tensor"), (0, "all_gather_into_tensor"), (1, "chunk")]


@pytest.mark.slow  # seconds: one fake world per world size
def test_retorch_redistribution_plan_equals_torch_on_the_lab_cases():
    cases = [*lab.REDISTRIBUTE_CASES, *lab.random_redistribute_cases(40, seed=11)]
    by_world = {}
    for case in cases:
        by_world.setdefault(math.prod(case[0]), []).append(case)
    for world, group in sorted(by_world.items()):
        with lab.fake_world(world):
            theirs = [lab.torch_redistribute_steps(m, _torch(s), _torch(d)) for m, s, d in group]
        for (m, s, d), want in zip(group, theirs):
            assert _retorch_steps(m, s, d) == want, (m, s, d)


@pytest.mark.slow  # seconds: one fake world per world size
def test_retorch_shard_sizes_equal_torch():
    by_world = {}
    for size, world in lab.SHARD_SIZE_CASES:
        by_world.setdefault(world, []).append(size)
    for world, sizes in sorted(by_world.items()):
        with lab.fake_world(world):
            theirs = [lab.torch_shard_sizes(size, world) for size in sizes]
        for size, want in zip(sizes, theirs):
            full = math.ceil(size / world)
            ours = [rp.Shard.local_shard_size_and_offset(size, world, r)[0] for r in range(world)]
            assert [(n, full - n) for n in ours] == want, (size, world)


def _retorch_mm(a_shape, pa, b_shape, pb, world):
    """The placements retorch's ``_ops.mm`` chooses (its rules expanded and selected as
    ``mm`` does), on DTensor stand-ins that carry only what the choice reads."""
    mesh = _mesh((world,))

    def dt(shape, p):
        spec = DTensorSpec(mesh, (p,), shape, (shape[1], 1), torch.float32)
        return types.SimpleNamespace(shape=shape, device_mesh=mesh, _spec=spec, placements=(p,))

    inputs = [dt(a_shape, pa), dt(b_shape, pb)]
    rules = [[("S", p.dim) if p.is_shard() else p for p in r] for r in _ops._mm_single_dim()]
    out, (wa, wb) = _ops._select(inputs, _ops._expand(rules, inputs), uneven=False)
    return out[0], wa[0], wb[0]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [3, 17])
def test_retorch_mm_strategy_equals_torch(seed):
    """retorch's strategy list, cost model and choice give torch's output placement and
    input placements for mm on a 1-D mesh (worlds 2 to 5, dims shorter than the world)."""
    to_ours = {
        "R": rp.Replicate(),
        "S(0)": rp.Shard(0),
        "S(1)": rp.Shard(1),
        "P(sum)": rp.Partial(),
    }
    cases = [*lab.mm_fixed_cases(), *lab.mm_cases(30, seed=seed)]
    by_world = {}
    for case in cases:
        by_world.setdefault(case[-1], []).append(case)
    for world, group in sorted(by_world.items()):
        with lab.fake_world(world):
            theirs = [lab.torch_mm_placement(*case)[0] for case in group]
        for (a_shape, pa, b_shape, pb, _), want in zip(group, theirs):
            ours = _retorch_mm(a_shape, to_ours[str(pa)], b_shape, to_ours[str(pb)], world)
            assert [str(p) for p in ours] == [str(p) for p in want], (a_shape, pa, b_shape, pb)

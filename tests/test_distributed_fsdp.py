"""retorch.distributed.fsdp: sharded training against single-process training and torch's
``fully_shard`` (which runs on CPU/gloo in 2.13), with 2 and 4 ranks; memory held per rank
against retorch's DDP.

Parameters must agree within atol 1e-6 + rtol 1e-5 after every step (SGD, momentum 0.9): the
sharded gradient is the ring reduce-scatter of each rank's gradient over 1/n of the batch,
the single-process one the gradient over the whole batch, so only rounding differs.
"""

from __future__ import annotations

import math

import pytest
import torch

import retorch.nn as rn
import retorch.optim as ro
from retorch.distributed import fsdp
from retorch.distributed.collectives import count_bytes
from retorch.distributed.launch import launch
from retorch.nn.parallel import DistributedDataParallel as DDP

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow

ATOL, RTOL = 1e-6, 1e-5
SIZES = [(7, 13), (13, 11), (11, 3)]  # 104, 154 and 36 parameters: 154 needs padding for 4


def _mlp(seed: int, nn=rn):
    torch.manual_seed(seed)
    (a, b), (c, d), (e, f) = SIZES
    return nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(c, d), nn.ReLU(), nn.Linear(e, f))


def _batches(step: int, world: int):
    gens = [torch.Generator().manual_seed(100 * step + r) for r in range(world)]
    return [(torch.randn(4, 7, generator=g), torch.randn(4, 3, generator=g)) for g in gens]


def _loss(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def _unit_order(model):
    # fully_shard_units builds m[0], m[2], then the root (m[4]'s parameters)
    return [p for i in (0, 2, 4) for p in model[i].parameters()]


def _sharded_training(rank: int, world: int, steps: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    ours = _mlp(seed=rank)  # rank 0's init must be broadcast
    units = fsdp.fully_shard_units(ours, [ours[0], ours[2]])
    single = _mlp(seed=0)
    theirs = _mlp(seed=0, nn=torch.nn)
    for layer in (theirs[0], theirs[2], theirs):
        fully_shard(layer, mesh=init_device_mesh("cpu", (world,)))
    # SGD with momentum: unlike Adam, it is not blind to a gradient scaled by n.
    opts = [
        ro.SGD(ours.parameters(), lr=0.05, momentum=0.9),
        ro.SGD(single.parameters(), lr=0.05, momentum=0.9),
        torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9),
    ]
    vs_single, vs_torch, max_single, max_torch = [], [], 0.0, 0.0
    for step in range(steps):
        batches = _batches(step, world)
        _loss(ours, *batches[rank]).backward()
        _loss(theirs, *batches[rank]).backward()
        _loss(
            single, torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])
        ).backward()
        for opt in opts:
            opt.step()
            opt.zero_grad()
        full = fsdp.full_parameters(units)
        ref = _unit_order(single)
        tfull = [p.full_tensor() for p in _unit_order(theirs)]
        vs_single.append(
            all(torch.allclose(a, b, atol=ATOL, rtol=RTOL) for a, b in zip(full, ref, strict=True))
        )
        vs_torch.append(
            all(
                torch.allclose(a, b, atol=ATOL, rtol=RTOL) for a, b in zip(full, tfull, strict=True)
            )
        )
        max_single = max(
            max_single, max((a - b).abs().max().item() for a, b in zip(full, ref, strict=True))
        )
        max_torch = max(
            max_torch, max((a - b).abs().max().item() for a, b in zip(full, tfull, strict=True))
        )
    # Memory held per rank at rest (after an Adam step, gradients kept): sharded against DDP.
    adam = ro.Adam(ours.parameters(), lr=1e-2)
    with count_bytes() as sent:  # one forward and backward: what a step costs in messages
        _loss(ours, *_batches(0, world)[rank]).backward()
    adam.step()
    sharded = _held(list(ours.parameters()), adam, extra=[u.full for u in units])
    ddp_model = DDP(_mlp(seed=0))
    ddp_opt = ro.Adam(ddp_model.parameters(), lr=1e-2)
    _loss(ddp_model, *_batches(0, world)[rank]).backward()
    ddp_opt.step()
    ddp = _held(
        list(ddp_model.parameters()), ddp_opt, extra=[b.buffer for b in ddp_model.reducer.buckets]
    )
    return dict(
        vs_single=vs_single,
        vs_torch=vs_torch,
        max_single=max_single,
        max_torch=max_torch,
        sharded=sharded,
        ddp=ddp,
        shard_numels=[u.flat_param.numel() for u in units],
        gathered_peak=units[0].gathered.peak,
        sent_per_step=sent.bytes,
        gathered_now=units[0].gathered.now,
    )


def _held(params, opt, extra) -> dict:
    state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    return dict(
        params=fsdp.held_bytes(params),
        grads=fsdp.held_bytes(p.grad for p in params),
        optimizer=fsdp.held_bytes(t for t in state if t.dim() > 0),
        buffers=fsdp.held_bytes(extra),
    )


@pytest.mark.parametrize("world_size, steps", [(2, 20), (4, 10)])
def test_sharded_training_equals_single_process_and_fully_shard(world_size, steps):
    results = launch(_sharded_training, world_size, steps, timeout=85)
    total = sum(i * o + o for i, o in SIZES)
    for rank, res in enumerate(results):
        assert all(res["vs_single"]), f"rank {rank}: {res['vs_single']} ({res['max_single']:.2e})"
        assert all(res["vs_torch"]), f"rank {rank}: {res['vs_torch']} ({res['max_torch']:.2e})"
        shards = [math.ceil((i * o + o) / world_size) for i, o in SIZES]
        assert res["shard_numels"] == shards
        s, d = res["sharded"], res["ddp"]
        assert s["params"] == s["grads"] == 4 * sum(shards)  # 1/n of the model (plus padding)
        assert s["optimizer"] == 2 * 4 * sum(shards)  # Adam's two moments, of the shard only
        assert s["buffers"] == 0  # the gathered flat parameters are freed between uses
        assert d["params"] == d["grads"] == 4 * total and d["optimizer"] == 2 * 4 * total
        assert d["buffers"] == 4 * total  # DDP's buckets: one more copy of the gradients
        # Unsharded at once: the root unit (the last layer, gathered for the whole forward)
        # and one other unit at a time, the larger one (154 parameters, padded): never all.
        assert res["gathered_peak"] == 4 * world_size * (shards[2] + shards[1])
        assert res["gathered_now"] == 0
        # ZeRO-3's cost: per unit two all-gathers (forward, backward) and one reduce-scatter,
        # each sending n-1 shards: 3(n-1)/n of the model against DDP's 2(n-1)/n.
        assert res["sent_per_step"] == 3 * (world_size - 1) * 4 * sum(shards)

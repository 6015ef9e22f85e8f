"""Chapter 7's parallel designs, one training step each, retorch beside torch.

The same 4-layer MLP of 512-wide linear layers (1.05M parameters, batch 32 per rank, SGD),
on 2 and 4 local CPU processes over gloo, each library with its own SGD: data parallelism (DDP
around chapter 1's modules for retorch), FSDP2 (``fully_shard`` on
each linear layer, then the root) and tensor parallelism (``ColwiseParallel`` /
``RowwiseParallel`` on alternate layers, Megatron's pairs). Each time is the slowest rank's
(a MAX all-reduce of the per-rank times), median of the repetitions, in ms. With more
processes than cores (4 on a 2-core machine) the ranks take turns on the cores.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

import retorch.nn as rn
import retorch.optim as ro
from retorch.distributed.device_mesh import init_device_mesh as our_mesh
from retorch.distributed.fully_shard import fully_shard as our_fully_shard
from retorch.distributed.launch import launch
from retorch.distributed.tensor import parallel as our_tp
from retorch.nn.parallel import DistributedDataParallel as OurDDP

# retorch's parts are imported here, not only in the workers, so that the stored result
# records them among the code it measured (tools/bench.py keys staleness to that list)

WIDTH, DEPTH, BATCH = 512, 4, 32


def _mlp(nn=torch.nn):
    torch.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _slowest_median(step, reps: int) -> float:
    step()  # warm-up (and FSDP's lazy initialisation)
    samples = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        samples.append(t.item())
    return statistics.median(samples) * 1e3


def _models(world: int):
    """(design, library) -> a model laid out for that design."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard as torch_fully_shard
    from torch.distributed.tensor import parallel as torch_tp

    linears = range(0, 2 * DEPTH - 1, 2)
    models = {("DDP", "torch"): torch.nn.parallel.DistributedDataParallel(_mlp()),
              ("DDP", "retorch"): OurDDP(_mlp(rn))}  # chapter 1's modules  # fmt: skip
    for lib, shard, mesh in (("torch", torch_fully_shard, init_device_mesh("cpu", (world,))),
                             ("retorch", our_fully_shard, our_mesh("cpu", (world,)))):  # fmt: skip
        m = _mlp()
        for i in linears:
            shard(m[i], mesh=mesh)
        models[("FSDP2 (fully_shard)", lib)] = shard(m, mesh=mesh)
    for lib, tp, mesh in (("torch", torch_tp, init_device_mesh("cpu", (world,))),
                          ("retorch", our_tp, our_mesh("cpu", (world,)))):  # fmt: skip
        plan = {str(i): (tp.ColwiseParallel() if k % 2 == 0 else tp.RowwiseParallel())
                for k, i in enumerate(linears)}  # fmt: skip
        models[("tensor parallel (column, row pairs)", lib)] = tp.parallelize_module(
            _mlp(), mesh, plan
        )
    return models


def _worker(rank: int, world: int, quick: bool) -> list[dict]:
    torch.set_num_threads(1)
    x = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(rank))
    rows = []
    for (design, lib), model in _models(world).items():
        opt = (torch.optim.SGD if lib == "torch" else ro.SGD)(model.parameters(), lr=1e-3)
        # tensor parallelism: every rank works on the same batch (the layers are cut, not it)
        batch = x if "tensor" not in design else torch.randn(
            BATCH, WIDTH, generator=torch.Generator().manual_seed(0))  # fmt: skip

        def step(model=model, opt=opt, batch=batch):
            opt.zero_grad()
            model(batch).square().mean().backward()
            opt.step()

        ms = _slowest_median(step, 3 if quick else 15)
        rows.append({"case": f"{design}, {world} processes", "impl": lib, "value": ms})
    return rows


def run(quick: bool = False) -> dict:
    rows = []
    for world in (2,) if quick else (2, 4):
        rows += launch(_worker, world, quick, timeout=600)[0]
    return {
        "name": "parallel",
        "title": "One training step per parallel design on CPU processes (ms, lower is better)",
        "unit": "ms per step",
        "rows": rows,
        "notes": " ".join(__doc__.split("\n\n")[1].split()),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1))

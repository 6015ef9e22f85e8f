"""Chapter 7: ring all-reduce over isend/irecv against gloo's all_reduce; DDP step time.

All-reduce of float32 tensors from 1 KB to 64 MB on 2 and 4 local CPU processes (gloo over
TCP on 127.0.0.1), reported as bus bandwidth, the convention of nccl-tests: algorithm
bandwidth (bytes / time) times 2(n-1)/n, the share of the data each rank must send in a ring,
so that the figure is comparable across process counts. retorch's ring is chapter 7's
``ring_all_reduce`` (n-1 reduce-scatter steps, n-1 all-gather steps, each an
``isend``/``irecv`` pair through Python); gloo's runs the whole algorithm in C++. Each time is
the slowest rank's (a MAX all-reduce of the per-rank times), median of the repetitions. With
more processes than cores (4 on a 2-core machine) the ranks take turns on the cores, so the
4-process figures measure scheduling as much as the algorithm.

The DDP section times one training step (forward, backward, SGD step) of a 4-layer MLP of
1024-wide linear layers (4.2M parameters, 16 MB of gradients in 4 MB buckets, batch 32 per
rank) with torch's DDP, retorch's, and retorch's with ``overlap=False`` (all-reduces held
until backward has finished), in ms.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

import retorch.nn as rn
import retorch.optim as ro
from retorch.distributed.collectives import ring_all_reduce
from retorch.distributed.launch import launch
from retorch.nn.parallel import DistributedDataParallel as DDP

SIZES = [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26]
QUICK_SIZES = [1 << 10, 1 << 16, 1 << 20]
IMPLS = {"retorch ring (isend/irecv)": ring_all_reduce, "gloo all_reduce": dist.all_reduce}


def _slowest(seconds: float) -> float:
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def _time(fn, reps: int) -> float:
    fn()  # warm up: connections, allocations
    times = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        times.append(_slowest(time.perf_counter() - t0))
    return statistics.median(times)


def _allreduce_worker(rank: int, world: int, sizes: list[int], quick: bool) -> list[dict]:
    rows = []
    for nbytes in sizes:
        x = torch.ones(nbytes // 4)
        reps = 3 if quick or nbytes >= 1 << 24 else 10
        for name, fn in IMPLS.items():
            seconds = _time(lambda fn=fn: fn(x), reps)
            algbw = nbytes / seconds / 1e9
            rows.append(
                {
                    "case": f"{_human(nbytes)} x {world} processes",
                    "impl": name,
                    "value": algbw * 2 * (world - 1) / world,
                    "algbw_GBps": algbw,
                    "time_ms": seconds * 1e3,
                }
            )
    return rows


def _mlp(nn, width: int = 1024, depth: int = 4):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _ddp_worker(rank: int, world: int, quick: bool) -> list[dict]:
    torch.set_num_threads(1)
    models = {
        "torch DDP": (torch.nn.parallel.DistributedDataParallel(_mlp(torch.nn), bucket_cap_mb=4),
                      torch.optim.SGD),
        "retorch DDP": (DDP(_mlp(rn), bucket_cap_mb=4), ro.SGD),
        "retorch DDP, overlap=False": (DDP(_mlp(rn), bucket_cap_mb=4, overlap=False), ro.SGD),
    }  # fmt: skip
    x = torch.randn(32, 1024, generator=torch.Generator().manual_seed(rank))
    rows = []
    for name, (model, opt_cls) in models.items():
        opt = opt_cls(model.parameters(), lr=1e-3)

        def step(model=model, opt=opt):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()

        seconds = _time(step, 3 if quick else 15)
        rows.append({"case": f"DDP step, {world} processes", "impl": name, "value": seconds * 1e3})
    return rows


def _human(nbytes: int) -> str:
    for unit, size in (("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


def run(quick: bool = False) -> dict:
    sizes = QUICK_SIZES if quick else SIZES
    rows = []
    for world in (2,) if quick else (2, 4):
        rows += launch(_allreduce_worker, world, sizes, quick, timeout=600)[0]
    ddp_rows = []
    for world in (2,) if quick else (2, 4):
        ddp_rows += launch(_ddp_worker, world, quick, timeout=600)[0]
    return {
        "name": "distributed",
        "title": "All-reduce on CPU processes over gloo: bus bandwidth (GB/s, higher is better)",
        "unit": "GB/s",
        "rows": rows,
        "ddp": {"title": "One DDP training step (ms, lower is better)", "unit": "ms",
                "rows": ddp_rows},
        "notes": " ".join(__doc__.split("\n\n")[1].split()),
    }  # fmt: skip


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1))

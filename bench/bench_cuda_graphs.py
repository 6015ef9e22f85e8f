"""Chapter 8c: the host time a CUDA graph saves per training step, replay against eager.

One step of a 2-layer MLP (Linear-ReLU-Linear, squared error, SGD with the learning rate in
device memory) on retorch's CUDA tensors: eagerly (each op through the dispatcher, autograd
and the launch path), and as the replay of a ``retorch.cuda.CUDAGraph`` captured from the same
step (the captured launches only). Host time is CPU time (``time.process_time``) per step;
samples are interleaved and the median is stored. Under the simulator the kernels themselves
run on the host too, so ``run`` measures retorch only and its replay still includes the
simulated kernels; ``run_gpu`` times the same step in retorch and in torch
(``torch.cuda.CUDAGraph``) on a GPU, where a replay's host time is the launches alone (torch:
one ``cudaGraphLaunch``).
"""

from __future__ import annotations

import statistics
import time

import numpy as np


def _median(fns: dict, rounds: int, per: int, sync=lambda: None) -> dict[str, float]:
    """ms of host (CPU) time per call of each function: ``rounds`` interleaved samples of
    ``per`` calls."""
    for fn in fns.values():
        fn()
    sync()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.process_time()
            for _ in range(per):
                fn()
            sync()
            samples[name].append(time.process_time() - t0)
    return {name: statistics.median(s) / per * 1e3 for name, s in samples.items()}


def _retorch_step_fns(batch: int, width: int):
    import retorch.autograd as ra
    import retorch.cuda as rc
    import retorch.tensor as rt

    # the callers switch chapter 3's array backend to retorch for as long as they time
    rng = np.random.default_rng(0)

    def dev(a):
        return rt.tensor(np.asarray(a, dtype=np.float32), device="cuda")

    shapes = {"w1": (width, width), "b1": (width,), "w2": (width, 4), "b2": (4,)}
    p = {k: ra.tensor(dev(rng.standard_normal(s) * 0.1), requires_grad=True)
         for k, s in shapes.items()}  # fmt: skip
    x = ra.tensor(dev(rng.standard_normal((batch, width))))
    y = ra.tensor(dev(rng.standard_normal((batch, 4))))
    lr = dev(1e-3)

    def step():
        h = (x @ p["w1"] + p["b1"]).relu() @ p["w2"] + p["b2"]
        loss = ((h - y) * (h - y)).sum()
        loss.backward()
        for t in p.values():
            rt.sub(t.data, rt.mul(t.grad.data, lr), out=t.data)
            t.grad = None

    step()  # warm-up before capture
    g = rc.CUDAGraph()
    with rc.graph(g):
        step()
    return {"eager step": step, "graph replay": g.replay}, rc.synchronize


def run(quick: bool = False) -> dict:
    import retorch.autograd as ra
    import retorch.cuda as rcuda

    with ra.array_backend("retorch"):  # switched back afterwards (it is process-wide)
        fns, sync = _retorch_step_fns(batch=2, width=4)
        rounds, per = (3, 1) if quick else (9, 3)
        rows = [
            {"case": f"MLP training step, {case} (ms host time per step)", "impl": "retorch",
             "value": value}
            for case, value in _median(fns, rounds, per, sync).items()
        ]  # fmt: skip
    return {
        "name": "cuda_graphs",
        "title": "Host time per training step: eager against a CUDA graph's replay "
        "(CPU time, lower is better)",
        "unit": "ms per step",
        "rows": rows,
        "where": rcuda.target(),
        "notes": " ".join(" ".join(__doc__.split("\n\n")[1:2]).split()),
    }


def run_gpu(quick: bool = False) -> dict:
    """The same step in retorch and torch on a GPU (torch.cuda.CUDAGraph's documented recipe:
    warm-up on a side stream, capture, copy inputs into the static tensors, replay)."""
    import torch

    import retorch.autograd as ra

    batch, width = (64, 256) if quick else (64, 1024)
    with ra.array_backend("retorch"):  # switched back afterwards (it is process-wide)
        return _run_gpu(torch, batch, width, quick)


def _run_gpu(torch, batch: int, width: int, quick: bool) -> dict:
    fns, rsync = _retorch_step_fns(batch, width)
    torch.manual_seed(0)
    dev = "cuda"
    p = [torch.randn(width, width, device=dev, requires_grad=True),
         torch.randn(width, device=dev, requires_grad=True),
         torch.randn(width, 4, device=dev, requires_grad=True),
         torch.randn(4, device=dev, requires_grad=True)]  # fmt: skip
    x, y = torch.randn(batch, width, device=dev), torch.randn(batch, 4, device=dev)
    lr = torch.tensor(1e-3, device=dev)

    def step():
        h = (x @ p[0] + p[1]).relu() @ p[2] + p[3]
        ((h - y) * (h - y)).sum().backward()
        with torch.no_grad():
            for t in p:
                t.sub_(t.grad * lr)
                t.grad = None

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    rounds, per = (3, 3) if quick else (9, 20)
    rows = []
    for impl, impl_fns, sync in (("retorch", fns, rsync),
                                 ("torch", {"eager step": step, "graph replay": g.replay},
                                  torch.cuda.synchronize)):  # fmt: skip
        for case, value in _median(impl_fns, rounds, per, sync).items():
            rows.append({"case": f"MLP step {batch}x{width}, {case} (ms host time per step)",
                         "impl": impl, "value": value})  # fmt: skip
    return {
        "name": "cuda_graphs",
        "title": "Host time per training step on a GPU: eager against a CUDA graph's replay",
        "unit": "ms per step",
        "rows": rows,
        "notes": " ".join(" ".join(__doc__.split("\n\n")[1:2]).split()),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1, ensure_ascii=False))

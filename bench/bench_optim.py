"""Chapter 2: one Adam step, for 1M and 10M float32 parameters split into 10 or 100 tensors.

Six implementations in one run: torch's loop, foreach and fused steps, and ours. Adam is
memory-bound: the loop and foreach versions read and write the parameter, gradient and both
moments once per operation of the formula (about ten passes), while a fused step makes one
pass. Gradients are filled once; every implementation then steps the same parameters.
"""

from __future__ import annotations

import statistics
import time

import torch

import retorch.optim as ro

IMPLS = {
    "torch loop": (torch.optim.Adam, dict(foreach=False)),
    "torch foreach": (torch.optim.Adam, dict(foreach=True)),
    "torch fused": (torch.optim.Adam, dict(fused=True)),
    "retorch loop": (ro.Adam, dict(foreach=False)),
    "retorch foreach": (ro.Adam, dict(foreach=True)),
    "retorch fused (numba)": (ro.Adam, dict(fused=True)),
}


def _params(total: int, count: int):
    torch.manual_seed(0)
    params = [torch.randn(total // count, requires_grad=True) for _ in range(count)]
    for p in params:
        p.grad = torch.randn_like(p)
    return params


def run(quick: bool = False) -> dict:
    cases = (
        [(100_000, 10)]
        if quick
        else [(1_000_000, 10), (1_000_000, 100), (10_000_000, 10), (10_000_000, 100)]
    )
    rows = []
    for total, count in cases:
        params = _params(total, count)
        opts = {name: cls(params, lr=1e-3, **kw) for name, (cls, kw) in IMPLS.items()}
        for opt in opts.values():  # warm up: state allocation, Numba compilation
            opt.step()
        samples = {name: [] for name in opts}
        for _ in range(3 if quick else 7):
            for name, opt in opts.items():  # interleaved, so drifts hit every implementation
                t0 = time.perf_counter()
                opt.step()
                samples[name].append(time.perf_counter() - t0)
        for name, times in samples.items():
            rows.append(
                {
                    "case": f"{total / 1e6:g}M in {count}",
                    "impl": name,
                    "value": statistics.median(times) * 1e3,
                }
            )
    return {
        "name": "optim",
        "title": "One Adam step (ms, lower is better)",
        "unit": "ms",
        "rows": rows,
        "notes": __doc__.strip().split("\n\n")[1],
    }

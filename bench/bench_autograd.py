"""Chapter 3: the cost of the autograd graph, per node, ours against torch's C++ engine.

Two shapes of graph over tiny tensors (so the arithmetic is negligible and the bookkeeping
is what is measured): a chain ``y = y * c`` and a balanced binary tree of additions. Forward
time is graph building (one node per op); backward time is the engine walking it. Our nodes
are Python objects, so Python's cyclic garbage collector scans them as the graph grows;
"retorch, gc paused" measures the same code with the collector off, to show that share.
"""

from __future__ import annotations

import gc
import statistics
import time

import torch

import retorch.autograd as ra


def _chain(x, c, n):
    y = x
    for _ in range(n):
        y = y * c
    return y.sum()


def _tree(x, n):
    level = [x] * n
    while len(level) > 1:
        level = [level[i] + level[i + 1] for i in range(0, len(level) - 1, 2)] + level[
            len(level) - len(level) % 2 :
        ]
    return level[0].sum()


def _measure(build, repeats):
    fwd, bwd = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = build()
        t1 = time.perf_counter()
        out.backward()
        t2 = time.perf_counter()
        fwd.append(t1 - t0)
        bwd.append(t2 - t1)
    return statistics.median(fwd), statistics.median(bwd)


def run(quick: bool = False) -> dict:
    sizes = [1000] if quick else [1000, 10000]
    repeats = 3 if quick else 7
    rows = []
    for n in sizes:
        for shape in ("chain", "tree"):
            libs = {
                "retorch": (
                    ra.tensor(torch.ones(4), requires_grad=True),
                    ra.tensor(torch.full((4,), 1.0001)),
                ),
                "torch": (torch.ones(4, requires_grad=True), torch.full((4,), 1.0001)),
            }
            for name, (x, c) in [*libs.items(), ("retorch, gc paused", libs["retorch"])]:
                build = (
                    (lambda x=x, c=c: _chain(x, c, n))
                    if shape == "chain"
                    else (lambda x=x: _tree(x, n))
                )
                build().backward()  # warm up
                if name.endswith("gc paused"):
                    gc.disable()
                try:
                    fwd, bwd = _measure(build, repeats)
                finally:
                    gc.enable()
                nodes = n + 1 if shape == "chain" else n
                rows.append(
                    {"case": f"{shape} {n:,} fwd", "impl": name, "value": fwd / nodes * 1e6}
                )
                rows.append(
                    {"case": f"{shape} {n:,} bwd", "impl": name, "value": bwd / nodes * 1e6}
                )
    return {
        "name": "autograd",
        "title": "Autograd cost per graph node (µs, lower is better)",
        "unit": "us",
        "rows": rows,
        "log": False,
        "notes": __doc__.strip().split("\n\n")[1],
    }

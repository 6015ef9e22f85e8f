"""Chapter 3: the cost of the autograd graph, per node, ours against torch's C++ engine.

Two shapes of graph over tiny tensors (so the arithmetic is negligible and the bookkeeping is
what is measured): a chain ``y = y * c`` and a balanced binary tree of additions, each ending
in a ``sum``. Forward time is graph building (one node per op); backward time is the engine
walking it. Our nodes are Python objects, so Python's cyclic garbage collector scans them as
the graph grows: "retorch, gc paused" times the same code with the collector off.

Times are the CPU time of this process (``time.process_time``), not wall-clock time, so that
the other processes of a shared machine do not count; each repeat times every implementation
once, in turn, and the fastest of the repeats is reported. Freeing a graph is left out of both
timings.
"""

from __future__ import annotations

import gc
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
        pairs = [level[i] + level[i + 1] for i in range(0, len(level) - 1, 2)]
        level = pairs + level[len(level) - len(level) % 2 :]
    return level[0].sum()


def _time_once(build, pause_gc: bool) -> tuple[float, float]:
    if pause_gc:
        gc.disable()
    try:
        t0 = time.process_time()
        out = build()
        t1 = time.process_time()
        out.backward()
        t2 = time.process_time()
    finally:
        gc.enable()
    del out  # freeing the graph is not part of either timing
    return t1 - t0, t2 - t1


def run(quick: bool = False) -> dict:
    sizes = [1000] if quick else [1000, 10000]
    repeats = 3 if quick else 11
    x, c = ra.tensor(torch.ones(4), requires_grad=True), ra.tensor(torch.full((4,), 1.0001))
    tx, tc = torch.ones(4, requires_grad=True), torch.full((4,), 1.0001)
    rows = []
    for n in sizes:
        for shape in ("chain", "tree"):
            if shape == "chain":
                builds = {"retorch": lambda: _chain(x, c, n), "torch": lambda: _chain(tx, tc, n)}
            else:
                builds = {"retorch": lambda: _tree(x, n), "torch": lambda: _tree(tx, n)}
            impls = {
                "retorch": (builds["retorch"], False),
                "torch": (builds["torch"], False),
                "retorch, gc paused": (builds["retorch"], True),
            }
            times: dict[str, list] = {name: [] for name in impls}
            for build, pause_gc in impls.values():
                _time_once(build, pause_gc)  # warm up
            for _ in range(repeats):
                for name, (build, pause_gc) in impls.items():
                    times[name].append(_time_once(build, pause_gc))
            nodes = n + 1 if shape == "chain" else n  # n ops (n - 1 adds for the tree) and a sum
            for name, samples in times.items():
                for i, phase in enumerate(("fwd", "bwd")):
                    value = min(s[i] for s in samples) / nodes * 1e6
                    rows.append({"case": f"{shape} {n:,} {phase}", "impl": name, "value": value})
    return {
        "name": "autograd",
        "title": "Autograd cost per graph node (µs, lower is better)",
        "unit": "us",
        "rows": rows,
        "log": False,
        "notes": " ".join(__doc__.strip().split("\n\n")[1:]).replace("\n", " "),
    }

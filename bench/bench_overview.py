"""Chapter 0: what torch adds around the loop. ``torch.add`` against the bare loop in Numba.

For a tiny tensor the time is all overhead (argument parsing, dispatch, autograd's check, the
output's allocation); for a large one it is all memory traffic, where a compiled loop and
torch's vectorised kernel meet at the machine's bandwidth. Outputs are preallocated for both
(``out=``), so allocation cost is left out of the large case.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from retorch.overview import add_cpu


def _time(fn, repeats: int, number: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return statistics.median(samples)


def run(quick: bool = False) -> dict:
    sizes = [10, 100_000] if quick else [10, 100_000, 10_000_000]
    rows = []
    for n in sizes:
        a, b = torch.rand(n), torch.rand(n)
        out = torch.empty(n)
        x, y, o = a.numpy(), b.numpy(), out.numpy()
        number = max(1, min(2000, 2_000_000 // n))
        impls = {
            "torch.add(out=)": lambda: torch.add(a, b, alpha=2.0, out=out),
            "numba prange loop": lambda: add_cpu(x, y, np.float32(2.0), o),
        }
        results = {k: [] for k in impls}
        for _ in range(3 if quick else 7):  # interleave implementations
            for name, fn in impls.items():
                results[name].append(_time(fn, 1, number))
        for name, samples in results.items():
            rows.append(
                {
                    "case": f"add {n:,} floats",
                    "impl": name,
                    "value": statistics.median(samples) * 1e6,
                }
            )
    return {
        "name": "overview",
        "title": "torch.add vs the bare loop (µs per call)",
        "unit": "us",
        "rows": rows,
        "notes": __doc__.strip().split("\n\n")[1],
    }

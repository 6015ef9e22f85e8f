"""Chapter 1: DataLoader throughput with 0, 1 and 2 worker processes, ours beside torch's.

The dataset is deliberately slow: each sample sleeps 2 ms, standing in for decoding or
augmentation. With workers, loading overlaps across processes, so throughput grows with the
worker count until the cores (2 here) are used; starting the workers costs a fixed amount per
epoch. Each value is the median over repeated full epochs (worker start-up included), the two
loaders taking turns.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.utils.data as td

import retorch.utils.data as rd


class SlowDataset:
    def __init__(self, n: int, delay: float = 0.002):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay)
        return torch.full((16,), float(i))


def _epoch_seconds(lib, dataset, workers: int) -> float:
    t0 = time.perf_counter()
    for _ in lib.DataLoader(dataset, batch_size=16, num_workers=workers):
        pass
    return time.perf_counter() - t0


def run(quick: bool = False) -> dict:
    dataset = SlowDataset(64 if quick else 256)
    repeats = 1 if quick else 5
    libs = {"retorch": rd, "torch": td}
    rows = []
    for workers in (0, 1, 2):
        for lib in libs.values():  # warm-up: imports, first fork, allocator
            _epoch_seconds(lib, dataset, workers)
        times = {name: [] for name in libs}
        for _ in range(repeats):
            for name, lib in libs.items():
                times[name].append(_epoch_seconds(lib, dataset, workers))
        for name, seconds in times.items():
            rows.append(
                {
                    "case": f"{workers} workers",
                    "impl": name,
                    "value": len(dataset) / statistics.median(seconds),
                }
            )
    return {
        "name": "dataloader",
        "title": "DataLoader throughput on a 2 ms/sample dataset (samples/s, higher is better)",
        "unit": "samples/s",
        "higher_is_better": True,
        "log": False,
        "rows": rows,
        "notes": __doc__.strip().split("\n\n")[1],
    }

"""Chapter 1: DataLoader throughput with 0, 1 and 2 worker processes, ours beside torch's.

The dataset is deliberately slow: each sample sleeps 2 ms, standing in for decoding or
augmentation. Sleeping needs no core, so with two workers two samples load at once even on a
busy 2-core machine. Each value is the median over repeated full epochs (worker start-up and
shut-down included), the two loaders taking turns.

Where the time goes is measured too, so that the chapter can explain the figure rather than
guess: each epoch is split into the wait for the first batch, the time per later batch and the
final ``next`` (which shuts the workers down); and two costs are measured alone: starting a
worker process until its first message arrives, and moving one batch from a worker to the main
process through a ``torch.multiprocessing`` queue (pickling, shared memory, passing its file
descriptor).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.multiprocessing as mp
import torch.utils.data as td

import retorch.utils.data as rd

BATCH = 16


class SlowDataset:
    def __init__(self, n: int, delay: float = 0.002):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay)
        return torch.full((16,), float(i))


def _epoch_parts(lib, dataset, workers: int) -> dict:
    """One epoch's seconds: to the first batch, per later batch, the final next, in all."""
    t0 = time.perf_counter()
    it = iter(lib.DataLoader(dataset, batch_size=BATCH, num_workers=workers))
    next(it)
    t1 = last = time.perf_counter()
    n = 1
    for _ in it:
        n += 1
        last = time.perf_counter()
    t2 = time.perf_counter()
    return {
        "first": t1 - t0,
        "per_batch": (last - t1) / (n - 1),
        "end": t2 - last,
        "total": t2 - t0,
    }


def _send_batches(queue, done, count: int) -> None:
    batch = torch.full((BATCH, 16), 1.0)
    queue.put("started")
    for _ in range(count):
        queue.put(batch.clone())
    done.wait()  # the receiver fetches each batch's file descriptor from this process


def _worker_costs(count: int) -> dict:
    """Seconds to start a process until its first message, and per batch sent through a queue."""
    ctx = mp.get_context()
    queue, done = ctx.Queue(), ctx.Event()
    t0 = time.perf_counter()
    p = ctx.Process(target=_send_batches, args=(queue, done, count), daemon=True)
    p.start()
    queue.get()
    t1 = time.perf_counter()
    for _ in range(count):
        batch = queue.get()
        assert batch.is_shared()
    t2 = time.perf_counter()
    done.set()
    p.join()
    return {"start": t1 - t0, "transfer": (t2 - t1) / count}


def run(quick: bool = False) -> dict:
    dataset = SlowDataset(64 if quick else 256)
    repeats = 1 if quick else 5
    libs = {"retorch": rd, "torch": td}
    rows, parts = [], {}
    for workers in (0, 1, 2):
        for lib in libs.values():  # warm-up: imports, first fork, allocator
            _epoch_parts(lib, dataset, workers)
        runs = {name: [] for name in libs}
        for _ in range(repeats):
            for name, lib in libs.items():
                runs[name].append(_epoch_parts(lib, dataset, workers))
        for name, epochs in runs.items():
            median = {k: statistics.median(e[k] for e in epochs) for k in epochs[0]}
            parts[f"{name}, {workers} workers"] = {k: 1000 * v for k, v in median.items()}
            rows.append(
                {
                    "case": f"{workers} workers",
                    "impl": name,
                    "value": len(dataset) / median["total"],
                }
            )
    costs = [_worker_costs(20 if quick else 200) for _ in range(repeats)]
    return {
        "name": "dataloader",
        "title": "DataLoader throughput on a 2 ms/sample dataset (samples/s, higher is better)",
        "unit": "samples/s",
        "higher_is_better": True,
        "log": False,
        "rows": rows,
        "epoch_ms": parts,
        "batches_per_epoch": len(dataset) // BATCH,
        "worker_start_ms": 1000 * statistics.median(c["start"] for c in costs),
        "batch_transfer_ms": 1000 * statistics.median(c["transfer"] for c in costs),
        "notes": __doc__.strip().split("\n\n")[1],
    }

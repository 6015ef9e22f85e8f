"""The loop each DataLoader worker process runs. Mirrors torch/utils/data/_utils/worker.py.

A worker owns an index queue (tasks from the main process) and shares one result queue. It
seeds its random generators from the loader's base seed plus its id, so augmentations drawn
inside ``__getitem__`` are reproducible, then fetches and collates batches until it gets
``None``. An exception is wrapped with its traceback and sent back instead of a batch.
"""

from __future__ import annotations

import queue
import random
import sys
import traceback
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class WorkerInfo:
    """What ``get_worker_info()`` returns inside a worker (``None`` in the main process)."""

    id: int
    num_workers: int
    seed: int
    dataset: object


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    return _worker_info


class ExceptionWrapper:
    """An exception and its formatted traceback, picklable across processes (torch/_utils.py)."""

    def __init__(self, where: str):
        exc_type, exc, tb = sys.exc_info()
        self.exc_type = exc_type
        self.exc_msg = "".join(traceback.format_exception(exc_type, exc, tb))
        self.where = where

    def reraise(self):
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        try:
            exception = self.exc_type(msg)
        except Exception:
            raise RuntimeError(msg) from None
        raise exception


def _worker_loop(
    dataset, index_queue, data_queue, done_event, collate_fn, seed, worker_id, num_workers, init_fn
):
    global _worker_info
    random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # as torch does: workers must not oversubscribe the cores
    _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
    try:
        if init_fn is not None:
            init_fn(worker_id)
    except Exception:
        data_queue.put((None, ExceptionWrapper(f"in DataLoader worker process {worker_id}")))
        return
    while not done_event.is_set():
        try:
            task = index_queue.get(timeout=0.1)
        except queue.Empty:
            continue
        if task is None:  # the main process is shutting us down
            break
        idx, indices = task
        try:
            data = collate_fn([dataset[i] for i in indices])
        except Exception:
            data = ExceptionWrapper(f"in DataLoader worker process {worker_id}")
        data_queue.put((idx, data))

"""The loop each DataLoader worker process runs. Mirrors torch/utils/data/_utils/worker.py.

A worker gets a copy of the dataset, its own index queue (tasks from the main process) and
the result queue all workers share. It first seeds every random generator from the loader's
``base_seed`` and its id, so random augmentation inside ``__getitem__`` is reproducible and
differs between workers; then it answers each task ``(idx, indices)`` with ``(idx, batch)``
until it receives ``None``. A failure is answered with an ``ExceptionWrapper`` carrying the
traceback, which the main process re-raises.

Left out from torch's file: thread workers, the C-level signal handlers and DataPipe seeding.
"""

from __future__ import annotations

import os
import queue
import random
from dataclasses import dataclass

import numpy as np
import torch

from . import MP_STATUS_CHECK_INTERVAL, ExceptionWrapper


@dataclass(frozen=True)
class WorkerInfo:
    """What ``get_worker_info()`` returns inside a worker. Mirrors torch's ``WorkerInfo``.

    ``dataset`` is this worker's own copy of the dataset, not the main process's object.
    (Torch's also has ``rng`` and ``worker_method``, for thread workers it does not expose.)
    """

    id: int
    num_workers: int
    seed: int
    dataset: object


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """This worker's ``WorkerInfo`` inside a DataLoader worker process, ``None`` elsewhere.

    An ``IterableDataset`` uses it to split its samples between workers; ``worker_init_fn``
    can use it to configure each worker's copy of the dataset.
    """
    return _worker_info


@dataclass(frozen=True)
class _IterableDatasetStopIteration:
    """Sent instead of a batch when this worker's copy of an IterableDataset is exhausted."""

    worker_id: int


@dataclass(frozen=True)
class _ResumeIteration:
    """Sent to persistent workers at a new epoch: start the dataset over, then acknowledge."""


def _worker_loop(
    dataset_kind,
    dataset,
    index_queue,
    data_queue,
    done_event,
    auto_collation,
    collate_fn,
    drop_last,
    base_seed,
    init_fn,
    worker_id,
    num_workers,
):
    from ..dataloader import _DatasetKind  # imported here: dataloader.py imports this module

    try:
        # One thread per worker: num_workers processes each using every core would fight.
        torch.set_num_threads(1)
        seed = base_seed + worker_id
        random.seed(seed)
        torch.manual_seed(seed)
        # A forked worker inherits NumPy's global state, identical in every worker, so it is
        # reseeded from (base_seed, worker_id). Torch's _generate_state is NumPy's SeedSequence
        # written out in Python; calling SeedSequence gives the same four words.
        mask = 0xFFFFFFFF
        entropy = [worker_id, base_seed & mask, base_seed >> 32, 0]
        np.random.seed(np.random.SeedSequence(entropy).generate_state(4))

        global _worker_info
        _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)

        # A failing worker_init_fn is reported as the answer to this worker's first task, so
        # the main process sees it in its usual place in the order.
        init_exception = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
            fetcher = _DatasetKind.create_fetcher(
                dataset_kind, dataset, auto_collation, collate_fn, drop_last
            )
        except Exception:
            init_exception = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")

        # After its IterableDataset ended, a worker answers nothing more until resumed or
        # told to exit (it cannot set done_event: that is shared by all workers).
        iteration_end = False
        manager_pid = os.getppid()
        while os.getppid() == manager_pid:  # a dead main process makes us an orphan: exit
            try:
                r = index_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)
            except queue.Empty:
                continue
            if isinstance(r, _ResumeIteration):
                data_queue.put((r, None))
                iteration_end = False
                fetcher = _DatasetKind.create_fetcher(
                    dataset_kind, dataset, auto_collation, collate_fn, drop_last
                )
                continue
            if r is None:
                break
            if done_event.is_set() or iteration_end:
                continue  # shutting down: skip the remaining tasks until the final None
            idx, index = r
            if init_exception is not None:
                data, init_exception = init_exception, None
            else:
                try:
                    data = fetcher.fetch(index)
                except Exception as e:
                    if isinstance(e, StopIteration) and dataset_kind == _DatasetKind.Iterable:
                        data = _IterableDatasetStopIteration(worker_id)
                        iteration_end = True
                    else:
                        data = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
            data_queue.put((idx, data))
            del data, idx, index, r  # don't hold the batch while waiting for the next task
    except KeyboardInterrupt:
        pass  # Ctrl-C reaches every process; the main process reports it
    if done_event.is_set():
        # Nobody reads the results any more: exit without waiting to flush them.
        data_queue.cancel_join_thread()
        data_queue.close()

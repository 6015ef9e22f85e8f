"""``DataLoader`` with single- and multi-process iterators. Mirrors torch/utils/data/dataloader.py.

The loader itself only validates arguments and picks a sampler; iterating it creates an
iterator. Both iterators draw ``_base_seed`` from torch's generator first (as torch does), so
the shuffling and the worker seeds follow torch's under the same ``torch.manual_seed``.

The multi-process iterator keeps ``prefetch_factor * num_workers`` batches in flight: it sends
``(task index, batch indices)`` to the workers round-robin, receives results in whatever order
they finish, and yields them in task order (``_task_info`` holds early arrivals).
"""

from __future__ import annotations

import itertools
import queue

import torch
import torch.multiprocessing as multiprocessing

from ._utils.collate import default_collate, default_convert
from ._utils.worker import ExceptionWrapper, _worker_loop
from .sampler import BatchSampler, RandomSampler, SequentialSampler


class DataLoader:
    """Batches a map-style dataset, optionally loading batches in worker processes."""

    def __init__(
        self,
        dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler=None,
        batch_sampler=None,
        num_workers: int = 0,
        collate_fn=None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn=None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
    ):
        if num_workers < 0:
            raise ValueError(
                "num_workers option should be non-negative; use num_workers=0 to disable multiprocessing."
            )
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing."
                "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None."
            )
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"
                )
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching and is mutually exclusive with drop_last"
            )
        if sampler is None:
            sampler = (
                RandomSampler(dataset, generator=generator)
                if shuffle
                else SequentialSampler(dataset)
            )
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset, self.num_workers, self.prefetch_factor = dataset, num_workers, prefetch_factor
        self.batch_size, self.drop_last, self.timeout = batch_size, drop_last, timeout
        self.sampler, self.batch_sampler, self.generator = sampler, batch_sampler, generator
        self.worker_init_fn, self.multiprocessing_context = worker_init_fn, multiprocessing_context
        self.pin_memory, self.persistent_workers = pin_memory, persistent_workers
        if collate_fn is None:
            collate_fn = default_collate if batch_sampler is not None else default_convert
        self.collate_fn = collate_fn

    @property
    def _index_sampler(self):
        # With auto-batching each "index" is a list of indices; without, a single index.
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def __iter__(self):
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        return _MultiProcessingDataLoaderIter(self)

    def __len__(self) -> int:
        return len(self._index_sampler)


class _BaseDataLoaderIter:
    def __init__(self, loader: DataLoader) -> None:
        self._dataset = loader.dataset
        self._auto_collation = loader.batch_sampler is not None
        self._collate_fn = loader.collate_fn
        self._sampler_iter = iter(loader._index_sampler)
        self._base_seed = (
            torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item()
        )
        self._num_yielded = 0
        self._len = len(loader)

    def __iter__(self):
        return self

    def _next_index(self):
        return next(self._sampler_iter)

    def __len__(self) -> int:
        return self._len

    def __next__(self):
        data = self._next_data()
        self._num_yielded += 1
        return data


class _SingleProcessDataLoaderIter(_BaseDataLoaderIter):
    """Fetch and collate in the main process, one batch per ``next``."""

    def _next_data(self):
        index = self._next_index()
        if self._auto_collation:
            return self._collate_fn([self._dataset[i] for i in index])
        return self._collate_fn(self._dataset[index])


class _MultiProcessingDataLoaderIter(_BaseDataLoaderIter):
    """Workers fetch and collate; the main process dispatches indices and restores the order."""

    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        self._num_workers, self._timeout = loader.num_workers, loader.timeout
        collate = (
            self._collate_fn
            if self._auto_collation
            else (lambda sample: self._collate_fn(sample[0]))
        )
        ctx = loader.multiprocessing_context or multiprocessing
        if isinstance(ctx, str):
            ctx = multiprocessing.get_context(ctx)
        self._worker_result_queue = ctx.Queue()
        self._workers_done_event = ctx.Event()
        self._index_queues, self._workers = [], []
        for i in range(self._num_workers):
            index_queue = ctx.Queue()
            w = ctx.Process(
                target=_worker_loop,
                args=(
                    self._dataset,
                    index_queue,
                    self._worker_result_queue,
                    self._workers_done_event,
                    collate,
                    self._base_seed + i,
                    i,
                    self._num_workers,
                    loader.worker_init_fn,
                ),
                daemon=True,
            )
            w.start()
            self._index_queues.append(index_queue)
            self._workers.append(w)
        self._worker_queue_idx_cycle = itertools.cycle(range(self._num_workers))
        self._send_idx = 0  # next task index to send
        self._rcvd_idx = 0  # next task index to yield
        self._task_info: dict[int, object] = {}  # task index -> result that arrived early
        self._shutdown = False
        for _ in range(loader.prefetch_factor * self._num_workers):
            self._try_put_index()

    def _try_put_index(self):
        try:
            index = self._next_index()
        except StopIteration:
            return
        worker = next(self._worker_queue_idx_cycle)
        self._index_queues[worker].put((self._send_idx, index if self._auto_collation else [index]))
        self._send_idx += 1

    def _next_data(self):
        while True:
            if self._rcvd_idx == self._send_idx:  # nothing in flight and nothing left to send
                self._shutdown_workers()
                raise StopIteration
            if self._rcvd_idx in self._task_info:
                data = self._task_info.pop(self._rcvd_idx)
                self._rcvd_idx += 1
                self._try_put_index()
                return self._process_data(data)
            try:
                idx, data = self._worker_result_queue.get(timeout=self._timeout or 300)
            except queue.Empty:
                self._shutdown_workers()
                raise RuntimeError(
                    f"DataLoader timed out after {self._timeout or 300} seconds"
                ) from None
            if idx is None:  # a worker failed before it could take a task (worker_init_fn)
                self._process_data(data)
            self._task_info[idx] = data

    def _process_data(self, data):
        if isinstance(data, ExceptionWrapper):
            self._shutdown_workers()
            data.reraise()
        return data

    def _shutdown_workers(self):
        if self._shutdown:
            return
        self._shutdown = True
        self._workers_done_event.set()
        for q in self._index_queues:
            q.put(None)
        for w in self._workers:
            w.join(timeout=5)
            if w.is_alive():
                w.terminate()
        for q in [*self._index_queues, self._worker_result_queue]:
            q.cancel_join_thread()
            q.close()

    def __del__(self):
        self._shutdown_workers()

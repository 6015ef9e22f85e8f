"""``DataLoader`` and its two iterators. Mirrors torch/utils/data/dataloader.py.

A DataLoader is sampler + batch sampler + fetch + collate. It only validates its arguments
and picks the samplers; iterating it creates an iterator that does the work. Each iterator
first draws ``_base_seed`` from torch's generator (or the loader's ``generator``), before the
sampler draws anything, as torch's does: so under one ``torch.manual_seed`` the shuffle order
and the workers' seeds, hence every random augmentation, equal torch's.

The multi-process iterator keeps ``prefetch_factor * num_workers`` tasks in flight. It sends
``(task idx, indices)`` to the workers' index queues round-robin, receives ``(task idx,
batch)`` from one shared result queue in whatever order the workers finish, and returns the
batches in task order, parking early arrivals in ``_task_info``.

With ``pin_memory=True``, batches are pinned where an accelerator exists (in the main process,
batch by batch: torch uses a pin-memory thread), and the loader warns as torch's does where none
exists. Left out from torch's file: the pin-memory thread, ``in_order=False``,
``pin_memory_device``,
DataPipes and distributed sharding, the SIGCHLD handler that reports a crashed worker at once
(here it is noticed within ``MP_STATUS_CHECK_INTERVAL`` seconds), the warnings about the
worker count and about an IterableDataset yielding more than its ``len``.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing as python_multiprocessing
import queue
import warnings

import torch
import torch.multiprocessing as multiprocessing

from . import _utils
from ._utils import ExceptionWrapper
from ._utils.collate import default_collate, default_convert
from ._utils.fetch import _IterableDatasetFetcher, _MapDatasetFetcher
from ._utils.pin_memory import pin_memory
from ._utils.worker import _IterableDatasetStopIteration, _ResumeIteration, _worker_loop
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler


class _DatasetKind:
    Map = 0
    Iterable = 1

    @staticmethod
    def create_fetcher(kind, dataset, auto_collation, collate_fn, drop_last):
        fetcher = _MapDatasetFetcher if kind == _DatasetKind.Map else _IterableDatasetFetcher
        return fetcher(dataset, auto_collation, collate_fn, drop_last)


class _InfiniteConstantSampler(Sampler):
    """``None`` forever: the sampler of an IterableDataset, whose fetcher ignores indices."""

    def __iter__(self):
        while True:
            yield None


class DataLoader:
    """Iterate over a dataset in batches, optionally loading them in worker processes.

    Mirrors ``torch.utils.data.DataLoader`` (same arguments and errors, less ``pin_memory_device``
    and ``in_order``). ``batch_size=None`` turns batching off: each item is one converted sample.
    """

    __initialized = False

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
    ) -> None:
        if num_workers < 0:
            raise ValueError(
                "num_workers option should be non-negative; "
                "use num_workers=0 to disable multiprocessing."
            )
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing."
                "let num_workers > 0 to enable multiprocessing, "
                "otherwise set prefetch_factor to None."
            )
        elif num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")

        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context

        # Dataset checks come first, so that a user learns that an iterable-style dataset
        # takes no sampler before spending time on the sampler's own errors.
        if isinstance(dataset, IterableDataset):
            self._dataset_kind = _DatasetKind.Iterable
            # The dataset decides the order, so there is nothing to shuffle or sample.
            if shuffle not in {False, None}:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified shuffle option, "
                    f"but got shuffle={shuffle}"
                )
            if sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified sampler option, "
                    f"but got sampler={sampler}"
                )
            if batch_sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified batch_sampler option, "
                    f"but got batch_sampler={batch_sampler}"
                )
        else:
            shuffle = bool(shuffle)
            self._dataset_kind = _DatasetKind.Map

        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            # A batch sampler decides the batches; the arguments that would build one conflict.
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive "
                    "with batch_size, shuffle, sampler, and drop_last"
                )
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching "
                "and is mutually exclusive with drop_last"
            )

        if sampler is None:
            if self._dataset_kind == _DatasetKind.Iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self._iterator = None
        self.__initialized = True

    @property
    def multiprocessing_context(self):
        return self.__multiprocessing_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, multiprocessing_context) -> None:
        if multiprocessing_context is not None:
            if self.num_workers == 0:
                raise ValueError(
                    "multiprocessing_context can only be used with multi-process loading "
                    f"(num_workers > 0), but got num_workers={self.num_workers}"
                )
            if isinstance(multiprocessing_context, str):
                valid_start_methods = multiprocessing.get_all_start_methods()
                if multiprocessing_context not in valid_start_methods:
                    raise ValueError(
                        "multiprocessing_context option should specify a valid start method in "
                        f"{valid_start_methods!r}, but got "
                        f"multiprocessing_context={multiprocessing_context!r}"
                    )
                multiprocessing_context = multiprocessing.get_context(multiprocessing_context)
            if not isinstance(multiprocessing_context, python_multiprocessing.context.BaseContext):
                raise TypeError(
                    "multiprocessing_context option should be a valid context object or a string "
                    "specifying the start method, but got "
                    f"multiprocessing_context={multiprocessing_context}"
                )
        self.__multiprocessing_context = multiprocessing_context

    def __setattr__(self, attr, val) -> None:
        # A live iterator (persistent workers) was built from these: changing them would
        # silently not apply.
        if self.__initialized and attr in (
            "batch_size",
            "batch_sampler",
            "sampler",
            "drop_last",
            "dataset",
            "persistent_workers",
        ):
            raise ValueError(
                f"{attr} attribute should not be set after {self.__class__.__name__} is initialized"
            )
        super().__setattr__(attr, val)

    def _get_iterator(self):
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        return _MultiProcessingDataLoaderIter(self)

    def __iter__(self):
        # Persistent workers outlive an epoch: the one iterator is reset instead of rebuilt.
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None:
                self._iterator = self._get_iterator()
            else:
                self._iterator._reset(self)
            return self._iterator
        return self._get_iterator()

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        # What the fetcher is fed: lists of indices with auto-batching, single indices without.
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self) -> int:
        if self._dataset_kind == _DatasetKind.Iterable:
            # Only an estimate: the dataset's own len, batched. With workers it is right only
            # if the dataset splits its samples between them.
            length = len(self.dataset)
            if self.batch_size is None:
                return length
            if self.drop_last:
                return length // self.batch_size
            return math.ceil(length / self.batch_size)
        return len(self._index_sampler)


class _BaseDataLoaderIter:
    def __init__(self, loader: DataLoader) -> None:
        self._dataset = loader.dataset
        self._dataset_kind = loader._dataset_kind
        self._auto_collation = loader._auto_collation
        self._drop_last = loader.drop_last
        self._index_sampler = loader._index_sampler
        self._num_workers = loader.num_workers
        self._timeout = loader.timeout
        self._collate_fn = loader.collate_fn
        self._persistent_workers = loader.persistent_workers
        if loader.pin_memory and not torch.accelerator.is_available():
            warnings.warn(
                "'pin_memory' argument is set as true but no accelerator is found, "
                "then device pinned memory won't be used.",
                stacklevel=2,
            )
        self._pin_memory = loader.pin_memory and torch.accelerator.is_available()
        self._sampler_iter = iter(self._index_sampler)
        # Drawn now, before a shuffling sampler draws its own seed at its first `next`: the
        # order in which torch's iterator consumes the generator.
        self._base_seed = (
            torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item()
        )

    def __iter__(self):
        return self

    def _reset(self, loader, first_iter=False) -> None:
        self._sampler_iter = iter(self._index_sampler)

    def _next_index(self):
        return next(self._sampler_iter)  # StopIteration ends the epoch

    def _next_data(self):
        raise NotImplementedError

    def __next__(self):
        return self._next_data()

    def __len__(self) -> int:
        return len(self._index_sampler)


class _SingleProcessDataLoaderIter(_BaseDataLoaderIter):
    """Fetch and collate in the main process, one batch per ``next``."""

    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        # timeout bounds the wait for a worker; torch rejects it here, when iteration starts.
        if self._timeout != 0:
            raise AssertionError("_SingleProcessDataLoaderIter requires timeout == 0")
        self._dataset_fetcher = _DatasetKind.create_fetcher(
            self._dataset_kind,
            self._dataset,
            self._auto_collation,
            self._collate_fn,
            self._drop_last,
        )

    def _next_data(self):
        index = self._next_index()
        data = self._dataset_fetcher.fetch(index)
        return pin_memory(data) if self._pin_memory else data


class _MultiProcessingDataLoaderIter(_BaseDataLoaderIter):
    """Workers fetch and collate; the main process hands out tasks and restores their order.

    Data flow: main ``(idx, indices)`` → ``_index_queues[w]`` → worker ``w`` → ``(idx,
    batch)`` → the one ``_worker_result_queue`` → main. Tasks go to the workers round-robin;
    ``prefetch_factor * num_workers`` are in flight, and each batch returned sends one more.
    ``_task_info[idx]`` is ``(worker_id,)`` while task ``idx`` is in flight and
    ``(worker_id, data)`` once its result arrived ahead of its turn.

    Shutdown, at the end of an epoch or from ``__del__`` after a ``break`` or an error: set
    ``_workers_done_event`` (workers skip the tasks still queued), send every worker ``None``,
    join them, and terminate any that has not exited in time.
    """

    _shutdown = True  # until workers are started, there is nothing for __del__ to stop

    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        self._prefetch_factor = loader.prefetch_factor
        # DataLoader accepts 0, but with nothing in flight an epoch would end at once.
        if self._prefetch_factor <= 0:
            raise AssertionError(
                "prefetch_factor must be greater than 0 for MultiProcessingDataLoaderIter"
            )
        ctx = loader.multiprocessing_context or multiprocessing
        self._worker_result_queue = ctx.Queue()
        self._workers_done_event = ctx.Event()
        self._shutdown = False
        self._index_queues, self._workers = [], []
        for i in range(self._num_workers):
            index_queue = ctx.Queue()
            # Tasks a dead worker will never read must not block this process's exit.
            index_queue.cancel_join_thread()
            w = ctx.Process(
                target=_worker_loop,
                args=(
                    self._dataset_kind,
                    self._dataset,
                    index_queue,
                    self._worker_result_queue,
                    self._workers_done_event,
                    self._auto_collation,
                    self._collate_fn,
                    self._drop_last,
                    self._base_seed,
                    loader.worker_init_fn,
                    i,
                    self._num_workers,
                ),
                daemon=True,  # never outlive the main process
            )
            w.start()
            self._index_queues.append(index_queue)
            self._workers.append(w)
        self._reset(loader, first_iter=True)

    def _reset(self, loader, first_iter=False) -> None:
        super()._reset(loader, first_iter)
        self._send_idx = 0  # index of the next task to send
        self._rcvd_idx = 0  # index of the next task to return
        self._task_info = {}
        self._workers_status = [True] * self._num_workers  # False: its IterableDataset ended
        self._worker_queue_idx_cycle = itertools.cycle(range(self._num_workers))
        if not first_iter:
            # A new epoch with persistent workers: each worker restarts its dataset and says
            # so; results of the last epoch still queued (after a `break`) arrive before that
            # acknowledgement and are dropped.
            for index_queue in self._index_queues:
                index_queue.put(_ResumeIteration())
            resumed = 0
            while resumed < self._num_workers:
                idx, _ = self._get_data()
                resumed += isinstance(idx, _ResumeIteration)
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    def _try_get_data(self, timeout):
        try:
            return True, self._worker_result_queue.get(timeout=timeout)
        except Exception as e:
            # No result in time, or a broken pipe: a dead worker would explain either.
            failed = [
                worker_id
                for worker_id, w in enumerate(self._workers)
                if self._workers_status[worker_id] and not w.is_alive()
            ]
            if failed:
                for worker_id in failed:
                    self._workers_status[worker_id] = False
                pids = ", ".join(str(self._workers[worker_id].pid) for worker_id in failed)
                raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly") from e
            if isinstance(e, queue.Empty):
                return False, None
            raise

    def _get_data(self):
        if self._timeout > 0:
            success, data = self._try_get_data(self._timeout)
            if not success:
                raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")
            return data
        while True:  # no timeout: wait forever, checking now and then that workers live
            success, data = self._try_get_data(_utils.MP_STATUS_CHECK_INTERVAL)
            if success:
                return data

    def _next_data(self):
        while True:
            # Skip tasks sent to a worker whose IterableDataset ended: they get no answer.
            while self._rcvd_idx < self._send_idx:
                info = self._task_info[self._rcvd_idx]
                if len(info) == 2 or self._workers_status[info[0]]:
                    break
                del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
            else:
                if not self._persistent_workers:
                    self._shutdown_workers()
                raise StopIteration

            if len(self._task_info[self._rcvd_idx]) == 2:  # arrived earlier, out of turn
                _, data = self._task_info.pop(self._rcvd_idx)
                self._rcvd_idx += 1
                return self._process_data(data)

            idx, data = self._get_data()
            if isinstance(data, _IterableDatasetStopIteration):
                if self._persistent_workers:
                    self._workers_status[data.worker_id] = False  # idle until the next epoch
                else:
                    self._mark_worker_as_unavailable(data.worker_id)
                self._try_put_index()
                continue
            if idx != self._rcvd_idx:
                self._task_info[idx] += (data,)  # park it until its turn
            else:
                del self._task_info[idx]
                self._rcvd_idx += 1
                return self._process_data(data)

    def _try_put_index(self) -> None:
        try:
            index = self._next_index()
        except StopIteration:
            return
        for _ in range(self._num_workers):  # the next active worker, round-robin
            worker_queue_idx = next(self._worker_queue_idx_cycle)
            if self._workers_status[worker_queue_idx]:
                break
        else:
            return  # every worker's IterableDataset has ended
        self._index_queues[worker_queue_idx].put((self._send_idx, index))
        self._task_info[self._send_idx] = (worker_queue_idx,)
        self._send_idx += 1

    def _process_data(self, data):
        # One task done, one sent: prefetch_factor * num_workers stay in flight. An error is
        # raised after that, so a caller who catches it can go on with the next batch.
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            data.reraise()
        return pin_memory(data) if self._pin_memory else data

    def _mark_worker_as_unavailable(self, worker_id: int) -> None:
        self._index_queues[worker_id].put(None)  # the worker exits when it reads this
        self._workers_status[worker_id] = False

    def _shutdown_workers(self) -> None:
        # At interpreter exit multiprocessing terminates daemonic workers itself.
        if _utils.python_exit_status or self._shutdown:
            return
        self._shutdown = True
        try:
            # done_event first: workers then skip any task still queued until their None.
            self._workers_done_event.set()
            for worker_id in range(self._num_workers):
                if self._persistent_workers or self._workers_status[worker_id]:
                    self._mark_worker_as_unavailable(worker_id)
            for w in self._workers:
                w.join(timeout=_utils.MP_STATUS_CHECK_INTERVAL)
            for index_queue in self._index_queues:
                index_queue.close()
        finally:
            for w in self._workers:  # stuck in a long __getitem__, or hung
                if w.is_alive():
                    w.terminate()
                    w.join(timeout=_utils.MP_STATUS_CHECK_INTERVAL)

    def __del__(self) -> None:
        # An early `break` or an error leaves the iterator unfinished: garbage collection
        # still stops its workers.
        self._shutdown_workers()

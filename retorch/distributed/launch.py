"""Start N local CPU processes on a gloo group, torchrun-style. Mirrors torch/distributed/run.py.

``torchrun --nproc-per-node N script.py`` starts N workers, gives each ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``, and makes them meet at a
rendezvous: a ``TCPStore`` (torch/csrc/distributed/c10d/TCPStore.cpp) that the launching agent
hosts and every worker connects to. ``launch`` does the same for a Python function: the
launcher hosts the store on 127.0.0.1 (port 0: the OS picks a free port, so parallel test
runs never collide), spawns the workers (torch.multiprocessing's ``spawn`` start method, as
torch/multiprocessing/spawn.py does), and each worker calls ``init_process_group("gloo")``
on that store before running ``fn(rank, world_size, *args)``.

Fail-fast, as torch/distributed/elastic/multiprocessing/api.py and spawn.py's
``ProcessContext.join`` do: the launcher polls its workers; the first one to raise sends its
traceback back, the launcher kills the others (they may be blocked in a collective waiting for
the dead rank, which would otherwise hang until gloo's own timeout) and raises
``WorkerFailed`` naming the rank and carrying its error (the earliest, by the time each
worker stamps on its failure: the peers of a dead rank fail too, a moment later). A run that has not finished within
``timeout`` seconds is killed the same way and raises ``TimeoutError`` naming the ranks still
running. Results come back pickled by value (not through shared memory), so a worker may exit
as soon as it has sent them.
"""

from __future__ import annotations

import datetime
import os
import pickle
import queue
import time
import traceback
from typing import Any, Callable

import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["WorkerFailed", "launch"]


class WorkerFailed(RuntimeError):
    """A worker raised; carries its rank, the exception's type name and its traceback.

    Mirrors torch.multiprocessing's ``ProcessRaisedException`` and elastic's
    ``ChildFailedError``.
    """

    def __init__(self, rank: int, error_type: str, message: str, tb: str):
        self.rank, self.error_type, self.error_message = rank, error_type, message
        self.traceback = tb
        super().__init__(f"rank {rank} failed with {error_type}: {message}\n\n{tb}")


def _worker(rank, world_size, port, timeout, fn, args, results, env):
    os.environ.update(env)
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    try:
        store = dist.TCPStore(
            "127.0.0.1",
            port,
            world_size,
            is_master=False,
            timeout=datetime.timedelta(seconds=timeout),
        )
        dist.init_process_group(
            "gloo",
            store=store,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout),
        )
        out = fn(rank, world_size, *args)
        dist.destroy_process_group()
        results.put((rank, "ok", pickle.dumps(out)))
    except BaseException as e:  # noqa: BLE001 - every failure, SystemExit included, is reported
        failed_at = time.time()
        results.put((rank, "error", (failed_at, type(e).__name__, str(e), traceback.format_exc())))
        raise SystemExit(1) from None


def _first_failure(rank, payload, results, procs, grace: float = 1.0) -> WorkerFailed:
    """The earliest failure: a rank's error closes its sockets, which fails its peers' pending
    receives a moment later; those secondary errors must not hide the cause (elastic's
    ``ChildFailedError.get_first_failure`` picks by timestamp too). A rank that died without
    a report (killed, ``os._exit``) is the cause: the others report what its death did."""
    failures = {rank: payload}
    end = time.monotonic() + grace
    while time.monotonic() < end:
        try:
            r, status, p = results.get(timeout=0.05)
        except queue.Empty:
            continue
        if status == "error":
            failures[r] = p
    for r, p in enumerate(procs):
        if p.exitcode not in (None, 0) and r not in failures and results.empty():
            return WorkerFailed(r, "ProcessExit", f"exit code {p.exitcode}", "")
    first = min(failures, key=lambda r: (failures[r][0], r))
    return WorkerFailed(first, *failures[first][1:])


def launch(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` processes on one gloo group.

    Returns the ranks' return values, in rank order. Raises ``WorkerFailed`` as soon as one
    rank raises (the others are killed), and ``TimeoutError`` after ``timeout`` seconds.
    ``fn`` must be importable by name (defined at a module's top level), as for any spawned
    process. ``env`` adds environment variables in the workers (the default sets
    ``OMP_NUM_THREADS=1``: N workers share the machine's cores).
    """
    env = {"OMP_NUM_THREADS": "1", **(env or {})}
    # The launcher hosts the rendezvous, as torchrun's agent does; port 0 picks a free port.
    store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker,
            args=(rank, world_size, store.port, timeout, fn, args, results, env),
            daemon=True,
        )
        for rank in range(world_size)
    ]
    for p in procs:
        p.start()
    outputs: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(outputs) < world_size:
            try:
                rank, status, payload = results.get(timeout=0.05)
            except queue.Empty:
                for rank, p in enumerate(procs):
                    # A worker killed by a signal (or os._exit) sends nothing: report its code.
                    if p.exitcode not in (None, 0) and rank not in outputs:
                        time.sleep(0.2)  # its report may still be in the pipe
                        if results.empty():
                            raise WorkerFailed(
                                rank, "ProcessExit", f"exit code {p.exitcode}", ""
                            ) from None
                        break
                if time.monotonic() > deadline:
                    running = [r for r in range(world_size) if r not in outputs]
                    raise TimeoutError(
                        f"launch: ranks {running} still running after {timeout:.0f} s; "
                        "they were killed (a rank waiting for a message nobody sends, or "
                        "a collective some rank skipped?)"
                    ) from None
                continue
            if status == "error":
                raise _first_failure(rank, payload, results, procs)
            outputs[rank] = pickle.loads(payload)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(timeout=5)
        results.close()
    return [outputs[r] for r in range(world_size)]

"""retorch.distributed.launch: torchrun-style start, rendezvous on a TCPStore, fail-fast."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

from retorch.distributed.launch import WorkerFailed, launch

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow


def _report(rank: int, world_size: int) -> dict:
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    env = {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")}
    return dict(env, rank=dist.get_rank(), world=dist.get_world_size(), total=t.item())


def _one_rank_raises(rank: int, world_size: int) -> None:
    if rank == 2:
        time.sleep(0.5)  # the others are already blocked, waiting for rank 2
        raise ValueError("bad batch on rank 2")
    t = torch.zeros(1)
    dist.recv(t, src=2)  # would wait until gloo's timeout without fail-fast


def _never_finishes(rank: int, world_size: int) -> None:
    t = torch.zeros(1)
    dist.recv(t, src=(rank + 1) % world_size)  # nobody ever sends


def _dies(rank: int, world_size: int) -> None:
    if rank == 1:
        os._exit(3)  # no exception, no report: only an exit code
    dist.barrier()


def test_ranks_meet_on_one_group_and_return_in_rank_order():
    out = launch(_report, 4, timeout=60)
    assert [o["rank"] for o in out] == [0, 1, 2, 3]
    assert [o["RANK"] for o in out] == ["0", "1", "2", "3"]
    assert {o["WORLD_SIZE"] for o in out} == {"4"} and {o["world"] for o in out} == {4}
    assert {o["MASTER_ADDR"] for o in out} == {"127.0.0.1"}
    assert {o["total"] for o in out} == {6.0}  # 0 + 1 + 2 + 3: one group, all four ranks


def test_a_raising_rank_fails_the_launch_with_its_error_fast():
    start = time.monotonic()
    with pytest.raises(WorkerFailed) as info:
        launch(_one_rank_raises, 4, timeout=60)
    elapsed = time.monotonic() - start
    assert info.value.rank == 2, str(info.value)  # the cause, not a peer that lost rank 2
    assert info.value.error_type == "ValueError"
    assert "bad batch on rank 2" in str(info.value)
    assert "_one_rank_raises" in info.value.traceback
    assert elapsed < 20, f"took {elapsed:.1f} s; the timeout was 60 s"


def test_a_hung_run_is_killed_at_the_timeout():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"ranks \[0, 1\] still running after 8 s"):
        launch(_never_finishes, 2, timeout=8)
    assert time.monotonic() - start < 8 + 10


def test_a_rank_that_exits_without_an_exception_is_reported():
    with pytest.raises(WorkerFailed, match="rank 1 failed with ProcessExit: exit code 3"):
        launch(_dies, 2, timeout=60)

"""retorch.distributed.collectives against torch.distributed's gloo collectives, 2 and 4 ranks.

Each test is one launch (starting a process costs about a second on a 2-core machine) whose
workers run every comparison and send back a row per case; the assertions run here.
Integers must be equal exactly; float32 within atol 1e-5 (N(0, 1) data summed over at most 4
ranks in another order: a few ulp of values below 8).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from retorch.distributed import collectives as C
from retorch.distributed.launch import launch

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow

SIZES = [1, 3, 10, 1000, 4097]  # 1 and 3 leave some ring chunks empty with 4 ranks
FLOAT_ATOL = 1e-5


def _data(rank: int, numel: int, dtype: torch.dtype, salt: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * salt + 17 * rank + numel)
    if dtype.is_floating_point:
        return torch.randn(numel, generator=g, dtype=dtype)
    return torch.randint(-1000, 1000, (numel,), generator=g, dtype=dtype)


def _agree(ours: torch.Tensor, theirs: torch.Tensor) -> tuple[bool, float]:
    diff = (ours.double() - theirs.double()).abs().max().item() if ours.numel() else 0.0
    if ours.dtype.is_floating_point:
        return ours.shape == theirs.shape and diff <= FLOAT_ATOL, diff
    return torch.equal(ours, theirs), diff


def _compare_collectives(rank: int, n: int) -> dict:
    rows = []
    for dtype in (torch.int64, torch.float32):
        for salt, numel in enumerate(SIZES):
            x = _data(rank, numel, dtype, salt)
            ours, theirs = C.ring_all_reduce(x.clone()), x.clone()
            dist.all_reduce(theirs)
            rows.append(("all_reduce", dtype, numel, *_agree(ours, theirs)))

            big = _data(rank, n * numel, dtype, salt + 50)
            ours, theirs = torch.empty(numel, dtype=dtype), torch.empty(numel, dtype=dtype)
            C.reduce_scatter(ours, big)
            dist.reduce_scatter_tensor(theirs, big.clone())
            rows.append(("reduce_scatter", dtype, numel, *_agree(ours, theirs)))

            ours, theirs = torch.empty(n * numel, dtype=dtype), torch.empty(n * numel, dtype=dtype)
            C.all_gather(ours, x)
            dist.all_gather_into_tensor(theirs, x)
            rows.append(("all_gather", dtype, numel, *_agree(ours, theirs)))

            for src in (0, n - 1):
                ours, theirs = x.clone(), x.clone()
                C.tree_broadcast(ours, src=src)
                dist.broadcast(theirs, src=src)
                rows.append((f"broadcast from {src}", dtype, numel, *_agree(ours, theirs)))

    counts = {}
    for numel in (4096, 1001):  # 1001 floats do not split evenly into 2 or 4 chunks
        x = torch.ones(numel)
        with C.count_bytes() as c:
            C.ring_all_reduce(x)
        counts[f"all_reduce {numel}"] = (c.bytes, C.ring_all_reduce_bytes(4 * numel, n))
        with C.count_bytes() as c:
            C.tree_broadcast(x, src=1)
        counts[f"broadcast {numel}"] = (c.bytes, C.tree_broadcast_bytes(4 * numel, n, rank, 1))
    return {"rows": rows, "bytes": counts}


@pytest.mark.parametrize("world_size", [2, 4])
def test_collectives_equal_torch_distributed(world_size):
    results = launch(_compare_collectives, world_size, timeout=60)
    for rank, res in enumerate(results):
        wrong = [row for row in res["rows"] if not row[3]]
        assert not wrong, f"rank {rank}: (op, dtype, numel, equal, max|diff|) {wrong}"
        assert len(res["rows"]) == 2 * len(SIZES) * 5
        sent, model = res["bytes"]["all_reduce 4096"]
        assert sent == model  # 4096 splits evenly: the cost model is exact
        sent, model = res["bytes"]["all_reduce 1001"]
        # uneven chunks: each rank sends 2(n-1) chunks of 1001//n or 1001//n + 1 floats
        assert abs(sent - model) <= 4 * 2 * (world_size - 1)
        sent, model = res["bytes"]["broadcast 4096"]
        assert sent == model
    # Every byte sent is received: the ring's total is n x the per-rank model.
    total = sum(res["bytes"]["all_reduce 1001"][0] for res in results)
    assert total == 2 * (world_size - 1) * 4 * 1001
    # The root of the tree sends ceil(log2 n) copies, leaves none.
    assert results[1]["bytes"]["broadcast 4096"][0] == 4 * 4096 * (world_size - 1).bit_length()

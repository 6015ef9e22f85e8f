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
from retorch.distributed.demos import _all_gather_single, _reduce_scatter_single
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
    if ours.dtype != theirs.dtype or ours.shape != theirs.shape:
        return False, diff  # torch.equal alone would take int32 for int64
    if ours.dtype.is_floating_point:
        return diff <= FLOAT_ATOL, diff
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


# ---- randomized layouts: strided, transposed, sliced, empty inputs ---------------------------------
# torch's gloo all_reduce cannot be the reference here: on a non-contiguous view it reduces the
# first numel() elements of memory from the view's data pointer (a (4, 6)[:, ::2] view gets rows
# 0-1 of the base reduced, and its own elements of rows 2-3 left alone). The reference is torch's
# collective on a contiguous copy; elements of the base outside the view must be left untouched.
DTYPES = [torch.int64, torch.int32, torch.float32, torch.float64]


def _random_view(rng, rank: int, dtype: torch.dtype):
    """A random base tensor (the same shape on every rank, values by rank) and a random
    non-contiguous or empty view of it."""
    ndim = rng.randint(1, 3)
    shape = [rng.choice([0, 1, 2, 3, 5, 7]) if rng.random() < 0.15 else rng.randint(1, 7)
             for _ in range(ndim)]  # fmt: skip
    g = torch.Generator().manual_seed(rng.randint(0, 10**6) + rank)
    base = torch.randint(-50, 50, shape, generator=g).to(dtype)
    view = base
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["t", "step", "narrow", "select"])
        if kind == "t" and view.dim() >= 2:
            a, b = rng.sample(range(view.dim()), 2)
            view = view.transpose(a, b)
        elif kind == "step" and view.dim() >= 1:
            d = rng.randrange(view.dim())
            view = view[(slice(None),) * d + (slice(rng.randint(0, 1), None, rng.randint(1, 3)),)]
        elif kind == "narrow" and view.dim() >= 1 and view.shape[0] > 1:
            view = view[1:]
        elif kind == "select" and view.dim() >= 2 and view.shape[-1] > 0:
            view = view[..., rng.randrange(view.shape[-1])]
    return base, view


def _compare_layouts(rank: int, n: int, seed: int, cases: int) -> list:
    import random

    rows = []
    for case in range(cases):
        dtype = random.Random(case).choice(DTYPES)
        for op in ("all_reduce", "broadcast", "reduce_scatter", "all_gather"):
            # the same layout on every rank and for every op; fresh values, different by rank
            # (after an all-reduce every rank holds the same values: a broadcast of those
            # would pass without moving anything)
            base, view = _random_view(random.Random(1000 * seed + case), rank, dtype)
            desc = (tuple(base.shape), tuple(view.shape), view.stride(), str(dtype))
            before = base.clone()
            ref = view.contiguous()
            if op == "all_reduce":
                dist.all_reduce(ref)
                out = C.ring_all_reduce(view)
            elif op == "broadcast":
                dist.broadcast(ref, src=n - 1)
                out = C.tree_broadcast(view, src=n - 1)
            elif op == "reduce_scatter":
                # the input: n multiples of the view, stacked, then transposed (strided)
                stacked = torch.stack([view * (k + 1) for k in range(n)])
                big = stacked.transpose(0, -1) if case % 2 and stacked.dim() > 1 else stacked
                before = big.clone()  # the input: must be left as it was
                out = torch.full((view.numel(),), -7, dtype=dtype)
                ref = torch.full((view.numel(),), -7, dtype=dtype)
                _reduce_scatter_single(ref, big.contiguous().reshape(-1))
                C.reduce_scatter(out, big)
                base = big
            else:
                out = torch.full((n * view.numel(),), -7, dtype=dtype)
                ref = torch.full((n * view.numel(),), -7, dtype=dtype)
                _all_gather_single(ref, view.contiguous().reshape(-1))
                C.all_gather(out, view)
            in_place = op in ("all_reduce", "broadcast")
            ok = out.dtype == ref.dtype and out.shape == ref.shape and torch.equal(out, ref)
            if in_place:
                ok = ok and out is view
                untouched = before.clone()
                untouched.as_strided(view.shape, view.stride(), view.storage_offset()).copy_(ref)
                ok = ok and torch.equal(base, untouched)  # the view's elements changed, no other
            else:
                ok = ok and torch.equal(base, before)  # the input is left as it was
            rows.append((op, desc, ok))
    return rows


@pytest.mark.parametrize("world_size, seed", [(2, 0), (3, 1), (4, 2)])
def test_collectives_on_random_strided_views_equal_torch_on_contiguous_copies(world_size, seed):
    cases = 40
    results = launch(_compare_layouts, world_size, seed, cases, timeout=90)
    for rank, rows in enumerate(results):
        assert len(rows) == 4 * cases
        wrong = [row for row in rows if not row[2]]
        assert not wrong, f"rank {rank}: {wrong[:5]}"
    layouts = [desc for _, desc, _ in results[0]]
    assert any(0 in d[1] for d in layouts)  # empty views are in the corpus
    assert sum(not _contiguous(*d[1:3]) for d in layouts) > len(layouts) // 3


def _contiguous(shape, stride) -> bool:
    return torch.empty(shape).stride() == tuple(stride) or 0 in shape

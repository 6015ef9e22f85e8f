"""retorch.nn.parallel.DistributedDataParallel against torch's, on gloo with 2 and 4 ranks.

Ours wraps a ``retorch.nn`` model (with and without overlap), torch's the same ``torch.nn``
model (same state_dict); each rank starts from a different random init (so the initial
broadcast matters) and trains on its own batches. Parameters must agree after every step within atol 1e-6 + rtol 1e-5 (both
average the same gradients, but the buckets differ: torch 2.13 starts with one bucket, so
gloo's additions may run in another order).
"""

from __future__ import annotations

import sys

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch.nn as rn
import retorch.optim as ro
from retorch.distributed.demos import torch_buckets
from retorch.distributed.launch import launch
from retorch.nn.parallel import DistributedDataParallel as DDP
from retorch.nn.parallel import compute_bucket_assignment_by_size

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow

ATOL, RTOL = 1e-6, 1e-5
TINY_CAP_MB = 300 / 2**20  # 300 bytes: 1 bucket at step 0, then 3 in arrival order


def _models(seed: int):
    torch.manual_seed(seed)
    ours = rn.Sequential(
        rn.Linear(8, 16), rn.ReLU(), rn.Linear(16, 16), rn.ReLU(), rn.Linear(16, 4)
    )
    theirs = torch.nn.Sequential(
        torch.nn.Linear(8, 16),
        torch.nn.ReLU(),
        torch.nn.Linear(16, 16),
        torch.nn.ReLU(),
        torch.nn.Linear(16, 4),
    )
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def _batch(step: int, rank: int):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)


def _max_diff(a, b) -> float:
    return max(
        (p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters(), strict=True)
    )


def _close(a, b) -> bool:
    return all(
        torch.allclose(p, q, atol=ATOL, rtol=RTOL)
        for p, q in zip(a.parameters(), b.parameters(), strict=True)
    )


def _train_side_by_side(rank: int, world: int, steps: int, cap_mb) -> dict:
    ours_m, theirs_m = _models(seed=rank)  # a different init on every rank
    rank0_init = _models(seed=0)[0]
    ours = DDP(ours_m, bucket_cap_mb=cap_mb)
    theirs = torch.nn.parallel.DistributedDataParallel(theirs_m, bucket_cap_mb=cap_mb)
    broadcast_ok = _max_diff(ours, rank0_init) == 0 and _max_diff(theirs, rank0_init) == 0
    late = DDP(_models(seed=rank)[0], bucket_cap_mb=cap_mb, overlap=False)
    opt_ours = ro.SGD(ours.parameters(), lr=0.05, momentum=0.9)
    opt_theirs = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9)
    opt_late = ro.SGD(late.parameters(), lr=0.05, momentum=0.9)
    diffs, agree, buckets = [], [], []
    for step in range(steps):
        for model, opt in ((ours, opt_ours), (theirs, opt_theirs), (late, opt_late)):
            opt.zero_grad()
            if step == 3:  # gradient accumulation: two micro-batches, one all-reduce
                with model.no_sync():
                    x, y = _batch(1000 + step, rank)
                    torch.nn.functional.mse_loss(model(x), y).backward()
            x, y = _batch(step, rank)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        buckets.append(
            ([list(b.param_indices) for b in ours.reducer.buckets], torch_buckets(theirs))
        )
        diffs.append(max(_max_diff(ours, theirs), _max_diff(late, theirs)))
        agree.append(_close(ours, theirs) and _close(late, theirs))
    return dict(
        broadcast_ok=broadcast_ok,
        diffs=diffs,
        agree=agree,
        buckets=buckets,
        logged=(ours._get_ddp_logging_data(), theirs._get_ddp_logging_data()),
        timeline=ours.timeline,
        late_timeline=late.timeline,
        replicas_equal=_replicas_equal(ours),
    )


def _replicas_equal(model) -> bool:
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    return all(torch.equal(g, flat) for g in gathered)


@pytest.mark.parametrize("world_size", [2, 4])
def test_ddp_trains_as_torch_ddp_for_20_steps(world_size):
    results = launch(_train_side_by_side, world_size, 20, TINY_CAP_MB, timeout=80)
    for rank, res in enumerate(results):
        assert res["broadcast_ok"], f"rank {rank} did not start from rank 0's parameters"
        assert len(res["diffs"]) == len(res["agree"]) == len(res["buckets"]) == 20
        bad = [
            (s, d)
            for s, (d, ok) in enumerate(zip(res["diffs"], res["agree"], strict=True))
            if not ok
        ]
        assert not bad, f"rank {rank}: (step, max |ours - torch|) beyond tolerance: {bad}"
        assert res["replicas_equal"]
        # The buckets each reducer held after every backward: torch's read from its C++ reducer.
        for step, (ours, theirs) in enumerate(res["buckets"]):
            assert ours == theirs, f"rank {rank}, step {step}: ours {ours}, torch's {theirs}"
        ours, theirs = res["logged"]
        for key in ("bucket_sizes", "rebuilt_per_bucket_param_indices", "rebuilt_bucket_sizes"):
            assert ours[key] == theirs[key], (key, ours[key], theirs[key])
    # What torch did (checked above against its reducer; spelled out here so that a torch that
    # changed its behaviour is noticed): bytes 512, 64, 1024, 64, 256, 16; one bucket for the
    # first backward, then the arrival order 5..0 cut at 300 bytes.
    assert results[0]["buckets"][0][1] == [[0, 1, 2, 3, 4, 5]]
    assert results[0]["buckets"][1][1] == [[5, 4, 3], [2], [1, 0]]
    # Overlap: the first bucket's all-reduce starts while gradients are still arriving.
    events = results[0]["timeline"]
    first_launch = next(t for kind, _, t in events if kind == "allreduce")
    last_grad = max(t for kind, _, t in events if kind == "grad")
    launches = [i for kind, i, _ in events if kind == "allreduce"]
    assert launches == [0, 1, 2] and first_launch < last_grad
    grads_before_first_launch = [i for kind, i, t in events if kind == "grad" and t <= first_launch]
    assert sorted(grads_before_first_launch) == [3, 4, 5]
    # overlap=False, the baseline: nothing is launched before the last gradient.
    events = results[0]["late_timeline"]
    first_launch = next(t for kind, _, t in events if kind == "allreduce")
    assert first_launch >= max(t for kind, _, t in events if kind == "grad")


class _Branches(rn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = rn.Linear(4, 4), rn.Linear(4, 4), rn.Linear(4, 4)

    def forward(self, x, use_b: bool):
        out = self.a(x)
        return out + self.b(x) if use_b else out  # c: never used


class _TorchBranches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    forward = _Branches.forward


BUCKET_TEST_SIZES = [300_000, 10, 70_000, 1, 262_144, 262_144, 5, 600_000, 5_400_000, 10]


def _flat(nn):
    class Flat(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            for i, n in enumerate(sizes):
                setattr(self, f"p{i}", nn.Parameter(torch.zeros(n)))

        def forward(self, x):
            return sum(p.sum() for p in self.parameters()) * x

    return Flat(BUCKET_TEST_SIZES)


def _logged_bucket_sizes(rank: int, world: int) -> dict:
    ours = DDP(_flat(rn), find_unused_parameters=True)
    theirs = torch.nn.parallel.DistributedDataParallel(_flat(torch.nn), find_unused_parameters=True)
    return dict(
        ours=", ".join(str(4 * b.buffer.numel()) for b in ours.reducer.buckets),
        theirs=theirs._get_ddp_logging_data()["bucket_sizes"],
    )


def test_default_buckets_equal_torch_reducers_logged_buckets():
    # With find_unused_parameters=True torch 2.13 buckets at construction by the 1 MiB / 25 MiB
    # rule, and its Reducer logs the sizes: "40, 26377216, 1200000" bytes for these tensors.
    ours, theirs = launch(_logged_bucket_sizes, 2, timeout=60)[0].values()
    assert ours == theirs and len(theirs.split(",")) == 3


def _unused_parameters(rank: int, world: int) -> dict:
    torch.manual_seed(0)
    ours_m, theirs_m = _Branches(), _TorchBranches()
    theirs_m.load_state_dict(ours_m.state_dict())
    ours = DDP(ours_m, find_unused_parameters=True)
    theirs = torch.nn.parallel.DistributedDataParallel(theirs_m, find_unused_parameters=True)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(rank))
    use_b = rank == 0  # b is used on rank 0 only; c on no rank
    for model in (ours, theirs):
        model(x, use_b).sum().backward()
    grads = {}
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        grads[name] = (
            p.grad is None,
            q.grad is None,
            p.grad is None
            or q.grad is None
            or torch.allclose(p.grad, q.grad, atol=ATOL, rtol=RTOL),
        )
    # Without find_unused_parameters: the next forward raises, as torch's does.
    errors = []
    for cls in (DDP, torch.nn.parallel.DistributedDataParallel):
        torch.manual_seed(0)
        model = cls(_Branches() if cls is DDP else _TorchBranches())
        model(x, True).sum().backward()  # c gets no gradient: its bucket is never reduced
        try:
            model(x, True)
            errors.append(None)
        except RuntimeError as e:
            errors.append(str(e))
    return dict(grads=grads, errors=errors)


def test_find_unused_parameters_and_the_error_without_it():
    results = launch(_unused_parameters, 2, timeout=60)
    for rank, res in enumerate(results):
        g = res["grads"]
        assert g["module.c.weight"][:2] == (True, True), "globally unused: grad stays None"
        assert g["module.b.weight"][:2] == (False, False), "used on rank 0: grad everywhere"
        assert all(ok for _, _, ok in g.values()), g
        ours, theirs = res["errors"]
        assert theirs is not None and ours is not None
        cut = theirs.index("\n In addition")  # torch's TORCH_DISTRIBUTED_DEBUG advice
        assert ours == theirs[:cut].replace("`torch.nn.parallel", "`retorch.nn.parallel")
        assert ours.endswith(f"rank {rank}: 4 5")


SIZES = [
    [100, 200, 300, 400],
    [300_000, 10, 70_000, 1, 262_144, 262_144, 5, 600_000],  # crosses 1 MiB, then 4 MiB
    [1] * 50,
    [262_144] * 9,  # exactly 1 MiB of float32 per tensor: the limit is reached, not passed
]


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize(
    "limits", [[2**20, 4 * 2**20], [4 * 2**20], [1000, 2000, 3000], [sys.maxsize]]
)
def test_bucket_assignment_equals_torch(sizes, limits):
    tensors = [torch.empty(n) for n in sizes]
    expected = dist._compute_bucket_assignment_by_size(tensors, limits)
    assert compute_bucket_assignment_by_size(tensors, limits) == tuple(map(list, expected))


def test_bucket_assignment_equals_torch_for_mixed_dtypes():
    tensors = [
        torch.empty(n, dtype=d)
        for n, d in [
            (300, torch.float32),
            (200, torch.float64),
            (300, torch.float32),
            (10, torch.float64),
            (900, torch.float32),
            (5, torch.float16),
        ]
    ]
    for limits in ([1000, 3000], [500], [1200, 2400, 4800]):
        expected = dist._compute_bucket_assignment_by_size(tensors, limits)
        assert compute_bucket_assignment_by_size(tensors, limits) == tuple(map(list, expected))


def test_bucket_assignment_equals_torch_in_a_given_order():
    # The rebuild after the first iteration passes the order gradients arrived in. (With
    # several dtypes torch appends the unfilled buckets in its hash map's order: one dtype.)
    tensors = [torch.empty(n) for n in [300, 200, 300, 10, 900, 5, 70]]
    order = [5, 2, 0, 6, 4, 1, 3]
    for limits in ([1000, 3000], [500], [1200, 2400, 4800]):
        expected = dist._compute_bucket_assignment_by_size(tensors, limits, [], order)
        assert compute_bucket_assignment_by_size(tensors, limits, order) == tuple(
            map(list, expected)
        )


# ---- randomized: bucket assignment and rebuild against torch ------------------------------------
def _permuted_chain(nn, widths, order, biases):
    """Linear layers applied in chain order but registered in ``order``: the gradients then
    arrive in an order that is neither registration order nor its reverse."""

    class Chain(nn.Module):
        def __init__(self):
            super().__init__()
            for i in order:
                setattr(self, f"l{i}", nn.Linear(widths[i], widths[i + 1], bias=biases[i]))

        def forward(self, x):
            for i in range(len(order)):
                x = getattr(self, f"l{i}")(x)
            return x

    return Chain()


def _random_case(rng):
    n = rng.randint(1, 6)
    widths = [rng.randint(1, 40) for _ in range(n + 1)]
    order = rng.sample(range(n), n)
    biases = [rng.random() < 0.7 for _ in range(n)]
    cap_mb = rng.choice([None, rng.randint(1, 8000) / 2**20])
    find_unused = rng.random() < 0.25
    return widths, order, biases, cap_mb, find_unused


def _random_rebuilds(rank: int, world: int, seed: int, cases: int) -> list:
    import random

    rows = []
    for case in range(cases):
        rng = random.Random(1000 * seed + case)  # the same model on every rank
        widths, order, biases, cap_mb, find_unused = _random_case(rng)
        torch.manual_seed(case)
        ours = DDP(
            _permuted_chain(rn, widths, order, biases),
            bucket_cap_mb=cap_mb,
            find_unused_parameters=find_unused,
        )
        theirs = torch.nn.parallel.DistributedDataParallel(
            _permuted_chain(torch.nn, widths, order, biases),
            bucket_cap_mb=cap_mb,
            find_unused_parameters=find_unused,
        )
        seen = []
        for step in range(3):
            x = torch.randn(3, widths[0], generator=torch.Generator().manual_seed(step + rank))
            for model in (ours, theirs):
                model(x).square().sum().backward()
            seen.append(
                ([list(b.param_indices) for b in ours.reducer.buckets], torch_buckets(theirs))
            )
        rows.append(((widths, order, biases, cap_mb, find_unused), seen))
    return rows


@pytest.mark.parametrize("world_size, seed", [(2, 0), (3, 1)])
def test_buckets_at_step_0_and_after_the_rebuild_equal_torchs_on_random_models(world_size, seed):
    # Random chains (1-6 layers, widths 1-40, some without bias, registered in a shuffled order),
    # caps from 1 byte to 8000 bytes or the default, find_unused_parameters on or off: the
    # buckets after each of three backwards, ours against those torch's reducer holds.
    cases = 12
    results = launch(_random_rebuilds, world_size, seed, cases, timeout=120)
    rebuilt = 0
    for rank, rows in enumerate(results):
        assert len(rows) == cases
        for config, seen in rows:
            assert len(seen) == 3
            for step, (ours, theirs) in enumerate(seen):
                assert ours == theirs, f"rank {rank} {config}, step {step}: {ours} != {theirs}"
            rebuilt += seen[0][1] != seen[1][1]
    assert rebuilt > 0  # the corpus exercises the rebuild, not only the single bucket


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    sizes=st.lists(
        st.tuples(st.integers(0, 3000), st.sampled_from([torch.float32, torch.float64])),
        min_size=1,
        max_size=12,
    ),
    limits=st.lists(st.integers(1, 20_000), min_size=1, max_size=3),
    data=st.data(),
)
def test_bucket_assignment_equals_torch_on_random_tensors(sizes, limits, data):
    tensors = [torch.empty(n, dtype=d) for n, d in sizes]
    expected = dist._compute_bucket_assignment_by_size(tensors, limits)
    assert compute_bucket_assignment_by_size(tensors, limits) == tuple(map(list, expected))
    # In a given order (the rebuild's), one dtype: torch appends the unfilled buckets of
    # several dtypes in its hash map's order, which is not part of its contract.
    one = [torch.empty(n) for n, _ in sizes]
    order = data.draw(st.permutations(range(len(one))))
    expected = dist._compute_bucket_assignment_by_size(one, limits, [], order)
    assert compute_bucket_assignment_by_size(one, limits, order) == tuple(map(list, expected))


def _clone_hook(state, bucket):
    """A user's hook that reduces a copy: DDP must copy the future's value into the bucket."""
    copy = bucket.buffer().clone().div_(dist.get_world_size(state))
    return (
        dist.all_reduce(copy, group=state, async_op=True)
        .get_future()
        .then(lambda fut: fut.value()[0])
    )


def _with_comm_hooks(rank: int, world: int, steps: int) -> dict:
    """DDP with each built-in comm hook, ours beside torch's, one bucket size for both so the
    same gradients meet in the same all-reduce: parameters after every step."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as torch_hooks

    from retorch.distributed.algorithms.ddp_comm_hooks import default_hooks as our_hooks

    out = {}
    torch_hooks.clone_hook = our_hooks.clone_hook = _clone_hook
    for name in ("allreduce_hook", "fp16_compress_hook", "clone_hook"):
        ours_m, theirs_m = _models(seed=rank)
        ours = DDP(ours_m, bucket_cap_mb=TINY_CAP_MB)
        theirs = torch.nn.parallel.DistributedDataParallel(theirs_m, bucket_cap_mb=TINY_CAP_MB)
        ours.register_comm_hook(None, getattr(our_hooks, name))
        theirs.register_comm_hook(None, getattr(torch_hooks, name))
        opt_ours = ro.SGD(ours.parameters(), lr=0.05)
        opt_theirs = torch.optim.SGD(theirs.parameters(), lr=0.05)
        diffs = []
        for step in range(steps):
            for model, opt in ((ours, opt_ours), (theirs, opt_theirs)):
                opt.zero_grad()
                x, y = _batch(step, rank)
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            diffs.append(_max_diff(ours, theirs))
        out[name] = diffs
    # the float16 hook rounds: ours with it against torch's default all-reduce differ
    plain = torch.nn.parallel.DistributedDataParallel(_models(seed=rank)[1])
    half = DDP(_models(seed=rank)[0])
    half.register_comm_hook(None, our_hooks.fp16_compress_hook)
    for model in (plain, half):
        x, y = _batch(0, rank)
        torch.nn.functional.mse_loss(model(x), y).backward()
    grads = zip(plain.parameters(), half.parameters(), strict=True)
    out["fp16 vs default grad diff"] = max((p.grad - q.grad).abs().max().item() for p, q in grads)
    return out


def test_comm_hooks_reduce_as_torch_s_built_in_hooks():
    for rank, res in enumerate(launch(_with_comm_hooks, 2, 6, timeout=90)):
        assert res["allreduce_hook"] == [0.0] * 6, (rank, res)
        assert res["fp16_compress_hook"] == [0.0] * 6, (rank, res)
        assert res["clone_hook"] == [0.0] * 6, (rank, res)
        assert 0 < res["fp16 vs default grad diff"] < 1e-3, (rank, res)

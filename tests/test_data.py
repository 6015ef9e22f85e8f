"""retorch.utils.data against torch.utils.data under the same seeds."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.utils.data as td
from hypothesis import given
from hypothesis import strategies as st

import retorch.utils.data as rd

BOTH = [rd, td]


class Noisy:
    """Draws from torch's RNG in __getitem__: equal batches prove equal worker seeding."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"x": torch.rand(2) + i, "i": i, "name": f"s{i}"}


class WorkerSeen:
    def __len__(self):
        return 6

    def __getitem__(self, i):
        info = (rd if WorkerSeen.lib == "rd" else td).get_worker_info()
        return (
            torch.tensor([info.id, info.num_workers, info.seed % 1000])
            if info
            else torch.tensor([-1, 0, 0])
        )


class Failing:
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise KeyError("sample 5 is corrupt") if False else ValueError("sample 5 is corrupt")
        return i


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b) and a.dtype == b.dtype
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _batches(lib, seed=7, **kwargs):
    torch.manual_seed(seed)
    return list(lib.DataLoader(Noisy(kwargs.pop("n", 23)), **kwargs))


@given(
    n=st.integers(1, 60),
    replacement=st.booleans(),
    num_samples=st.none() | st.integers(1, 80),
    seed=st.integers(0, 99),
)
def test_random_sampler_order_matches_torch(n, replacement, num_samples, seed):
    orders = []
    for lib in BOTH:
        torch.manual_seed(seed)
        orders.append(
            list(lib.RandomSampler(range(n), replacement=replacement, num_samples=num_samples))
        )
        g = torch.Generator().manual_seed(seed)
        orders.append(list(lib.RandomSampler(range(n), generator=g)))
    assert orders[0] == orders[2] and orders[1] == orders[3]


@given(n=st.integers(0, 50), batch_size=st.integers(1, 9), drop_last=st.booleans())
def test_batch_sampler_matches_torch(n, batch_size, drop_last):
    ours = rd.BatchSampler(rd.SequentialSampler(range(n)), batch_size, drop_last)
    theirs = td.BatchSampler(td.SequentialSampler(range(n)), batch_size, drop_last)
    assert list(ours) == list(theirs) and len(ours) == len(theirs)


Point = collections.namedtuple("Point", "x y")


@given(st.integers(1, 4))
def test_default_collate_matches_torch_on_nested_samples(b):
    batch = [
        {
            "t": torch.full((2,), float(i)),
            "n": (i, 0.5 * i, True),
            "p": Point(i, torch.ones(1)),
            "s": f"s{i}",
        }
        for i in range(b)
    ]
    assert _same(rd.default_collate(batch), td.default_collate(batch))
    with pytest.raises(TypeError):
        td.default_collate([object()])
    with pytest.raises(TypeError, match="default_collate"):
        rd.default_collate([object()])


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_single_process_batches_match_torch(shuffle, drop_last):
    assert _same(
        _batches(rd, shuffle=shuffle, drop_last=drop_last, batch_size=4),
        _batches(td, shuffle=shuffle, drop_last=drop_last, batch_size=4),
    )
    assert _same(_batches(rd, batch_size=None, n=5), _batches(td, batch_size=None, n=5))
    assert len(rd.DataLoader(Noisy(23), batch_size=4, drop_last=drop_last)) == len(
        td.DataLoader(Noisy(23), batch_size=4, drop_last=drop_last)
    )


def test_two_workers_keep_order_and_seeding():
    ours = _batches(rd, shuffle=True, batch_size=3, num_workers=2)
    theirs = _batches(td, shuffle=True, batch_size=3, num_workers=2)
    assert _same(ours, theirs)


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_workers_match_torch(num_workers):
    for kw in [
        dict(shuffle=True, batch_size=5, prefetch_factor=1),
        dict(shuffle=False, batch_size=2, drop_last=True),
    ]:
        assert _same(
            _batches(rd, num_workers=num_workers, **kw), _batches(td, num_workers=num_workers, **kw)
        )


@pytest.mark.slow
def test_worker_info_matches_torch():
    results = []
    for lib in ["rd", "td"]:
        WorkerSeen.lib = lib
        torch.manual_seed(3)
        mod = rd if lib == "rd" else td
        results.append(
            torch.cat(list(mod.DataLoader(WorkerSeen(), batch_size=None, num_workers=2)))
        )
    assert torch.equal(results[0], results[1])


def test_worker_error_reraised_with_its_traceback():
    messages = []
    for lib in BOTH:
        with pytest.raises(ValueError) as info:
            list(lib.DataLoader(Failing(), batch_size=2, num_workers=2))
        messages.append(str(info.value))
    for text in messages:
        assert text.startswith(
            "Caught ValueError in DataLoader worker process 0.\nOriginal Traceback"
        )
        assert "sample 5 is corrupt" in text and "__getitem__" in text


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_workers=-1),
        dict(timeout=-1),
        dict(prefetch_factor=2),
        dict(persistent_workers=True),
        dict(sampler=[0, 1], shuffle=True),
        dict(batch_sampler=[[0]], batch_size=2),
        dict(batch_size=None, drop_last=True),
    ],
)
def test_argument_errors_match_torch(kwargs):
    with pytest.raises(ValueError) as theirs:
        td.DataLoader(Noisy(4), **kwargs)
    with pytest.raises(ValueError) as ours:
        rd.DataLoader(Noisy(4), **kwargs)
    assert str(ours.value) == str(theirs.value)

"""retorch.utils.data against torch.utils.data: same seeds, same orders, same batches, same errors.

Multi-process loaders use the platform's default start method ("fork" on Linux), as torch's
do. Each one is given a ``timeout``, so that a broken worker fails its test instead of hanging
it; only ``test_two_workers_match_torch`` runs in the fast subset.
"""

from __future__ import annotations

import collections
import collections.abc
import gc
import os
import random
import time
import types
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as td
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch.utils.data as rd
from retorch.utils.data import _utils as rd_utils
from retorch.utils.data._utils.collate import collate, default_collate_fn_map

BOTH = (rd, td)
TIMEOUT = 60  # seconds a multi-process test may wait for one batch
Point = collections.namedtuple("Point", "x y")


def _same(a, b) -> bool:
    """Equal values of the same types all the way down (tensors: same dtype, torch.equal)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def _epoch(lib, dataset, seed=7, **kwargs) -> list:
    _seed_all(seed)
    if kwargs.get("num_workers"):
        kwargs.setdefault("timeout", TIMEOUT)
    return list(lib.DataLoader(dataset, **kwargs))


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as e:  # noqa: B036 (whatever it is, the test compares it)
        return e
    raise AssertionError(f"{fn} did not raise")


def _same_error(fn_ours, fn_theirs) -> str:
    """Both raise the same exception type with the same message; returns the message."""
    ours, theirs = _raised(fn_ours), _raised(fn_theirs)
    assert type(ours) is type(theirs), (ours, theirs)
    assert str(ours) == str(theirs)
    return str(ours)


class Augmented:
    """Draws from torch's, NumPy's and Python's generators in __getitem__, as augmentation does:
    equal batches from worker processes prove that the workers are seeded alike."""

    def __init__(self, n: int = 23):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {
            "x": torch.rand(2) + i,
            "np": np.random.rand(),
            "py": random.random(),
            "i": i,
            "name": f"s{i}",
        }


class UnevenlySlow:
    """Every third sample takes 20 ms, so workers finish their tasks out of turn."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        if i % 3 == 0:
            time.sleep(0.02)
        return torch.tensor([i])


class WorkerSeen:
    """Returns what its library's get_worker_info() says inside the worker."""

    def __init__(self, lib):
        self.lib = lib

    def __len__(self):
        return 6

    def __getitem__(self, i):
        info = self.lib.get_worker_info()
        return (info.id, info.num_workers, info.seed, info.dataset is self, torch.rand(1))


class Offset:
    """worker_init_fn sets ``offset`` on each worker's copy."""

    offset = 0

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return i + self.offset


class Corrupt:
    def __init__(self, error=ValueError):
        self.error = error

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise self.error("sample 5 is corrupt")
        return i


class TwoArgError(Exception):
    def __init__(self, a, b):
        super().__init__(a, b)


class NeedsTwoArgs:
    def __len__(self):
        return 2

    def __getitem__(self, i):
        raise TwoArgError("a", "b")


class Dies:
    """A worker process that dies at sample 2. Use it unbatched: a batch is a tensor, sent as
    a handle that the main process fetches from the worker, and fetching it from a dead worker
    can fail first, with a ConnectionResetError (in torch's loader as in ours)."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 2:
            os._exit(3)
        return i


class Sleeps:
    def __len__(self):
        return 4

    def __getitem__(self, i):
        time.sleep(1.0)
        return i


class Batched:
    """Has __getitems__: the loader fetches a batch in one call."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        raise AssertionError("__getitems__ should have been used")

    def __getitems__(self, indices):
        return [10 * i for i in indices]


class EagerShuffle:
    """A sampler whose __iter__ draws at once (not a generator): it reveals how many times the
    loader calls iter() on it, and where, relative to the base seed."""

    def __len__(self):
        return 9

    def __iter__(self):
        return iter(torch.randperm(9).tolist())


class _Stream:
    """0..n-1, or with ``shard`` this worker's share (every num_workers-th from its id)."""

    def __init__(self, n, shard=False):
        self.n, self.shard = n, shard

    def __len__(self):
        return self.n

    def __iter__(self):
        info = self.lib.get_worker_info()
        if self.shard and info is not None:
            return iter(range(info.id, self.n, info.num_workers))
        return iter(range(self.n))


class RStream(_Stream, rd.IterableDataset):
    lib = rd


class TStream(_Stream, td.IterableDataset):
    lib = td


# ---------------------------------------------------------------------------- samplers


@given(
    n=st.integers(1, 60),
    replacement=st.booleans(),
    num_samples=st.none() | st.integers(1, 100),
    seed=st.integers(0, 2**32 - 1),
    own_generator=st.booleans(),
)
def test_random_sampler_matches_torch(n, replacement, num_samples, seed, own_generator):
    runs = []
    for lib in BOTH:
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed + 1) if own_generator else None
        sampler = lib.RandomSampler(range(n), replacement, num_samples, generator=generator)
        # Two epochs, then a draw from each generator: orders and generator states agree.
        runs.append(
            [
                list(sampler),
                list(sampler),
                len(sampler),
                torch.rand(2),
                torch.rand(2, generator=generator),
            ]
        )
    assert _same(runs[0], runs[1])


def test_sequential_sampler_and_errors_match_torch():
    assert list(rd.SequentialSampler("abc")) == list(td.SequentialSampler("abc")) == [0, 1, 2]
    for kwargs in [dict(replacement=1), dict(num_samples=0), dict(num_samples=2.0)]:
        _same_error(
            lambda: rd.RandomSampler(range(3), **kwargs),
            lambda: td.RandomSampler(range(3), **kwargs),
        )
    for args in [(0, False), (True, False), (2.0, False), (2, 1)]:
        _same_error(
            lambda: rd.BatchSampler(range(3), *args), lambda: td.BatchSampler(range(3), *args)
        )
    with pytest.raises(TypeError):  # like torch's, the base class defines no __len__
        len(rd.Sampler())


@given(
    n=st.integers(0, 50),
    batch_size=st.integers(1, 9),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
)
def test_batch_sampler_matches_torch(n, batch_size, drop_last, shuffle):
    runs = []
    for lib in BOTH:
        torch.manual_seed(n)
        inner = lib.RandomSampler(range(n)) if shuffle and n else lib.SequentialSampler(range(n))
        sampler = lib.BatchSampler(inner, batch_size, drop_last)
        runs.append((list(sampler), len(sampler)))
    assert runs[0] == runs[1]


# ---------------------------------------------------------------------------- collate

LEAVES = st.sampled_from(["int", "float", "bool", "str", "bytes", "tensor", "array", "np_scalar"])
SCHEMAS = st.recursive(
    LEAVES,
    lambda kids: st.tuples(
        st.sampled_from(["list", "tuple", "point", "dict", "ordered"]),
        st.lists(kids, min_size=2, max_size=3),
    ),
    max_leaves=8,
)


def _sample(schema, rng: random.Random):
    """One sample of the given structure, with leaf values drawn from ``rng``."""
    if isinstance(schema, str):
        v = rng.randint(-50, 50)
        return {
            "int": lambda: v,
            "float": lambda: v / 4,
            "bool": lambda: v % 2 == 0,
            "str": lambda: f"s{v}",
            "bytes": lambda: b"b%d" % v,
            "tensor": lambda: torch.tensor([v, -v / 3]),
            "array": lambda: np.array([[v], [v + 1]], dtype=np.int16),
            "np_scalar": lambda: np.float32(v / 8),
        }[schema]()
    kind, kids = schema
    parts = [_sample(kid, rng) for kid in kids]
    if kind == "list":
        return parts
    if kind == "tuple":
        return tuple(parts)
    if kind == "point":
        return Point(parts[0], parts[1:])
    items = {f"k{j}": part for j, part in enumerate(parts)}
    return items if kind == "dict" else collections.OrderedDict(reversed(items.items()))


@given(schema=SCHEMAS, batch_size=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_default_collate_and_convert_match_torch(schema, batch_size, seed):
    rng = random.Random(seed)
    batch = [_sample(schema, rng) for _ in range(batch_size)]
    assert _same(rd.default_collate(batch), td.default_collate(batch))
    assert _same(rd.default_convert(batch[0]), td.default_convert(batch[0]))


def test_collate_keeps_mapping_types_and_takes_new_types():
    batch = [collections.defaultdict(list, a=i) for i in range(3)]
    ours, theirs = rd.default_collate(batch), td.default_collate(batch)
    assert _same(dict(ours), dict(theirs)) and ours.default_factory is list
    assert _same(rd.default_collate([["a", 1], ["b", 2]]), [("a", "b"), torch.tensor([1, 2])])

    class Money(float):
        pass

    # A registered type is looked up before the built-in rules (float would make float64).
    to_cents = {Money: lambda batch, collate_fn_map: torch.tensor([round(m * 100) for m in batch])}
    mapping = {**default_collate_fn_map, **to_cents}
    batch = [{"price": Money(1.5)}, {"price": Money(2.25)}]
    assert _same(collate(batch, collate_fn_map=mapping), {"price": torch.tensor([150, 225])})
    assert _same(rd.default_collate(batch), td.default_collate(batch))


@pytest.mark.parametrize(
    "batch",
    [
        [object()],
        [[1, 2], [3]],
        [np.array(["a", "b"])],
        [{"a": None}],
    ],
    ids=["object", "uneven lists", "numpy strings", "None"],
)
def test_collate_errors_match_torch(batch):
    message = _same_error(lambda: rd.default_collate(batch), lambda: td.default_collate(batch))
    assert "default_collate" in message or "equal size" in message


# ---------------------------------------------------------------------------- single process


@settings(max_examples=25)
@given(
    n=st.integers(1, 30),
    batch_size=st.none() | st.integers(1, 8),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    own_generator=st.booleans(),
)
def test_single_process_loader_matches_torch(
    n, batch_size, shuffle, drop_last, seed, own_generator
):
    drop_last = drop_last and batch_size is not None
    runs = []
    for lib in BOTH:
        generator = torch.Generator().manual_seed(seed + 1) if own_generator else None
        kwargs = dict(batch_size=batch_size, shuffle=shuffle, drop_last=drop_last)
        loader = lib.DataLoader(Augmented(n), generator=generator, **kwargs)
        runs.append((_epoch(lib, Augmented(n), seed, generator=generator, **kwargs), len(loader)))
        runs.append(torch.rand(1))  # the global generator was consumed alike
    assert _same(runs[0], runs[2]) and torch.equal(runs[1], runs[3])


def test_loader_options_match_torch():
    x, y = torch.arange(12.0).view(6, 2), torch.arange(6)
    cases = [
        lambda lib: dict(dataset=lib.TensorDataset(x, y), batch_size=4, shuffle=True),
        lambda lib: dict(dataset=Augmented(9), sampler=[8, 1, 1, 3], batch_size=3),
        lambda lib: dict(
            dataset=Augmented(9),
            batch_sampler=lib.BatchSampler(lib.RandomSampler(range(9)), 4, drop_last=True),
        ),
        lambda lib: dict(dataset=Augmented(9), sampler=EagerShuffle(), batch_size=None),
        lambda lib: dict(dataset=Augmented(5), collate_fn=lambda samples: len(samples)),
        lambda lib: dict(dataset=Batched(), batch_size=4),
    ]
    for case in cases:
        ours, theirs = _epoch(rd, **case(rd)), _epoch(td, **case(td))
        assert _same(ours, theirs)
    _same_error(lambda: rd.TensorDataset(x, y[:3]), lambda: td.TensorDataset(x, y[:3]))


@pytest.mark.parametrize(
    "batch_size, drop_last", [(None, False), (1, False), (3, False), (1, True), (3, True)]
)
def test_iterable_dataset_single_process_matches_torch(batch_size, drop_last):
    kwargs = dict(batch_size=batch_size, drop_last=drop_last)
    assert _same(_epoch(rd, RStream(8), **kwargs), _epoch(td, TStream(8), **kwargs))
    assert len(rd.DataLoader(RStream(8), **kwargs)) == len(td.DataLoader(TStream(8), **kwargs))


def _argument_cases():
    yield "num_workers=-1", lambda lib: lib.DataLoader(Augmented(4), num_workers=-1)
    yield "timeout=-1", lambda lib: lib.DataLoader(Augmented(4), timeout=-1)
    yield "prefetch w/o workers", lambda lib: lib.DataLoader(Augmented(4), prefetch_factor=2)
    yield "prefetch<0", lambda lib: lib.DataLoader(Augmented(4), num_workers=1, prefetch_factor=-1)
    yield (
        "prefetch=0",
        lambda lib: iter(lib.DataLoader(Augmented(4), num_workers=1, prefetch_factor=0)),
    )
    yield "persistent", lambda lib: lib.DataLoader(Augmented(4), persistent_workers=True)
    yield "sampler+shuffle", lambda lib: lib.DataLoader(Augmented(4), sampler=[0], shuffle=True)
    yield "batch_sampler+bs", lambda lib: lib.DataLoader(Augmented(4), [[0]], batch_size=2)
    yield (
        "batch_sampler+drop_last",
        lambda lib: lib.DataLoader(Augmented(4), batch_sampler=[[0]], drop_last=True),
    )
    yield "bs=None+drop_last", lambda lib: lib.DataLoader(Augmented(4), None, drop_last=True)
    yield "batch_size=0", lambda lib: lib.DataLoader(Augmented(4), batch_size=0)
    yield (
        "mp context w/o workers",
        lambda lib: lib.DataLoader(Augmented(4), multiprocessing_context="fork"),
    )
    yield (
        "bad start method",
        lambda lib: lib.DataLoader(Augmented(4), num_workers=1, multiprocessing_context="nope"),
    )
    yield (
        "bad context",
        lambda lib: lib.DataLoader(Augmented(4), num_workers=1, multiprocessing_context=3),
    )
    stream = {rd: RStream, td: TStream}
    yield "iterable+shuffle", lambda lib: lib.DataLoader(stream[lib](3), shuffle=True)
    yield "iterable+sampler", lambda lib: lib.DataLoader(stream[lib](3), sampler=[0])
    yield "iterable+batch_sampler", lambda lib: lib.DataLoader(stream[lib](3), batch_sampler=[[0]])
    yield "set batch_size", lambda lib: setattr(lib.DataLoader(Augmented(4)), "batch_size", 2)
    yield "timeout w/o workers", lambda lib: iter(lib.DataLoader(Augmented(4), timeout=5))
    yield "Dataset[0]", lambda lib: lib.Dataset()[0]
    yield "no __iter__", lambda lib: type("NoIter", (lib.IterableDataset,), {})()


@pytest.mark.parametrize("case", list(_argument_cases()), ids=lambda case: case[0])
def test_misuse_raises_like_torch(case):
    _, make = case
    message = _same_error(lambda: make(rd), lambda: make(td))
    assert message


def test_pin_memory_warns_as_torch_where_no_accelerator_exists(monkeypatch):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    messages = []
    for lib in (rd, td):
        with pytest.warns(UserWarning, match="pin") as caught:
            batches = _epoch(lib, Augmented(4), pin_memory=True)
        assert not batches[0]["x"].is_pinned()
        messages.append([str(w.message) for w in caught])
    assert messages[0] == messages[1]


class _FakeAccelerator:
    type = "cuda"


def _pinned_copy(self, device=None):
    """Stands in for Tensor.pin_memory on a machine without an accelerator."""
    out = self.clone()
    out.pinned_by_test = True
    return out


class _Pinnable:
    def __init__(self, value):
        self.value = value

    def pin_memory(self):
        return _Pinnable(("pinned", self.value))


def _layout(x):
    """Types all the way down, tensors with their values and whether they were pinned."""
    if isinstance(x, torch.Tensor):
        return ("tensor", x.tolist(), getattr(x, "pinned_by_test", False))
    if isinstance(x, _Pinnable):
        return ("pinnable", x.value)
    if isinstance(x, collections.abc.Mapping):
        return (type(x).__name__, {k: _layout(v) for k, v in x.items()})
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [_layout(v) for v in x])
    return (type(x).__name__, repr(x))


def test_pin_memory_walks_a_batch_as_torchs(monkeypatch):
    from torch.utils.data._utils.pin_memory import pin_memory as torch_pin_memory

    from retorch.utils.data._utils.pin_memory import pin_memory

    monkeypatch.setattr(torch.Tensor, "pin_memory", _pinned_copy)
    point = collections.namedtuple("Point", "x y")
    batch = {
        "a": torch.ones(2),
        "b": [torch.zeros(1), "text", 3, b"raw"],
        "c": point(torch.ones(1), 2.5),
        "d": (torch.arange(2),),
        "e": types.MappingProxyType({"k": torch.ones(1)}),  # immutable: rebuilt from a dict
        "f": range(3),  # cannot be rebuilt from a list: becomes a list
        "g": _Pinnable(7),
        "h": collections.OrderedDict(z=torch.ones(1), a=torch.zeros(1)),
    }
    ours, theirs = pin_memory(batch), torch_pin_memory(batch)
    assert _layout(ours) == _layout(theirs)
    assert _layout(ours)[1]["a"][2] is True and _layout(batch)[1]["a"][2] is False


class _Plain:
    """The same batches with or without workers: no randomness."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        return {"x": torch.full((2,), float(i)), "name": f"s{i}"}


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_are_pinned_where_an_accelerator_exists(monkeypatch, workers):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a: _FakeAccelerator())
    monkeypatch.setattr(torch.Tensor, "pin_memory", _pinned_copy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning where pinning happens
        ours = _epoch(rd, _Plain(), batch_size=2, pin_memory=True, num_workers=workers)
        # torch pins in a thread that needs a real device: compare with its in-process loader
        theirs = _epoch(td, _Plain(), batch_size=2, pin_memory=True)
    assert _layout(ours) == _layout(theirs)
    assert all(b["x"].pinned_by_test for b in ours)


# ---------------------------------------------------------------------------- worker processes


def test_two_workers_match_torch():
    kwargs = dict(batch_size=3, shuffle=True, num_workers=2)
    assert _same(_epoch(rd, Augmented(), **kwargs), _epoch(td, Augmented(), **kwargs))


WORKER_CASES = {
    "shuffle-prefetch1": lambda: dict(batch_size=5, shuffle=True, prefetch_factor=1),
    "own-generator-drop_last": lambda: dict(
        batch_size=2, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(3)
    ),
    "unbatched": lambda: dict(batch_size=None, shuffle=True),
    "eager-sampler": lambda: dict(batch_size=None, sampler=EagerShuffle()),
}


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [1, 2, 3])
@pytest.mark.parametrize("case", list(WORKER_CASES))
def test_workers_match_torch(num_workers, case):
    runs = []
    for lib in BOTH:
        runs.append(_epoch(lib, Augmented(), num_workers=num_workers, **WORKER_CASES[case]()))
        runs.append(torch.rand(1))  # the global generator was consumed alike
    assert _same(runs[0], runs[2]) and torch.equal(runs[1], runs[3])


@pytest.mark.slow
def test_order_is_kept_when_workers_finish_out_of_turn():
    kwargs = dict(batch_size=1, num_workers=3, prefetch_factor=3)
    ours = _epoch(rd, UnevenlySlow(), **kwargs)
    assert _same(ours, _epoch(td, UnevenlySlow(), **kwargs))
    assert torch.equal(torch.cat(ours), torch.arange(12).view(12, 1))


@pytest.mark.slow
def test_get_worker_info_matches_torch():
    assert rd.get_worker_info() is None
    runs = [_epoch(lib, WorkerSeen(lib), batch_size=None, num_workers=2) for lib in BOTH]
    assert _same(runs[0], runs[1])
    # (id, num_workers) per sample, as lists: default_convert turns tuples into lists
    assert [info[:2] for info in runs[0]] == [[i % 2, 2] for i in range(6)]
    assert all(info[3] for info in runs[0])  # `dataset` is the worker's copy, the one in use


def _offset_init(worker_id):
    info = rd.get_worker_info() or td.get_worker_info()
    info.dataset.offset = 100 * (worker_id + 1)


@pytest.mark.slow
def test_worker_init_fn_matches_torch():
    kwargs = dict(batch_size=2, num_workers=2, worker_init_fn=_offset_init)
    ours = _epoch(rd, Offset(), **kwargs)
    assert _same(ours, _epoch(td, Offset(), **kwargs))
    assert ours[0].tolist() == [100, 101] and ours[1].tolist() == [202, 203]


def _failing_init(worker_id):
    if worker_id == 1:
        raise ZeroDivisionError("init failed")


def _error_from(lib, dataset, **kwargs) -> Exception:
    """The exception an epoch raises. The workers are stopped here, because torch's iterator
    is kept alive by a reference cycle through that exception (see the garbage test)."""
    kwargs.setdefault("timeout", TIMEOUT)
    it = iter(lib.DataLoader(dataset, **kwargs))
    try:
        list(it)
    except Exception as e:
        return e
    finally:
        it._shutdown_workers()
    raise AssertionError("the epoch raised nothing")


@pytest.mark.slow
def test_worker_errors_reraised_like_torch():
    # A failing sample: same type, the worker's traceback; a caller who catches the error can
    # go on with the next batches.
    runs = []
    for lib in BOTH:
        it = iter(lib.DataLoader(Corrupt(), batch_size=2, num_workers=2, timeout=TIMEOUT))
        batches = [next(it), next(it)]
        error = _raised(lambda: next(it))
        runs.append((type(error), str(error), batches + list(it)))
        del error
    assert runs[0][0] is runs[1][0] is ValueError
    assert _same(runs[0][2], runs[1][2])
    ours, theirs = runs[0][1].splitlines(), runs[1][1].splitlines()
    assert ours[:2] == theirs[:2]
    assert ours[:2] == [
        "Caught ValueError in DataLoader worker process 0.",
        "Original Traceback (most recent call last):",
    ]
    assert ours[-2:] == theirs[-2:]
    assert ours[-2].strip() == 'raise self.error("sample 5 is corrupt")'

    errors = [_error_from(lib, Corrupt(KeyError), batch_size=2, num_workers=1) for lib in BOTH]
    assert type(errors[0]) is type(errors[1]) is KeyError
    # KeyError's str is the repr of its argument; the message still prints as lines.
    ours, theirs = str(errors[0]).splitlines(), str(errors[1]).splitlines()
    assert ours[0] == theirs[0] == "Caught KeyError in DataLoader worker process 0."
    assert ours[-1] == theirs[-1] == "KeyError: 'sample 5 is corrupt'"

    # An exception that cannot be rebuilt from one message becomes a RuntimeError.
    for lib in BOTH:
        error = _error_from(lib, NeedsTwoArgs(), num_workers=1)
        assert type(error) is RuntimeError
        assert str(error).startswith("Caught TwoArgError in DataLoader worker process 0.")

    # A failing worker_init_fn is the answer to that worker's first task.
    for lib in BOTH:
        error = _error_from(lib, Offset(), num_workers=2, worker_init_fn=_failing_init)
        assert type(error) is ZeroDivisionError
        assert str(error).startswith("Caught ZeroDivisionError in DataLoader worker process 1.")
        assert "init failed" in str(error)


@pytest.mark.slow
def test_dead_worker_and_timeout_raise_runtime_errors(monkeypatch):
    monkeypatch.setattr(rd_utils, "MP_STATUS_CHECK_INTERVAL", 0.2)
    for lib in BOTH:
        error = _error_from(lib, Dies(), batch_size=None, num_workers=1, timeout=0)
        assert type(error) is RuntimeError
        assert str(error).startswith("DataLoader worker (pid")
        assert "exited unexpectedly" in str(error)
        error = _error_from(lib, Sleeps(), num_workers=1, timeout=0.3)
        assert type(error) is RuntimeError
        assert str(error) == "DataLoader timed out after 0.3 seconds"


def _epoch_broken_by_an_error(workers: list, dataset, error, batch_size) -> None:
    it = iter(rd.DataLoader(dataset, batch_size=batch_size, num_workers=2))
    workers += it._workers
    try:
        list(it)
    except error:
        pass


@pytest.mark.slow
def test_workers_exit_at_the_end_and_on_garbage_collection(monkeypatch):
    loader = rd.DataLoader(Augmented(), batch_size=2, num_workers=2, timeout=TIMEOUT)
    it = iter(loader)
    workers = it._workers
    list(it)
    assert not any(w.is_alive() for w in workers)

    it = iter(loader)
    next(it)  # an early `break`
    workers = it._workers
    assert all(w.is_alive() for w in workers)
    del it
    assert not any(w.is_alive() for w in workers) and all(w.exitcode == 0 for w in workers)

    # After an error, too, the iterator is freed at once, with no garbage collection: it is
    # in no reference cycle. (Torch's is, through the frame that re-raises a worker's error;
    # its workers then wait for an exit signal that the collected queues never deliver, and
    # are terminated after 5 s each.)
    monkeypatch.setattr(rd_utils, "MP_STATUS_CHECK_INTERVAL", 0.2)
    for dataset, error, batch_size, exitcodes in [
        (Corrupt(), ValueError, 2, [0, 0]),
        (Dies(), RuntimeError, None, [3, 0]),
    ]:
        workers = []
        gc.disable()
        try:
            _epoch_broken_by_an_error(workers, dataset, error, batch_size)
        finally:
            gc.enable()
        assert [w.exitcode for w in workers] == exitcodes  # all exited, none was terminated


@pytest.mark.slow
def test_persistent_workers_match_torch_across_epochs():
    runs = []
    for lib in BOTH:
        _seed_all(5)
        loader = lib.DataLoader(
            Augmented(),
            batch_size=3,
            shuffle=True,
            num_workers=2,
            persistent_workers=True,
            timeout=TIMEOUT,
        )
        first = next(iter(loader))  # broken off: its prefetched batches must be dropped
        pids = [w.pid for w in loader._iterator._workers]
        epochs = [first, list(loader), list(loader)]
        assert [w.pid for w in loader._iterator._workers] == pids
        runs.append(epochs)
        del loader
    assert _same(runs[0], runs[1])


@pytest.mark.slow
@pytest.mark.parametrize("shard", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_iterable_dataset_workers_match_torch(shard, drop_last):
    kwargs = dict(batch_size=3, num_workers=3, drop_last=drop_last)
    ours = _epoch(rd, RStream(10, shard), **kwargs)
    assert _same(ours, _epoch(td, TStream(10, shard), **kwargs))
    if shard:  # every sample once; drop_last drops worker 0's short last batch, [9]
        assert sorted(torch.cat(ours).tolist()) == list(range(9 if drop_last else 10))
    for persistent in [False, True]:  # two epochs
        loaders = [
            lib.DataLoader(
                stream(7, shard), persistent_workers=persistent, timeout=TIMEOUT, **kwargs
            )
            for lib, stream in [(rd, RStream), (td, TStream)]
        ]
        assert _same([list(loaders[0]), list(loaders[0])], [list(loaders[1]), list(loaders[1])])


@pytest.mark.slow
def test_spawned_workers_match_torch():
    kwargs = dict(batch_size=4, shuffle=True, num_workers=1, multiprocessing_context="spawn")
    assert _same(_epoch(rd, Augmented(9), **kwargs), _epoch(td, Augmented(9), **kwargs))

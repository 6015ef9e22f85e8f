"""retorch.export against torch.export: signatures, outputs, symbols, guards, save/load."""

import io
import json
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.export import Dim

import retorch.export as rx

pytestmark = pytest.mark.slow  # torch.export costs about a second per program


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


class BN(torch.nn.Module):
    def __init__(self, train):
        super().__init__()
        self.lin, self.bn = torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)
        self.train(train)

    def forward(self, x):
        return torch.relu(self.bn(self.lin(x)))


class Counter(torch.nn.Module):
    """A registered buffer updated in place, and one not in the state_dict."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(4))
        self.register_buffer("scale", torch.full((4,), 2.0), persistent=False)

    def forward(self, x):
        self.count.add_(1)
        return x * self.count * self.scale, x.sum()


class Flatten(torch.nn.Module):
    """A size in the graph that follows the batch: view(x, [batch, 12])."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(12, 2)

    def forward(self, x):
        return self.lin(x.reshape(x.shape[0], -1))


def two_inputs(x, y):
    return torch.sigmoid(x) * y + 1


BATCH = Dim("batch", min=2, max=32)
CORPUS = {
    "mlp": (MLP, (torch.randn(5, 4),), None),
    "bn_eval": (lambda: BN(False), (torch.randn(5, 4),), None),
    "bn_train": (lambda: BN(True), (torch.randn(5, 4),), None),
    "counter": (Counter, (torch.randn(3, 4),), None),
    "mlp_dynamic": (MLP, (torch.randn(5, 4),), {"x": {0: BATCH}}),
    "flatten_dynamic": (Flatten, (torch.randn(5, 3, 4),), {"x": {0: BATCH}}),
    "function_dynamic": (
        lambda: two_inputs,
        (torch.randn(6, 3),) * 2,
        {"x": {0: BATCH}, "y": {0: BATCH}},
    ),
}


def make(name):
    ctor, args, dyn = CORPUS[name]
    torch.manual_seed(0)
    return ctor(), args, dyn


def torch_export(model, args, dyn):
    mod = model if isinstance(model, torch.nn.Module) else _Wrap(model)
    return torch.export.export(mod, args, dynamic_shapes=dyn).run_decompositions()


class _Wrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, y):
        return self.fn(x, y)


@pytest.fixture(scope="module")
def programs():
    out = {}
    for name in CORPUS:
        model, args, dyn = make(name)
        out[name] = (rx.export(model, args, dynamic_shapes=dyn), torch_export(model, args, dyn))
    return out


@pytest.mark.parametrize("name", CORPUS)
def test_signature_agrees_with_torch(programs, name):
    ours, theirs = programs[name]
    keep = [(side, kind, target) for side, kind, _, target in rx.signature_rows(theirs)]
    assert [(side, kind, target) for side, kind, _, target in rx.signature_rows(ours)] == keep
    names = [r[2] for r in rx.signature_rows(theirs) if r[0] == "input"]
    assert [r[2] for r in rx.signature_rows(ours) if r[0] == "input"] == names


@pytest.mark.parametrize("name", CORPUS)
def test_dynamic_dims_and_ranges_agree_with_torch(programs, name):
    ours, theirs = programs[name]
    assert [(i, d) for i, d, _ in rx.dynamic_dims(ours)] == [
        (i, d) for i, d, _ in rx.dynamic_dims(theirs)
    ]
    assert list(rx.range_constraints_of(ours).values()) == list(
        rx.range_constraints_of(theirs).values()
    )


@pytest.mark.parametrize("name", CORPUS)
def test_program_equals_eager_and_leaves_model_alone(programs, name):
    ep, _ = programs[name]
    model, args, _ = make(name)
    before = {k: v.clone() for k, v in getattr(model, "state_dict", dict)().items()}
    for _ in range(2):  # twice: the buffers the first call wrote are read by the second
        want, got = model(*args), ep(*args)
        want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
        assert all(torch.equal(w, g) for w, g in zip(want, got))
    for k, v in getattr(model, "state_dict", dict)().items():
        assert torch.equal(v, ep.state_dict[k])
    fresh, _, _ = make(name)
    if isinstance(fresh, torch.nn.Module):  # export ran the model on clones of its state
        assert all(torch.equal(v, before[k]) for k, v in fresh.state_dict().items())


@pytest.mark.parametrize("name", CORPUS)
def test_save_load_round_trip_is_exact(programs, name):
    ep, _ = programs[name]
    buf = io.StringIO()
    rx.save(ep, buf)
    back = rx.load(io.StringIO(buf.getvalue()))
    assert rx.signature_rows(back) == rx.signature_rows(ep)
    assert back.range_constraints == ep.range_constraints
    assert all(torch.equal(back.state_dict[k], v) for k, v in ep.state_dict.items())
    _, args, _ = make(name)
    m1, m2 = ep.module(), back.module()  # each owns a copy of the state: no cross-talk
    for _ in range(2):
        a, b = m1(*args), m2(*args)
        a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert json.loads(buf.getvalue())["version"] == rx.FORMAT_VERSION


def test_flatten_reads_the_batch_with_sym_size(programs):
    ep, theirs = programs["flatten_dynamic"]
    ops = rx.aten_op_counts(ep)
    assert ops["aten.sym_size.int"] == 1 == rx.aten_op_counts(theirs)["aten.sym_size.int"]


@given(batch=st.integers(2, 32), seed=st.integers(0, 2**16))
def test_dynamic_batch_runs_other_sizes_as_eager(programs, batch, seed):
    g = torch.Generator().manual_seed(seed)
    for name in ("mlp_dynamic", "flatten_dynamic", "function_dynamic"):
        ep, _ = programs[name]
        model, args, _ = make(name)
        new = [torch.randn(batch, *a.shape[1:], generator=g) for a in args]
        assert torch.equal(ep(*new), model(*new))


@pytest.mark.parametrize("shape,message", [((33, 4), "x.size()[0] <= 32"),
                                           ((1, 4), "x.size()[0] >= 2"),
                                           ((5, 5), "x.size()[1] == 4")])  # fmt: skip
def test_out_of_range_raises_assertion_error_as_torch(programs, shape, message):
    ours, theirs = programs["mlp_dynamic"]
    buf = io.BytesIO()
    torch.export.save(theirs, buf)
    buf.seek(0)
    loaded = torch.export.load(buf)
    x = torch.randn(*shape)
    with pytest.raises(AssertionError, match=re.escape(f"Guard failed: {message}")):
        ours(x)
    with pytest.raises(AssertionError, match=re.escape(f"Guard failed: {message}")):
        rx.load(io.StringIO(_saved(ours))).module()(x)
    if shape != (1, 4):  # torch emits no guard for min=2 (its default lower bound for sizes)
        for program in (theirs, loaded):
            with pytest.raises(AssertionError, match="Guard failed"):
                program.module()(x)


def _saved(ep) -> str:
    buf = io.StringIO()
    rx.save(ep, buf)
    return buf.getvalue()


def test_shared_dim_guards_equal_sizes(programs):
    ep, theirs = programs["function_dynamic"]
    x, y = torch.randn(4, 3), torch.randn(5, 3)
    with pytest.raises(AssertionError, match=r"y.size\(\)\[0\] == x.size\(\)\[0\]"):
        ep(x, y)
    with pytest.raises(AssertionError, match="Guard failed"):
        theirs.module()(x, y)


def test_clear_errors():
    with pytest.raises(ValueError, match="outside batch's range"):
        rx.export(MLP(), (torch.randn(40, 4),), dynamic_shapes={"x": {0: BATCH}})
    with pytest.raises(ValueError, match="not arguments of the forward"):
        rx.export(MLP(), (torch.randn(5, 4),), dynamic_shapes={"z": {0: BATCH}})
    with pytest.raises(NotImplementedError, match="named dims only"):
        rx.export(MLP(), (torch.randn(5, 4),), dynamic_shapes={"x": {0: Dim.DYNAMIC}})
    with pytest.raises(ValueError, match="version 1"):
        rx.load(io.StringIO(json.dumps({"format": "retorch.export", "version": 99})))
    ep = rx.export(MLP(), (torch.randn(5, 4),))
    with pytest.raises(TypeError, match="takes 1 inputs"):
        ep(torch.randn(5, 4), torch.randn(5, 4))


def test_view_mutation_refused():
    def f(x):
        y = x.clone()
        y[0].add_(1)
        return y

    with pytest.raises(NotImplementedError, match="writes a view"):
        rx.export(f, (torch.randn(3, 3),))


def test_readers_are_plain_and_sorted(programs):
    ours, theirs = programs["bn_train"]
    text = rx.format_signature(theirs)
    assert "0x" not in text and text.splitlines()[-1].split()[:2] == ["output", "USER_OUTPUT"]
    counts = rx.aten_op_counts(ours)
    assert list(counts) == sorted(counts)
    assert counts["aten._native_batch_norm_legit_functional.default"] == 1


def buffer_persistence(ep) -> list[tuple[str, bool]]:
    """(target, persistent) of each buffer input, as the graph signature says."""
    sig = ep.graph_signature
    sig = sig if isinstance(sig, rx.ExportGraphSignature) else rx.graph_signature.from_torch(sig)
    return [(s.target, s.persistent) for s in sig.input_specs if s.kind.name == "BUFFER"]


@pytest.mark.parametrize("name", ["counter", "bn_eval", "bn_train"])
def test_buffer_persistence_and_state_dict_agree_with_torch(programs, name):
    ours, theirs = programs[name]
    assert buffer_persistence(ours) == buffer_persistence(theirs)
    assert sorted(ours.module().state_dict()) == sorted(theirs.module().state_dict())
    buffer = io.StringIO()
    rx.save(ours, buffer)
    loaded = rx.load(io.StringIO(buffer.getvalue()))
    assert buffer_persistence(loaded) == buffer_persistence(theirs)
    assert sorted(loaded.module().state_dict()) == sorted(theirs.module().state_dict())


class RandomBuffers(torch.nn.Module):
    """Buffers, some not persistent, some in a child module, some written by the forward."""

    def __init__(self, spec):
        super().__init__()
        self.child = torch.nn.Module()
        for i, (in_child, persistent, _) in enumerate(spec):
            owner = self.child if in_child else self
            owner.register_buffer(f"b{i}", torch.full((3,), float(i + 1)), persistent=persistent)
        self.spec = spec

    def forward(self, x):
        out = x
        for i, (in_child, _, mutated) in enumerate(self.spec):
            b = getattr(self.child if in_child else self, f"b{i}")
            if mutated:
                b.add_(1.0)
            out = out * b
        return out


@settings(max_examples=15, deadline=None)
@given(spec=st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), min_size=1,
                     max_size=5))  # fmt: skip
def test_random_buffer_persistence_equals_torch_export(spec):
    """Which buffers are persistent (in the state_dict) in the graph signature, against
    torch.export on modules with random buffers: persistent or not, nested, mutated or not."""
    x = torch.randn(2, 3)
    ours = rx.export(RandomBuffers(spec), (x,))
    theirs = torch.export.export(RandomBuffers(spec), (x,)).run_decompositions()
    assert buffer_persistence(ours) == buffer_persistence(theirs)
    assert [r[::3] for r in rx.signature_rows(ours)] == [r[::3] for r in rx.signature_rows(theirs)]
    assert sorted(ours.module().state_dict()) == sorted(theirs.module().state_dict())
    torch.testing.assert_close(ours.module()(x), RandomBuffers(spec)(x), rtol=0, atol=0)

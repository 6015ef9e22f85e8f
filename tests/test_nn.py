"""retorch.nn against torch.nn: same seed, same trees, same answers, same errors."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
import torch.nn as tnn
from hypothesis import given
from hypothesis import strategies as st

import retorch.nn as rnn

BOTH = [rnn, tnn]


def _mlp(nn):
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(4, 8),
        nn.GELU(),
        nn.Dropout(0.1),
        nn.LayerNorm(8),
        nn.ModuleList([nn.Linear(8, 8), nn.ReLU()]),
        nn.ModuleDict({"head": nn.Linear(8, 2)}),
    )


def _same_named(xs, ys):
    xs, ys = list(xs), list(ys)
    assert [n for n, _ in xs] == [n for n, _ in ys]
    for (_, a), (_, b) in zip(xs, ys):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b) and a.dtype == b.dtype and a.requires_grad == b.requires_grad
        else:
            assert type(a).__name__ == type(b).__name__


def test_same_seed_same_parameters_outputs_and_repr():
    ours, theirs = _mlp(rnn), _mlp(tnn)
    _same_named(ours.named_parameters(), theirs.named_parameters())
    assert repr(ours) == repr(theirs)
    x = torch.randn(3, 4)
    ours.eval(), theirs.eval()
    assert torch.equal(ours[:4](x), theirs[:4](x))
    assert repr(ours[0].weight) == repr(theirs[0].weight)


@pytest.mark.parametrize(
    "make",
    [
        lambda nn: nn.Linear(5, 3),
        lambda nn: nn.Linear(5, 3, bias=False),
        lambda nn: nn.Embedding(10, 4),
        lambda nn: nn.Embedding(10, 4, padding_idx=-2),
        lambda nn: nn.LayerNorm([2, 3], elementwise_affine=False),
        lambda nn: nn.LayerNorm(6, bias=False),
        lambda nn: nn.GELU("tanh"),
        lambda nn: nn.ReLU(inplace=True),
    ],
)
def test_layers_initialise_and_print_as_torch(make):
    torch.manual_seed(3)
    ours = make(rnn)
    torch.manual_seed(3)
    theirs = make(tnn)
    _same_named(ours.named_parameters(), theirs.named_parameters())
    assert repr(ours) == repr(theirs)


def test_dropout_uses_the_same_random_stream():
    x = torch.ones(1000)
    torch.manual_seed(5)
    a = rnn.Dropout(0.3)(x)
    torch.manual_seed(5)
    b = tnn.Dropout(0.3)(x)
    assert torch.equal(a, b)
    assert torch.equal(rnn.Dropout(0.3).eval()(x), x)


def _params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_signatures_match_torch():
    for name in [
        "Linear",
        "ReLU",
        "GELU",
        "Dropout",
        "LayerNorm",
        "Embedding",
        "Sequential",
        "ModuleList",
        "ModuleDict",
    ]:
        assert _params(getattr(rnn, name)) == _params(getattr(tnn, name)), name
    for method in [
        "register_buffer",
        "register_parameter",
        "add_module",
        "named_parameters",
        "named_buffers",
        "named_modules",
        "train",
        "zero_grad",
        "register_forward_pre_hook",
        "register_forward_hook",
        "load_state_dict",
        "requires_grad_",
        "apply",
    ]:
        assert _params(getattr(rnn.Module, method)) == _params(getattr(tnn.Module, method)), method


def _record_hooks(nn, calls):
    torch.manual_seed(0)
    m = nn.Linear(3, 2)
    handles = [
        m.register_forward_pre_hook(lambda mod, args: calls.append("pre1")),
        m.register_forward_pre_hook(lambda mod, args: calls.append("pre0"), prepend=True),
        m.register_forward_pre_hook(
            lambda mod, args, kw: (calls.append("pre_kw"), None)[1], with_kwargs=True
        ),
        m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,)),
        m.register_forward_hook(lambda mod, args, out: calls.append("post1")),
        m.register_forward_hook(lambda mod, args, out: out + 1),
        m.register_forward_hook(
            lambda mod, args, kw, out: calls.append("post_kw"), with_kwargs=True
        ),
        m.register_forward_hook(lambda mod, args, out: calls.append("first"), prepend=True),
    ]
    return m, handles


def test_hook_order_results_and_removal_match_torch():
    x = torch.randn(4, 3)
    runs = {}
    for nn in BOTH:
        calls = []
        m, handles = _record_hooks(nn, calls)
        out1 = m(x)
        handles[3].remove()
        handles[5].remove()
        with handles[0]:
            pass  # leaving the context removes the hook
        out2 = m(x)
        runs[nn.__name__] = (calls, out1, out2)
    (c1, a1, a2), (c2, b1, b2) = runs.values()
    assert c1 == c2
    assert torch.equal(a1, b1) and torch.equal(a2, b2)


def test_always_call_hook_runs_when_forward_raises():
    for nn in BOTH:
        calls = []

        class Boom(nn.Module):
            def forward(self, x):
                raise ValueError("boom")

        m = Boom()
        m.register_forward_hook(lambda mod, args, out: calls.append("always"), always_call=True)
        m.register_forward_hook(lambda mod, args, out: calls.append("normal"))
        with pytest.raises(ValueError, match="boom"):
            m(torch.ones(1))
        assert calls == ["always"]


def test_state_dict_round_trips_both_ways():
    ours, theirs = _mlp(rnn), _mlp(tnn)
    torch.manual_seed(9)
    donor = _mlp(tnn)
    for p in donor.parameters():
        torch.nn.init.normal_(p)
    assert repr(ours.load_state_dict(donor.state_dict())) == "<All keys matched successfully>"
    _same_named(ours.state_dict().items(), donor.state_dict().items())
    theirs.load_state_dict(ours.state_dict())
    _same_named(theirs.state_dict().items(), ours.state_dict().items())
    assert ours.state_dict()._metadata == theirs.state_dict()._metadata


def test_non_strict_load_reports_the_same_keys():
    results = []
    for nn in BOTH:
        m = _mlp(nn)
        sd = _mlp(tnn).state_dict()
        del sd["0.weight"]
        sd["extra"] = torch.ones(1)
        sd["4.0.bogus"] = torch.ones(1)
        results.append(m.load_state_dict(sd, strict=False))
    assert results[0].missing_keys == results[1].missing_keys == ["0.weight"]
    assert results[0].unexpected_keys == results[1].unexpected_keys


def test_load_errors_match_torch():
    messages = []
    for nn in BOTH:
        m = nn.Linear(3, 2)
        with pytest.raises(RuntimeError) as info:
            m.load_state_dict({"weight": torch.ones(2, 4), "bias": torch.ones(2)})
        messages.append(str(info.value))
        with pytest.raises(RuntimeError, match="Missing key"):
            m.load_state_dict({"weight": torch.ones(2, 3)})
        with pytest.raises(RuntimeError, match="Unexpected key"):
            m.load_state_dict(
                {"weight": torch.ones(2, 3), "bias": torch.ones(2), "b": torch.ones(1)}
            )
    assert messages[0] == messages[1]
    assert "size mismatch for weight" in messages[0]


def test_buffers_persistent_and_not():
    for nn in BOTH:
        m = nn.Module()
        m.register_buffer("a", torch.ones(1))
        m.register_buffer("b", torch.zeros(1), persistent=False)
        assert [n for n, _ in m.named_buffers()] == ["a", "b"]
        assert list(m.state_dict()) == ["a"]
        m.a = torch.full((1,), 2.0)  # reassigning a buffer keeps it a buffer
        assert list(m.state_dict()) == ["a"] and m.state_dict()["a"].item() == 2.0


def _misuse_cases(nn):
    def assign_tensor_to_param():
        m = nn.Linear(2, 2)
        m.weight = torch.ones(2, 2)

    def assign_tensor_to_module():
        m = nn.Sequential(nn.ReLU())
        setattr(m, "0", torch.ones(1))

    def dotted_param():
        nn.Module().register_parameter("a.b", nn.Parameter(torch.ones(1)))

    def non_param():
        nn.Module().register_parameter("a", torch.ones(1))

    def buffer_clash():
        m = nn.Module()
        m.x = 1
        m.register_buffer("x", torch.ones(1))

    def missing_attr():
        return nn.Linear(2, 2).foo

    def bad_dropout():
        nn.Dropout(1.5)

    def bad_module():
        nn.Module().add_module("a", 3)

    def before_init():
        class Bad(nn.Module):
            def __init__(self):
                self.w = nn.Parameter(torch.ones(1))

        Bad()

    def no_forward():
        nn.Module()(torch.ones(1))

    def bad_index():
        return nn.Sequential(nn.ReLU())[3]

    def int_dtype():
        nn.Linear(2, 2).to(torch.int32)

    return [
        assign_tensor_to_param,
        assign_tensor_to_module,
        dotted_param,
        non_param,
        buffer_clash,
        missing_attr,
        bad_dropout,
        bad_module,
        before_init,
        no_forward,
        bad_index,
        int_dtype,
    ]


def test_misuse_raises_torchs_exception_types_with_clear_messages():
    for ours, theirs in zip(_misuse_cases(rnn), _misuse_cases(tnn)):
        with pytest.raises(Exception) as theirs_info:
            theirs()
        with pytest.raises(Exception) as ours_info:
            ours()
        assert type(ours_info.value) is type(theirs_info.value), ours.__name__
        assert str(ours_info.value), ours.__name__
    with pytest.raises(AttributeError, match="'Linear' object has no attribute 'foo'"):
        _misuse_cases(rnn)[5]()


def test_train_eval_apply_to_zero_grad_requires_grad():
    for nn in BOTH:
        m = _mlp(nn)
        m.eval()
        assert not any(sub.training for sub in m.modules())
        order = []
        m.apply(lambda sub: order.append(type(sub).__name__))
        assert order[-1] == "Sequential" and order[0] == "Linear"
        m.to(torch.float64)
        assert all(p.dtype == torch.float64 for p in m.parameters())
        assert all(isinstance(p, nn.Parameter) for p in m.parameters())
        m[0](torch.randn(2, 4, dtype=torch.float64)).sum().backward()
        assert m[0].weight.grad is not None
        m.zero_grad()
        assert m[0].weight.grad is None
        m.requires_grad_(False)
        assert not any(p.requires_grad for p in m.parameters())


def test_containers_behave_as_torchs():
    for nn in BOTH:
        seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
        assert len(seq) == 3 and isinstance(seq[1:], nn.Sequential) and len(seq[1:]) == 2
        del seq[1]
        assert [n for n, _ in seq.named_children()] == ["0", "1"]
        ml = nn.ModuleList([nn.ReLU()])
        ml.append(nn.GELU())
        ml.insert(0, nn.Linear(1, 1))
        ml += [nn.ReLU()]
        assert [type(x).__name__ for x in ml] == ["Linear", "ReLU", "GELU", "ReLU"]
        md = nn.ModuleDict({"a": nn.ReLU()})
        md["b"] = nn.GELU()
        assert list(md.keys()) == ["a", "b"] and "a" in md and md.pop("a") is not None


def test_deepcopy_keeps_sharing_and_values():
    for nn in BOTH:
        m = _mlp(nn)
        m[4].append(m[0])  # the same Linear at two places in the tree
        c = copy.deepcopy(m)
        assert c[4][2] is c[0], "the copy must share the module the original shares"
        assert c[0] is not m[0] and c[0].weight is not m[0].weight
        assert c[0].weight.data_ptr() != m[0].weight.data_ptr()
        _same_named(c.named_parameters(), m.named_parameters())
    torch_names = [n for n, _ in copy.deepcopy(_mlp(BOTH[1])).named_parameters()]
    ours = _mlp(BOTH[0])
    assert [n for n, _ in copy.deepcopy(ours).named_parameters()] == torch_names


# ---------------------------------------------------------------- random trees

LEAVES = ["linear", "layernorm", "embedding", "relu", "custom"]


@st.composite
def tree_recipes(draw, depth=0):
    """A recipe (nested lists of tags) that builds the same module tree in either library."""
    if depth >= 3 or draw(st.booleans()) and depth > 0:
        return draw(st.sampled_from(LEAVES))
    kind = draw(st.sampled_from(["seq", "list", "dict", "custom_parent"]))
    children = draw(st.lists(tree_recipes(depth=depth + 1), min_size=1, max_size=3))
    return [kind, children]


def build_tree(nn, recipe, shared, counter):
    counter[0] += 1
    n = counter[0] % 4 + 2
    if isinstance(recipe, str):
        if recipe == "linear":
            return nn.Linear(n, n + 1, bias=counter[0] % 2 == 0)
        if recipe == "layernorm":
            return nn.LayerNorm(n)
        if recipe == "embedding":
            return nn.Embedding(n + 3, 2)
        if recipe == "relu":
            return nn.ReLU()
        m = nn.Module()
        m.w = nn.Parameter(torch.randn(n))
        m.register_buffer("running", torch.zeros(n))
        m.register_buffer("scratch", torch.ones(1), persistent=False)
        m.shared = shared["module"]  # the same module under several names
        m.tied = shared["param"]  # the same parameter under several names
        return m
    kind, children = recipe
    built = [build_tree(nn, c, shared, counter) for c in children]
    if kind == "seq":
        return nn.Sequential(*built)
    if kind == "list":
        return nn.ModuleList(built)
    if kind == "dict":
        return nn.ModuleDict({f"k{i}": b for i, b in enumerate(built)})
    parent = nn.Module()
    for i, b in enumerate(built):
        setattr(parent, f"child{i}", b)
    parent.register_buffer("count", torch.tensor(counter[0]))
    return parent


def both_trees(recipe):
    trees = []
    for nn in BOTH:
        torch.manual_seed(1234)
        shared = {"module": nn.Linear(2, 2), "param": nn.Parameter(torch.randn(3))}
        root = nn.Module()
        root.body = build_tree(nn, recipe, shared, [0])
        root.also = shared["module"]
        trees.append(root)
    return trees


@given(tree_recipes(), st.booleans(), st.booleans(), st.sampled_from(["", "model"]))
def test_random_trees_iterate_like_torch(recipe, remove_duplicate, recurse, prefix):
    ours, theirs = both_trees(["custom_parent", [recipe, "custom"]])
    _same_named(
        ours.named_parameters(prefix, recurse, remove_duplicate),
        theirs.named_parameters(prefix, recurse, remove_duplicate),
    )
    _same_named(
        ours.named_buffers(prefix, recurse, remove_duplicate),
        theirs.named_buffers(prefix, recurse, remove_duplicate),
    )
    _same_named(
        ours.named_modules(prefix=prefix, remove_duplicate=remove_duplicate),
        theirs.named_modules(prefix=prefix, remove_duplicate=remove_duplicate),
    )
    _same_named(ours.named_children(), theirs.named_children())
    assert len(list(ours.parameters())) == len(list(theirs.parameters()))
    assert len(list(ours.modules())) == len(list(theirs.modules()))
    assert repr(ours) == repr(theirs)


@given(tree_recipes())
def test_random_trees_state_dict_round_trips(recipe):
    ours, theirs = both_trees(["custom_parent", [recipe, "custom"]])
    _same_named(ours.state_dict().items(), theirs.state_dict().items())
    _same_named(ours.state_dict(keep_vars=True).items(), theirs.state_dict(keep_vars=True).items())
    with torch.no_grad():
        for p in theirs.parameters():
            p.add_(1.5)
    assert not ours.load_state_dict(theirs.state_dict()).missing_keys
    _same_named(ours.state_dict().items(), theirs.state_dict().items())
    with torch.no_grad():
        for p in ours.parameters():
            p.mul_(-1)
    theirs.load_state_dict(ours.state_dict())
    _same_named(ours.state_dict().items(), theirs.state_dict().items())
    ours.train(False), theirs.train(False)
    assert [m.training for m in ours.modules()] == [m.training for m in theirs.modules()]
    ours.to(torch.float64), theirs.to(torch.float64)
    _same_named(ours.state_dict().items(), theirs.state_dict().items())

"""Randomized differential tests: retorch.nn against torch.nn on module trees, registration
sequences and hook programs drawn by hypothesis.

A *recipe* is plain data drawn once; ``build(nn, recipe)`` follows it with either library from
the same seed, so the two trees have the same shape, the same tensors and the same sharing
(submodules reused under several names, parameters and buffers tied across modules). Then
every walk, ``state_dict`` in both directions, mode changes, ``apply``, ``to(float64)`` and the
leaf layers' outputs are compared.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict

import pytest
import torch
import torch.nn as tnn
from hypothesis import given
from hypothesis import strategies as st

import retorch.nn as rnn

BOTH = [rnn, tnn]

# ---------------------------------------------------------------- recipes

LEAVES = [
    "linear",
    "linear_nobias",
    "layernorm",
    "layernorm_noaffine",
    "embedding",
    "embedding_pad",
    "relu",
    "gelu",
    "dropout",
    "custom_leaf",
]
CONTAINERS = ["seq", "seq_named", "list", "dict", "custom_parent"]


@st.composite
def nodes(draw, depth):
    """A node: ("leaf", kind, size), ("shared", k) or (container kind, [children])."""
    if depth == 0:
        if draw(st.integers(0, 5)) == 0:
            return ("shared", draw(st.integers(0, 50)))
        return ("leaf", draw(st.sampled_from(LEAVES)), draw(st.integers(1, 4)))
    kind = draw(st.sampled_from(CONTAINERS))
    children = draw(
        st.lists(
            st.one_of(nodes(depth=0), nodes(depth=depth - 1)) if depth > 1 else nodes(depth=0),
            min_size=1 if kind != "custom_parent" else 0,
            max_size=3,
        )
    )
    if depth > 1 and not any(c[0] not in ("leaf", "shared") for c in children):
        children.append(draw(nodes(depth=depth - 1)))  # reach the drawn depth on one branch
    return (kind, children)


@st.composite
def recipes(draw):
    depth = draw(st.integers(1, 4))
    root = draw(nodes(depth=depth))
    ties = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["param", "buffer", "buffer_np", "module"]),
                st.integers(0, 100),  # what to tie (index into the built members)
                st.integers(0, 100),  # where (index into the built modules)
            ),
            max_size=4,
        )
    )
    return root, ties


_CLASSES: dict = {}


def custom_classes(nn):
    """Custom Modules with their own parameters and buffers (persistent, not, None)."""
    if nn not in _CLASSES:

        class Leaf(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.w = nn.Parameter(torch.randn(n))
                self.register_parameter("unused", None)
                self.register_buffer("running", torch.zeros(n))
                self.register_buffer("scratch", torch.randn(n), persistent=False)
                self.register_buffer("empty", None)
                self.steps = nn.Buffer(torch.zeros((), dtype=torch.int64))
                self.note = n

            def extra_repr(self):
                return f"n={self.note}"

        class Parent(nn.Module):
            def __init__(self, children):
                super().__init__()
                self.register_buffer("count", torch.tensor(len(children)))
                for i, child in enumerate(children):
                    setattr(self, f"child{i}", child)
                self.scale = nn.Parameter(torch.ones(2))  # registered after the children

        _CLASSES[nn] = Leaf, Parent
    return _CLASSES[nn]


def make_leaf(nn, kind, n):
    Leaf, _ = custom_classes(nn)
    return {
        "linear": lambda: nn.Linear(n, n + 1),
        "linear_nobias": lambda: nn.Linear(n + 1, n, bias=False),
        "layernorm": lambda: nn.LayerNorm(n),
        "layernorm_noaffine": lambda: nn.LayerNorm([2, n], elementwise_affine=False),
        "embedding": lambda: nn.Embedding(n + 2, 3),
        "embedding_pad": lambda: nn.Embedding(n + 2, 2, padding_idx=n),
        "relu": lambda: nn.ReLU(),
        "gelu": lambda: nn.GELU("tanh" if n % 2 else "none"),
        "dropout": lambda: nn.Dropout(n / 5),
        "custom_leaf": lambda: Leaf(n),
    }[kind]()


def build(nn, recipe, seed=1234):
    """Follow the recipe with library ``nn``: a root module holding the whole tree."""
    torch.manual_seed(seed)
    _, Parent = custom_classes(nn)
    root_node, ties = recipe
    built: list = []  # every finished module, in build order (never an unfinished ancestor)

    def make(node):
        if node[0] == "shared":
            if not built:
                return nn.ReLU()
            return built[node[1] % len(built)]  # the same object, reached by a second path
        if node[0] == "leaf":
            m = make_leaf(nn, node[1], node[2])
        else:
            kind, children = node
            kids = [make(c) for c in children]
            if kind == "seq":
                m = nn.Sequential(*kids)
            elif kind == "seq_named":
                m = nn.Sequential(OrderedDict((f"s{i}", k) for i, k in enumerate(kids)))
            elif kind == "list":
                m = nn.ModuleList(kids)
            elif kind == "dict":
                m = nn.ModuleDict({f"k{i}": k for i, k in enumerate(kids)})
            else:
                m = Parent(kids)
        built.append(m)
        return m

    root = nn.Module()
    root.body = make(root_node)
    for i, (what, src, dst) in enumerate(ties):
        target = built[dst % len(built)]
        if what == "module":
            root.add_module(f"alias{i}", built[src % len(built)])
            continue
        if what == "param":
            pool = [p for m in built for p in m._parameters.values() if p is not None]
        else:
            pool = [b for m in built for b in m._buffers.values() if b is not None]
        if not pool:
            continue
        if what == "param":
            target.register_parameter(f"tied{i}", pool[src % len(pool)])
        else:
            target.register_buffer(f"tied{i}", pool[src % len(pool)], persistent=what == "buffer")
    root.register_buffer("root_step", torch.zeros(()))
    return root


def both_trees(recipe):
    return build(rnn, recipe), build(tnn, recipe)


# ---------------------------------------------------------------- comparisons


def pattern(objs):
    """Which items are the same object: each item's first index in the list."""
    ids = [id(o) for o in objs]
    return [ids.index(i) for i in ids]


def same_tensor(a, b) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and a.requires_grad == b.requires_grad
        and torch.equal(a, b)
    )


def assert_same_named(ours, theirs, what=""):
    ours, theirs = list(ours), list(theirs)
    assert [n for n, _ in ours] == [n for n, _ in theirs], what
    assert pattern([v for _, v in ours]) == pattern([v for _, v in theirs]), what
    for (name, a), (_, b) in zip(ours, theirs):
        if isinstance(a, torch.Tensor):
            assert type(a).__name__ == type(b).__name__, (what, name)
            assert same_tensor(a, b), (what, name)
        else:
            assert type(a).__name__ == type(b).__name__, (what, name)


def assert_same_walks(ours, theirs):
    for prefix in ["", "model", "a.b"]:
        for recurse in [True, False]:
            for remove_duplicate in [True, False]:
                args = (prefix, recurse, remove_duplicate)
                assert_same_named(
                    ours.named_parameters(*args), theirs.named_parameters(*args), args
                )
                assert_same_named(ours.named_buffers(*args), theirs.named_buffers(*args), args)
        for remove_duplicate in [True, False]:
            kw = {"prefix": prefix, "remove_duplicate": remove_duplicate}
            assert_same_named(ours.named_modules(**kw), theirs.named_modules(**kw), kw)
    for remove_duplicate in [True, False]:
        a, b = list(ours.modules(remove_duplicate)), list(theirs.modules(remove_duplicate))
        assert [type(m).__name__ for m in a] == [type(m).__name__ for m in b]
        assert pattern(a) == pattern(b)
    for recurse in [True, False]:
        for a, b in [
            (ours.parameters(recurse), theirs.parameters(recurse)),
            (ours.buffers(recurse), theirs.buffers(recurse)),
        ]:
            a, b = list(a), list(b)
            assert pattern(a) == pattern(b) and all(same_tensor(x, y) for x, y in zip(a, b))
    for sub_ours, sub_theirs in zip(ours.modules(), theirs.modules()):
        assert_same_named(sub_ours.named_children(), sub_theirs.named_children())
        assert [type(c).__name__ for c in sub_ours.children()] == [
            type(c).__name__ for c in sub_theirs.children()
        ]


def assert_same_state_dicts(ours, theirs):
    for keep_vars in [False, True]:
        a, b = ours.state_dict(keep_vars=keep_vars), theirs.state_dict(keep_vars=keep_vars)
        assert_same_named(a.items(), b.items(), f"state_dict keep_vars={keep_vars}")
        assert a._metadata == b._metadata
    d1, d2 = {}, {}
    ours.state_dict(destination=d1, prefix="p.")
    theirs.state_dict(destination=d2, prefix="p.")
    assert_same_named(d1.items(), d2.items())


def assert_same_lookups(ours, theirs):
    for (name, a), (_, b) in zip(ours.named_modules(), theirs.named_modules()):
        assert type(ours.get_submodule(name)).__name__ == type(theirs.get_submodule(name)).__name__
        assert ours.get_submodule(name) is a and theirs.get_submodule(name) is b
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert ours.get_parameter(name) is p and theirs.get_parameter(name) is q
    for (name, p), (_, q) in zip(ours.named_buffers(), theirs.named_buffers()):
        assert ours.get_buffer(name) is p and theirs.get_buffer(name) is q


def leaf_outputs(root, dtype=torch.float32):
    """Run every leaf layer on an input drawn from a fixed seed."""
    outs = []
    for name, m in root.named_modules():
        kind = type(m).__name__
        torch.manual_seed(len(name))
        if kind == "Linear":
            x = torch.randn(3, m.in_features, dtype=dtype)
        elif kind == "LayerNorm":
            x = torch.randn(2, *m.normalized_shape, dtype=dtype)
        elif kind == "Embedding":
            x = torch.arange(m.num_embeddings).flip(0)
        elif kind in ("ReLU", "GELU", "Dropout"):
            x = torch.randn(4, 5, dtype=dtype)
        else:
            continue
        outs.append((name, m(x).detach()))
    return outs


# ---------------------------------------------------------------- tree tests


@pytest.mark.slow  # hypothesis over module trees: make unit runs it
@given(recipes())
def test_random_trees_walk_print_and_look_up_like_torch(recipe):
    ours, theirs = both_trees(recipe)
    assert_same_walks(ours, theirs)
    assert_same_state_dicts(ours, theirs)
    assert_same_lookups(ours, theirs)
    assert repr(ours) == repr(theirs)
    assert_same_named(leaf_outputs(ours), leaf_outputs(theirs))


@pytest.mark.slow  # hypothesis over module trees: make unit runs it
@given(recipes(), st.data())
def test_random_trees_state_dict_both_ways(recipe, data):
    ours, theirs = both_trees(recipe)
    # torch -> retorch
    with torch.no_grad():
        for i, t in enumerate(theirs.state_dict(keep_vars=True).values()):
            t.add_(i + 1)  # a tensor reached by two names is changed twice, in both libraries
    result = ours.load_state_dict(theirs.state_dict())
    assert repr(result) == "<All keys matched successfully>"
    assert_same_state_dicts(ours, theirs)
    # retorch -> torch
    with torch.no_grad():
        for t in ours.state_dict(keep_vars=True).values():
            t.mul_(-1) if t.is_floating_point() else t.sub_(3)
    assert repr(theirs.load_state_dict(ours.state_dict())) == "<All keys matched successfully>"
    assert_same_state_dicts(ours, theirs)
    assert_same_named(leaf_outputs(ours.eval()), leaf_outputs(theirs.eval()))

    # a damaged state_dict: the same missing and unexpected keys, the same errors
    sd = theirs.state_dict()
    keys = list(sd)
    for k in data.draw(st.lists(st.sampled_from(keys), max_size=3, unique=True)):
        del sd[k]
    for k in data.draw(
        st.lists(st.sampled_from(["extra", "body.extra", "body.0.x.y", "nowhere.w"]), unique=True)
    ):
        sd[k] = torch.ones(1)
    if keys and data.draw(st.booleans()):
        victim = data.draw(st.sampled_from(keys))
        if victim in sd:
            sd[victim] = torch.ones(7, 7)  # a shape that fits nothing
    results = []
    for m in (ours, theirs):
        try:
            r = m.load_state_dict(sd, strict=False)
            results.append(("ok", r.missing_keys, r.unexpected_keys))
        except RuntimeError as e:
            results.append(("RuntimeError", str(e).split(":", 1)[1]))
        try:
            m.load_state_dict(sd)
            results.append("ok")
        except RuntimeError as e:
            results.append(str(e).split(":", 1)[1])
    assert results[:2] == results[2:]


@pytest.mark.slow  # hypothesis over module trees: make unit runs it
@given(recipes(), st.lists(st.tuples(st.integers(0, 100), st.booleans()), max_size=4))
def test_random_trees_modes_apply_and_dtype(recipe, mode_changes):
    ours, theirs = both_trees(recipe)
    for index, mode in mode_changes:
        for root in (ours, theirs):
            subs = list(root.modules())
            subs[index % len(subs)].train(mode)
        assert [m.training for m in ours.modules(False)] == [
            m.training for m in theirs.modules(False)
        ]
    ours.eval(), theirs.eval()
    assert not any(m.training for m in ours.modules()) and not any(
        m.training for m in theirs.modules()
    )
    ours.train(), theirs.train()
    assert all(m.training for m in ours.modules())

    orders = []
    for root in (ours, theirs):
        names = {id(m): n for n, m in root.named_modules()}
        order = []
        root.apply(lambda m: order.append((names[id(m)], type(m).__name__)))  # noqa: B023
        orders.append(order)
    assert orders[0] == orders[1]

    params_before = [list(ours.parameters()), list(theirs.parameters())]
    assert ours.to(torch.float64) is ours and theirs.to(torch.float64) is theirs
    assert all(a is b for a, b in zip(params_before[0], ours.parameters()))  # converted in place
    assert_same_walks(ours, theirs)
    assert_same_state_dicts(ours, theirs)
    ours.eval(), theirs.eval()
    assert_same_named(leaf_outputs(ours, torch.float64), leaf_outputs(theirs, torch.float64))
    ours.float(), theirs.float()
    assert_same_state_dicts(ours, theirs)


# ---------------------------------------------------------------- registration sequences

NAMES = ["a", "b", "weight", "bias", "in_features"]
VALUES = ["parameter", "tensor", "buffer", "buffer_np", "module", "none", "int"]
OPS = [
    "setattr",
    "delattr",
    "register_parameter",
    "register_buffer",
    "register_buffer_np",
    "add_module",
]


def registry(m):
    internal = {"training", "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"}
    return (
        [(k, None if v is None else v.tolist()) for k, v in m._parameters.items()],
        [(k, None if v is None else v.tolist()) for k, v in m._buffers.items()],
        sorted(m._non_persistent_buffers_set),
        [(k, type(v).__name__) for k, v in m._modules.items()],
        sorted(
            (k, repr(v)) for k, v in m.__dict__.items() if k not in internal and "hook" not in k
        ),
    )


def make_value(nn, kind, i):
    return {
        "parameter": lambda: nn.Parameter(torch.full((2,), float(i))),
        "tensor": lambda: torch.full((1,), float(i)),
        "buffer": lambda: nn.Buffer(torch.full((3,), float(i))),
        "buffer_np": lambda: nn.Buffer(torch.full((3,), float(i)), persistent=False),
        "module": lambda: nn.ReLU() if i % 2 else nn.GELU(),
        "none": lambda: None,
        "int": lambda: i,
    }[kind]()


def apply_op(nn, m, op, name, kind, i):
    value = make_value(nn, kind, i)
    if op == "setattr":
        setattr(m, name, value)
    elif op == "delattr":
        delattr(m, name)
    elif op == "register_parameter":
        m.register_parameter(name, value)
    elif op == "register_buffer":
        m.register_buffer(name, value)
    elif op == "register_buffer_np":
        m.register_buffer(name, value, persistent=False)
    else:
        m.add_module(name, value)


@given(
    st.booleans(),
    st.lists(
        st.tuples(st.sampled_from(OPS), st.sampled_from(NAMES), st.sampled_from(VALUES)),
        min_size=1,
        max_size=12,
    ),
)
def test_random_registration_sequences_match_torch(start_from_linear, ops):
    logs = []
    for nn in BOTH:
        torch.manual_seed(0)
        m = nn.Linear(2, 2) if start_from_linear else nn.Module()
        log = [registry(m)]
        for i, (op, name, kind) in enumerate(ops):
            try:
                apply_op(nn, m, op, name, kind, i)
                log.append("ok")
            except Exception as e:  # noqa: BLE001 - the type and message are what we compare
                log.append((type(e).__name__, str(e).replace("retorch.nn", "torch.nn")))
            log.append(registry(m))
        log.append([n for n, _ in m.named_parameters()] + [n for n, _ in m.named_buffers()])
        log.append(list(m.state_dict()))
        try:
            log.append(repr(m))
        except AttributeError as e:  # Linear's extra_repr needs the bias attribute
            log.append(str(e))
        logs.append(log)
    assert logs[0] == logs[1]


# ---------------------------------------------------------------- hook programs

HOOK_OPS = st.one_of(
    st.tuples(
        st.just("pre"),
        st.booleans(),  # prepend
        st.booleans(),  # with_kwargs
        st.sampled_from(["none", "replace", "bare"]),
    ),
    st.tuples(
        st.just("post"),
        st.booleans(),  # prepend
        st.booleans(),  # with_kwargs
        st.booleans(),  # always_call
        st.sampled_from(["none", "replace", "raise"]),
    ),
    st.tuples(st.just("remove"), st.integers(0, 20)),
    st.tuples(st.just("call"), st.booleans(), st.booleans()),  # forward raises, pass a kwarg
)


def run_hook_program(nn, program):
    log = []

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x, scale=1.0):
            log.append(("forward", scale))
            if scale < 0:
                raise ValueError("negative scale")
            return self.lin(x) * scale

    torch.manual_seed(0)
    m = Scaled()
    handles = []
    x = torch.ones(1, 2)
    for step, op in enumerate(program):
        if op[0] == "pre":
            _, prepend, with_kwargs, action = op

            def pre(mod, args, *kw, step=step, action=action):
                log.append(("pre", step, len(kw) == 1 and sorted(kw[0])))
                if action == "none":
                    return None
                new_args = (args[0] + step,)
                if kw:
                    return (new_args, {**kw[0], "scale": float(step)})
                return new_args if action == "replace" else new_args[0]

            handles.append(
                m.register_forward_pre_hook(pre, prepend=prepend, with_kwargs=with_kwargs)
            )
        elif op[0] == "post":
            _, prepend, with_kwargs, always_call, action = op

            def post(mod, args, *rest, step=step, action=action):
                out = rest[-1]
                log.append(("post", step, len(rest) == 2 and sorted(rest[0]), out is None))
                if action == "raise":
                    raise RuntimeError(f"hook {step} failed")
                return None if action == "none" or out is None else out + step

            handles.append(
                m.register_forward_hook(
                    post, prepend=prepend, with_kwargs=with_kwargs, always_call=always_call
                )
            )
        elif op[0] == "remove":
            if handles:
                handles[op[1] % len(handles)].remove()
        else:
            _, raises, with_kwarg = op
            kwargs = {"scale": -1.0 if raises else 2.0} if with_kwarg or raises else {}
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    log.append(("out", m(x, **kwargs).tolist()))
                except Exception as e:  # noqa: BLE001
                    log.append((type(e).__name__, str(e)))
            log.append([str(w.message) for w in caught])
    log.append([h.id - handles[0].id for h in handles])
    log.append(([k - handles[0].id for k in m._forward_pre_hooks] if handles else []))
    log.append(([k - handles[0].id for k in m._forward_hooks] if handles else []))
    return log


@given(st.lists(HOOK_OPS, min_size=1, max_size=10))
def test_random_hook_programs_match_torch(program):
    ours = run_hook_program(rnn, program)
    theirs = run_hook_program(tnn, program)
    assert ours == theirs

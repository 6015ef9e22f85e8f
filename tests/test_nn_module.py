"""retorch.nn.Module against torch.nn.Module: registration, iteration, modes, conversions,
hooks, state_dict, printing and errors.

Every test builds the same thing with both libraries (``nn`` is ``retorch.nn`` or
``torch.nn``), does the same thing to both, and compares what comes out: names in order,
tensor bits, exception types and messages, printed strings.
"""

from __future__ import annotations

import copy
import inspect
import pickle
import warnings
from collections import OrderedDict

import pytest
import torch
import torch.nn as tnn

import retorch.nn as rnn
from retorch.nn._hooks import RemovableHandle
from retorch.nn.modules.module import _IncompatibleKeys

BOTH = [rnn, tnn]


# ---------------------------------------------------------------- helpers


def both(make, seed=0):
    """``make(nn)`` built with each library (ours first) from the same seed."""
    out = []
    for nn in BOTH:
        torch.manual_seed(seed)
        out.append(make(nn))
    return out


def norm(msg: str) -> str:
    """Messages name the library when they print a type: compare them modulo that name."""
    return msg.replace("retorch.nn", "torch.nn")


def outcome(fn):
    """What ``fn()`` did: ("ok", result) or (exception type name, message)."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - the type is what we compare
        return (type(e).__name__, norm(str(e)))


def same_tensor(a, b) -> bool:
    return (
        type(a).__name__ == type(b).__name__
        and a.dtype == b.dtype
        and a.shape == b.shape
        and a.requires_grad == b.requires_grad
        and torch.equal(a, b)
    )


def assert_same_named(ours, theirs):
    """Same names in the same order; same tensors (bits, dtype, requires_grad) or module types."""
    ours, theirs = list(ours), list(theirs)
    assert [n for n, _ in ours] == [n for n, _ in theirs]
    for (name, a), (_, b) in zip(ours, theirs):
        if isinstance(a, torch.Tensor):
            assert same_tensor(a, b), name
        else:
            assert type(a).__name__ == type(b).__name__, name


def registry(m):
    """Where a module keeps what it was given: the three dicts and its plain attributes."""
    internal = {"training", "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"}
    return {
        "parameters": [
            (k, None if v is None else tuple(v.shape)) for k, v in m._parameters.items()
        ],
        "buffers": [(k, None if v is None else tuple(v.shape)) for k, v in m._buffers.items()],
        "non_persistent": sorted(m._non_persistent_buffers_set),
        "modules": [(k, type(v).__name__) for k, v in m._modules.items()],
        "plain": sorted(k for k in m.__dict__ if k not in internal and "hook" not in k),
    }


def mlp(nn):
    return nn.Sequential(
        nn.Linear(4, 8),
        nn.GELU(),
        nn.Dropout(0.1),
        nn.LayerNorm(8),
        nn.ModuleList([nn.Linear(8, 8), nn.ReLU()]),
        nn.ModuleDict({"head": nn.Linear(8, 2)}),
    )


def custom_classes(nn):
    """A small hand-written model, written once against either library."""

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.proj = nn.Linear(d, d)
            self.scale = nn.Parameter(torch.ones(d))
            self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
            self.register_buffer("cache", torch.zeros(d), persistent=False)
            self.note = "plain attribute"

        def forward(self, x):
            self.steps += 1
            return self.proj(self.norm(x)) * self.scale + x

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 6, padding_idx=0)
            self.blocks = nn.ModuleList([Block(6), Block(6)])
            self.head = nn.Linear(6, 10, bias=False)
            self.head.weight = self.embed.weight  # tied weights
            self.heads = nn.ModuleDict({"main": self.head, "aux": nn.Linear(6, 3)})

        def forward(self, idx):
            x = self.embed(idx)
            for block in self.blocks:
                x = block(x)
            return self.head(x), self.heads["aux"](x)

    return Block, Net


def net(nn):
    return custom_classes(nn)[1]()


# ---------------------------------------------------------------- Parameter and Buffer


@pytest.mark.parametrize(
    "data, requires_grad",
    [
        (torch.tensor([[1.0, -2.5], [3.25, 4.0]]), True),
        (torch.arange(3, dtype=torch.float64), False),
        (torch.zeros(0), True),
        (torch.tensor(2.0), True),
    ],
)
def test_parameter_is_a_tensor_subclass_printed_as_torchs(data, requires_grad):
    ours = rnn.Parameter(data, requires_grad)
    theirs = tnn.Parameter(data, requires_grad)
    assert isinstance(ours, torch.Tensor) and type(ours) is rnn.Parameter
    assert ours.requires_grad == theirs.requires_grad and ours.is_leaf
    assert ours.data_ptr() == data.data_ptr()  # shares the storage, as torch's
    assert repr(ours) == repr(theirs)
    assert str(ours) == str(theirs)


def test_parameter_defaults_operations_and_copies():
    assert repr(rnn.Parameter()) == repr(tnn.Parameter())
    p = rnn.Parameter(torch.ones(2, 2))
    assert p.requires_grad
    assert type(p * 2) is torch.Tensor and type(p.detach()) is torch.Tensor  # not Parameters
    x = torch.ones(2, requires_grad=True)
    q = rnn.Parameter(x * 3)  # a leaf, even when made from the result of an operation
    assert q.is_leaf and q.grad_fn is None
    c = copy.deepcopy(p)
    assert type(c) is rnn.Parameter and torch.equal(c, p) and c.data_ptr() != p.data_ptr()
    r = pickle.loads(pickle.dumps(rnn.Parameter(torch.ones(3), requires_grad=False)))
    assert type(r) is rnn.Parameter and not r.requires_grad and torch.equal(r, torch.ones(3))


def test_buffer_marks_a_tensor_as_torchs_does():
    for nn in BOTH:
        b = nn.Buffer(torch.ones(2), persistent=False)
        assert type(b) is torch.Tensor and isinstance(b, nn.Buffer) and not b.persistent
        assert not isinstance(torch.ones(2), nn.Buffer)
        m = nn.Module()
        m.a = nn.Buffer(torch.ones(1))
        m.b = nn.Buffer(torch.zeros(1), persistent=False)
        assert list(m._buffers) == ["a", "b"] and m._non_persistent_buffers_set == {"b"}
        assert list(m.state_dict()) == ["a"]


# ---------------------------------------------------------------- registration


def test_setattr_routes_each_value_to_torchs_dict():
    def script(nn):
        m = nn.Linear(2, 3)
        snapshots = [registry(m)]
        steps = [
            lambda: setattr(m, "extra", nn.Parameter(torch.ones(1))),
            lambda: setattr(m, "child", nn.ReLU()),
            lambda: m.register_buffer("running", torch.zeros(3)),
            lambda: m.register_buffer("scratch", torch.zeros(3), persistent=False),
            lambda: setattr(m, "scratch", torch.ones(3)),  # stays a non-persistent buffer
            lambda: setattr(m, "running", None),  # a buffer may be None
            lambda: setattr(m, "bias", None),  # so may a parameter
            lambda: setattr(m, "child", None),  # and a child module
            lambda: setattr(m, "plain", torch.ones(2)),  # a tensor is not a buffer by itself
            lambda: setattr(m, "plain", nn.Parameter(torch.ones(2))),  # leaves __dict__
            lambda: setattr(m, "plain", nn.GELU()),  # parameter -> module
            lambda: setattr(m, "extra", nn.Linear(1, 1)),  # parameter -> module
            lambda: setattr(m, "scratch", nn.Parameter(torch.ones(1))),  # buffer -> parameter
            lambda: delattr(m, "plain"),
            lambda: delattr(m, "running"),
            lambda: delattr(m, "note") if hasattr(m, "note") else None,
            lambda: m.register_parameter("late", None),
            lambda: m.add_module("late_module", None),
            lambda: m.register_module("registered", nn.ReLU()),
            lambda: setattr(m, "in_features", 7),
        ]
        for step in steps:
            snapshots.append((outcome(step)[0], registry(m)))
        return snapshots

    ours, theirs = both(script)
    assert ours == theirs


def test_getattr_finds_registered_values_and_fails_as_torch():
    for nn in BOTH:
        m = nn.Linear(2, 2)
        assert "weight" not in m.__dict__ and m.weight is m._parameters["weight"]
        m.register_buffer("b", torch.ones(1))
        assert m.b is m._buffers["b"]
    assert outcome(lambda: rnn.Linear(2, 2).foo) == outcome(lambda: tnn.Linear(2, 2).foo)
    with pytest.raises(AttributeError, match="^'Linear' object has no attribute 'foo'$"):
        _ = rnn.Linear(2, 2).foo


def misuse_cases(nn):
    """Misuses whose exception type and message must be torch's."""

    class Early(nn.Module):
        def __init__(self, what):
            if what == "param":
                self.w = nn.Parameter(torch.ones(1))
            elif what == "module":
                self.m = nn.ReLU()
            elif what == "buffer":
                self.register_buffer("b", torch.ones(1))
            else:
                self.register_parameter("p", None)

    def with_attr(name="x"):
        m = nn.Module()
        setattr(m, name, 1)
        return m

    lin = lambda: nn.Linear(2, 2)  # noqa: E731
    seq = lambda: nn.Sequential(nn.ReLU(), nn.Linear(1, 1))  # noqa: E731
    return {
        "tensor to a parameter attribute": lambda: setattr(lin(), "weight", torch.ones(2, 2)),
        "int to a parameter attribute": lambda: setattr(lin(), "bias", 3),
        "tensor to a module attribute": lambda: setattr(seq(), "0", torch.ones(1)),
        "int to a buffer attribute": lambda: (
            lambda m: (m.register_buffer("b", None), setattr(m, "b", 3))
        )(nn.Module()),
        "register_parameter non-Parameter": lambda: nn.Module().register_parameter(
            "a", torch.ones(1)
        ),
        "register_parameter dotted name": lambda: nn.Module().register_parameter(
            "a.b", nn.Parameter(torch.ones(1))
        ),
        "register_parameter empty name": lambda: nn.Module().register_parameter("", None),
        "register_parameter int name": lambda: nn.Module().register_parameter(3, None),
        "register_parameter existing attr": lambda: with_attr().register_parameter("x", None),
        "register_parameter non-leaf": lambda: nn.Module().register_parameter(
            "a", nn.Parameter(torch.ones(1)) * 1
        ),
        "register_buffer existing attr": lambda: with_attr().register_buffer("x", torch.ones(1)),
        "register_buffer existing param": lambda: lin().register_buffer("weight", torch.ones(1)),
        "register_buffer dotted name": lambda: nn.Module().register_buffer("a.b", torch.ones(1)),
        "register_buffer empty name": lambda: nn.Module().register_buffer("", torch.ones(1)),
        "register_buffer int name": lambda: nn.Module().register_buffer(1, torch.ones(1)),
        "register_buffer non-tensor": lambda: nn.Module().register_buffer("a", [1.0]),
        "Buffer onto a plain attribute": lambda: setattr(
            with_attr(), "x", nn.Buffer(torch.ones(1))
        ),
        "add_module non-module": lambda: nn.Module().add_module("a", 3),
        "add_module dotted name": lambda: nn.Module().add_module("a.b", nn.ReLU()),
        "add_module empty name": lambda: nn.Module().add_module("", nn.ReLU()),
        "add_module int name": lambda: nn.Module().add_module(1, nn.ReLU()),
        "add_module existing attr": lambda: with_attr().add_module("x", nn.ReLU()),
        "parameter before __init__": lambda: Early("param"),
        "module before __init__": lambda: Early("module"),
        "buffer before __init__": lambda: Early("buffer"),
        "register_parameter before __init__": lambda: Early("register"),
        "missing attribute": lambda: lin().foo,
        "delete missing attribute": lambda: delattr(lin(), "foo"),
        "no forward": lambda: nn.Module()(torch.ones(1)),
        "ModuleList has no forward": lambda: nn.ModuleList([nn.ReLU()])(torch.ones(1)),
        "Module() with arguments": lambda: nn.Module(3),
        "Module() with keywords": lambda: nn.Module(a=3),
        "train with a non-bool": lambda: lin().train(1),
        "to an integer dtype": lambda: lin().to(torch.int32),
        "to nonsense": lambda: lin().to("nonsense"),
        "get_submodule missing": lambda: seq().get_submodule("1.foo"),
        "get_submodule of a parameter": lambda: seq().get_submodule("1.weight"),
        "get_parameter missing": lambda: seq().get_parameter("1.foo"),
        "get_parameter of a module": lambda: seq().get_parameter("1"),
        "get_parameter of a plain attribute": lambda: seq().get_parameter("1.in_features"),
        "get_buffer of a parameter": lambda: seq().get_buffer("1.weight"),
        "get_buffer missing": lambda: seq().get_buffer("0.nothing"),
        "set_submodule empty target": lambda: seq().set_submodule("", nn.ReLU()),
        "set_submodule non-module": lambda: seq().set_submodule("0", 3),
        "set_submodule strict missing": lambda: seq().set_submodule("2", nn.ReLU(), strict=True),
        "set_submodule over a parameter": lambda: seq().set_submodule("1.weight", nn.ReLU()),
        "load_state_dict of a list": lambda: lin().load_state_dict([1, 2]),
    }


@pytest.mark.parametrize("case", list(misuse_cases(tnn)))
def test_misuse_raises_torchs_exception_and_message(case):
    ours = outcome(misuse_cases(rnn)[case])
    theirs = outcome(misuse_cases(tnn)[case])
    assert theirs[0] != "ok", "the case should fail in torch"
    assert ours == theirs


def test_dotted_paths():
    def run(nn):
        m = net(nn)
        results = [
            type(m.get_submodule("")).__name__,
            type(m.get_submodule("blocks.1.proj")).__name__,
            tuple(m.get_parameter("blocks.0.scale").shape),
            tuple(m.get_parameter("embed.weight").shape),
            m.get_buffer("blocks.1.steps").item(),
            tuple(m.get_buffer("blocks.1.cache").shape),
        ]
        m.set_submodule("blocks.0.proj", nn.Linear(6, 6, bias=False))
        m.set_submodule("blocks.0.new", nn.ReLU())  # not strict: adds
        results.append([n for n, _ in m.named_modules()])
        return results

    ours, theirs = both(run)
    assert ours == theirs


# ---------------------------------------------------------------- iteration


@pytest.mark.parametrize("prefix", ["", "model"])
@pytest.mark.parametrize("recurse", [True, False])
@pytest.mark.parametrize("remove_duplicate", [True, False])
def test_iterators_match_torch_on_a_model_with_sharing(prefix, recurse, remove_duplicate):
    ours, theirs = both(net)
    for m in (ours, theirs):
        m.blocks.append(m.blocks[0])  # the same block twice
    assert_same_named(
        ours.named_parameters(prefix, recurse, remove_duplicate),
        theirs.named_parameters(prefix, recurse, remove_duplicate),
    )
    assert_same_named(
        ours.named_buffers(prefix, recurse, remove_duplicate),
        theirs.named_buffers(prefix, recurse, remove_duplicate),
    )
    assert_same_named(
        ours.named_modules(prefix=prefix, remove_duplicate=remove_duplicate),
        theirs.named_modules(prefix=prefix, remove_duplicate=remove_duplicate),
    )
    assert_same_named(ours.named_children(), theirs.named_children())
    assert len(list(ours.parameters(recurse))) == len(list(theirs.parameters(recurse)))
    assert len(list(ours.buffers(recurse))) == len(list(theirs.buffers(recurse)))
    assert [type(c).__name__ for c in ours.children()] == [
        type(c).__name__ for c in theirs.children()
    ]
    assert len(list(ours.modules(remove_duplicate))) == len(list(theirs.modules(remove_duplicate)))


def test_iterators_are_lazy_and_skip_none():
    for nn in BOTH:
        m = nn.Linear(2, 2, bias=False)
        m.register_buffer("nothing", None)
        m.add_module("empty", None)
        gen = m.named_parameters()
        assert inspect.isgenerator(gen)
        assert [n for n, _ in gen] == ["weight"]
        assert list(m.named_buffers()) == [] and list(m.named_children()) == []
        assert [n for n, _ in m.named_modules()] == [""]


def test_named_modules_memo_argument():
    for nn in BOTH:
        m = nn.Sequential(nn.ReLU(), nn.Linear(1, 1))
        memo = {m[0]}
        assert [n for n, _ in m.named_modules(memo, "p")] == ["p", "p.1"]


# ---------------------------------------------------------------- modes and conversions


def test_train_eval_propagate_and_return_self():
    def run(nn):
        m = net(nn)
        out = [m.eval() is m, [x.training for x in m.modules()]]
        m.blocks.train()
        out.append([x.training for x in m.modules()])
        out.append(m.train(False) is m)
        out.append([x.training for x in m.modules()])
        return out

    ours, theirs = both(run)
    assert ours == theirs


def test_apply_visits_children_first():
    def run(nn):
        m = net(nn)
        order = []
        assert m.apply(lambda sub: order.append(type(sub).__name__)) is m
        return order

    ours, theirs = both(run)
    assert ours == theirs


def test_apply_initialises_as_torch():
    def run(nn):
        m = mlp(nn)

        def init(sub):
            if isinstance(sub, nn.Linear):
                nn.init.xavier_uniform_(sub.weight)
                nn.init.zeros_(sub.bias)

        return list(m.apply(init).state_dict().items())

    ours, theirs = both(run)
    assert_same_named(ours, theirs)


@pytest.mark.parametrize(
    "convert",
    [
        lambda m: m.to(torch.float64),
        lambda m: m.to(dtype=torch.float64),
        lambda m: m.to("cpu", torch.float64),
        lambda m: m.to(torch.device("cpu")),
        lambda m: m.to(torch.ones(1, dtype=torch.float16)),
        lambda m: m.double(),
        lambda m: m.double().float(),
        lambda m: m.half(),
        lambda m: m.bfloat16(),
        lambda m: m.cpu(),
        lambda m: m.type(torch.float64),
    ],
)
def test_conversions_keep_parameter_identity_and_integer_buffers(convert):
    def run(nn):
        m = net(nn)
        idx = torch.tensor([[1, 2, 0]])
        sum(out.sum() for out in m(idx)).backward()  # give the parameters gradients to convert too
        before = {n: p for n, p in m.named_parameters()}
        assert convert(m) is m
        return (
            list(m.state_dict(keep_vars=True).items()),
            [
                (n, p is before[n], p.grad.dtype, p.grad is before[n].grad)
                for n, p in m.named_parameters()
            ],
            m.head.weight is m.embed.weight,  # still tied
        )

    ours, theirs = both(run)
    assert_same_named(ours[0], theirs[0])
    assert ours[1:] == theirs[1:]
    assert ours[2]


def test_to_empty_and_complex_dtype():
    for nn in BOTH:
        m = nn.Linear(2, 3)
        assert m.to_empty(device="cpu") is m and m.weight.shape == (3, 2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m.to(torch.complex64)
        assert m.weight.dtype == torch.complex64 and "Complex modules" in str(caught[0].message)


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_and_requires_grad(set_to_none):
    def run(nn):
        m = net(nn)
        sum(out.sum() for out in m(torch.tensor([[1, 2, 0]]))).backward()
        m.zero_grad(set_to_none=set_to_none)
        grads = [None if p.grad is None else p.grad.clone() for p in m.parameters()]
        assert m.requires_grad_(False) is m
        flags = [p.requires_grad for p in m.parameters()]
        m.blocks.requires_grad_()
        return grads, flags, [p.requires_grad for p in m.parameters()]

    ours, theirs = both(run)
    assert ours[1:] == theirs[1:]
    assert len(ours[0]) == len(theirs[0])
    for a, b in zip(ours[0], theirs[0]):
        assert (a is None and b is None) or torch.equal(a, b)


# ---------------------------------------------------------------- calling and hooks


def hook_program(nn, log):
    """Pre-hooks and hooks of every kind on one module, each logging its call."""

    class Affine(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x, scale=1.0):
            log.append(f"forward scale={scale}")
            return self.lin(x) * scale

    m = Affine()
    handles = {
        "pre A": m.register_forward_pre_hook(lambda mod, args: log.append("pre A")),
        "pre B (prepended)": m.register_forward_pre_hook(
            lambda mod, args: log.append("pre B"), prepend=True
        ),
        "pre doubles input": m.register_forward_pre_hook(
            lambda mod, args: (log.append("pre doubles"), args[0] * 2)[1]  # a bare value: wrapped
        ),
        "pre kwargs": m.register_forward_pre_hook(
            lambda mod, args, kwargs: (
                log.append(f"pre kw {sorted(kwargs)}"),
                (args, {**kwargs, "scale": 3.0}),
            )[1],
            with_kwargs=True,
        ),
        "pre kwargs prepended": m.register_forward_pre_hook(
            lambda mod, args, kwargs: log.append("pre kw first"), with_kwargs=True, prepend=True
        ),
        "post adds": m.register_forward_hook(
            lambda mod, args, out: (log.append("post adds"), out + 100)[1]
        ),
        "post kwargs": m.register_forward_hook(
            lambda mod, args, kwargs, out: log.append(f"post kw {kwargs} {tuple(args[0].shape)}"),
            with_kwargs=True,
        ),
        "post first": m.register_forward_hook(
            lambda mod, args, out: log.append("post first"), prepend=True
        ),
        "post always": m.register_forward_hook(
            lambda mod, args, out: (log.append("post always"), out * -1)[1], always_call=True
        ),
        "inner": m.lin.register_forward_hook(lambda mod, args, out: log.append("inner post")),
    }
    return m, handles


def test_hook_order_results_and_removal_match_torch():
    x = torch.randn(4, 3)
    runs = []
    for nn in BOTH:
        torch.manual_seed(0)
        log = []
        m, handles = hook_program(nn, log)
        outs = [m(x), m(x, scale=0.5)]
        handles["pre doubles input"].remove()
        handles["pre doubles input"].remove()  # twice is harmless
        handles["post kwargs"].remove()
        with handles["pre A"]:
            pass  # leaving the block removes the hook
        outs.append(m(x))
        for h in handles.values():
            h.remove()
        outs.append(m(x))
        state = [len(m._forward_pre_hooks), len(m._forward_pre_hooks_with_kwargs)]
        state += [len(m._forward_hooks), len(m._forward_hooks_with_kwargs)]
        state += [len(m._forward_hooks_always_called)]
        runs.append((log, outs, state))
    (log1, outs1, state1), (log2, outs2, state2) = runs
    assert log1 == log2
    assert state1 == state2 == [0, 0, 0, 0, 0]
    for a, b in zip(outs1, outs2):
        assert torch.equal(a, b)


def backward_hook_program(nn, log):
    """Two linear layers in a module taking (x, scale, y); full backward hooks at two levels."""

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 2)

        def forward(self, x, scale, y):
            return self.b(self.a(x) * scale), y * 2

    def summary(grads):
        return tuple(None if g is None else round(g.sum().item(), 4) for g in grads)

    m = Two()
    m.register_full_backward_pre_hook(lambda mod, go: log.append(("pre", summary(go))))
    m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 10, go[1]))  # replaces grad_output
    m.register_full_backward_hook(
        lambda mod, gi, go: log.append(("outer", summary(gi), summary(go)))
    )
    m.register_full_backward_hook(
        lambda mod, gi, go: (gi[0] + 1, None, gi[2])
    )  # replaces grad_input
    m.register_full_backward_hook(
        lambda mod, gi, go: log.append(("first", summary(gi))), prepend=True
    )
    m.a.register_full_backward_hook(
        lambda mod, gi, go: log.append(("inner a", summary(gi), summary(go)))
    )
    return m


@pytest.mark.parametrize("y_requires_grad", [False, True])
def test_full_backward_hooks_see_and_replace_gradients_as_torch(y_requires_grad):
    runs = []
    for nn in BOTH:
        torch.manual_seed(0)
        log = []
        m = backward_hook_program(nn, log)
        x = torch.randn(4, 3, requires_grad=True)
        y = torch.randn(2, requires_grad=y_requires_grad)
        out, out_y = m(x, 0.5, y)
        (out.sum() + out_y.sum()).backward()
        runs.append((log, x.grad, None if y.grad is None else y.grad, m.a.weight.grad))
    (log1, *grads1), (log2, *grads2) = runs
    assert log1 == log2 and [e[0] for e in log1] == ["pre", "inner a", "first", "outer"]
    for a, b in zip(grads1, grads2):
        assert (a is None and b is None) or torch.equal(a, b)


def test_full_backward_hook_without_input_gradients_warns_as_torch():
    runs = []
    for nn in BOTH:
        torch.manual_seed(0)
        log = []
        lin = nn.Linear(2, 2)
        lin.register_full_backward_hook(lambda mod, gi, go: log.append((gi, go[0].shape)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lin(torch.ones(1, 2)).sum().backward()
        runs.append((log, [str(w.message) for w in caught], lin.weight.grad))
    assert runs[0][0] == runs[1][0] == [((None,), torch.Size([1, 2]))]
    assert runs[0][1] == runs[1][1] and len(runs[0][1]) == 1
    assert torch.equal(runs[0][2], runs[1][2])


def test_backward_hook_with_the_wrong_number_of_gradients_raises_as_torch():
    messages = []
    for nn in BOTH:
        lin = nn.Linear(2, 2)
        lin.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
        with pytest.raises(RuntimeError) as e:
            lin(torch.ones(1, 2, requires_grad=True)).sum().backward()
        messages.append(str(e.value))
    assert messages[0] == messages[1]


def test_handles_count_up_and_survive_their_module():
    m = rnn.Linear(1, 1)
    h1 = m.register_forward_hook(lambda *a: None)
    h2 = m.register_forward_pre_hook(lambda *a: None)
    assert isinstance(h1, RemovableHandle) and h2.id == h1.id + 1
    assert list(m._forward_hooks) == [h1.id] and list(m._forward_pre_hooks) == [h2.id]
    del m
    h1.remove()  # the dicts are gone: nothing to do


def test_always_call_hooks_run_when_forward_raises():
    runs = []
    for nn in BOTH:
        log = []

        class Boom(nn.Module):
            def forward(self, x, flag=False):
                log.append("forward")
                raise ValueError("boom")

        m = Boom()
        m.register_forward_hook(
            lambda mod, args, out: log.append(f"always out={out}"), always_call=True
        )
        m.register_forward_hook(lambda mod, args, out: log.append("normal"))
        m.register_forward_hook(
            lambda mod, args, kwargs, out: log.append(f"always kw {kwargs}"),
            always_call=True,
            with_kwargs=True,
        )

        def broken(mod, args, out):
            raise KeyError("hook failed too")

        m.register_forward_hook(broken, always_call=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ValueError, match="boom"):
                m(torch.ones(1), flag=True)
        runs.append((log, [str(w.message) for w in caught]))
    assert runs[0] == runs[1]
    assert runs[0][0] == ["forward", "always out=None", "always kw {'flag': True}"]


def test_always_call_hook_runs_once_when_a_later_hook_raises():
    runs = []
    for nn in BOTH:
        log = []
        m = nn.ReLU()
        m.register_forward_hook(lambda mod, args, out: log.append("always"), always_call=True)

        def fail(mod, args, out):
            log.append("fail")
            raise RuntimeError("late")

        m.register_forward_hook(fail)
        m.register_forward_hook(lambda mod, args, out: log.append("always 2"), always_call=True)
        with pytest.raises(RuntimeError, match="late"):
            m(torch.ones(1))
        runs.append(log)
    assert runs[0] == runs[1] == ["always", "fail", "always 2"]


def test_bad_pre_hook_result_raises_torchs_error():
    def run(nn):
        m = nn.ReLU()
        m.register_forward_pre_hook(lambda mod, args, kwargs: (1, 2, 3), with_kwargs=True)
        return m(torch.ones(1))

    assert outcome(lambda: run(rnn)) == outcome(lambda: run(tnn))
    assert outcome(lambda: run(rnn))[0] == "RuntimeError"


def test_call_without_hooks_is_forward():
    for nn in BOTH:
        m = nn.Linear(2, 2)
        x = torch.randn(3, 2)
        assert torch.equal(m(x), m.forward(x))


# ---------------------------------------------------------------- state_dict


def test_state_dict_keys_values_and_metadata_match_torch():
    ours, theirs = both(net)
    sd_ours, sd_theirs = ours.state_dict(), theirs.state_dict()
    assert type(sd_ours) is OrderedDict
    assert_same_named(sd_ours.items(), sd_theirs.items())
    assert sd_ours._metadata == sd_theirs._metadata
    assert "blocks.0.cache" not in sd_ours  # non-persistent
    for v in sd_ours.values():
        assert type(v) is torch.Tensor and not v.requires_grad  # detached...
    assert sd_ours["head.weight"].data_ptr() == ours.head.weight.data_ptr()  # ...not copied


def test_state_dict_keep_vars_prefix_and_destination():
    ours, theirs = both(net)
    kv = ours.state_dict(keep_vars=True)
    assert kv["blocks.0.scale"] is ours.blocks[0].scale
    assert_same_named(kv.items(), theirs.state_dict(keep_vars=True).items())
    for nn_model in (ours, theirs):
        dest = {}
        assert nn_model.state_dict(destination=dest, prefix="m.") is dest
    d1, d2 = {}, {}
    ours.state_dict(destination=d1, prefix="m.")
    theirs.state_dict(destination=d2, prefix="m.")
    assert_same_named(d1.items(), d2.items())


def test_state_dict_round_trips_between_libraries():
    ours, theirs = both(net)
    torch.manual_seed(9)
    donor = net(tnn)
    with torch.no_grad():
        for p in donor.parameters():
            p.normal_()
        donor.blocks[1].steps.fill_(5)
    result = ours.load_state_dict(donor.state_dict())
    assert (
        isinstance(result, _IncompatibleKeys) and repr(result) == "<All keys matched successfully>"
    )
    assert_same_named(ours.state_dict().items(), donor.state_dict().items())
    idx = torch.tensor([[1, 2, 3, 0]])
    ours.eval(), theirs.eval(), donor.eval()
    back = theirs.load_state_dict(ours.state_dict())
    assert repr(back) == "<All keys matched successfully>"
    for a, b in zip(ours(idx), donor(idx)):
        assert torch.equal(a, b)
    for a, b in zip(theirs(idx), donor(idx)):
        assert torch.equal(a, b)


def test_non_strict_load_reports_the_same_keys():
    def run(nn):
        m = net(nn)
        sd = net(tnn).state_dict()
        del sd["embed.weight"], sd["blocks.1.steps"]
        sd["extra"] = torch.ones(1)
        sd["blocks.0.bogus"] = torch.ones(1)
        sd["nowhere.weight"] = torch.ones(1)
        result = m.load_state_dict(sd, strict=False)
        strict = outcome(lambda: m.load_state_dict(sd))
        return result.missing_keys, result.unexpected_keys, repr(result), strict

    ours, theirs = both(run)
    assert ours == theirs
    assert ours[0] == ["embed.weight", "blocks.1.steps"]


def test_load_errors_match_torch():
    def run(nn):
        lin = lambda: nn.Linear(3, 2)  # noqa: E731
        return [
            outcome(
                lambda: lin().load_state_dict({"weight": torch.ones(2, 4), "bias": torch.ones(3)})
            ),
            outcome(lambda: lin().load_state_dict({"weight": torch.ones(2, 3)})),
            outcome(
                lambda: lin().load_state_dict(
                    {"weight": torch.ones(2, 3), "bias": torch.ones(2), "b": torch.ones(1)}
                )
            ),
            outcome(lambda: lin().load_state_dict({"weight": [1.0], "bias": torch.ones(2)})),
            outcome(lambda: lin().load_state_dict({"weight": torch.ones(2, 4)}, strict=False)),
            outcome(lambda: nn.Sequential(lin()).load_state_dict({"0.weight": torch.ones(2, 4)})),
        ]

    ours, theirs = both(run)
    assert ours == theirs
    assert ours[0][1].startswith(
        "Error(s) in loading state_dict for Linear:\n\tsize mismatch for weight: copying a param "
        "with shape torch.Size([2, 4]) from checkpoint, the shape in current model is torch.Size([2, 3])."
    )


def test_load_error_message_names_the_class():
    ours = outcome(lambda: net(rnn).load_state_dict({}))
    theirs = outcome(lambda: net(tnn).load_state_dict({}))
    assert ours == theirs and "for Net:\n\tMissing key(s) in state_dict: " in ours[1]


def test_load_with_assign_replaces_the_tensors():
    def run(nn):
        m = nn.Linear(3, 2)
        m.register_buffer("count", torch.zeros(()))
        m.bias.requires_grad_(False)
        new = {
            "weight": torch.ones(2, 3, dtype=torch.float64),
            "bias": torch.zeros(2),
            "count": torch.ones(()),
        }
        m.load_state_dict(new, assign=True)
        return [
            (
                n,
                type(t).__name__,
                t.dtype,
                t.requires_grad,
                t is new[n] or t.data_ptr() == new[n].data_ptr(),
            )
            for n, t in m.state_dict(keep_vars=True).items()
        ]

    ours, theirs = both(run)
    norm_types = [(n, t.replace("Parameter", "P"), *rest) for n, t, *rest in ours]
    assert norm_types == [(n, t.replace("Parameter", "P"), *rest) for n, t, *rest in theirs]
    assert ours[0][1] == "Parameter" and ours[0][2] == torch.float64


def test_load_into_a_scalar_from_a_one_element_tensor():
    def run(nn):
        m = nn.Module()
        m.register_buffer("s", torch.zeros(()))
        m.load_state_dict({"s": torch.tensor([4.0])})
        return m.s

    ours, theirs = both(run)
    assert same_tensor(ours, theirs)


def test_load_keeps_metadata_from_the_state_dict():
    seen = []

    class Versioned(rnn.Module):
        _version = 3

        def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args):
            seen.append((prefix, local_metadata))
            super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)

    m = rnn.Sequential(Versioned())
    sd = m.state_dict()
    assert sd._metadata == OrderedDict([("", {"version": 1}), ("0", {"version": 3})])
    m.load_state_dict(sd)
    assert seen == [("0.", {"version": 3})]


# ---------------------------------------------------------------- printing and introspection


def test_repr_of_a_nested_model_is_torchs():
    def run(nn):
        Block, _ = custom_classes(nn)
        m = nn.Sequential(
            OrderedDict(
                [
                    ("embed", nn.Embedding(10, 4, padding_idx=2)),
                    ("blocks", nn.ModuleList([Block(4), Block(4), Block(4), nn.ReLU(), nn.ReLU()])),
                    (
                        "heads",
                        nn.ModuleDict(
                            {
                                "a": nn.Linear(4, 2),
                                "b": nn.Sequential(nn.GELU("tanh"), nn.Dropout(0.2, True)),
                            }
                        ),
                    ),
                    ("norm", nn.LayerNorm([4], eps=1e-6, bias=False)),
                    ("empty_list", nn.ModuleList()),
                    ("empty_seq", nn.Sequential()),
                    ("plain", nn.Module()),
                ]
            )
        )
        m.add_module("nothing", None)
        return repr(m), str(m), repr(m.blocks), repr(m.heads)

    ours, theirs = both(run)
    assert ours == theirs


def test_repr_with_a_multiline_extra_repr_and_blank_lines():
    def run(nn):
        class Multi(nn.Module):
            def extra_repr(self):
                return "first line\n\nthird line"

        class One(nn.Module):
            def extra_repr(self):
                return "only=1"

        m = nn.Sequential(Multi(), One(), nn.ModuleList([Multi(), Multi()]))
        m[0].child = One()
        return repr(m)

    ours, theirs = both(run)
    assert ours == theirs


def test_dir_lists_registered_names_as_torch():
    def run(nn):
        Block, Net = custom_classes(nn)
        m = Net()
        m.register_buffer("b", torch.ones(1))
        m.add_module("3d", nn.ReLU())  # not a legal identifier: left out
        # the base classes differ (torch's has more methods and hook dicts): compare the rest
        mine = lambda x, cls: [
            k for k in dir(x) if k not in set(dir(cls)) and not k.startswith("_")
        ]  # noqa: E731
        return mine(m, nn.Module), mine(m.blocks, nn.ModuleList), mine(m.blocks[0], nn.Module)

    ours, theirs = both(run)
    assert ours == theirs
    assert "embed" in ours[0] and "b" in ours[0] and "3d" not in ours[0]


def test_get_name_and_incompatible_keys():
    assert rnn.Linear(1, 1)._get_name() == "Linear"
    ok = _IncompatibleKeys([], [])
    assert repr(ok) == str(ok) == "<All keys matched successfully>"
    bad = _IncompatibleKeys(["a"], [])
    theirs = tnn.modules.module._IncompatibleKeys(["a"], [])
    assert repr(bad) == repr(theirs) == "_IncompatibleKeys(missing_keys=['a'], unexpected_keys=[])"
    assert bad.missing_keys == ["a"] and tuple(bad) == (["a"], [])


def test_deepcopy_keeps_sharing_and_values():
    for nn in BOTH:
        m = net(nn)
        c = copy.deepcopy(m)
        assert_same_named(c.named_parameters(), m.named_parameters())
        assert c.head.weight is c.embed.weight and c.head.weight is not m.head.weight
        assert c.heads["main"] is c.head


# ---------------------------------------------------------------- signatures


def params_of(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


MODULE_METHODS = [
    "__init__",
    "register_buffer",
    "register_parameter",
    "add_module",
    "register_module",
    "get_submodule",
    "set_submodule",
    "get_parameter",
    "get_buffer",
    "parameters",
    "named_parameters",
    "buffers",
    "named_buffers",
    "children",
    "named_children",
    "modules",
    "named_modules",
    "train",
    "eval",
    "requires_grad_",
    "zero_grad",
    "apply",
    "_apply",
    "to",
    "cuda",
    "cpu",
    "type",
    "float",
    "double",
    "half",
    "bfloat16",
    "to_empty",
    "register_forward_pre_hook",
    "register_forward_hook",
    "_call_impl",
    "_save_to_state_dict",
    "_load_from_state_dict",
    "load_state_dict",
    "_named_members",
    "extra_repr",
    "_get_name",
    "__setattr__",
    "__getattr__",
    "__delattr__",
    "__dir__",
    "__repr__",
]


@pytest.mark.parametrize("method", MODULE_METHODS)
def test_module_method_signatures_match_torch(method):
    assert params_of(getattr(rnn.Module, method)) == params_of(getattr(tnn.Module, method))


def test_state_dict_signature_is_torchs_without_the_deprecated_positionals():
    theirs = [p for p in params_of(tnn.Module.state_dict) if p[0] != "args"]
    assert params_of(rnn.Module.state_dict) == theirs


def test_handle_and_parameter_signatures_match_torch():
    import torch.utils.hooks as thooks

    for name in ["__init__", "remove", "__enter__", "__exit__"]:
        assert params_of(getattr(RemovableHandle, name)) == params_of(
            getattr(thooks.RemovableHandle, name)
        )
    assert params_of(rnn.Parameter.__new__) == params_of(tnn.Parameter.__new__)
    assert params_of(rnn.Buffer.__new__) == params_of(tnn.Buffer.__new__)

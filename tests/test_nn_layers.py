"""retorch.nn's layers, containers and init against torch.nn's.

Under the same ``torch.manual_seed`` a rebuilt layer must hold bit-identical parameters (the
initialisers make the same random draws in the same order, with bounds computed by the same
floating-point expressions), leave the generator in the same state, print the same, and
compute bit-identical outputs and gradients.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections import OrderedDict

import pytest
import torch
import torch.nn as tnn

import retorch.nn as rnn

BOTH = [rnn, tnn]


def same_tensor(a, b) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and a.requires_grad == b.requires_grad
        and torch.equal(a, b)
    )


def outcome(fn):
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - the type is what we compare
        return (type(e).__name__, str(e).replace("retorch.nn", "torch.nn"))


# ---------------------------------------------------------------- layers

LAYERS = {
    "Linear": (lambda nn: nn.Linear(5, 3), lambda: torch.randn(4, 5)),
    "Linear no bias": (lambda nn: nn.Linear(5, 3, bias=False), lambda: torch.randn(2, 7, 5)),
    "Linear float64": (
        lambda nn: nn.Linear(6, 2, dtype=torch.float64),
        lambda: torch.randn(3, 6, dtype=torch.float64),
    ),
    "Linear on cpu": (lambda nn: nn.Linear(1, 4, True, "cpu"), lambda: torch.randn(3, 1)),
    "Linear wide": (lambda nn: nn.Linear(1000, 7), lambda: torch.randn(2, 1000)),
    "Linear 1x1": (lambda nn: nn.Linear(1, 1), lambda: torch.randn(8, 1)),
    "Linear no inputs": (lambda nn: nn.Linear(0, 3), lambda: torch.randn(2, 0)),
    "ReLU": (lambda nn: nn.ReLU(), lambda: torch.randn(3, 4)),
    "ReLU inplace": (lambda nn: nn.ReLU(inplace=True), lambda: torch.randn(3, 4)),
    "GELU": (lambda nn: nn.GELU(), lambda: torch.randn(3, 4)),
    "GELU tanh": (lambda nn: nn.GELU(approximate="tanh"), lambda: torch.randn(3, 4)),
    "Dropout": (lambda nn: nn.Dropout(), lambda: torch.randn(16, 16)),
    "Dropout p=0.1": (lambda nn: nn.Dropout(0.1), lambda: torch.randn(16, 16)),
    "Dropout p=0": (lambda nn: nn.Dropout(0.0), lambda: torch.randn(16, 16)),
    "Dropout p=1": (lambda nn: nn.Dropout(1.0), lambda: torch.randn(16, 16)),
    "Dropout inplace": (lambda nn: nn.Dropout(0.3, inplace=True), lambda: torch.randn(16, 16)),
    "LayerNorm": (lambda nn: nn.LayerNorm(6), lambda: torch.randn(2, 3, 6)),
    "LayerNorm 2-d shape": (
        lambda nn: nn.LayerNorm([3, 6], eps=1e-3),
        lambda: torch.randn(2, 3, 6),
    ),
    "LayerNorm no affine": (
        lambda nn: nn.LayerNorm((6,), elementwise_affine=False),
        lambda: torch.randn(4, 6),
    ),
    "LayerNorm no bias": (lambda nn: nn.LayerNorm(6, bias=False), lambda: torch.randn(4, 6)),
    "LayerNorm float64": (
        lambda nn: nn.LayerNorm(6, dtype=torch.float64),
        lambda: torch.randn(4, 6, dtype=torch.float64),
    ),
    "Embedding": (lambda nn: nn.Embedding(10, 4), lambda: torch.tensor([[1, 2, 9], [0, 0, 3]])),
    "Embedding padding_idx": (
        lambda nn: nn.Embedding(10, 4, padding_idx=0),
        lambda: torch.tensor([[1, 0, 9, 0]]),
    ),
    "Embedding negative padding_idx": (
        lambda nn: nn.Embedding(10, 4, padding_idx=-2),
        lambda: torch.tensor([8, 8, 1]),
    ),
    "Embedding max_norm": (
        lambda nn: nn.Embedding(10, 4, max_norm=1.0, norm_type=1.0),
        lambda: torch.tensor([1, 2, 2]),
    ),
    "Embedding scale_grad_by_freq": (
        lambda nn: nn.Embedding(6, 3, scale_grad_by_freq=True),
        lambda: torch.tensor([1, 1, 2]),
    ),
    "Embedding sparse": (lambda nn: nn.Embedding(6, 3, sparse=True), lambda: torch.tensor([1, 5])),
    "Embedding frozen _weight": (
        lambda nn: nn.Embedding(3, 2, _weight=torch.arange(6.0).view(3, 2), _freeze=True),
        lambda: torch.tensor([2, 0]),
    ),
}


def build(make, seed=7):
    torch.manual_seed(seed)
    module = make()
    return module, torch.rand(3)  # the generator's next draws: the same only if as many were used


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_matches_torch(name):
    make, make_input = LAYERS[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours, after_ours = build(lambda: make(rnn))
        n_ours = len(caught)
        theirs, after_theirs = build(lambda: make(tnn))
    assert [str(w.message) for w in caught[:n_ours]] == [str(w.message) for w in caught[n_ours:]]
    # the same parameters, bit for bit, and the same generator state afterwards
    assert torch.equal(after_ours, after_theirs)
    ours_params, theirs_params = list(ours.named_parameters()), list(theirs.named_parameters())
    assert [n for n, _ in ours_params] == [n for n, _ in theirs_params]
    for (_, a), (_, b) in zip(ours_params, theirs_params):
        assert type(a) is rnn.Parameter and same_tensor(a, b)
    assert list(ours._parameters) == list(theirs._parameters)  # including the ones set to None
    assert repr(ours) == repr(theirs)
    assert {k: v for k, v in vars(ours).items() if not k.startswith("_")} == {
        k: v for k, v in vars(theirs).items() if not k.startswith("_")
    }

    # the same outputs and gradients, in training and in eval mode, from the same seed
    for train in (True, False):
        ours.train(train), theirs.train(train)
        results = []
        for m in (ours, theirs):
            torch.manual_seed(11)
            x = make_input()
            if x.is_floating_point():
                x.requires_grad_()
            leaf = x
            if getattr(m, "inplace", False) and x.requires_grad:
                x = x * 1  # in-place layers may not write into a leaf that requires grad
            y = m(x)
            y.sum().backward() if y.requires_grad else None
            results.append(
                (
                    y.detach(),
                    None if leaf.grad is None else leaf.grad,
                    [p.grad for p in m.parameters()],
                    torch.rand(2),
                )
            )
            m.zero_grad()
        (y1, gx1, gp1, r1), (y2, gx2, gp2, r2) = results
        assert torch.equal(y1, y2) and y1.dtype == y2.dtype
        assert (gx1 is None and gx2 is None) or torch.equal(gx1, gx2)
        for a, b in zip(gp1, gp2):
            assert (a is None and b is None) or torch.equal(a.to_dense(), b.to_dense())
        assert torch.equal(r1, r2)


def test_layers_load_torchs_parameters_and_compute_the_same():
    x = torch.randn(5, 8)
    for ours_make, theirs_make in [
        (lambda: rnn.Linear(8, 3), lambda: tnn.Linear(8, 3)),
        (lambda: rnn.LayerNorm(8), lambda: tnn.LayerNorm(8)),
    ]:
        torch.manual_seed(1)
        theirs = theirs_make()
        with torch.no_grad():
            for p in theirs.parameters():
                p.normal_()
        ours = ours_make()
        ours.load_state_dict(theirs.state_dict())
        assert torch.equal(ours(x), theirs(x))


def test_embedding_padding_row_is_zero_and_gets_no_gradient():
    for nn in BOTH:
        torch.manual_seed(0)
        emb = nn.Embedding(5, 3, padding_idx=-1)
        assert emb.padding_idx == 4 and torch.equal(emb.weight[4], torch.zeros(3))
        emb(torch.tensor([4, 1, 4])).sum().backward()
        assert torch.equal(emb.weight.grad[4], torch.zeros(3))
        assert torch.equal(emb.weight.grad[1], torch.ones(3))


def test_embedding_from_pretrained_and_errors():
    w = torch.randn(4, 3)
    for nn in BOTH:
        e = nn.Embedding.from_pretrained(w)
        assert (
            type(e) is nn.Embedding
            and not e.weight.requires_grad
            and e.weight.data_ptr() == w.data_ptr()
        )
        assert nn.Embedding.from_pretrained(w, freeze=False, padding_idx=1).weight.requires_grad
    for make in [
        lambda nn: nn.Embedding(5, 3, padding_idx=5),
        lambda nn: nn.Embedding(5, 3, padding_idx=-6),
        lambda nn: nn.Embedding(5, 3, _weight=torch.ones(4, 3)),
        lambda nn: nn.Embedding.from_pretrained(torch.ones(3)),
    ]:
        ours, theirs = outcome(lambda: make(rnn)), outcome(lambda: make(tnn))
        assert ours == theirs and ours[0] == "AssertionError"


@pytest.mark.parametrize("p", [1.5, -0.1, 2])
def test_dropout_rejects_probabilities_outside_0_1(p):
    ours, theirs = outcome(lambda: rnn.Dropout(p)), outcome(lambda: tnn.Dropout(p))
    assert (
        ours
        == theirs
        == ("ValueError", f"dropout probability has to be between 0 and 1, but got {p}")
    )


def test_dropout_masks_follow_the_seed():
    x = torch.ones(10_000)
    outs = []
    for nn in BOTH:
        torch.manual_seed(5)
        d = nn.Dropout(0.3)
        outs.append((d(x), d(x), torch.rand(2)))
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    assert not torch.equal(outs[0][0], outs[0][1])  # a fresh mask per call
    assert torch.equal(rnn.Dropout(0.3).eval()(x), x)


def test_dropout_inplace_writes_into_its_input():
    for nn in BOTH:
        x = torch.ones(100)
        torch.manual_seed(0)
        assert nn.Dropout(0.5, inplace=True)(x) is x
        assert (x == 0).any() and (x == 2).any()


# ---------------------------------------------------------------- signatures


def params_of(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize(
    "name",
    [
        "Linear",
        "ReLU",
        "GELU",
        "Dropout",
        "LayerNorm",
        "Embedding",
        "Sequential",
        "ModuleList",
        "ModuleDict",
        "Module",
    ],
)
def test_constructor_signatures_match_torch(name):
    assert params_of(getattr(rnn, name)) == params_of(getattr(tnn, name))


@pytest.mark.parametrize(
    "cls, method",
    [
        ("Linear", "reset_parameters"),
        ("Linear", "forward"),
        ("Linear", "extra_repr"),
        ("LayerNorm", "reset_parameters"),
        ("LayerNorm", "forward"),
        ("Embedding", "reset_parameters"),
        ("Embedding", "forward"),
        ("Embedding", "from_pretrained"),
        ("Dropout", "forward"),
        ("GELU", "forward"),
        ("ReLU", "forward"),
        ("Sequential", "__getitem__"),
        ("Sequential", "append"),
        ("Sequential", "insert"),
        ("Sequential", "extend"),
        ("Sequential", "pop"),
        ("Sequential", "forward"),
        ("ModuleList", "__getitem__"),
        ("ModuleList", "append"),
        ("ModuleList", "extend"),
        ("ModuleList", "insert"),
        ("ModuleList", "pop"),
        ("ModuleDict", "update"),
        ("ModuleDict", "pop"),
    ],
)
def test_method_signatures_match_torch(cls, method):
    assert params_of(getattr(getattr(rnn, cls), method)) == params_of(
        getattr(getattr(tnn, cls), method)
    )


@pytest.mark.parametrize(
    "name",
    [
        "calculate_gain",
        "uniform_",
        "normal_",
        "constant_",
        "ones_",
        "zeros_",
        "xavier_uniform_",
        "xavier_normal_",
        "kaiming_uniform_",
        "kaiming_normal_",
        "_calculate_fan_in_and_fan_out",
        "_calculate_correct_fan",
    ],
)
def test_init_signatures_match_torch(name):
    assert params_of(getattr(rnn.init, name)) == params_of(getattr(tnn.init, name))


def test_exports():
    for name in [
        "Module", "Parameter", "Buffer", "Linear", "ReLU", "GELU", "Dropout", "LayerNorm",
        "Embedding", "Sequential", "ModuleList", "ModuleDict", "init", "utils",
    ]:  # fmt: skip
        assert hasattr(rnn, name), name
    assert rnn.utils.clip_grad_norm_ is not None
    assert rnn.Linear.__module__ == "retorch.nn.modules.linear"
    assert issubclass(rnn.Linear, rnn.Module) and not issubclass(rnn.Linear, tnn.Module)


# ---------------------------------------------------------------- init

SHAPES = [(3, 5), (8, 2), (4, 3, 2), (2, 3, 3, 3), (1, 1), (1000, 1)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "call",
    [
        lambda init, t: init.uniform_(t),
        lambda init, t: init.uniform_(t, -0.3, 0.7),
        lambda init, t: init.normal_(t),
        lambda init, t: init.normal_(t, 2.0, 0.5),
        lambda init, t: init.constant_(t, 0.25),
        lambda init, t: init.ones_(t),
        lambda init, t: init.zeros_(t),
        lambda init, t: init.xavier_uniform_(t),
        lambda init, t: init.xavier_uniform_(t, gain=init.calculate_gain("tanh")),
        lambda init, t: init.xavier_normal_(t, 0.3),
        lambda init, t: init.kaiming_uniform_(t),
        lambda init, t: init.kaiming_uniform_(t, a=math.sqrt(5)),
        lambda init, t: init.kaiming_uniform_(t, mode="fan_out", nonlinearity="relu"),
        lambda init, t: init.kaiming_uniform_(t, a=0.2, mode="FAN_IN"),
        lambda init, t: init.kaiming_normal_(t, nonlinearity="selu"),
    ],
)
def test_init_functions_draw_the_same_values(shape, call):
    results = []
    for nn in BOTH:
        torch.manual_seed(3)
        t = torch.empty(shape, requires_grad=True)
        out = call(nn.init, t)
        assert out is t and t.grad_fn is None  # in place, and not recorded by autograd
        results.append((t.detach().clone(), torch.rand(2)))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


def test_init_with_an_explicit_generator():
    outs = []
    for nn in BOTH:
        g = torch.Generator().manual_seed(42)
        t = torch.empty(4, 6)
        nn.init.kaiming_uniform_(t, generator=g)
        nn.init.normal_(t[0], generator=g)
        nn.init.xavier_uniform_(t[1:3], generator=g)
        outs.append(t)
    assert torch.equal(*outs)


@pytest.mark.parametrize(
    "args",
    [
        ("linear",),
        ("conv2d",),
        ("sigmoid",),
        ("tanh",),
        ("relu",),
        ("leaky_relu",),
        ("leaky_relu", 0.2),
        ("leaky_relu", 3),
        ("selu",),
        ("softmax",),
        ("leaky_relu", True),
        ("leaky_relu", "0.1"),
    ],
)
def test_calculate_gain(args):
    assert outcome(lambda: rnn.init.calculate_gain(*args)) == outcome(
        lambda: tnn.init.calculate_gain(*args)
    )


@pytest.mark.parametrize("shape", [(3,), (), (3, 4), (5, 2, 3, 3), (0, 4)])
def test_fans_and_their_errors(shape):
    t = torch.empty(shape)
    assert outcome(lambda: rnn.init._calculate_fan_in_and_fan_out(t)) == outcome(
        lambda: tnn.init._calculate_fan_in_and_fan_out(t)
    )
    for mode in ["fan_in", "fan_out", "fan_avg"]:
        assert outcome(lambda: rnn.init._calculate_correct_fan(t, mode)) == outcome(
            lambda: tnn.init._calculate_correct_fan(t, mode)
        )


def test_kaiming_on_an_empty_tensor_warns_and_does_nothing():
    for nn in BOTH:
        with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
            t = torch.empty(0, 3)
            assert nn.init.kaiming_uniform_(t) is t


# ---------------------------------------------------------------- containers


def describe(m):
    """A container's children: names, types, and which are the same object (by first index)."""
    children = list(m._modules.items())
    ids = [id(c) for _, c in children]
    return [(k, type(c).__name__, ids.index(id(c))) for k, c in children]


def run_both(script):
    results = []
    for nn in BOTH:
        torch.manual_seed(0)
        results.append(script(nn))
    return results


def test_sequential_api():
    def script(nn):
        a, b, c, d = nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1), nn.GELU()
        seq = nn.Sequential(a, b, c)
        log = [len(seq), describe(seq), seq[0] is a, seq[-1] is c, seq[-3] is a]
        log.append(outcome(lambda: seq[3]))
        log.append(outcome(lambda: seq[-4]))
        log.append(outcome(lambda: seq["0"]))
        sliced = seq[1:]
        log += [type(sliced).__name__, describe(sliced), sliced[0] is b, describe(seq[::-1])]
        log.append([type(x).__name__ for x in seq])
        seq[1] = d
        log.append(describe(seq))
        log.append(seq.append(nn.ReLU()) is seq)
        log.append(seq.insert(0, nn.Linear(2, 2)) is seq)
        log.append(seq.insert(-1, b) is seq)
        log.append(describe(seq))
        log.append(outcome(lambda: seq.insert(99, b)))
        log.append(outcome(lambda: seq.insert(0, 3)))
        log.append(seq.extend([nn.ReLU(), nn.GELU()]) is seq)
        log.append(type(seq.pop(1)).__name__)
        del seq[0]
        del seq[1:3]
        log.append(describe(seq))
        log.append(describe(seq + nn.Sequential(a)))
        log.append(outcome(lambda: seq + [a]))
        s2 = nn.Sequential(a, b)
        s2 += nn.Sequential(c)
        log.append(describe(s2))
        log.append(describe(s2 * 2))
        log.append(describe(2 * s2))
        s2 *= 2
        log.append(describe(s2))
        log.append(outcome(lambda: s2 * 0))
        log.append(outcome(lambda: s2 * 1.5))
        named = nn.Sequential(
            OrderedDict([("first", nn.Linear(2, 3)), ("act", nn.ReLU()), ("last", nn.Linear(3, 1))])
        )
        log += [describe(named), describe(named[1:]), named.act is named[1]]
        log.append(named(torch.ones(4, 2)).detach())
        log.append(nn.Sequential()(torch.ones(2)))  # an empty Sequential is the identity
        log.append([k for k in dir(named) if not k.startswith("_") and k not in dir(nn.Sequential)])
        return log

    ours, theirs = run_both(script)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def test_module_list_api():
    def script(nn):
        a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.GELU()
        ml = nn.ModuleList([a, b])
        log = [
            len(ml),
            describe(ml),
            ml[0] is a,
            ml[-1] is b,
            outcome(lambda: ml[2]),
            outcome(lambda: ml[-3]),
        ]
        log += [type(ml[1:]).__name__, describe(ml[::-1])]
        log.append(ml.append(c) is ml)
        log.append(ml.extend([a, nn.ReLU()]) is ml)
        ml += [nn.Linear(1, 1)]
        ml.insert(1, nn.Dropout())
        log.append(describe(ml))
        log.append(outcome(lambda: nn.ModuleList([a, b]).insert(-1, c)))  # torch's fails too
        ml[0] = nn.GELU()
        log.append(outcome(lambda: ml.__setitem__(99, b)))
        log.append(type(ml.pop(2)).__name__)
        del ml[-1]
        del ml[::2]
        log.append(describe(ml))
        log.append(describe(ml + [a]))
        log.append(outcome(lambda: ml.extend(3)))
        log.append([type(x).__name__ for x in ml])
        log.append(describe(nn.ModuleList()))
        log.append([n for n, _ in nn.ModuleList([a, a, b]).named_parameters()])
        return log

    ours, theirs = run_both(script)
    assert ours == theirs


def test_module_dict_api():
    def script(nn):
        a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.GELU()
        md = nn.ModuleDict({"a": a, "b": b})
        log = [len(md), describe(md), md["a"] is a, "a" in md, "z" in md, list(md), list(md.keys())]
        md["c"] = c
        md.update([("d", nn.Dropout()), ("a", nn.GELU())])  # replacing keeps the key's position
        md.update(OrderedDict(e=nn.ReLU()))
        md.update(nn.ModuleDict({"f": a}))
        log.append(describe(md))
        log.append([type(v).__name__ for v in md.values()])
        log.append([(k, type(v).__name__) for k, v in md.items()])
        log.append(type(md.pop("b")).__name__)
        del md["c"]
        log.append(describe(md))
        log.append(outcome(lambda: md["missing"]))
        log.append(outcome(lambda: md.update(3)))
        log.append(outcome(lambda: md.update([3])))
        log.append(outcome(lambda: md.update([("x", b, c)])))
        log.append(outcome(lambda: md.__setitem__("x.y", b)))
        log.append(outcome(lambda: md.__setitem__("g", 3)))
        md.clear()
        log.append((len(md), describe(md)))
        return log

    ours, theirs = run_both(script)
    assert ours == theirs


def test_containers_have_no_forward():
    for make in [lambda nn: nn.ModuleList([nn.ReLU()]), lambda nn: nn.ModuleDict({"a": nn.ReLU()})]:
        assert outcome(lambda: make(rnn)(torch.ones(1))) == outcome(
            lambda: make(tnn)(torch.ones(1))
        )

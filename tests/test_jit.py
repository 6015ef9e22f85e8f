"""retorch.jit.trace against torch.jit.trace: values, the baked-in branch, constants, warnings."""

import warnings

import pytest
import torch

import retorch.jit as rj

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow

W = torch.randn(3, 3, generator=torch.Generator().manual_seed(0))  # a global: a constant


def clip(x):
    if x.sum() > 0:
        return x * 2
    return -x


def mlp(x, b):
    return torch.tanh(x @ W + b).sum(dim=0)


def halves(x):
    a, b = x.chunk(2, dim=1)
    return torch.relu(a) - b.exp(), x[0]


def shift_by_item(x):
    return x - x.mean().item()


def scale_by_float(x):
    return x * float(x.max())


def add_int(x):
    return x + int(x[0, 0])


def add_len(x):
    return x + len(x)


def from_list(x):
    return x * x.tolist()[0][0]


def plus_tensor(x):
    return torch.tensor([1.0, 2.0, 3.0, 4.0]) + x


def loop_on_value(x):
    while x.norm() < 10:  # the number of iterations is baked in
        x = x * 2
    return x


FUNCS = [clip, mlp, halves, shift_by_item, scale_by_float, add_int, add_len, from_list,
         plus_tensor, loop_on_value]  # fmt: skip


def example(f, seed):
    g = torch.Generator().manual_seed(seed)
    if f is mlp:
        return torch.randn(2, 3, generator=g), torch.randn(3, generator=g)
    return (torch.rand(3, 4, generator=g) + 0.5,)  # positive: clip takes its first branch


def torch_trace(f, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(f, args, check_trace=False)


def quiet_trace(f, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rj.TracerWarning)
        return rj.trace(f, args)


def flat(v):
    return list(v) if isinstance(v, (tuple, list)) else [v]


@pytest.mark.parametrize("f", FUNCS, ids=lambda f: f.__name__)
def test_trace_equals_eager_on_the_examples(f):
    args = example(f, 0)
    ours, eager = flat(quiet_trace(f, args)(*args)), flat(f(*args))
    assert len(ours) == len(eager)
    assert all(torch.equal(a, b) for a, b in zip(ours, eager))


@pytest.mark.parametrize("f", FUNCS, ids=lambda f: f.__name__)
def test_trace_equals_torch_jit_trace_on_new_inputs(f):
    args, new = example(f, 0), example(f, 1)
    ours, theirs = flat(quiet_trace(f, args)(*new)), flat(torch_trace(f, args)(*new))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("f, wrong", [(clip, True), (shift_by_item, True),
                                      (loop_on_value, True), (mlp, False)])  # fmt: skip
def test_both_traces_are_wrong_the_same_way_off_the_examples_path(f, wrong):
    """A negative input takes clip's other branch; both traces still double it."""
    args = example(f, 0)
    new = tuple(-a for a in args) if f is not loop_on_value else (args[0] * 100,)
    ours, theirs, eager = quiet_trace(f, args)(*new), torch_trace(f, args)(*new), f(*new)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    assert (not torch.allclose(ours, eager)) is wrong


def tracer_warnings(trace, f, args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace(f, args)
    return sorted({str(w.message) for w in caught if w.category.__name__ == "TracerWarning"})


@pytest.mark.parametrize("f", FUNCS, ids=lambda f: f.__name__)
def test_tracer_warnings_are_torchs(f):
    args = example(f, 0)
    ours = tracer_warnings(rj.trace, f, args)
    theirs = tracer_warnings(lambda f, a: torch.jit.trace(f, a, check_trace=False), f, args)
    assert ours == theirs
    assert bool(ours) is (f not in (mlp, halves))


def torch_ops(f, args):
    graph = torch_trace(f, args).graph
    return [n.kind().split("::")[1] for n in graph.nodes() if n.kind().startswith("aten::")]


def our_ops(f, args):
    gm = quiet_trace(f, args)
    return [getattr(n.target, "__name__", n.target) for n in gm.graph.nodes
            if n.op in ("call_function", "call_method")]  # fmt: skip


@pytest.mark.parametrize(
    "f, ops",
    [
        (clip, ["mul"]),
        (mlp, ["matmul", "add", "tanh", "sum"]),
        (shift_by_item, ["sub"]),
        (loop_on_value, ["mul"] * 2),
    ],
)
def test_recorded_ops_are_torchs(f, ops):
    """Only the ops that feed the output stay: the comparison and the `.item()` are gone."""
    args = example(f, 0)
    assert our_ops(f, args) == torch_ops(f, args) == ops


def test_constant_tensor_is_stored_on_the_module():
    gm = quiet_trace(mlp, example(mlp, 0))
    assert [n.op for n in gm.graph.nodes].count("get_attr") == 1
    assert torch.equal(gm._tensor_constant0, W)


def test_a_module_traces_as_torch_jit_trace():
    """Parameters are constants of the trace; new inputs give torch.jit.trace's values."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    x, new = example(clip, 0)[0], example(clip, 1)[0]
    ours, theirs = quiet_trace(model, (x,)), torch_trace(model, (x,))
    assert [n.op for n in ours.graph.nodes].count("get_attr") == 4  # two weights, two biases
    with torch.no_grad():
        torch.testing.assert_close(ours(new), theirs(new), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(ours(new), model(new), rtol=0, atol=0)

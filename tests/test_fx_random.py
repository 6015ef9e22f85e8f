"""Hypothesis: random operator chains traced by retorch.fx equal torch.fx's graphs and run as
eager, and the passes (DCE, CSE, ShapeProp) leave them as torch's passes do."""

import operator

import torch
import torch.fx as tfx
from hypothesis import given
from hypothesis import strategies as st
from torch.fx.passes.dialect.common.cse_pass import CSEPass as TorchCSEPass
from torch.fx.passes.shape_prop import ShapeProp as TorchShapeProp

import retorch.fx as rfx
from retorch.fx.passes import CSEPass, ShapeProp

# Each step maps (v, x, y) -> new v: operators, reflected operators, torch.* calls, methods,
# indexing and attribute reads, so every Proxy path is drawn.
STEPS = [
    lambda v, x, y: v + y,
    lambda v, x, y: v - x,
    lambda v, x, y: v * 1.5,
    lambda v, x, y: v / (y.abs() + 1),
    lambda v, x, y: 2.0 - v,
    lambda v, x, y: 3 * v,
    lambda v, x, y: 1.0 / (v.abs() + 1),
    lambda v, x, y: 2 ** v.clamp(-2, 2),
    lambda v, x, y: -v,
    lambda v, x, y: +v,
    lambda v, x, y: abs(v),
    lambda v, x, y: v @ y.t() @ x,
    lambda v, x, y: torch.tanh(v),
    lambda v, x, y: torch.relu(v) + torch.sigmoid(y),
    lambda v, x, y: torch.where(v > x, v, y),
    lambda v, x, y: torch.cat([v, x], dim=0)[: v.shape[0]],
    lambda v, x, y: v.sum(dim=1, keepdim=True) + v,
    lambda v, x, y: v.t().contiguous().t(),
    lambda v, x, y: v.exp().log1p(),
    lambda v, x, y: torch.nn.functional.softmax(v, dim=-1),
    lambda v, x, y: v.flip(1),
    lambda v, x, y: v.float() * (x > 0),
    lambda v, x, y: v % 2.0,
    lambda v, x, y: v.mean() + v,
    lambda v, x, y: (v * 3) // 2,
    lambda v, x, y: operator.neg(v),
    lambda v, x, y: (v.exp(), v * 2)[1],  # leaves a dead node for DCE
    lambda v, x, y: torch.tanh(x) + torch.tanh(x) + v,  # a common subexpression for CSE
    lambda v, x, y: (v + 1) * (v + 1),
]


def chain(steps):
    def f(x, y):
        v = x
        for i in steps:
            v = STEPS[i](v, x, y)
        return v

    return f


@given(st.lists(st.integers(0, len(STEPS) - 1), min_size=1, max_size=12), st.integers(1, 4))
def test_random_chains_trace_like_torch_and_run_as_eager(steps, n):
    f = chain(steps)
    ours, theirs = rfx.symbolic_trace(f), tfx.symbolic_trace(f)
    assert ours.code == theirs.code
    assert [(n.op, n.name, n.target) for n in ours.graph.nodes] == [
        (n.op, n.name, n.target) for n in theirs.graph.nodes
    ]
    torch.manual_seed(n)
    x, y = torch.randn(n, n), torch.randn(n, n)
    expected = f(x, y)
    exact = dict(rtol=0, atol=0, equal_nan=True)  # same ops in the same order: bit for bit
    torch.testing.assert_close(ours(x, y), expected, **exact)
    torch.testing.assert_close(rfx.Interpreter(ours).run(x, y), expected, **exact)


chains = st.lists(st.integers(0, len(STEPS) - 1), min_size=1, max_size=12)
exact = dict(rtol=0, atol=0, equal_nan=True)


@given(chains)
def test_random_chains_through_dce_and_cse_like_torch(steps):
    f = chain(steps)
    ours, theirs = rfx.symbolic_trace(f), tfx.symbolic_trace(f)
    assert ours.graph.eliminate_dead_code() == theirs.graph.eliminate_dead_code()
    ours.recompile(), theirs.recompile()
    assert ours.code == theirs.code
    csed, modified = CSEPass()(ours)
    try:
        result = TorchCSEPass()(theirs)
    except TypeError as e:  # torch's CSE hashes raw args: slices (x[:n]) are unhashable
        assert "slice" in str(e)
    else:
        assert modified == result.modified and csed.code == result.graph_module.code
    x, y = torch.randn(3, 3), torch.randn(3, 3)
    torch.testing.assert_close(csed(x, y), f(x, y), **exact)


@given(chains)
def test_random_chains_shape_prop_like_torch(steps):
    f = chain(steps)
    ours, theirs = rfx.symbolic_trace(f), tfx.symbolic_trace(f)
    x, y = torch.randn(2, 2), torch.randn(2, 2)
    ShapeProp(ours).propagate(x, y)
    TorchShapeProp(theirs).propagate(x, y)
    for a, b in zip(ours.graph.nodes, theirs.graph.nodes):
        ma, mb = a.meta.get("tensor_meta"), b.meta.get("tensor_meta")
        assert (ma is None) == (mb is None), a.name
        if ma is not None:
            assert tuple(ma) == tuple(mb), a.name


def test_steps_cover_every_proxy_path():
    names = set()
    for i in range(len(STEPS)):
        graph = rfx.symbolic_trace(chain([i])).graph
        names |= {(n.op, getattr(n.target, "__name__", n.target)) for n in graph.nodes}
    assert {
        ("call_function", t) for t in ("getattr", "getitem", "matmul", "neg", "abs", "pos")
    } <= names
    assert {("call_method", t) for t in ("sum", "t", "exp", "flip")} <= names
    reflected = rfx.symbolic_trace(chain([4])).graph  # 2.0 - v: __rsub__ records sub(2.0, v)
    sub = next(n for n in reflected.nodes if n.target is operator.sub)
    assert sub.args[0] == 2.0 and isinstance(sub.args[1], rfx.Node)


# How a traced function may return its values: the code generator must write each back as
# Python (a 1-tuple keeps its comma, an empty tuple its parentheses, a dict its keys).
PACKERS = [
    lambda v, x: v,
    lambda v, x: (v,),
    lambda v, x: (v, x),
    lambda v, x: [v],
    lambda v, x: {"out": v, "x": (x,)},
    lambda v, x: ((v,), [x, (v,)]),
    lambda v, x: (v, None, 3),
]


def _same_structure(a, b) -> bool:
    if isinstance(a, torch.Tensor):  # exact, NaN where the other has NaN (log of a randn)
        return (isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
                and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))  # fmt: skip
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same_structure(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(map(_same_structure, a, b))
    return a == b


@given(chains, st.integers(0, len(PACKERS) - 1))
def test_random_output_structures_generate_torchs_code(steps, k):
    inner = chain(steps)

    def f(x, y):
        return PACKERS[k](inner(x, y), x)

    ours, theirs = rfx.symbolic_trace(f), tfx.symbolic_trace(f)
    assert ours.code == theirs.code
    x, y = torch.randn(3, 3), torch.randn(3, 3)
    assert _same_structure(ours(x, y), f(x, y))
    assert _same_structure(ours(x, y), theirs(x, y))

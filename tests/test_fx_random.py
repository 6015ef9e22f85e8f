"""Hypothesis: random operator chains traced by retorch.fx equal torch.fx's graphs and run as eager."""

import operator

import torch
import torch.fx as tfx
from hypothesis import given
from hypothesis import strategies as st

import retorch.fx as rfx

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

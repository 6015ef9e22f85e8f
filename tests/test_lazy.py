"""retorch.lazy against eager and torch._lazy (TorchScript backend): values, IR, graph reuse."""

import re

import pytest
import torch
import torch._lazy
import torch._lazy.debug
import torch._lazy.metrics
import torch._lazy.ts_backend

import retorch.lazy as rl
from retorch.lazy import ir

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow

torch._lazy.ts_backend.init()


def mlp(x, w):
    return torch.tanh(x @ w + 1).sum(0)


def affine_relu(x, w):
    return (x * 2 + w[0]).relu()


def softmax_rows(x, w):
    return torch.nn.functional.softmax(x @ w, dim=-1)


def in_place(x, w):
    x.add_(w[1])
    x.mul_(3)
    return x


def max_and_chunk(x, w):
    values, indices = (x @ w).max(dim=1)
    a, b = w.chunk(2, dim=0)
    return values, indices, a - b


def mixed_with_eager(x, w):
    return x @ w + torch.arange(4.0)  # an eager tensor joins the graph as data


FUNCS = [mlp, affine_relu, softmax_rows, in_place, max_and_chunk, mixed_with_eager]


def inputs(seed, n=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, n, generator=g), torch.randn(n, n, generator=g)


def flat(v):
    return list(v) if isinstance(v, (tuple, list)) else [v]


def run_lazy(f, x, w):
    out = flat(f(rl.to_lazy(x), rl.to_lazy(w)))
    assert all(t.value.node.data is None for t in out)  # recorded, not run
    rl.mark_step()
    return [t.cpu() for t in out]


@pytest.mark.parametrize("f", FUNCS, ids=lambda f: f.__name__)
def test_lazy_equals_eager(f):
    for seed in range(3):
        x, w = inputs(seed)
        ours, eager = run_lazy(f, x, w), flat(f(x, w))
        assert len(ours) == len(eager)
        for a, b in zip(ours, eager):
            assert a.dtype == b.dtype and a.shape == b.shape
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


TORCH_FUNCS = [mlp, affine_relu, softmax_rows, in_place]  # torch's lazy crashes on chunk


def torch_lazy(f, x, w):
    out = flat(f(x.to("lazy"), w.to("lazy")))
    text = torch._lazy.debug.dump_ir(out, "text")
    torch._lazy.mark_step()
    return [t.cpu() for t in out], text


def op_rows(text):
    """(op, output shapes) of each node that is not data, from either library's dump."""
    rows = re.findall(r"= \[(.*?)\] (\S+?)\(", text)
    # torch's functionalization records a view as a copy: select_copy for select
    return [
        (op.removesuffix("_copy"), shapes) for shapes, op in rows if not op.endswith("device_data")
    ]


@pytest.mark.parametrize("f", TORCH_FUNCS, ids=lambda f: f.__name__)
def test_values_and_ir_ops_equal_torch_lazy(f):
    x, w = inputs(0)
    theirs, their_ir = torch_lazy(f, x, w)
    lx, lw = rl.to_lazy(x), rl.to_lazy(w)
    out = flat(f(lx, lw))
    our_ir = rl.debug.dump_ir(out)
    rl.mark_step()
    for a, b in zip([t.cpu() for t in out], theirs):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    assert op_rows(our_ir) == op_rows(their_ir)
    assert len(op_rows(our_ir)) >= 2


def test_dump_ir_text():
    """torch's numbering (operands last to first); the 1 of `+ 1` is data, not a constant."""
    x, w = inputs(0, n=3)
    y = mlp(rl.to_lazy(x[:2]), rl.to_lazy(w))
    assert rl.debug.dump_ir([y]) == (
        "IR {\n"
        "  %0 = [Long[]] device_data()\n"
        "  %1 = [Float[3,3]] device_data()\n"
        "  %2 = [Float[2,3]] device_data()\n"
        "  %3 = [Float[2,3]] aten::mm(%2, %1)\n"
        "  %4 = [Float[2,3]] aten::add(%3, %0)\n"
        "  %5 = [Float[2,3]] aten::tanh(%4)\n"
        "  %6 = [Float[3]] aten::sum(%5, [0]), ROOT=0\n"
        "}\n"
    )


def counters(metrics):
    return [metrics.counter_value(n) or 0 for n in ("UncachedCompile", "CachedCompile")]


def steps(to_lazy, mark_step, metrics, scalars, n):
    """Counter increments (uncached, cached) over one step per scalar, each with new data."""
    mark_step()  # nothing pending from earlier tests joins the first graph
    before, out = counters(metrics), []
    for seed, s in enumerate(scalars):
        x, w = inputs(10 + seed, n)  # a size no other test uses: a graph of its own
        y = (to_lazy(x) * s + to_lazy(w)[0]).relu()
        mark_step()
        out.append(y.cpu())
    return [a - b for a, b in zip(counters(metrics), before)], out


@pytest.mark.parametrize("scalars, n, expected", [
    ((5, 5, 5), 5, [1, 2]),  # the same graph on new data: compiled once
    ((5, 7, 8), 6, [1, 2]),  # a new int is new data, not a new graph
    ((5, 2.5, 5), 7, [2, 1]),  # a float scalar is data of another dtype: a new graph
])  # fmt: skip
def test_graph_reuse_as_torch_lazy(scalars, n, expected):
    """Both cache the compiled graph by the IR's hash; scalars are data, not constants."""
    ours, our_out = steps(rl.to_lazy, rl.mark_step, rl.metrics, scalars, n)
    theirs, their_out = steps(lambda t: t.to("lazy"), torch._lazy.mark_step,
                              torch._lazy.metrics, scalars, n)  # fmt: skip
    assert ours == theirs == expected
    for a, b in zip(our_out, their_out):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_shared_input_is_a_different_graph():
    """x * x and x * y print alike op by op; the hash must still tell them apart."""
    x, w = inputs(0)
    a, b = rl.to_lazy(x), rl.to_lazy(x.clone())
    products = [a * a, a * b]
    assert len({rl.lazy_graph_executor.graph_hash([p.value]) for p in products}) == 2
    assert [len(ir.post_order([p.value])) for p in products] == [2, 3]
    torch.testing.assert_close(rl.sync(products)[1], x * x)


def test_roots_in_another_order_are_another_graph():
    """max's two outputs as roots (values, indices) and (indices, values): two cache keys."""
    m = rl.to_lazy(inputs(0)[0]).max(dim=1)
    keys = {rl.lazy_graph_executor.graph_hash([a.value, b.value]) for a, b in (m, m[::-1])}
    assert len(keys) == 2
    values, indices = rl.sync(list(m[::-1]))[::-1]
    assert torch.equal(indices, inputs(0)[0].max(dim=1).indices)


def test_ops_are_nodes_until_a_value_is_read():
    x, w = inputs(0)
    before = rl.metrics.counter_value("SyncedTensorsWithIR") or 0
    y = mlp(rl.to_lazy(x), rl.to_lazy(w))
    assert [n.name for n in ir.post_order([y.value])] == ["device_data"] * 3 + [
        "aten::mm",
        "aten::add",
        "aten::tanh",
        "aten::sum",
    ]
    assert (rl.metrics.counter_value("SyncedTensorsWithIR") or 0) == before
    assert y.sum().item() == pytest.approx(mlp(x, w).sum().item(), rel=1e-6)
    assert rl.metrics.counter_value("SyncedTensorsWithIR") == before + 1  # y.sum() only
    assert y.value.node.op != "device_data"
    rl.mark_step()
    assert y.value.node.op == "device_data"  # y's data is kept: the next step starts there

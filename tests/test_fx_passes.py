"""retorch.fx passes against torch's on the same graphs: DCE, CSE, const folding, replace_pattern,
ShapeProp."""

import operator
import sys
import warnings

import pytest
import torch
import torch.fx as tfx
from test_fx_corpus import CORPUS, inputs, make
from torch.fx.experimental.const_fold import split_const_subgraphs as torch_const_fold
from torch.fx.passes.dialect.common.cse_pass import CSEPass as TorchCSEPass
from torch.fx.passes.shape_prop import ShapeProp as TorchShapeProp
from torch.fx.subgraph_rewriter import replace_pattern as torch_replace_pattern

import retorch.fx as rfx
from retorch.fx.passes import CSEPass, ShapeProp, split_const_subgraphs
from retorch.fx.subgraph_rewriter import replace_pattern


def both(fn_or_factory):
    """The same root traced by each library (fresh instances for modules)."""
    return rfx.symbolic_trace(fn_or_factory()), tfx.symbolic_trace(fn_or_factory())


# -- dead-code elimination ---------------------------------------------------------------


def dead(x):
    a = x + 1  # dead
    torch.relu(a).sum()  # dead chain
    torch._assert(x.sum() > -1e9, "kept: side effect")
    torch.rand_like(x)  # kept: random, consumes RNG state
    y = x.clone()
    y.add_(1)  # dropped by torch too: call_method counts as pure (FX's heuristic)
    x.t()  # dead method call
    return x * 2


@pytest.mark.parametrize("name", ["dead", *sorted(CORPUS)])
def test_dce_equals_torch(name):
    factory = (lambda: dead) if name == "dead" else (lambda: make(name))
    ours, theirs = both(factory)
    assert ours.graph.eliminate_dead_code() == theirs.graph.eliminate_dead_code()
    ours.recompile(), theirs.recompile()
    assert [(n.op, n.name) for n in ours.graph.nodes] == [
        (n.op, n.name) for n in theirs.graph.nodes
    ]
    assert ours.code == theirs.code.replace("torch.fx._symbolic_trace.wrap(", "wrap(")


def test_dce_keeps_what_torch_keeps():
    gm = rfx.symbolic_trace(dead)
    gm.graph.eliminate_dead_code()
    kept = {n.name for n in gm.graph.nodes}
    assert {"_assert", "rand_like"} <= kept and "add_" not in kept and "t" not in kept


# -- common-subexpression elimination ----------------------------------------------------


def repeated(x, y):
    a = torch.relu(x) + y
    b = torch.relu(x) + y  # same as a
    c = (a * 2).sum(dim=0) + (b * 2).sum(dim=0)  # same after a == b
    d = x[0] + x[0] + x.t() @ y.t() + x.t() @ y.t()
    return c, d, torch.cat([x, y]) + torch.cat([x, y])


def repeated_attention():
    return make("attention")  # the three `C // heads` floordivs and shape reads repeat


@pytest.mark.parametrize("factory", [lambda: repeated, repeated_attention, lambda: make("mlp")])
def test_cse_equals_torch(factory):
    ours, theirs = both(factory)
    gm, modified = CSEPass()(ours)
    result = TorchCSEPass()(theirs)
    assert modified == result.modified
    assert gm.code == result.graph_module.code.replace("torch.fx._symbolic_trace.wrap(", "wrap(")
    args = (torch.randn(4, 4), torch.randn(4, 4)) if factory() is repeated else inputs("attention")
    if modified:
        assert_same(gm(*args), ours(*args))


def test_cse_merges_in_torch_but_keeps_random_calls_apart():
    def f(x):
        return torch.rand_like(x) + torch.rand_like(x) + x.exp() + x.exp()

    gm, _ = CSEPass()(rfx.symbolic_trace(f))
    theirs = TorchCSEPass()(tfx.symbolic_trace(f)).graph_module
    count = lambda g, t: sum(n.target is t for n in g.graph.nodes)
    assert count(gm, torch.rand_like) == 2 and count(theirs, torch.rand_like) == 1
    assert sum(n.target == "exp" for n in gm.graph.nodes) == 1


def test_cse_handles_slices_where_torch_311_cannot():
    def f(x):
        return x[:, 1:] + x[:, 1:]

    gm, modified = CSEPass()(rfx.symbolic_trace(f))
    assert modified and sum(n.target is operator.getitem for n in gm.graph.nodes) == 1
    if sys.version_info < (3, 12):  # slices became hashable in Python 3.12
        with pytest.raises(TypeError, match="unhashable type: 'slice'"):
            TorchCSEPass()(tfx.symbolic_trace(f))  # torch hashes the raw args
    else:
        assert gm.code == TorchCSEPass()(tfx.symbolic_trace(f)).graph_module.code
    x = torch.randn(3, 4)
    assert torch.equal(gm(x), f(x))


def assert_same(a, b):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


# -- constant folding --------------------------------------------------------------------


class Folds(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))
        self.b = torch.nn.Parameter(torch.randn(4))
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x, y):
        h = torch.relu(x @ (self.w.t() * self.scale))
        z = h + (self.b * 2)
        return z + y + self.w.sum(), self.w


class FoldsOne(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))

    def forward(self, x, y):
        return x @ (self.w.t() + 1) - y


@pytest.mark.parametrize("cls", [Folds, FoldsOne, lambda: make("mlp")])
def test_const_fold_equals_torch(cls):
    torch.manual_seed(0)
    m = cls()
    ours = split_const_subgraphs(m)
    with warnings.catch_warnings():  # torch warns about its own get_attr insertion
        warnings.simplefilter("ignore", UserWarning)
        theirs = torch_const_fold(m)
    x = (torch.randn(3, 4), torch.randn(3, 4)) if cls in (Folds, FoldsOne) else inputs("mlp")
    out = ours(*x)
    assert_same(out, theirs(*x))
    assert_same(out, m(*x))
    assert ours.code == theirs.code
    if ours.const_subgraph_module is not None:
        folded = ours._FX_CONST_FOLDED_ATTRS
        reference = theirs._FX_CONST_FOLDED_ATTRS
        assert type(folded) is type(reference)
        assert_same(folded if isinstance(folded, torch.Tensor) else list(folded),
                    reference if isinstance(reference, torch.Tensor) else list(reference))  # fmt: skip


def test_const_fold_runs_the_constant_graph_once():
    m = Folds()
    gm = split_const_subgraphs(m)
    calls = []
    gm.const_subgraph_module.register_forward_hook(lambda *a: calls.append(1))
    x = (torch.randn(3, 4), torch.randn(3, 4))
    gm(*x), gm(*x)
    assert calls == [1] and gm.has_folding_been_run
    assert not any(n.op == "get_attr" and n.target == "b" for n in gm.graph.nodes)


# -- pattern replacement -----------------------------------------------------------------


def pat_add_relu(x, y):
    return torch.relu(x + y)


def rep_add_relu(x, y):
    return torch.clamp(x + y, min=0.0)


def pat_cat_sum(w1, w2):
    return torch.cat([w1, w2]).sum()


def rep_cat_sum(w1, w2):
    return torch.stack([w1, w2]).sum()


def pat_method(x):
    return x.t().contiguous()


def rep_method(x):
    return x.transpose(0, 1)


def target_a(x, y, z):
    a = torch.relu(x + y)
    b = torch.relu(a + z)  # overlaps the first match through `a`
    c = torch.relu(x + z) * 2
    return a, b, c, torch.cat([x, y]).sum() + torch.cat([y, z]).sum()


def target_b(x):
    return x.t().contiguous() + x.t().contiguous().t().contiguous()


def pat_double(x):
    return torch.relu(torch.relu(x))


def rep_double(x):
    return torch.relu(x)


def target_d(x):
    return torch.relu(torch.relu(torch.relu(x))) + 1  # two matches share the middle relu


def target_c(x, y):
    s = x + y
    return torch.relu(s), s  # `s` is read outside the pattern: no match


@pytest.mark.parametrize(
    "target,pattern,replacement",
    [(target_a, pat_add_relu, rep_add_relu), (target_a, pat_cat_sum, rep_cat_sum),
     (target_b, pat_method, rep_method), (target_c, pat_add_relu, rep_add_relu),
     (target_d, pat_double, rep_double)],
)  # fmt: skip
def test_replace_pattern_equals_torch(target, pattern, replacement):
    ours, theirs = both(lambda: target)
    m_ours = replace_pattern(ours, pattern, replacement)
    m_theirs = torch_replace_pattern(theirs, pattern, replacement)
    assert len(m_ours) == len(m_theirs)
    assert [m.anchor.name for m in m_ours] == [m.anchor.name for m in m_theirs]
    assert ours.code == theirs.code
    ours.graph.lint()
    args = [
        torch.randn(3, 3)
        for _ in range(len([n for n in ours.graph.nodes if n.op == "placeholder"]))
    ]
    expected = target(*args)
    got = ours(*args)
    assert_same(
        got if isinstance(got, tuple) else (got,),
        expected if isinstance(expected, tuple) else (expected,),
    )


def test_replace_pattern_counts_matches():
    gm = rfx.symbolic_trace(target_a)
    assert len(replace_pattern(gm, pat_add_relu, rep_add_relu)) == 3
    assert sum(n.target is torch.clamp for n in gm.graph.nodes) == 3
    assert not any(n.target is torch.relu for n in gm.graph.nodes)


# -- shape propagation -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["mlp", "convnet", "residual", "attention", "nested_output", "methods"]
)
def test_shape_prop_equals_torch(name):
    ours, theirs = rfx.symbolic_trace(make(name)), tfx.symbolic_trace(make(name))
    ShapeProp(ours).propagate(*inputs(name))
    TorchShapeProp(theirs).propagate(*inputs(name))
    meta = lambda gm: {
        n.name: (n.meta.get("tensor_meta"), n.meta.get("type")) for n in gm.graph.nodes
    }
    got, want = meta(ours), meta(theirs)
    assert got.keys() == want.keys()
    # TensorMetadata field by field (the NamedTuple classes differ, their fields must not)
    flat = lambda m: tfx.node.map_aggregate(m, lambda v: tuple(v) if hasattr(v, "_fields") else v)
    for k in got:
        assert flat(got[k][0]) == flat(want[k][0]), k
        if k != "output":  # torch's output holds its immutable_dict/immutable_list copies
            assert got[k][1] is want[k][1], k
    assert sum(m is not None for m, _ in got.values()) >= 3


def test_shape_prop_records_shape_dtype_stride():
    gm = rfx.symbolic_trace(make("convnet"))
    ShapeProp(gm).propagate(torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last))
    tm = {n.name: n.meta["tensor_meta"] for n in gm.graph.nodes}
    assert tm["conv"].shape == (2, 4, 8, 8) and tm["conv"].dtype == torch.float32
    assert tm["flatten"].stride == (64, 1) and tm["x"].memory_format == torch.channels_last
    assert tm["head"].shape == (2, 5)

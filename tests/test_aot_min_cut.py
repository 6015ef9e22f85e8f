"""retorch.aot's min-cut partitioner beside torch 2.13's `min_cut_rematerialization_partition`:
the same saved tensors on the corpus of tests/test_aot.py, the chapter's GELU (its ban on and
off), and random programs (chains and DAGs of pointwise ops, reductions, matmuls, broadcasts,
inputs that need no gradient). Torch's saved set is read from the forward graph its
partitioner hands the forward compiler, as in tests/test_aot.py."""

import functools
import subprocess
import sys
from unittest import mock

import networkx as nx
import pytest
import torch
import torch._functorch.config as functorch_config
import torch.nn.functional as F
from functorch.compile import aot_function as torch_aot_function
from functorch.compile import make_boxed_func
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch._functorch import partitioners
from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_min_cut

from retorch.aot import aot_function, min_cut_rematerialization_partition, saved_values, trace_joint
from retorch.aot.min_cut import cut_weight, min_cut_network
from tests.test_aot import CORPUS, gelu_tanh, make_args

pytestmark = pytest.mark.slow
nx_minimum_cut = nx.minimum_cut  # the real one, kept before the tests wrap it


def torch_saved(fn, args, **config):
    """Names torch's min-cut saves, and the number of forward outputs."""
    run = torch_min_cut_run(fn, args, **config)
    return run["saved"], run["n_out"]


def torch_min_cut_run(fn, args, **config):
    """Torch's min-cut run: the saved names, the number of forward outputs, the banned names,
    the flow network, the joint graph's (name, op) list. Its `solve_min_cut` and the
    `networkx.minimum_cut` it calls are wrapped to keep what they saw."""
    seen = {}
    solve = partitioners.solve_min_cut

    def solve_min_cut(*a, **kw):
        result = solve(*a, **kw)
        seen["banned"] = [n.name for n in result[1]]
        return result

    def minimum_cut(graph, *a, **kw):
        seen["network"] = graph
        return nx_minimum_cut(graph, *a, **kw)

    def fw(gm, example_inputs):
        seen.setdefault("fw", gm)  # the forward is compiled first, then the backward
        return make_boxed_func(gm.forward)

    def part(joint, joint_inputs, **kw):
        seen["n_out"] = kw["num_fwd_outputs"]
        seen["joint"] = node_list(joint)  # before the partitioner's CSE changes it
        return torch_min_cut(joint, joint_inputs, **kw)

    with (functorch_config.patch(**config),
          mock.patch.object(partitioners, "solve_min_cut", solve_min_cut),
          mock.patch.object(nx, "minimum_cut", minimum_cut)):  # fmt: skip
        out = torch_aot_function(fn, fw, fw, partition_fn=part)(*args)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    sum(o.sum() for o in outs if o.requires_grad).backward()
    if "n_out" in seen:  # else every output aliases an input: torch partitions nothing
        seen["saved"] = saved_values(seen.pop("fw"), seen["n_out"])
    return seen


def node_list(gm) -> list:
    """A joint graph as (name, op) pairs."""
    return [(n.name, str(n.target)) for n in gm.graph.nodes]


def edges(network) -> dict:
    """{(u, v): (capacity, reason)} of a flow network."""
    return {(u, v): (d["capacity"], d.get("reason")) for u, v, d in network.edges(data=True)}


def ours_saved(fn, args, **config):
    part = functools.partial(min_cut_rematerialization_partition, **config)
    f = aot_function(fn, lambda gm, ex: gm, partition_fn=part)
    f(*args)
    (compiled,) = f.compiled.values()
    return saved_values(compiled.fw_module, compiled.joint.num_fwd_outputs)


def test_the_rebuild_partitions_through_aot_function():
    f = aot_function(gelu_tanh, lambda gm, ex: gm, partition_fn=min_cut_rematerialization_partition)
    f(*make_args("gelu_tanh"))
    (compiled,) = f.compiled.values()
    assert compiled.joint.num_fwd_outputs == 1


@pytest.mark.parametrize("name", CORPUS)
def test_min_cut_saves_what_torchs_saves_on_the_corpus(name):
    fn, args = CORPUS[name][0], make_args(name)
    theirs, _ = torch_saved(fn, args)
    assert ours_saved(fn, args) == theirs


@pytest.mark.parametrize("ban", [True, False])
def test_gelu_with_the_materialized_in_backward_ban_on_and_off(ban):
    args = make_args("gelu_tanh", n=8, m=16)
    theirs, _ = torch_saved(gelu_tanh, args, ban_recompute_materialized_backward=ban)
    assert theirs == (["primals_1", "tanh"] if ban else ["primals_1"])
    assert ours_saved(gelu_tanh, args, ban_recompute_materialized_backward=ban) == theirs


@pytest.mark.parametrize("name", CORPUS)
def test_the_flow_network_and_the_bans_are_torchs(name):
    fn, args = CORPUS[name][0], make_args(name)
    theirs = torch_min_cut_run(fn, args)
    joint = trace_joint(fn, make_args(name))
    assert node_list(joint.module) == theirs["joint"]
    _, ours_banned, ours_network, _ = min_cut_network(joint.module, theirs["n_out"])
    assert [n.name for n in ours_banned] == theirs["banned"]
    assert edges(ours_network) == edges(theirs["network"])
    assert list(ours_network.nodes) == list(theirs["network"].nodes)  # the same order of ties


def used_far_apart(x, w):
    a = x.sin()
    c = (a @ w) * 2  # an unfusible use of `a` (the mm), then...
    return a.cos() * c  # ...a fusible one past it: torch bans `cos` ("used far apart")


def reduction(x):
    return x.exp().sum(-1, keepdim=True).sin() * x  # `sum`'s output is 4x smaller: banned


def common_subexpressions(x, y):
    return (x * y).sin() + (x * y).cos()  # one `mul` after CSE, as in torch


def long_chain(x):
    for _ in range(60):
        x = (x * 1.01).sin()  # 120 fusible ops: torch bans one past 100 ("long fusible chains")
    return x


def tagged_pointwise(x):
    return F.elu(F.leaky_relu(x) * x).sin()  # in torch's allowlist by their pointwise tag


EXTRA = {
    "tagged_pointwise": (tagged_pointwise, [(4, 4)]),
    "long_chain": (long_chain, [(4, 4)]),
    "used_far_apart": (used_far_apart, [(3, 4), (4, 4)]),
    "reduction": (reduction, [(3, 8)]),
    "common_subexpressions": (common_subexpressions, [(3, 4), (3, 4)]),
}


@pytest.mark.parametrize("name", EXTRA)
def test_each_heuristic_as_torch_applies_it(name):
    fn, shapes = EXTRA[name]
    args = functools.partial(program_args, shapes, [True] * len(shapes))
    theirs = torch_min_cut_run(fn, args())
    assert ours_saved(fn, args()) == theirs["saved"]
    joint = trace_joint(fn, args())
    assert node_list(joint.module) == theirs["joint"]
    _, ours_banned, ours_network, _ = min_cut_network(joint.module, theirs["n_out"])
    assert [n.name for n in ours_banned] == theirs["banned"]
    assert edges(ours_network) == edges(theirs["network"])


def test_the_cut_is_a_minimum_and_saves_where_the_network_says():
    joint = trace_joint(gelu_tanh, make_args("gelu_tanh"))
    saved, banned, net, weight = min_cut_network(joint.module, joint.num_fwd_outputs)
    assert [n.name for n in saved] == ["primals_1", "tanh"]
    assert [n.name for n in banned] == ["primals_1", "tanh", "mul_5"]
    assert weight == nx.minimum_cut_value(net, "source", "sink")


def test_the_op_lists_load_before_torch_inductor_does():
    code = ("import sys; from retorch.aot.min_cut import get_default_op_list as g; "
            "ops = g(); assert 'torch._inductor' not in sys.modules; "
            "import torch; assert ops.is_recomputable(type('N', (), "
            "{'target': torch.ops.aten.sin.default})())")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_unknown_option_is_refused():
    joint = trace_joint(gelu_tanh, make_args("gelu_tanh"))
    with pytest.raises(TypeError, match="unknown option.*ban_recompute_everything"):
        min_cut_rematerialization_partition(joint.module, num_fwd_outputs=1,
                                            ban_recompute_everything=True)  # fmt: skip


# -- random programs --
UNARY = {
    "sin": torch.sin, "cos": torch.cos, "exp": lambda v: torch.exp(v.tanh()), "tanh": torch.tanh,
    "relu": torch.relu, "sigmoid": torch.sigmoid, "neg": torch.neg,
    "sum": lambda v: v.sum(-1, keepdim=True), "mean": lambda v: v.mean(0),
    "amax": lambda v: v.amax(-1, keepdim=True), "square": lambda v: v * v,
    "sqrt": lambda v: (v * v + 1).sqrt(), "t": lambda v: v.t() if v.dim() == 2 else v,
    # pointwise ops that torch's allowlist holds through their `pointwise` tag alone
    "leaky_relu": F.leaky_relu, "hardtanh": F.hardtanh, "elu": F.elu,
    "max": lambda v: v.max(-1, keepdim=True).values,  # a multi-output node: values, indices
}  # fmt: skip
BINARY = {
    "add": torch.add, "mul": torch.mul, "sub": torch.sub,
    "div": lambda a, b: a / (b * b + 1), "matmul": lambda a, b: a @ b,
}  # fmt: skip
#: Shapes that broadcast with each other and mostly multiply: sizes of 16 to 128 bytes.
SHAPES = {"nn": (4, 4), "n": (4,), "n1": (4, 1), "bnn": (2, 4, 4)}


@st.composite
def programs(draw):
    """Input shapes and grad flags, then steps: (op, operand indices into the values so far)."""
    n_in = draw(st.integers(1, 3))
    shapes = draw(st.lists(st.sampled_from(sorted(SHAPES)), min_size=n_in, max_size=n_in))
    grads = draw(st.lists(st.booleans(), min_size=n_in, max_size=n_in))
    grads[draw(st.integers(0, n_in - 1))] = True
    steps = []
    for i in range(draw(st.integers(1, 7))):
        n_vals = n_in + i
        if draw(st.booleans()):
            steps.append(
                (draw(st.sampled_from(sorted(UNARY))), (draw(st.integers(0, n_vals - 1)),))
            )
        else:
            a, b = draw(st.integers(0, n_vals - 1)), draw(st.integers(0, n_vals - 1))
            steps.append((draw(st.sampled_from(sorted(BINARY))), (a, b)))
    two_outputs = draw(st.booleans())
    return [SHAPES[s] for s in shapes], grads, steps, two_outputs


def make_program(steps, two_outputs):
    def fn(*inputs):
        vals = list(inputs)
        for op, idx in steps:
            table = UNARY if len(idx) == 1 else BINARY
            vals.append(table[op](*(vals[i] for i in idx)))
        return (vals[-1], vals[-2]) if two_outputs else vals[-1]

    return fn


def program_args(shapes, grads, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).requires_grad_(r) for s, r in zip(shapes, grads)]


def compare_on(program):
    """Ours and torch's saved names, bans and flow networks, and our cut's weight; None for a
    program that does not run or whose outputs do not all need a gradient."""
    shapes, grads, steps, two_outputs = program
    fn = make_program(steps, two_outputs)
    args = program_args(shapes, grads)
    try:
        outs = fn(*args)
    except RuntimeError:  # shapes that do not broadcast or multiply
        return None
    outs = outs if isinstance(outs, tuple) else (outs,)
    if not all(o.requires_grad for o in outs):
        return None  # an output that needs no gradient, or a program that reads no grad input
    if len({id(o) for o in outs} | {id(a) for a in args}) < len(outs) + len(args):
        return None  # an output returned twice, or an input returned (torch's joint drops it)
    if any(o._is_view() for o in outs):
        return None  # a view of an input as output: torch's joint treats it apart, retorch's not
    run = torch_min_cut_run(fn, program_args(shapes, grads))
    if "n_out" not in run:
        return None
    joint = trace_joint(fn, program_args(shapes, grads))
    if node_list(joint.module) != run["joint"]:
        return "joint graphs differ"  # not the partitioner's business (see test_aot.py)
    ours = ours_saved(fn, program_args(shapes, grads))
    _, ours_banned, ours_network, weight = min_cut_network(joint.module, run["n_out"])
    network = run.get("network")  # none where torch falls back to the default partition
    return {"saved": (ours, run["saved"]),
            "banned": ([n.name for n in ours_banned], run.get("banned")),
            "network": (edges(ours_network), edges(network) if network else None),
            "weight": (weight, cut_weight(ours_network, run["saved"]) if network else None)}  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_min_cut_saves_what_torchs_saves_on_random_programs(program):
    result = compare_on(program)
    if result is None or result == "joint graphs differ":
        return
    for what, (ours, theirs) in result.items():
        if theirs is not None:  # no network where torch falls back to the default partition
            assert ours == theirs, what

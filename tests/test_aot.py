"""retorch.aot side by side with functorch's aot_function (torch 2.13): joint graphs,
functionalization, default_partition's saved tensors, the recompute partitioner, and compiled
outputs and gradients against eager torch."""

import collections
import operator

import pytest
import torch
import torch.nn.functional as F
from functorch.compile import aot_function as torch_aot_function
from functorch.compile import make_boxed_func
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._functorch.partitioners import default_partition as torch_default_partition
from torch._functorch.partitioners import min_cut_rematerialization_partition

from retorch.aot import (
    aot_function,
    default_partition,
    recompute_partition,
    saved_values,
    trace_joint,
)

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow


# -- the corpus: name -> (function, input shapes, which inputs need a gradient) --
def pointwise_chain(x, y):
    return (x * y).sin().exp() + x / (y * y + 1)


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def softmax(x):
    return torch.softmax(x, -1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def linear_relu(x, w, b):
    return torch.relu(x @ w + b)


def inplace_intermediate(x, y):
    z = x * y
    z.add_(1)
    z.mul_(y)
    return z.sin()


def multiple_outputs(x, y):
    return x.sin(), (x * y).cos()


def input_without_grad(x, c):
    return x * c + c.exp()


def broadcast_sigmoid(x, b):
    return 1 / (1 + torch.exp(-(x + b)))


def non_differentiable_output(x, c):
    return x.sin() * c, c.cos()  # the second output needs no gradient: no tangent for it


CORPUS = {
    "pointwise_chain": (pointwise_chain, lambda n, m: [(n, m), (n, m)], [True, True]),
    "gelu_tanh": (gelu_tanh, lambda n, m: [(n, m)], [True]),
    "softmax": (softmax, lambda n, m: [(n, m)], [True]),
    "layer_norm": (layer_norm, lambda n, m: [(n, m), (m,), (m,)], [True, True, True]),
    "linear_relu": (linear_relu, lambda n, m: [(n, m), (m, 5), (5,)], [True, True, True]),
    "inplace_intermediate": (inplace_intermediate, lambda n, m: [(n, m), (n, m)], [True, False]),
    "multiple_outputs": (multiple_outputs, lambda n, m: [(n, m), (n, m)], [True, True]),
    "input_without_grad": (input_without_grad, lambda n, m: [(n, m), (n, m)], [True, False]),
    "broadcast_sigmoid": (broadcast_sigmoid, lambda n, m: [(n, m), (m,)], [True, True]),
    "non_differentiable_output": (
        non_differentiable_output,
        lambda n, m: [(n, m), (n, m)],
        [True, False],
    ),
}


def make_args(name, n=3, m=4, dtype=torch.float32, seed=0):
    _, shapes, needs = CORPUS[name]
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(s, generator=g, dtype=dtype).requires_grad_(r)
        for s, r in zip(shapes(n, m), needs)
    ]


def ops(gm) -> collections.Counter:
    """The graph's op multiset: `aten.mul.Tensor` x 3, `getitem` x 2 ..."""
    return collections.Counter(
        "getitem" if n.target is operator.getitem else str(n.target)
        for n in gm.graph.nodes
        if n.op == "call_function"
    )


def num_saved(fw_gm, num_fwd_outputs) -> int:
    return len(fw_gm.graph.output_node().args[0]) - num_fwd_outputs


def run_torch(fn, args, partition):
    """functorch's aot_function with capturing compilers: joint, forward, backward graphs."""
    seen = {}

    def fw(gm, example_inputs):
        seen["fw"] = gm
        return make_boxed_func(gm.forward)

    def bw(gm, example_inputs):
        seen["bw"] = gm
        return make_boxed_func(gm.forward)

    def part(joint, joint_inputs, **kw):
        seen["joint"], seen["num_fwd_outputs"] = joint, kw["num_fwd_outputs"]
        return partition(joint, joint_inputs, **kw)

    out = torch_aot_function(fn, fw, bw, partition_fn=part)(*args)
    outs = out if isinstance(out, (tuple, list)) else (out,)  # torch returns a list
    sum(o.sum() for o in outs).backward()  # torch compiles the backward at its first run
    return seen


def run_ours(fn, args, partition):
    f = aot_function(fn, lambda gm, ex: gm, partition_fn=partition)
    f(*args)
    (compiled,) = f.compiled.values()
    return compiled


TORCH = {}


def torch_graphs(name, partition=torch_default_partition):
    key = (name, partition)
    if key not in TORCH:
        TORCH[key] = run_torch(CORPUS[name][0], make_args(name), partition)
    return TORCH[key]


@pytest.mark.parametrize("name", CORPUS)
def test_joint_graph_has_torchs_ops(name):
    joint = trace_joint(CORPUS[name][0], make_args(name))
    theirs = torch_graphs(name)
    assert ops(joint.module) == ops(theirs["joint"])
    assert joint.num_fwd_outputs == theirs["num_fwd_outputs"]
    # placeholders: primals then one tangent per differentiable output, as torch's joint
    ours_ph = [n.target for n in joint.module.graph.nodes if n.op == "placeholder"]
    theirs_ph = [n.name for n in theirs["joint"].graph.nodes if n.op == "placeholder"]
    assert ours_ph == theirs_ph


@pytest.mark.parametrize("name", CORPUS)
def test_default_partition_equals_torchs(name):
    ours = run_ours(CORPUS[name][0], make_args(name), default_partition)
    theirs = torch_graphs(name)
    n_out = theirs["num_fwd_outputs"]
    assert ops(ours.fw_module) == ops(theirs["fw"])
    assert ops(ours.bw_module) == ops(theirs["bw"])
    assert num_saved(ours.fw_module, n_out) == num_saved(theirs["fw"], n_out)
    # the very same values are saved: same node names, same order
    assert saved_values(ours.fw_module, n_out) == saved_values(theirs["fw"], n_out)


def test_functionalization_removes_the_mutations():
    joint = trace_joint(inplace_intermediate, make_args("inplace_intermediate"))
    targets = [n.target for n in joint.module.graph.nodes if n.op == "call_function"]
    assert not any(t._schema.is_mutable for t in targets)
    assert ops(joint.module)["aten.add.Tensor"] == 1
    assert [n.name for n in joint.module.graph.nodes if "functionalized_from" in n.meta] == [
        "add",
        "mul_1",
    ]


@pytest.mark.parametrize(
    "fn, match",
    [
        (lambda x: x.add_(1) * 2, "mutates the input `primals_1`"),
        (lambda x: ((z := x * 2).view(-1).add_(1), z * 3)[1], "shares storage"),
    ],
)
def test_mutations_the_rebuild_cannot_functionalize_are_refused(fn, match):
    x = torch.randn(3, 4)
    with pytest.raises(NotImplementedError, match=match):
        trace_joint(fn, [x])


def test_a_captured_constant_is_refused():
    c = torch.randn(3)
    with pytest.raises(RuntimeError, match="Pass it to the function as an argument"):
        trace_joint(lambda x: x * c, [torch.randn(3, requires_grad=True)])


SAVED = {}


def saved_counts(name):
    if name not in SAVED:
        fn, args = CORPUS[name][0], make_args(name)
        n_out = torch_graphs(name)["num_fwd_outputs"]
        SAVED[name] = {
            "default": num_saved(run_ours(fn, args, default_partition).fw_module, n_out),
            "recompute": num_saved(run_ours(fn, args, recompute_partition).fw_module, n_out),
            "torch_min_cut": num_saved(
                torch_graphs(name, min_cut_rematerialization_partition)["fw"], n_out
            ),
        }
    return SAVED[name]


def saved_bytes(fw_gm, n_out):
    return sum(
        n.meta["val"].numel() * n.meta["val"].element_size()
        for n in fw_gm.graph.output_node().args[0][n_out:]
    )


@pytest.mark.parametrize("name", CORPUS)
def test_recompute_partition_saves_no_more_than_default(name):
    fn, args = CORPUS[name][0], make_args(name)
    n_out = torch_graphs(name)["num_fwd_outputs"]
    default = run_ours(fn, args, default_partition).fw_module
    recompute = run_ours(fn, args, recompute_partition).fw_module
    assert num_saved(recompute, n_out) <= num_saved(default, n_out)
    assert saved_bytes(recompute, n_out) <= saved_bytes(default, n_out)


def test_recompute_partition_on_the_gelu_chain_saves_what_torchs_min_cut_saves():
    counts = saved_counts("gelu_tanh")
    assert counts["recompute"] < counts["default"]
    assert (counts["default"], counts["recompute"]) == (6, 2)
    ours = run_ours(gelu_tanh, make_args("gelu_tanh"), recompute_partition)
    theirs = torch_graphs("gelu_tanh", min_cut_rematerialization_partition)
    assert saved_values(ours.fw_module, 1) == saved_values(theirs["fw"], 1) == ["primals_1", "tanh"]
    assert ops(ours.bw_module) == ops(theirs["bw"])  # the same five ops recomputed


def _eager_and_compiled(name, partition, n, m, dtype, seed):
    fn = CORPUS[name][0]
    args = make_args(name, n, m, dtype, seed)
    compiled = aot_function(fn, lambda gm, ex: gm, partition_fn=partition)
    results = []
    for f in (fn, compiled):
        xs = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        out = f(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        g = torch.Generator().manual_seed(seed + 1)
        cotangents = [torch.randn(o.shape, generator=g, dtype=dtype) for o in outs]
        diff = [(o, c) for o, c in zip(outs, cotangents) if o.requires_grad]
        torch.autograd.backward(*zip(*diff))
        results.append(([o.detach() for o in outs], [x.grad for x in xs]))
        results[-1][0].append(torch.tensor([o.requires_grad for o in outs]))
    return results


@settings(max_examples=12)
@given(
    name=st.sampled_from(sorted(CORPUS)),
    partition=st.sampled_from([default_partition, recompute_partition]),
    n=st.integers(1, 5),
    m=st.integers(1, 6),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
)
def test_compiled_outputs_and_gradients_equal_eager(name, partition, n, m, dtype, seed):
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    (eager_outs, eager_grads), (outs, grads) = _eager_and_compiled(
        name, partition, n, m, dtype, seed
    )
    for a, b in zip(outs, eager_outs):
        torch.testing.assert_close(a, b, rtol=0, atol=tol)
    for a, b, r in zip(grads, eager_grads, CORPUS[name][2]):
        if not r:
            assert a is None and b is None
        else:
            torch.testing.assert_close(a, b, rtol=0, atol=tol)


@pytest.mark.parametrize("name", CORPUS)
@pytest.mark.parametrize("partition", [default_partition, recompute_partition])
def test_every_corpus_function_runs_compiled(name, partition):
    (eager_outs, eager_grads), (outs, grads) = _eager_and_compiled(
        name, partition, 3, 4, torch.float64, 7
    )
    for a, b in zip(outs + [g for g in grads if g is not None],
                    eager_outs + [g for g in eager_grads if g is not None]):  # fmt: skip
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_compilers_get_graph_modules_and_boxed_functions_are_called_boxed():
    calls = []

    def fw(gm, example_inputs):
        calls.append(("fw", [tuple(e.shape) for e in example_inputs]))
        return make_boxed_func(gm.forward)

    def bw(gm, example_inputs):
        calls.append(("bw", [tuple(e.shape) for e in example_inputs]))
        return make_boxed_func(gm.forward)

    f = aot_function(gelu_tanh, fw, bw, partition_fn=recompute_partition)
    x = torch.randn(2, 3, requires_grad=True)
    f(x).sum().backward()
    assert calls == [("fw", [(2, 3)]), ("bw", [(2, 3), (2, 3), (2, 3)])]
    torch.testing.assert_close(x.grad, torch.func.grad(lambda x: gelu_tanh(x).sum())(x))
    f(torch.randn(2, 3, requires_grad=True))  # same signature: no new trace
    f(torch.randn(4, 3, requires_grad=True))  # a new shape traces again
    assert len(f.compiled) == 2 and len(calls) == 4


@pytest.mark.parametrize("name", CORPUS)
def test_recompute_partition_saves_as_many_tensors_as_torchs_min_cut_on_the_corpus(name):
    # not a law (the greedy rule and the min-cut differ in general: see partitioners.py),
    # but on these functions the two agree: pointwise_chain 5 -> 3, multiple_outputs 3 -> 2
    counts = saved_counts(name)
    assert counts["recompute"] == counts["torch_min_cut"]


UNARY = [torch.sin, torch.cos, torch.tanh, torch.neg, torch.relu, torch.sigmoid]
BINARY = [torch.add, torch.sub, torch.mul]


@st.composite
def programs(draw):
    """A random straight-line program over inputs x, y: (op index, operand indices) steps."""
    steps = []
    for k in range(draw(st.integers(1, 8))):
        live = k + 2  # x, y and the k values computed so far
        if draw(st.booleans()):
            steps.append(
                (UNARY, draw(st.integers(0, len(UNARY) - 1)), draw(st.integers(0, live - 1)))
            )
        else:
            a, b = draw(st.integers(0, live - 1)), draw(st.integers(0, live - 1))
            steps.append((BINARY, draw(st.integers(0, len(BINARY) - 1)), a, b))
    two_outputs = draw(st.booleans()) and len(steps) > 1
    return steps, two_outputs


def program_function(steps, two_outputs):
    def fn(x, y):
        vals = [x, y]
        for table, op, *operands in steps:
            vals.append(table[op](*(vals[i] for i in operands)))
        return (vals[-1], vals[-2]) if two_outputs else vals[-1]

    return fn


@settings(max_examples=15)
@given(program=programs(), seed=st.integers(0, 2**16))
def test_random_programs_partition_as_torch_and_run_as_eager(program, seed):
    fn = program_function(*program)
    g = torch.Generator().manual_seed(seed)
    args = [torch.randn(3, 2, generator=g, dtype=torch.float64, requires_grad=True) for _ in "xy"]
    theirs = run_torch(fn, args, torch_default_partition)
    n_out = theirs["num_fwd_outputs"]
    default = run_ours(fn, args, default_partition)
    recompute = run_ours(fn, args, recompute_partition)
    assert ops(default.joint.module) == ops(theirs["joint"])
    assert saved_values(default.fw_module, n_out) == saved_values(theirs["fw"], n_out)
    assert num_saved(recompute.fw_module, n_out) <= num_saved(default.fw_module, n_out)
    assert saved_bytes(recompute.fw_module, n_out) <= saved_bytes(default.fw_module, n_out)
    for partition in (default_partition, recompute_partition):
        compiled = aot_function(fn, lambda gm, ex: gm, partition_fn=partition)
        results = []
        for f in (fn, compiled):
            xs = [a.detach().clone().requires_grad_() for a in args]
            out = f(*xs)
            outs = out if isinstance(out, tuple) else (out,)
            diff = [o for o in outs if o.requires_grad]
            torch.autograd.backward(diff, [torch.ones_like(o) for o in diff])
            results.append([o.detach() for o in outs] + [x.grad for x in xs])
        for a, b in zip(*results):
            if a is None or b is None:
                assert a is None and b is None
            else:
                torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def packed_at_runtime(f, args) -> int:
    """How many tensors autograd saves while `f` runs (saved_tensors_hooks count the packs)."""
    f(*[a.detach().clone().requires_grad_(a.requires_grad) for a in args])  # trace, compile
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        f(*[a.detach().clone().requires_grad_(a.requires_grad) for a in args])
    return len(packed)


def boxed(gm, example_inputs):
    return make_boxed_func(gm.forward)


@pytest.mark.parametrize("name", CORPUS)
def test_the_autograd_function_saves_at_runtime_what_torchs_does(name):
    fn, args = CORPUS[name][0], make_args(name)
    for ours, theirs in [
        (default_partition, torch_default_partition),
        (recompute_partition, min_cut_rematerialization_partition),
    ]:
        mine = packed_at_runtime(aot_function(fn, boxed, partition_fn=ours), args)
        torchs = packed_at_runtime(torch_aot_function(fn, boxed, boxed, partition_fn=theirs), args)
        assert mine == torchs


def test_aot_imports_only_torch_fx_and_itself():
    """The compiler layer: retorch.aot builds on torch and retorch.fx, nothing below."""
    import ast
    import pathlib

    import retorch.aot

    root = pathlib.Path(retorch.aot.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert (node.module or "").split(".")[0] == "fx", (
                    f"{path}: imports retorch.{node.module}"
                )
            assert not (isinstance(node, ast.ImportFrom) and node.level > 2), path
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            for name in names:
                assert not name.startswith("retorch") or name.startswith("retorch.fx"), path


@pytest.mark.parametrize("name", ["linear_relu", "softmax", "inplace_intermediate"])
def test_recompute_partition_recomputes_nothing_where_that_saves_nothing(name):
    # here neither partitioner can save fewer tensors than the default: the same graphs result
    fn, args = CORPUS[name][0], make_args(name)
    default = run_ours(fn, args, default_partition)
    recompute = run_ours(fn, args, recompute_partition)
    assert ops(recompute.bw_module) == ops(default.bw_module)
    assert saved_values(recompute.fw_module, 1) == saved_values(default.fw_module, 1)


# -- torch's bans, and inputs that are broadcast or need no gradient --
def test_gelu_tanh_is_banned_for_torchs_reason_and_recomputed_without_the_ban():
    from retorch.aot import ban_reasons
    from retorch.aot.debug import materialized_backwards, torch_partitioner_log

    args = make_args("gelu_tanh")
    with torch_partitioner_log() as log:
        theirs = run_torch(gelu_tanh, args, min_cut_rematerialization_partition)
    assert materialized_backwards(log) == {"tanh": ["detach", "add_1"], "mul_5": ["output"]}
    ours = run_ours(gelu_tanh, args, recompute_partition)
    assert ban_reasons(ours.joint.module, 1) == {
        "tanh": "materialized in backward", "mul_5": "materialized in backward"}  # fmt: skip
    assert saved_values(ours.fw_module, 1) == saved_values(theirs["fw"], 1) == ["primals_1", "tanh"]
    import functools

    import torch._functorch.config as functorch_config

    with functorch_config.patch(ban_recompute_materialized_backward=False):
        theirs = run_torch(gelu_tanh, args, min_cut_rematerialization_partition)
    ours = run_ours(gelu_tanh, args, functools.partial(
        recompute_partition, ban_recompute_materialized_backward=False))  # fmt: skip
    assert saved_values(ours.fw_module, 1) == saved_values(theirs["fw"], 1) == ["primals_1"]
    assert ops(ours.bw_module)["aten.tanh.default"] == 1  # recomputed in the backward


SECOND_INPUT_SHAPES = [(3, 2), (2,), (3, 1), (1, 2), (1,)]


@st.composite
def programs_on_broadcast_inputs(draw):
    """A random program on x (3, 2) needing a gradient and y of a broadcast shape that may not."""
    program = draw(programs())
    return program, draw(st.sampled_from(SECOND_INPUT_SHAPES)), draw(st.booleans())


def broadcast_args(shape, y_needs_grad, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 2, generator=g, dtype=torch.float64, requires_grad=True)
    return [x, torch.randn(shape, generator=g, dtype=torch.float64).requires_grad_(y_needs_grad)]


def _differentiable(fn, args) -> bool:
    out = fn(*args)
    return any(o.requires_grad for o in (out if isinstance(out, tuple) else (out,)))


@settings(max_examples=20, deadline=None)
@given(case=programs_on_broadcast_inputs(), seed=st.integers(0, 2**16))
def test_random_programs_on_broadcast_and_no_grad_inputs(case, seed):
    """Both partitions against eager torch and against torch's partitioners, where a corpus of
    same-shaped inputs that all need gradients left a blind spot: saved tensors of different
    sizes (a broadcast input is smaller than the values made from it), and an input whose
    gradient is None that the backward may still read."""
    from retorch.aot import ban_reasons
    from retorch.aot.debug import materialized_backwards, torch_partitioner_log
    from retorch.aot.partitioners import _required_fw

    program, shape, y_needs_grad = case
    fn, args = program_function(*program), broadcast_args(shape, y_needs_grad, seed)
    if not _differentiable(fn, args):
        return  # torch's aot_function cannot run a backward there either
    theirs = run_torch(fn, args, torch_default_partition)
    n_out = theirs["num_fwd_outputs"]
    default = run_ours(fn, args, default_partition)
    assert saved_values(default.fw_module, n_out) == saved_values(theirs["fw"], n_out)
    with torch_partitioner_log() as log:
        min_cut = run_torch(fn, args, min_cut_rematerialization_partition)
    recompute = run_ours(fn, args, recompute_partition)
    required = {n.name for n in _required_fw(min_cut["joint"], n_out)}
    assert sorted(n for n, r in ban_reasons(recompute.joint.module, n_out).items()
                  if r == "materialized in backward") == sorted(
        n for n in materialized_backwards(log) if n in required)  # fmt: skip
    # never more tensors than torch's min-cut; bytes may differ (see partitioners.py)
    assert num_saved(recompute.fw_module, n_out) <= num_saved(min_cut["fw"], n_out)
    assert num_saved(recompute.fw_module, n_out) <= num_saved(default.fw_module, n_out)
    assert saved_bytes(recompute.fw_module, n_out) <= saved_bytes(default.fw_module, n_out)
    for partition in (default_partition, recompute_partition):
        compiled = aot_function(fn, lambda gm, ex: gm, partition_fn=partition)
        results = []
        for f in (fn, compiled):
            xs = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
            out = f(*xs)
            outs = out if isinstance(out, tuple) else (out,)
            diff = [o for o in outs if o.requires_grad]
            torch.autograd.backward(diff, [torch.ones_like(o) for o in diff])
            results.append([o.detach() for o in outs] + [x.grad for x in xs])
        for a, b in zip(*results, strict=True):
            if a is None or b is None:
                assert a is None and b is None
            else:
                assert a.shape == b.shape
                torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_a_small_no_grad_input_is_saved_rather_than_a_full_size_intermediate():
    """Where bytes decide: y of shape (1,) needs no gradient; recomputing `neg` in the backward
    from the two inputs costs 8 bytes where saving it costs 48. A partitioner that counted
    tensors, not bytes, would save `neg` (found by planting that bug)."""

    def fn(x, y):
        return (x * -(x + y)).cos()

    args = [torch.randn(3, 2, dtype=torch.float64, requires_grad=True),
            torch.randn(1, dtype=torch.float64)]  # fmt: skip
    theirs = run_torch(fn, args, min_cut_rematerialization_partition)
    ours = run_ours(fn, args, recompute_partition)
    assert saved_values(ours.fw_module, 1) == saved_values(theirs["fw"], 1)
    assert saved_values(ours.fw_module, 1) == ["primals_1", "primals_2"]

"""retorch.fx against torch.fx: traced graphs, node names, generated code, execution, misuse."""

import operator

import pytest
import torch
import torch.fx as tfx
from test_fx_corpus import CORPUS, inputs, make

import retorch.fx as rfx
from retorch.fx.graph import _Namespace


def torch_code(gm) -> str:
    """torch's code, with its wrap() spelled as ours: the one line naming the package."""
    return gm.code.replace("torch.fx._symbolic_trace.wrap(", "wrap(")


def node_rows(graph):
    """(name, op, target, args, kwargs) per node, with nodes replaced by their names."""
    name = lambda a: ("node", a.name) if isinstance(a, (rfx.Node, tfx.Node)) else a
    rows = []
    for n in graph.nodes:
        args = tfx.node.map_aggregate(n.args, name)
        kwargs = tfx.node.map_aggregate(n.kwargs, name)
        rows.append((n.name, n.op, n.target, args, kwargs))
    return rows


def assert_same_values(a, b):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_values(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same_values(a[k], b[k])
    else:
        assert a == b


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_graph_equals_torch_fx(name):
    ours, theirs = rfx.symbolic_trace(make(name)), tfx.symbolic_trace(make(name))
    assert node_rows(ours.graph) == node_rows(theirs.graph)  # ops, targets, args, names
    assert ours.code == torch_code(theirs)
    assert str(ours.graph) == str(theirs.graph)
    uses = lambda gm: [
        ([u.name for u in n.users], [i.name for i in n.all_input_nodes]) for n in gm.graph.nodes
    ]
    assert uses(ours) == uses(theirs)  # both directions of the use-def chain, in order


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_generated_code_runs_as_eager(name):
    root = make(name)
    gm = rfx.symbolic_trace(root)
    with torch.no_grad():
        assert_same_values(gm(*inputs(name)), root(*inputs(name)))
        assert_same_values(rfx.Interpreter(gm).run(*inputs(name)), root(*inputs(name)))


def test_corpus_covers_every_op_kind():
    ops = set()
    for name in CORPUS:
        ops |= {n.op for n in rfx.symbolic_trace(make(name)).graph.nodes}
    assert ops == {
        "placeholder",
        "get_attr",
        "call_function",
        "call_method",
        "call_module",
        "output",
    }


def test_leaf_modules_and_traced_through_modules():
    gm = rfx.symbolic_trace(make("submodule_params"))
    called = [n.target for n in gm.graph.nodes if n.op == "call_module"]
    assert called == ["blocks.0", "blocks.1", "seq.0"]  # Scale is user code: traced through
    attrs = [n.target for n in gm.graph.nodes if n.op == "get_attr"]
    assert "inner.scale" in attrs and "seq.1.shift" in attrs and "seq.0.weight" in attrs


def test_concrete_args_specialise_like_torch():
    def f(x, flag):
        return x + 1 if flag else x - 1

    ours = rfx.symbolic_trace(f, concrete_args={"flag": True})
    theirs = tfx.symbolic_trace(f, concrete_args={"flag": True})
    assert ours.code == theirs.code
    assert torch.equal(ours(torch.ones(2), True), torch.ones(2) + 1)
    g = lambda x, y: x * y
    ph = rfx.symbolic_trace(g, concrete_args={"y": rfx.PH})
    assert ph.code == tfx.symbolic_trace(g, concrete_args={"y": tfx.PH}).code
    assert [n.name for n in ph.graph.nodes if n.op == "placeholder"] == ["x", "y_1"]


def test_namespace_names_like_torch():
    candidates = ["add", "add", "sum", "add_1", "seq.0", "1x", "in", "add", "getattr", "fooBar"]
    ours, theirs = _Namespace(), tfx.graph._Namespace()
    names = [ours.create_name(c, None) for c in candidates]
    assert names == [theirs.create_name(c, None) for c in candidates]
    assert names[:3] == ["add", "add_1", "sum_1"] and "in_1" in names and "seq_0" in names


def test_graph_building_api_and_linked_list():
    for lib in (rfx, tfx):
        g = lib.Graph()
        x = g.placeholder("x")
        relu = g.call_function(torch.relu, (x,))
        g.output(relu)
        with g.inserting_before(relu):
            neg = g.call_function(operator.neg, (x,))
        with g.inserting_after(relu):
            s = g.call_method("sum", (relu,), {"dim": 0})
        relu.replace_input_with(x, neg)
        g.output_node().args = (s,)
        assert [n.name for n in g.nodes] == ["x", "neg", "relu", "sum_1", "output"]
        assert [n.name for n in reversed(g.nodes)] == ["output", "sum_1", "relu", "neg", "x"]
        assert relu.prev is neg and relu.next is s and list(neg.users) == [relu]
        g.lint()
    code = lambda lib, g: lib.GraphModule(torch.nn.Module(), g).code
    assert code(rfx, g_of(rfx)) == code(tfx, g_of(tfx))


def g_of(lib):
    g = lib.Graph()
    x = g.placeholder("x")
    y = g.placeholder("y", default_value=3)
    a = g.call_function(operator.add, (x, y))
    g.call_function(torch.relu, (a,))  # dead: freed at once in the code
    g.output((a, [x], {"k": a}))
    return g


def test_erase_node_and_lint_errors_as_torch():
    for lib in (rfx, tfx):
        g = lib.Graph()
        x = g.placeholder("x")
        r = g.call_function(torch.relu, (x,))
        g.output(r)
        with pytest.raises(RuntimeError, match="still had 1 users"):
            g.erase_node(r)
        with g.inserting_before(x):  # use before definition
            g.call_function(torch.neg, (r,))
        with pytest.raises(RuntimeError, match="used before it has been defined"):
            g.lint()
    with pytest.raises(ValueError, match="Callable is expected"):
        rfx.Graph().create_node("call_function", "relu")


def test_transformer_rewrites_like_torch():
    def swap(lib):
        class Swap(lib.Transformer):
            def call_function(self, target, args, kwargs):
                target = torch.sigmoid if target is torch.relu else target
                return super().call_function(target, args, kwargs)

        return Swap

    def f(x):
        return torch.relu(x).sum(0) + torch.relu(-x).abs()

    ours = swap(rfx)(rfx.symbolic_trace(f)).transform()
    theirs = swap(tfx)(tfx.symbolic_trace(f)).transform()
    assert ours.code == theirs.code and "sigmoid" in ours.code
    x = torch.randn(3, 4)
    assert torch.equal(ours(x), theirs(x))
    ident = rfx.Transformer(rfx.symbolic_trace(make("mlp"))).transform()
    assert ident.code == tfx.Transformer(tfx.symbolic_trace(make("mlp"))).transform().code


def test_interpreter_handlers_see_what_torch_sees():
    def counting(lib):
        class Count(lib.Interpreter):
            seen = []

            def run_node(self, n):
                self.seen.append((n.op, n.name))
                return super().run_node(n)

        return Count

    ours, theirs = counting(rfx), counting(tfx)
    x = inputs("attention")
    ours(rfx.symbolic_trace(make("attention"))).run(*x)
    theirs(tfx.symbolic_trace(make("attention"))).run(*x)
    assert ours.seen == theirs.seen and len(ours.seen) > 20


def test_recompile_after_editing_the_graph():
    gm = rfx.symbolic_trace(lambda x: torch.relu(x) + 1)
    for n in gm.graph.nodes:
        if n.target is torch.relu:
            n.target = torch.tanh
    gm.recompile()
    x = torch.randn(5)
    assert "torch.tanh(x)" in gm.code and torch.equal(gm(x), torch.tanh(x) + 1)


def test_print_readable_annotates_shapes_like_torch():
    from torch.fx.passes.shape_prop import ShapeProp as TorchShapeProp

    from retorch.fx.passes import ShapeProp

    ours, theirs = rfx.symbolic_trace(make("mlp")), tfx.symbolic_trace(make("mlp"))
    ShapeProp(ours).propagate(*inputs("mlp"))
    TorchShapeProp(theirs).propagate(*inputs("mlp"))
    assert ours.print_readable(False).split() == theirs.print_readable(False).split()
    assert str(ours).endswith("please use `graph_module.print_readable()`")


def misuse_cases():
    def control_flow(x):
        return x if x.sum() > 0 else -x

    def loop(x):
        return [v for v in x]

    def length(x):
        return len(x)

    def bad_arg(x):
        return x + object()

    return [(control_flow, "inputs to control flow"), (loop, "cannot be iterated"),
            (length, "'len' is not supported"), (bad_arg, "argument of type"), (5, "FunctionType")]  # fmt: skip


@pytest.mark.parametrize("fn,message", misuse_cases())
def test_misuse_raises_torchs_exception_type(fn, message):
    with pytest.raises(Exception) as theirs:
        tfx.symbolic_trace(fn)
    expected = {tfx.proxy.TraceError: rfx.TraceError}.get(type(theirs.value), type(theirs.value))
    with pytest.raises(expected, match=message) as ours:
        rfx.symbolic_trace(fn)
    assert (
        type(ours.value) is expected
        and type(ours.value).__mro__[1:] == type(theirs.value).__mro__[1:]
    )
    if isinstance(theirs.value, tfx.proxy.TraceError):
        assert str(ours.value) == str(theirs.value)


def test_tracing_restores_module_call():
    call, getattr_ = torch.nn.Module.__call__, torch.nn.Module.__getattr__
    with pytest.raises(rfx.TraceError):
        rfx.symbolic_trace(lambda x: x if x else x)
    assert torch.nn.Module.__call__ is call and torch.nn.Module.__getattr__ is getattr_


# -- more traced forms: varargs, dtype/device/None/Ellipsis args, in-place operators, leaves --


def varargs(x, *args, **kwargs):
    return x + args[0] + kwargs["k"]


def odd_args(x):
    return x[..., None].to(torch.float64), x.size()[-1], torch.zeros_like(x, device=x.device)


def tensor_methods(x):
    return x.T, x.new_ones(3), x.permute(*[1, 0]).reshape([-1]), x.max(dim=0).values


def inplace_operators(x):
    x += 1
    x *= 2
    return x


class Leaves(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.ln = torch.nn.Embedding(10, 4), torch.nn.LayerNorm(4)
        self.mha = torch.nn.MultiheadAttention(4, 2, batch_first=True)

    def forward(self, idx):
        h = self.ln(self.emb(idx))
        return self.mha(h, h, h, need_weights=False)[0]


EXTRA = [
    (varargs, lambda: (torch.ones(2), torch.ones(2)), {"k": torch.ones(2)}),
    (odd_args, lambda: (torch.randn(3, 2),), {}),
    (tensor_methods, lambda: (torch.randn(3, 2),), {}),
    (inplace_operators, lambda: (torch.randn(3),), {}),
    (Leaves, lambda: (torch.tensor([[1, 2, 3]]),), {}),
]


@pytest.mark.parametrize("fn,args,kwargs", EXTRA, ids=lambda v: getattr(v, "__name__", ""))
def test_more_forms_trace_and_run_like_torch(fn, args, kwargs):
    def root():
        torch.manual_seed(0)
        return fn().eval() if isinstance(fn, type) else fn

    ours, theirs = rfx.symbolic_trace(root()), tfx.symbolic_trace(root())
    assert ours.code == torch_code(theirs) and node_rows(ours.graph) == node_rows(theirs.graph)
    with torch.no_grad():
        assert_same_values(ours(*args(), **kwargs), root()(*args(), **kwargs))


def test_graph_module_from_a_dict_root_as_dynamo_builds_them():
    for lib in (rfx, tfx):
        g = lib.Graph()
        x = g.placeholder("x")
        w = g.get_attr("sub.w")
        g.output(g.call_function(torch.matmul, (x, w)))
        gm = lib.GraphModule({"sub.w": torch.eye(2) * 3}, g)
        assert isinstance(gm.sub.w, torch.Tensor) and "sub.w" in dict(gm.named_buffers())
        assert torch.equal(gm(torch.ones(1, 2)), torch.full((1, 2), 3.0))
    assert gm.code.split() == lib.GraphModule({"sub.w": torch.eye(2)}, g).code.split()


def test_node_copy_and_graph_copy_like_torch():
    codes = []
    for lib in (rfx, tfx):
        src = lib.symbolic_trace(make("operator_chain")).graph
        dst = lib.Graph()
        val_map = {}
        out = dst.graph_copy(src, val_map)
        dst.output(out)
        dst.lint()
        assert len(val_map) == len(src.nodes) - 1
        codes.append(lib.GraphModule(torch.nn.Module(), dst).code)
    assert codes[0] == codes[1]


def test_dce_honours_module_is_impure():
    class Noisy(torch.nn.Module):
        _is_impure = True

        def forward(self, x):
            return x

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.noisy = Noisy()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x):
            self.lin(x)  # dead
            self.noisy(x)  # kept
            return x

    for lib in (rfx, tfx):
        tracer = lib.Tracer()
        tracer.is_leaf_module = lambda m, name: True
        gm = lib.GraphModule(M(), tracer.trace(M()))
        gm.graph.eliminate_dead_code()
        assert [n.op for n in gm.graph.nodes] == ["placeholder", "call_module", "output"]


def test_wrap_records_a_leaf_function_like_torch():
    import test_fx_wrapped as w

    for lib, fn in ((rfx, w.ours), (tfx, w.theirs)):
        gm = lib.symbolic_trace(fn)
        calls = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is w.clipped]
        assert len(calls) == 1 and calls[0].name == "clipped"
        lens = [n for n in gm.graph.nodes if n.target is len]
        assert len(lens) == 1
        x = torch.randn(3, 2)
        assert torch.equal(gm(x), fn(x))
    assert rfx.symbolic_trace(w.ours).code == torch_code(tfx.symbolic_trace(w.theirs)).replace(
        "theirs", "ours"
    )


def test_deepcopy_gives_an_independent_working_module():
    import copy

    gm = rfx.symbolic_trace(make("submodule_params"))
    clone = copy.deepcopy(gm)
    x = torch.randn(3, 4)
    with torch.no_grad():
        assert torch.equal(clone(x), gm(x)) and clone.code == gm.code
        clone.lin.weight.add_(1)
        assert not torch.equal(clone(x), gm(x))
    assert all(a is not b for a, b in zip(clone.graph.nodes, gm.graph.nodes))
    assert [n.name for n in clone.graph.nodes] == [n.name for n in gm.graph.nodes]
    clone.graph.lint()


def test_fx_imports_only_torch_and_itself():
    """The compiler layer sits on torch: no retorch.autograd/nn/optim/tensor imports."""
    import ast
    import pathlib

    root = pathlib.Path(rfx.__file__).parent
    for path in root.rglob("*.py"):
        depth = len(path.relative_to(root).parts) - 1  # 0 in fx/, 1 in fx/passes/
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level <= depth + 1, f"{path}: relative import leaves retorch.fx"
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            for name in names:
                assert not name.startswith("retorch") or name.startswith("retorch.fx"), path


@pytest.mark.parametrize("name", ["attention", "submodule_params"])
def test_interpreter_frees_values_after_last_use_like_torch(name):
    live = {}
    for lib in (rfx, tfx):

        class Peak(lib.Interpreter):
            def run_node(self, n):
                out = super().run_node(n)
                live.setdefault(lib, []).append(sorted(k.name for k in self.env))
                return out

        interp = Peak(lib.symbolic_trace(make(name)))
        interp.run(*inputs(name))
        live[lib].append(sorted(k.name for k in interp.env))
    assert live[rfx] == live[tfx]
    assert max(map(len, live[rfx])) < len(live[rfx]) // 2  # values really are dropped


def test_print_tabular_like_torch(capsys):
    rfx.symbolic_trace(make("torch_calls")).graph.print_tabular()
    ours = capsys.readouterr().out
    tfx.symbolic_trace(make("torch_calls")).graph.print_tabular()
    assert ours == capsys.readouterr().out and ours.splitlines()[0].split() == [
        "opcode", "name", "target", "args", "kwargs"
    ]  # fmt: skip


DEEP = {
    "encoder_layer": lambda: torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
    "decoder_layer": lambda: torch.nn.TransformerDecoderLayer(8, 2, 16),
    "mha": lambda: torch.nn.MultiheadAttention(8, 2, batch_first=True),
    "gru_cell": lambda: torch.nn.GRUCell(4, 4),
    "embedding": lambda: torch.nn.Embedding(5, 3),
    "conv_seq": lambda: torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(DEEP))
def test_tracing_into_torch_nn_ends_as_torch_fx_does(name):
    """A tracer that enters torch.nn's own forwards: same code, or the same failure."""
    outcomes = []
    for lib in (rfx, tfx):

        class Deep(lib.Tracer):
            def is_leaf_module(self, m, qualified_name):
                leaves = (torch.nn.Linear, torch.nn.LayerNorm, torch.nn.Dropout, torch.nn.Conv2d)
                return isinstance(m, (*leaves, torch.nn.BatchNorm2d))

        torch.manual_seed(0)
        m = DEEP[name]().eval()
        try:
            outcomes.append(lib.GraphModule(m, Deep().trace(m)).code)
        except Exception as e:  # data-dependent control flow inside torch.nn
            outcomes.append(f"{type(e).__name__}: {e}")
    assert outcomes[0] == outcomes[1]


def test_tracebacks_show_the_generated_line():
    import traceback

    gm = rfx.symbolic_trace(lambda x: x.view(-1, 5) + 1)
    with pytest.raises(RuntimeError) as err:
        gm(torch.randn(3, 4))  # 12 elements do not split into rows of 5
    frames = traceback.extract_tb(err.value.__traceback__)
    generated = [f for f in frames if f.filename.startswith("<eval_with_key>")]
    assert generated and generated[-1].line == "view = x.view(-1, 5);  x = None"

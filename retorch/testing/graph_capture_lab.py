"""Graders for lab 6a (solutions/06a_graph_capture_lab.md): the student's pieces against torch.

Each ``check_*`` takes the comparisons object that :func:`retorch.testing.grading.check` passes
and the student's code, runs it and torch (``torch.fx``, ``torch._dynamo``) on the same inputs,
and compares. The inputs are not the ones the lab page shows, and they are chosen so that the
usual mistakes show: methods whose names start with ``_``, keyword arguments, arguments in the
other order, constants equal in value but not in type (``2`` and ``2.0``), random and in-place
operations, lists and slices among the arguments, an example tensor changed in place after its
guard was made, bitwise and in-place operators, constants folded for floats as well as ints.
"""

from __future__ import annotations

import torch
import torch._dynamo
import torch.fx
import torch.nn.functional as F
from torch import nn
from torch.fx.passes.dialect.common.cse_pass import CSEPass

# ------------------------------------------------------------------ shared


def _name(a):
    return a.name if isinstance(a, torch.fx.Node) else a


def rows_of(graph) -> list:
    """(op, target, args, kwargs) of every node, nodes named, functions by qualified name."""
    rows = []
    for n in graph.nodes:
        target = (
            n.target if isinstance(n.target, str) else torch.fx.node._get_qualified_name(n.target)
        )
        rows.append(
            (n.op, target, torch.fx.node.map_arg(n.args, _name),
             dict(torch.fx.node.map_arg(n.kwargs, _name)))
        )  # fmt: skip
    return rows


# ------------------------------------------------------------------ exercise 1: a Proxy


def keep_dims(x):
    return x.sum(dim=1, keepdim=True)


def chained(x, y):
    return x.view(-1).relu() + y.flatten().relu()


def torch_functions(x, y):
    return torch.relu(x) * torch.cat([x, y.exp()], dim=0).mean(0)


def softmax_of_gram(x):
    return torch.softmax(x.t() @ x, dim=-1).transpose(0, 1)


def reflected(x, y):
    return 2 * x.neg() - torch.sum(y, 0)


def moved(x):
    return x.permute(1, 0).reshape(2, -1).to(torch.float64)


def private_methods(x, y):
    return x._conj().sum(dim=0) + y._neg_view().amax(dim=(0,), keepdim=False)


def functional_keywords(x, y):
    return F.normalize(x, p=1.0, dim=0) - torch.clamp(y, min=-0.5, max=0.5)


def check_proxy(cmp, proxy_cls, lab_trace):
    hint = ("x.name(...) is a call_method node: target the string name, args (x, *args), kwargs "
            "unchanged; torch.f(...) is a call_function node: target f itself, args and kwargs "
            "unchanged; only names starting with '__' are refused")  # fmt: skip
    for fn in [keep_dims, chained, torch_functions, softmax_of_gram, reflected, moved,
               private_methods, functional_keywords]:  # fmt: skip
        got = cmp.call(lambda: rows_of(lab_trace(fn)), f"lab_trace({fn.__name__}) ran", hint)
        want = rows_of(torch.fx.symbolic_trace(fn).graph)
        for k, (g, w) in enumerate(zip(got, want)):
            cmp.equal(g, w, f"{fn.__name__}: node {k} (op, target, args, kwargs)", hint)
        cmp.equal(len(got), len(want), f"{fn.__name__}: number of nodes", hint)
    probe = proxy_cls(torch.fx.Graph().placeholder("x"))
    for name in ["__array__", "__deepcopy__", "__len__"]:
        cmp.equal(cmp.call(lambda: hasattr(probe, name), f"hasattr(proxy, {name!r}) ran", hint),
                  False, f"hasattr(proxy, {name!r}) (Python's probe for a special method)",
                  "__getattr__ must raise AttributeError for names starting with '__': Python "
                  "and libraries probe for them and must not get a method back")  # fmt: skip


# ------------------------------------------------------------------ exercise 2: CSE


class TwoLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, y):
        return self.lin(x) + self.lin(x) + self.lin(y)


def repeated_chain(x, y):
    return (torch.relu(y) - 1) * (torch.relu(y) - 1)


def keywords(x, y):
    return x.sum(dim=0) + x.sum(dim=1) + x.sum(0) + x.sum(dim=0) + x.sum(dim=0, keepdim=True)


def operand_order(x, y):
    return (x - y) * (y - x) * (x - y) * torch.sub(x, y) * torch.sub(y, x)


def typed_constants(x, y):
    return x * 2, x * 2.0, y + 3, y + 3, x.pow(2), x.pow(2.0)


def random_and_in_place(x, y):
    torch._assert(x.dim() == 2, "2-d")
    torch._assert(x.dim() == 2, "2-d")
    a = torch.rand_like(x) + torch.rand_like(x)
    b = F.dropout(x, 0.5) * F.dropout(x, 0.5)
    y.mul_(2)
    y.mul_(2)
    return a, b, y


def underscores(x, y):
    return x._neg_view() + x._neg_view() + y._neg_view() + x.__abs__().__abs__() + x.__abs__()


def lists_and_slices(x, y):
    cat = torch.cat([x, y]) + torch.cat([x, y]) + torch.cat([y, x])
    return cat, x[1:] * x[1:] * x[:1] * x[1:, 0:1]


def after_a_merge(x, y):
    a, b = x.cos(), x.cos()
    return a.exp() + b.exp() + torch.tanh(a) * torch.tanh(b)


def nothing_repeats(x, y):
    return x.exp() + y * 3


def _int_pair(seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(-4, 5, (3, 3), generator=gen), torch.randint(-4, 5, (3, 3), generator=gen)


def _float_pair(seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(3, 3, generator=gen), torch.randn(3, 3, generator=gen)


# Node names left after CSE, checked by hand against each function above: what may merge, and
# what must not (other keyword arguments, other order, 2 against 2.0, random, impure or in place).
CSE_EXPECTED = {
    "TwoLinear": ["x", "y", "lin", "add", "lin_2", "add_1", "output"],
    "repeated_chain": ["x", "y", "relu", "sub", "mul", "output"],
    "keywords": ["x", "y", "sum_1", "sum_2", "add", "sum_3", "add_1", "add_2", "sum_5", "add_3", "output"],
    "operand_order": ["x", "y", "sub", "sub_1", "mul", "mul_1", "sub_3", "mul_2", "sub_4", "mul_3", "output"],
    "typed_constants": ["x", "y", "mul", "mul_1", "add", "pow_1", "pow_2", "output"],
    "random_and_in_place": ["x", "y", "dim", "eq", "_assert", "_assert_1", "rand_like", "rand_like_1", "add", "dropout", "dropout_1", "mul", "mul_", "mul__1", "output"],
    "underscores": ["x", "y", "_neg_view", "add", "_neg_view_2", "add_1", "abs_1", "abs_2", "add_2", "add_3", "output"],
    "lists_and_slices": ["x", "y", "cat", "add", "cat_2", "add_1", "getitem", "mul", "getitem_2", "mul_1", "getitem_3", "mul_2", "output"],
    "after_a_merge": ["x", "y", "cos", "exp", "add", "tanh", "mul", "add_1", "output"],
    "nothing_repeats": ["x", "y", "exp", "mul", "add", "output"],
}  # fmt: skip

# What torch.fx.passes' CSEPass leaves where it is right: not on 2 against 2.0 (it compares
# constants by value), random ops (it bans aten's random ops only), in-place methods, or slices
# (unhashable in its keys).
CSE_AGREES_WITH_TORCH = ["TwoLinear", "repeated_chain", "keywords", "operand_order",
                         "underscores", "after_a_merge", "nothing_repeats"]  # fmt: skip

CSE_CASES = [TwoLinear, repeated_chain, keywords, operand_order, typed_constants,
             random_and_in_place, underscores, lists_and_slices, after_a_merge, nothing_repeats]  # fmt: skip


def _case_name(case) -> str:
    return case.__name__


def _trace(case):
    torch.manual_seed(0)
    root = case() if isinstance(case, type) else case
    return torch.fx.symbolic_trace(root)


def check_cse(cmp, cse):
    hint = ("walk the nodes in order; a call_function/call_method/call_module node that is "
            "pure (not node.is_impure(), target not in RANDOM, not an in-place method whose "
            "name ends in one '_') merges into an earlier node with the same op, target, args "
            "and kwargs, where args are compared after earlier merges and constants by type "
            "as well as value (2 is not 2.0; True is not 1); replace_all_uses_with the earlier "
            "node, erase, and return whether anything changed")  # fmt: skip
    for case in CSE_CASES:
        what = _case_name(case)
        gm = _trace(case)
        changed = cmp.call(lambda: cse(gm.graph), f"your CSE on {what} ran", hint)
        names = [n.name for n in gm.graph.nodes]
        cmp.equal(names, CSE_EXPECTED[what], f"{what}: the nodes left", hint)
        expect_change = len(CSE_EXPECTED[what]) < len(_trace(case).graph.nodes)
        cmp.equal(changed, expect_change, f"{what}: the value returned (did anything change?)",
                  hint)  # fmt: skip
        cmp.call(gm.graph.lint, f"{what}: your graph is well formed (Graph.lint)", hint)
        gm.recompile()
        if what in CSE_AGREES_WITH_TORCH:
            theirs = CSEPass()(_trace(case)).graph_module
            cmp.equal(gm.code, theirs.code, f"{what}: the code, against torch's CSEPass", hint)
        if what != "random_and_in_place":
            for args in (
                (_float_pair(1), _int_pair(2)) if what == "typed_constants" else (_float_pair(1),)
            ):
                torch.manual_seed(0)
                root = case() if isinstance(case, type) else case
                with torch.no_grad():
                    want = root(*args)
                    got = cmp.call(lambda: gm(*args), f"{what}: running your graph", hint)
                flat = torch.utils._pytree.tree_leaves
                for k, (g, w) in enumerate(zip(flat(got), flat(want), strict=True)):
                    cmp.equal(g, w, f"{what}: output {k} on {args[0].dtype} inputs", hint)


# ------------------------------------------------------------------ exercise 3: TENSOR_MATCH


def plus_one(x):
    return x + 1


def _torch_guard(example):
    """The guard manager torch built for plus_one compiled on `example`."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    torch._dynamo.reset()
    torch.compile(plus_one, backend="eager", dynamic=False)(example)
    return _debug_get_cache_entry_list(plus_one.__code__)[0].guard_manager


def _tensor_cases():
    """(example, change made to the example after both guards exist, {what: candidate})."""
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(2, 5, generator=gen)
    z = torch.randn(3, 2, dtype=torch.complex64, generator=gen)
    b = torch.randn(2, 6, generator=gen)
    c = torch.randn(4, 3, generator=gen)
    keep = lambda t: None  # noqa: E731
    return [
        (a, keep, {"a clone": a.clone(), "other values": torch.zeros(2, 5),
                   "float64": a.double(), "int64": a.long(), "shape (5, 2)": torch.randn(5, 2),
                   "(5, 2) transposed": torch.randn(5, 2).t(), "requires_grad":
                   a.clone().requires_grad_(), "a Parameter": nn.Parameter(a.clone(),
                                                                          requires_grad=False),
                   "the float 1.0": 1.0, "a list": [[0.0] * 5] * 2,
                   "a view at offset 3": torch.randn(13)[3:].view(2, 5),
                   "every other column": torch.randn(2, 10)[:, ::2],
                   "on the meta device": torch.empty(2, 5, device="meta"),
                   "(2, 5) sliced from (2, 7)": torch.randn(2, 7)[:, :5],
                   "shape (3, 5), the same strides": torch.randn(3, 5),
                   "shape (5, 2), the same strides (5, 1)":
                       torch.randn(30).as_strided((5, 2), (5, 1))}),
        (torch.randn(5, 2).t(), keep, {"another transpose": torch.randn(5, 2).t(),
                                      "contiguous (2, 5)": torch.randn(2, 5),
                                      "every other column, strides (10, 2)":
                                          torch.randn(2, 10)[:, ::2]}),
        (z, keep, {"a clone": z.clone(), "z.conj() (lazy conjugate)": z.conj()}),
        (z.imag, keep, {"another .imag": torch.randn(3, 2, dtype=torch.complex64).imag,
                        "z.conj().imag (negative bit)": z.conj().imag}),
        (nn.Parameter(a.clone()), keep, {"another Parameter": nn.Parameter(torch.randn(2, 5)),
                                         "a plain tensor requiring grad":
                                             a.clone().requires_grad_()}),
        (b, lambda t: t.t_(), {"a (2, 6) tensor, as the example was": torch.randn(2, 6),
                                "the example itself, transposed in place since": b}),
        (c, lambda t: t.requires_grad_(), {"a (4, 3) tensor, no grad, as the example was":
                                           torch.randn(4, 3), "the example itself, now "
                                           "requiring grad": c}),
    ]  # fmt: skip


def check_tensor_match(cmp, tensor_match):
    hint = ("read the example's exact type (type(value) is type(example)), dtype, device, "
            "shape, stride, requires_grad and torch._C._dispatch_keys when the guard is made, "
            "not when it runs; not the values, not the storage offset; a non-tensor never "
            "matches")  # fmt: skip
    for example, change, cands in _tensor_cases():
        guard = _torch_guard(example)
        mine = cmp.call(lambda: tensor_match(example), "tensor_match(example) ran", hint)
        change(example)
        for what, value in cands.items():
            got = cmp.call(lambda: mine(value), f"check({what}) ran", hint)
            cmp.equal(got, guard.check({"x": value}),
                      f"example {tuple(example.shape)} {example.dtype}: does {what} match?",
                      hint)  # fmt: skip
    torch._dynamo.reset()


# ------------------------------------------------------------------ exercise 4: BINARY_OP


def affine(x, y):
    return x * 2 - y / 3


def in_place(x, y):
    k = 3
    z = x - y
    z -= k * 2
    return z**2 // y % x


def constant_first(x, y):
    return 10 - x @ y


def folded(x, y):
    k = 4
    k = k // 3 + k**3
    k |= 2
    z = k - x
    z *= y
    return z + k


def float_constants(x, y):
    k = 2.5
    k **= 2
    k //= 1.5
    j = 7
    j //= 2
    j **= 2
    return x * k - y / j + 0.5 % k


def bitwise(x, y):
    k = 5
    k <<= 2
    k ^= 3
    k >>= 1
    z = x ^ y
    z <<= 1
    z &= k
    return (z >> 1) | x


def _typed(a):
    return (type(a).__name__, a)


def calls_of(graph):
    """The call_function nodes: (target's qualified name, args), inputs as ("input", i), nodes
    as ("node", j), constants with their type."""
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    calls = [n for n in graph.nodes if n.op == "call_function"]

    def ref(a):
        if isinstance(a, torch.fx.Node):
            return ("input", inputs.index(a)) if a in inputs else ("node", calls.index(a))
        return _typed(a)

    return [(torch.fx.node._get_qualified_name(n.target), tuple(ref(a) for a in n.args))
            for n in calls]  # fmt: skip


def dynamo_graph(fn, args):
    kept = []
    torch._dynamo.reset()
    torch.compile(fn, backend=lambda gm, ex: kept.append(gm) or gm.forward, dynamic=False)(*args)
    torch._dynamo.reset()
    return kept[0].graph


def check_binary_op(cmp, translator_cls):
    hint = ("pop the right operand first, then the left; use the operator module's functions "
            "for every operator dis can print (operator.add, not torch.add; also ^ << >> & |); "
            "an in-place form (-=, <<=) is its in-place function (operator.isub, "
            "operator.ilshift); fold when both operands are constants, whatever their type, "
            "with the same function (7 // 2 is the int 3, 3 ** 2 the int 9); otherwise "
            "graph.call_function(op, (left, right))")  # fmt: skip
    gen = torch.Generator().manual_seed(3)
    floats = (torch.rand(3, 3, generator=gen) + 1, torch.rand(3, 3, generator=gen) + 1)
    ints = (torch.randint(1, 9, (3, 3), generator=gen), torch.randint(1, 9, (3, 3), generator=gen))
    for fn, args in [(affine, floats), (in_place, floats), (constant_first, floats),
                     (folded, floats), (float_constants, floats), (bitwise, ints)]:  # fmt: skip
        graph = cmp.call(lambda: translator_cls(fn).run(), f"translating {fn.__name__} ran", hint)
        cmp.equal(calls_of(graph), calls_of(dynamo_graph(fn, args)),
                  f"{fn.__name__}: call_function nodes (target, args; constants with types)",
                  hint)  # fmt: skip
        got = cmp.call(lambda: torch.fx.GraphModule(nn.Module(), graph)(*args),
                       f"running your graph of {fn.__name__}", hint)  # fmt: skip
        cmp.equal(got, fn(*args), f"{fn.__name__}: your graph's result", hint)

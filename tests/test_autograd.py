"""retorch.autograd against torch.autograd: each op, the engine, hooks, in-place safety,
custom Functions, checkpointing, anomaly mode, gradcheck, errors and training steps.

Random expression graphs are in test_autograd_random.py.
"""

from __future__ import annotations

import gc
import re
import warnings
import weakref

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint as torch_checkpoint

import retorch.autograd as ra
from retorch.utils.checkpoint import checkpoint

F64 = torch.float64


def pair(data, requires_grad=True):
    """The same leaf in both libraries."""
    return (
        ra.tensor(data.clone(), requires_grad=requires_grad),
        data.clone().requires_grad_(requires_grad),
    )


def close(ours, theirs):
    torch.testing.assert_close(
        ours.data if isinstance(ours, ra.Tensor) else ours, theirs, rtol=1e-10, atol=1e-12
    )


def raised(fn):
    """(exception type, message) of what ``fn()`` raises."""
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value)


def same_errors(make_case):
    """``make_case(lib)`` returns a callable that must fail; it fails alike in both libraries."""
    ours, theirs = raised(make_case(ra)), raised(make_case(torch))
    assert ours == theirs
    return ours


class lib_ops:
    """Spellings that differ: ``lib_ops.leaf(ra, [1.0])`` or ``lib_ops.leaf(torch, [1.0])``."""

    @staticmethod
    def leaf(lib, values, dtype=torch.float32):
        data = torch.tensor(values, dtype=dtype)
        return ra.tensor(data, requires_grad=True) if lib is ra else data.requires_grad_()

    @staticmethod
    def grad(lib):
        return ra.grad if lib is ra else torch.autograd.grad

    @staticmethod
    def function(lib):
        return ra.Function if lib is ra else torch.autograd.Function


# ---------------------------------------------------------------- every op, with broadcasting

UNARY = {
    "exp": lambda x: x.exp(),
    "log": lambda x: (x * x + 1).log(),
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(),
    "relu": lambda x: x.relu(),
    "neg": lambda x: -x,
    "pow": lambda x: x**3,
    "pow0": lambda x: x**0,
    "rpow": lambda x: 2**x,
    "rdiv": lambda x: 2 / (x * x + 1),
    "rsub": lambda x: 1 - x,
    "clone": lambda x: x.clone(),
    "sum": lambda x: x.sum(),
    "sum1": lambda x: x.sum(1),
    "sum01": lambda x: x.sum((0, 1)),
    "sum_keep": lambda x: x.sum(0, keepdim=True),
    "mean": lambda x: x.mean(),
    "mean1": lambda x: x.mean(1),
    "max": lambda x: x.max(),
    "max_ties": lambda x: x.expand(2, 3, 4).max(),  # the maximum twice: each gets half
    "max1": lambda x: x.max(1)[0],
    "max0_keep": lambda x: x.max(0, keepdim=True)[0],
    "reshape": lambda x: x.reshape(12),
    "t_reshape": lambda x: x.t().reshape(12),
    "expand_reshape": lambda x: x[:1].expand(2, 4).reshape(8),
    "view": lambda x: x.view(4, 3),
    "transpose": lambda x: x.transpose(0, 1),
    "t": lambda x: x.t(),
    "t_1d": lambda x: x[0].t(),
    "permute": lambda x: x.permute(1, 0),
    "unsqueeze": lambda x: x.unsqueeze(1),
    "squeeze": lambda x: x.unsqueeze(0).squeeze(0),
    "squeeze_all": lambda x: x.unsqueeze(0).squeeze(),
    "expand": lambda x: x[0].expand(5, 4),
    "select": lambda x: x[1],
    "select_neg": lambda x: x[-1, 2],
    "slice": lambda x: x[:, 1:3],
    "slice_step": lambda x: x[::2],
    "row_slice": lambda x: x[1:2],
    "softmax": lambda x: x.softmax(1),
    "log_softmax": lambda x: x.log_softmax(0),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_each_op_has_torchs_node_and_gradient(name):
    torch.manual_seed(0)
    ours, theirs = pair(torch.randn(3, 4, dtype=F64))
    y, ty = UNARY[name](ours), UNARY[name](theirs)
    assert ra.graph_names(y) == ra.graph_names(ty)
    close(y, ty.detach())
    g = torch.randn(ty.shape, dtype=F64)
    y.backward(ra.tensor(g))
    ty.backward(g)
    close(ours.grad, theirs.grad)


BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b * b + 1),
    "pow": lambda a, b: (a * a + 1) ** b,
    "where": lambda a, b: (ra.where if isinstance(a, ra.Tensor) else torch.where)(
        (a.data if isinstance(a, ra.Tensor) else a.detach()) > 0, a, b
    ),
}
SHAPES = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((3, 1), (1, 4)),
    ((2, 3, 4), (3, 1)),
    ((4,), (2, 1, 4)),
    ((), (3, 4)),
]


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("shapes", SHAPES)
def test_binary_ops_reduce_gradients_to_each_inputs_shape(name, shapes):
    torch.manual_seed(1)
    (a, ta), (b, tb) = (
        pair(torch.randn(shapes[0], dtype=F64)),
        pair(torch.randn(shapes[1], dtype=F64)),
    )
    y, ty = BINARY[name](a, b), BINARY[name](ta, tb)
    assert ra.graph_names(y) == ra.graph_names(ty)
    y.sum().backward()
    ty.sum().backward()
    close(a.grad, ta.grad)
    close(b.grad, tb.grad)


MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((3,), (3, 4)),  # unsqueeze, mm, squeeze_ (SqueezeBackward4)
    ((2, 3, 4), (4, 5)),
    ((2, 3, 4), (4,)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 2, 3, 4), (2, 2, 4, 3)),
    # torch's own test inputs (issue 8): 1-d and 2-d against batched, and empty shapes
    ((10,), (5, 10, 5)),
    ((5, 5, 10), (10,)),
    ((5, 10), (5, 10, 5)),
    ((0, 0), (5, 0, 0)),
    ((3, 5, 0), (0, 0)),
    ((4,), (2, 3, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),  # broadcast batch: expand, copy, bmm
    ((1, 3, 4), (2, 4, 5)),  # a batch of one is squeezed, then folded
    ((2, 3, 4), (1, 4, 5)),
]


@pytest.mark.parametrize("needs", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("shapes", MATMUL_SHAPES)
def test_matmul_decomposes_as_at_matmul(shapes, needs):
    """Same nodes as torch's _matmul_impl (which path depends on which operand needs grad),
    same values and gradients."""
    torch.manual_seed(2)
    A, B = torch.randn(shapes[0], dtype=F64), torch.randn(shapes[1], dtype=F64)
    a, b = ra.tensor(A, requires_grad=needs[0]), ra.tensor(B, requires_grad=needs[1])
    ta, tb = A.clone().requires_grad_(needs[0]), B.clone().requires_grad_(needs[1])
    y, ty = a @ b, ta @ tb
    assert ra.graph_names(y) == ra.graph_names(ty)
    close(y, ty.detach())
    grad = torch.randn(ty.shape, dtype=F64)
    y.backward(ra.tensor(grad))
    ty.backward(grad)
    for ours, theirs, need in ((a, ta, needs[0]), (b, tb, needs[1])):
        if need:
            close(ours.grad, theirs.grad)


def test_matmul_of_a_0_dim_tensor_is_refused_as_torch():
    s = torch.tensor(2.0)
    assert raised(lambda: ra.tensor(s) @ ra.tensor(torch.ones(2))) == raised(
        lambda: s @ torch.ones(2)
    )


@pytest.mark.parametrize("op", ["sum", "mean", "softmax", "log_softmax"])
def test_0_dim_tensors_accept_dim_0_and_minus_1(op):
    """maybe_wrap_dim: a 0-dim tensor behaves as if it had one dimension."""
    for dim in (0, -1):
        x, tx = pair(torch.tensor(0.7, dtype=F64))
        y, ty = getattr(x, op)(dim), getattr(tx, op)(dim)
        assert y.shape == ty.shape == ()
        close(y, ty.detach())
        (y * 3).backward()
        (ty * 3).backward()
        close(x.grad, tx.grad)
    for dim in (1, -2):
        assert raised(lambda: getattr(ra.tensor(torch.tensor(0.7)), op)(dim)) == raised(
            lambda: getattr(torch.tensor(0.7), op)(dim)
        )


def test_sum_over_a_repeated_dim_is_refused_as_torch():
    x = torch.ones(2, 3)
    assert raised(lambda: ra.tensor(x).sum((1, -1))) == raised(lambda: x.sum((1, -1)))


def test_cross_entropy_and_integer_index():
    torch.manual_seed(3)
    x, tx = pair(torch.randn(5, 4, dtype=F64))
    target, rows = torch.tensor([0, 3, 1, 1, 2]), torch.tensor([4, 0, 1, 1, 2])
    y = ra.cross_entropy(x[ra.tensor(rows)], target)
    ty = F.cross_entropy(tx[rows], target)
    close(y, ty.detach())
    assert ra.graph_names(y) == ra.graph_names(ty) == [
        "NllLossBackward0", "LogSoftmaxBackward0", "IndexBackward0", "AccumulateGrad"
    ]  # fmt: skip
    y.backward()
    ty.backward()
    close(x.grad, tx.grad)


def test_most_gradients_are_bit_for_bit_torchs():
    """The formulas do their arithmetic in torch's order; tanh's and the reductions' kernels differ."""
    torch.manual_seed(4)
    for name in ["exp", "log", "sigmoid", "relu", "pow", "rpow", "rdiv", "softmax", "mean", "max1"]:
        ours, theirs = pair(torch.randn(3, 4, dtype=F64))
        g = torch.randn(UNARY[name](theirs).shape, dtype=F64)
        UNARY[name](ours).backward(ra.tensor(g))
        UNARY[name](theirs).backward(g)
        assert torch.equal(ours.grad.data, theirs.grad), name
    for name in ["mul", "div", "pow"]:
        (a, ta), (b, tb) = pair(torch.randn(3, 4, dtype=F64)), pair(torch.randn(3, 4, dtype=F64))
        BINARY[name](a, b).sum().backward()
        BINARY[name](ta, tb).sum().backward()
        assert torch.equal(a.grad.data, ta.grad) and torch.equal(b.grad.data, tb.grad), name


# ---------------------------------------------------------------- the engine


def orders(build, data):
    """Node names in the order each engine runs them, for the graph ``build`` makes."""
    a, ta = pair(data)
    return ra.backward_order(build(a), build(ta))


@pytest.mark.parametrize(
    "build",
    [
        lambda a: ((a.exp() * a + a.exp()).tanh() * a).sum(),
        lambda a: (a @ a.t()).relu().sum() + a.sigmoid().mean(),
        lambda a: (a[0] * a[1] + a[2].exp()).sum(),  # three views of one leaf, ready together
        lambda a: ((a * 2) * (a * 3) + (a * 4)).sum(),
    ],
)
def test_execution_order_matches_torch(build):
    ours, theirs = orders(build, torch.randn(3, 4, dtype=F64))
    assert ours == theirs


def test_leaves_ready_together_run_in_torchs_order():
    """All AccumulateGrad nodes share one sequence number. Seven become ready at once here; the
    order they run in (torch's: 0 2 5 6 4 1 3) comes from how the heap moves tied entries."""
    data = [torch.randn(2, dtype=F64) for _ in range(7)]
    seen = {}
    for lib in (ra, torch):
        leaves = [lib_ops.leaf(lib, d.tolist(), F64) for d in data]

        class AddAll(lib_ops.function(lib)):
            @staticmethod
            def forward(ctx, *xs):
                return sum(xs[1:], xs[0])

            @staticmethod
            def backward(ctx, g):
                return (g,) * len(data)

        out = AddAll.apply(*leaves).sum()
        seen[lib] = []
        for i, leaf in enumerate(leaves):
            leaf.register_hook(lambda g, i=i, order=seen[lib]: order.append(i))
        out.backward()
    assert seen[ra] == seen[torch] == [0, 2, 5, 6, 4, 1, 3]


def test_several_roots_start_from_one_graph_root():
    a, ta = pair(torch.randn(3, dtype=F64))
    log = {"ours": [], "torch": []}
    for key, x in (("ours", a), ("torch", ta)):
        y1, y2 = x.exp(), x * 3
        for fn in (y1.grad_fn, y2.grad_fn):
            fn.register_prehook(lambda g, fn=fn, key=key: log[key].append(type(fn).__name__))
        lib_backward = ra.backward if key == "ours" else torch.autograd.backward
        lib_backward([y1.sum(), y2.sum()])
    assert log["ours"] == log["torch"] == ["MulBackward0", "ExpBackward0"]
    close(a.grad, ta.grad)


def test_grad_runs_only_what_leads_to_its_inputs():
    log = {"ours": [], "torch": []}
    for key, lib in (("ours", ra), ("torch", torch)):
        a, b = lib_ops.leaf(lib, [1.0, 2.0]), lib_ops.leaf(lib, [3.0, 4.0])
        c, d = a * 2, b.exp()
        e = (c * d).sum()
        for fn in (e.grad_fn, e.grad_fn.next_functions[0][0], c.grad_fn, d.grad_fn):
            fn.register_prehook(lambda g, fn=fn, key=key: log[key].append(type(fn).__name__))
        (ga,) = lib_ops.grad(lib)(e, [a])
        log[key].append(ga.tolist())
    assert log["ours"] == log["torch"]
    assert "ExpBackward0" not in log["ours"]


def test_backward_with_inputs_accumulates_only_into_them():
    results = []
    for lib in (ra, torch):
        a, b = lib_ops.leaf(lib, [1.0, 2.0]), lib_ops.leaf(lib, [3.0, 4.0])
        c = a * b
        e = (c * c).sum()
        e.backward(inputs=[c, b], retain_graph=True)
        results.append([None if t.grad is None else t.grad.tolist() for t in (a, b, c)])
        results[-1].append(c.retains_grad)
    assert results[0] == results[1]


def test_first_gradient_is_copied_into_grad():
    """.grad never aliases a gradient that also flows elsewhere, so later += is safe."""
    results = []
    for lib in (ra, torch):
        x, z = lib_ops.leaf(lib, [1.0, 1.0]), lib_ops.leaf(lib, [1.0, 1.0])
        (x + z).sum().backward()  # both get the same (expanded) gradient
        (x * 1).sum().backward()
        g = torch.ones(2)
        w = lib_ops.leaf(lib, [0.0, 0.0])
        (w + 0).backward(ra.tensor(g) if lib is ra else g)
        (w * 1).sum().backward()
        results.append([t.grad.tolist() for t in (x, z, w)] + [g.tolist()])
    assert results[0] == results[1] == [[2.0, 2.0], [1.0, 1.0], [2.0, 2.0], [1.0, 1.0]]


def test_accumulation_and_retain_graph():
    a, ta = pair(torch.tensor([1.0, 2.0], dtype=F64))
    for x in (a, ta):
        y = (x * x).sum()
        y.backward(retain_graph=True)
        y.backward()
    close(a.grad, ta.grad)


def test_saved_tensors_are_freed_after_backward_and_the_graph_by_reference_counting():
    x = ra.tensor(torch.randn(3, dtype=F64), requires_grad=True)
    gc.disable()
    try:
        y = x.exp()
        loss = (y * y).sum()
        node, mul = weakref.ref(y.grad_fn), loss.grad_fn.next_functions[0][0]
        assert isinstance(mul.self_, ra.SavedVariable) and mul.self_.unpack(mul) is y
        loss.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            mul.self_.unpack(mul)
        del y, loss, mul
        assert node() is None  # no reference cycle kept it: the collector was off
    finally:
        gc.enable()


# ---------------------------------------------------------------- hooks


def test_tensor_hooks_retain_grad_and_node_hooks():
    log = {"ours": [], "torch": []}
    for key, x in (
        ("ours", ra.tensor(torch.ones(3, dtype=F64), requires_grad=True)),
        ("torch", torch.ones(3, dtype=F64, requires_grad=True)),
    ):
        y = x * 2
        y.retain_grad()
        y.register_hook(lambda g: g * 10)  # replaces the gradient flowing on
        x.register_hook(lambda g, key=key: log[key].append(("leaf hook", g.sum().item())))
        z = (y * y).sum()
        z.grad_fn.register_prehook(lambda grads, key=key: log[key].append(("pre", len(grads))))
        z.grad_fn.register_hook(lambda gi, go, key=key: log[key].append(("post", len(gi), len(go))))
        acc = y.grad_fn.next_functions[0][0]
        acc.register_prehook(
            lambda grads, key=key: log[key].append(("accumulate pre-hook", len(grads)))
        )
        acc.register_hook(
            lambda gi, go, key=key: log[key].append(("accumulate post-hook", len(gi), len(go)))
        )
        z.backward()
        log[key] += [
            ("y.grad", y.grad.sum().item()),
            ("x.grad", x.grad.sum().item()),
            y.retains_grad,
            x.retains_grad,
        ]
    assert log["ours"] == log["torch"]


def test_hook_handles_remove_hooks():
    log = {"ours": [], "torch": []}
    for key, lib in (("ours", ra), ("torch", torch)):
        x = lib_ops.leaf(lib, [1.0, 2.0])
        y = x * 2
        handles = [
            x.register_hook(lambda g, key=key: log[key].append("leaf")),
            y.register_hook(lambda g, key=key: log[key].append("tensor")),
            y.grad_fn.register_prehook(lambda g, key=key: log[key].append("pre")),
            y.grad_fn.register_hook(lambda gi, go, key=key: log[key].append("post")),
        ]
        y.sum().backward(retain_graph=True)
        for h in handles:
            h.remove()
        y.sum().backward()
    assert log["ours"] == log["torch"] == ["tensor", "pre", "post", "leaf"]


def test_leaf_hooks_run_in_grad_and_change_what_it_returns():
    results = []
    for lib in (ra, torch):
        a = lib_ops.leaf(lib, [1.0, 2.0])
        a.register_hook(lambda g: g * 10)
        (g,) = lib_ops.grad(lib)((a * 3).sum(), a)
        results.append(g.tolist())
    assert results[0] == results[1] == [30.0, 30.0]


def test_no_grad_enable_grad_and_set_grad_enabled():
    x = ra.tensor(torch.ones(2), requires_grad=True)
    with ra.no_grad():
        y = x * 2
        with ra.enable_grad():
            z = x * 2
    assert y.grad_fn is None and not y.requires_grad and z.grad_fn is not None

    @ra.no_grad()
    def f(t):
        return t * 3

    assert f(x).grad_fn is None and ra.is_grad_enabled()
    ra.set_grad_enabled(False)
    try:
        assert (x * 2).grad_fn is None and not ra.is_grad_enabled()
    finally:
        ra.set_grad_enabled(True)
    with ra.set_grad_enabled(False):
        assert (x * 2).grad_fn is None
    assert (x * 2).grad_fn is not None


# ---------------------------------------------------------------- version counters, in place


def inplace_cases(lib):
    leaf = lambda v: lib_ops.leaf(lib, v)  # noqa: E731

    def input_saved_then_changed():
        b = leaf([1.0, 2.0, 3.0]).exp()
        c = b * b  # MulBackward0 saves b
        b.add_(1)
        c.sum().backward()

    def output_saved_then_changed():
        b = leaf([1.0, 2.0]).exp()  # ExpBackward0 saves its output
        b.mul_(2)
        b.sum().backward()

    def view_saved_then_base_changed():
        v = leaf([[1.0, 2.0], [3.0, 4.0]]) * 1
        w = v[0]
        out = (w * w).sum()
        v.add_(1)
        out.backward()

    return {
        "input saved, then changed": input_saved_then_changed,
        "output saved, then changed": output_saved_then_changed,
        "a view saved, its base changed": view_saved_then_base_changed,
        "a leaf changed": lambda: leaf([1.0]).add_(1),
        "a view of a leaf changed": lambda: leaf([[1.0, 2.0]])[0].mul_(2),
    }


@pytest.mark.parametrize("case", list(inplace_cases(torch)))
def test_in_place_errors_match_torch(case):
    same_errors(lambda lib: inplace_cases(lib)[case])


def test_in_place_ops_rebase_history_and_bump_versions():
    results = []
    for lib in (ra, torch):
        a, b = lib_ops.leaf(lib, [1.0, 2.0], F64), lib_ops.leaf(lib, [3.0, 4.0], F64)
        y = a * 1
        v = y.t()  # a view shares the version counter
        y.mul_(b)
        y.add_(b, alpha=2)
        z = b * 1
        z.zero_()
        names = [y.grad_fn.name(), z.grad_fn.name(), y._version, v._version, y.detach()._version]
        (y.sum() + z.sum()).backward()
        results.append(names + [a.grad.tolist(), b.grad.tolist()])
    assert results[0] == results[1]


def copy_slices_case(lib, make, op):
    """An in-place op on a view: the base's new grad_fn (CopySlices), the views' regenerated
    grad_fns (AsStridedBackward0, also for a view taken before), and the gradients."""
    x, w = make([1.0, -2.0, 3.0, 4.0, 0.5, 2.0]), make([0.5, -1.0])
    y = (x * 2).view(2, 3)
    before = y[:, 0]  # a view made before the change
    view = y[:, 1]  # strided: a column
    if op == "mul":
        view.mul_(w)
    elif op == "add":
        view.add_(w, alpha=3)
    else:
        view.zero_()
    names = [fn.name() for fn in (y.grad_fn, view.grad_fn, before.grad_fn)]
    edges = [type(f).__name__ if f else None for f, _ in y.grad_fn.next_functions]
    loss = (y * y).sum() + (before * 3).sum() + (view * view).sum()
    loss.backward()
    grads = [t.grad.tolist() if t.grad is not None else None for t in (x, w)]
    return names, edges, y._version, [round(v, 12) for v in y.reshape(-1).tolist()], grads


@pytest.mark.parametrize("op", ["mul", "add", "zero"])
def test_in_place_on_a_view_rebases_history_with_copy_slices(op):
    ours = copy_slices_case(ra, lambda v: ra.tensor(torch.tensor(v, dtype=F64), True), op)
    theirs = copy_slices_case(torch, lambda v: torch.tensor(v, dtype=F64, requires_grad=True), op)
    assert ours == theirs
    # y is itself a view (of x * 2): all three regenerated, on top of the root base's CopySlices
    assert ours[0] == ["AsStridedBackward0"] * 3 and ours[1] == ["CopySlices"]


def test_in_place_on_a_view_of_a_base_without_grad():
    """The base (a leaf that needs no grad) gets a history: it is no longer a leaf."""
    results = []
    for make, leaf in (
        (lambda v: ra.tensor(torch.tensor(v), requires_grad=True), lambda v: ra.tensor(v)),
        (lambda v: torch.tensor(v, requires_grad=True), torch.tensor),
    ):
        x, w = leaf(torch.zeros(3).tolist()), make([2.0, 3.0])
        x[1:].add_(w)
        (x * x).sum().backward()
        results.append((x.grad_fn.name(), x.is_leaf, w.grad.tolist()))
    assert results[0] == results[1]


def test_in_place_on_a_view_of_a_leaf_that_requires_grad_is_refused_as_torch():
    x, tx = pair(torch.ones(2, 2))
    assert raised(lambda: x[0].mul_(2)) == raised(lambda: tx[0].mul_(2))


# ---------------------------------------------------------------- custom Function


def make_cube(lib):
    class Cube(lib_ops.function(lib)):
        @staticmethod
        def forward(ctx, x, scale):
            ctx.scale = scale
            ctx.save_for_backward(x)
            return x**3 * scale

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x * x * ctx.scale, None  # None: scale is a number

    return Cube


def test_custom_function_node_is_its_ctx_and_matches_torch():
    (a, ta) = pair(torch.tensor([1.0, 2.0, 0.5], dtype=F64))
    y, ty = make_cube(ra).apply(a, 2.0), make_cube(torch).apply(ta, 2.0)
    for fn, tfn in ((y.grad_fn, ty.grad_fn),):
        assert type(fn).__name__ == type(tfn).__name__ == "CubeBackward"
        assert fn.name() == tfn.name()
        assert [type(f).__name__ for f, _ in fn.next_functions] == [
            type(f).__name__ for f, _ in tfn.next_functions
        ]
        assert fn.needs_input_grad == tfn.needs_input_grad == (True, False)
        assert fn.scale == tfn.scale == 2.0  # forward's ctx is the node
    (y * a).sum().backward()
    (ty * ta).sum().backward()
    close(a.grad, ta.grad)


def test_custom_function_double_backward():
    (a, ta) = pair(torch.tensor([1.0, 2.0, 0.5], dtype=F64))
    (g,) = ra.grad(make_cube(ra).apply(a, 2.0).sum(), a, create_graph=True)
    (tg,) = torch.autograd.grad(make_cube(torch).apply(ta, 2.0).sum(), ta, create_graph=True)
    close(ra.grad(g.sum(), a)[0], torch.autograd.grad(tg.sum(), ta)[0])


def custom_function_cases(lib):
    Function = lib_ops.function(lib)

    class TooFew(Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g

    class GradForNumber(Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g, g

    class WrongShape(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g, g[:1]

    class Cube2(Function):
        @staticmethod
        def forward(ctx, x):
            r = x**3
            ctx.save_for_backward(r)
            return r

        @staticmethod
        def backward(ctx, g):
            return g * ctx.saved_tensors[0]

    class Dirty(Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    leaf = lambda: lib_ops.leaf(lib, [1.0, 2.0])  # noqa: E731
    return {
        "too few gradients": lambda: TooFew.apply(leaf(), 3.0).sum().backward(),
        "gradient for a number": lambda: GradForNumber.apply(leaf(), 3.0).sum().backward(),
        "wrong gradient shape": lambda: WrongShape.apply(leaf(), leaf()).sum().backward(),
        "saved output changed": lambda: (
            (lambda c: (c.add_(1), c)[1])(Cube2.apply(leaf())).sum().backward()
        ),
        "dirty leaf": lambda: Dirty.apply(leaf()),
    }


@pytest.mark.parametrize("case", list(custom_function_cases(torch)))
def test_custom_function_misuse_fails_as_in_torch(case):
    same_errors(lambda lib: custom_function_cases(lib)[case])


def test_custom_function_mark_dirty_identity_and_several_outputs():
    results = []
    for lib in (ra, torch):
        Function = lib_ops.function(lib)

        class Inc(Function):
            @staticmethod
            def forward(ctx, x):
                x.add_(1)
                ctx.mark_dirty(x)
                return x

            @staticmethod
            def backward(ctx, g):
                return g * 2

        class Ident(Function):
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, g):
                return g * 3

        class Split(Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2, x * 5

            @staticmethod
            def backward(ctx, g1, g2):
                return g1 * 2 + g2 * 5

        a = lib_ops.leaf(lib, [1.0, 2.0])
        y = a * 1
        z = Inc.apply(y)
        w = Ident.apply(z)
        p, q = Split.apply(w)
        row = [
            z is y,
            w is z,
            z._version,
            w._version,
            type(z.grad_fn).__name__,
            p.grad_fn is q.grad_fn,
        ]
        p.sum().backward()  # q gets no gradient: backward sees zeros for it
        row.append(a.grad.tolist())
        results.append(row)
    assert results[0] == results[1]


# ---------------------------------------------------------------- checkpoint


def block(x):
    return ((x.exp() * x).tanh() * x).sigmoid()


def saved_shapes(hooks, fn):
    packed = []
    with hooks(lambda t: packed.append(tuple(t.shape)) or t, lambda t: t):
        out = fn()
    return out, sorted(packed)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_saves_only_its_inputs_and_gives_torchs_gradients(use_reentrant):
    a, ta = pair(torch.randn(4, 3, dtype=F64))
    calls = []

    def counted(x):
        calls.append(1)
        return block(x)

    _, plain = saved_shapes(ra.saved_tensors_hooks, lambda: block(a).sum())
    out, ours = saved_shapes(
        ra.saved_tensors_hooks, lambda: checkpoint(counted, a, use_reentrant=use_reentrant).sum()
    )
    tout, theirs = saved_shapes(
        torch.autograd.graph.saved_tensors_hooks,
        lambda: torch_checkpoint(block, ta, use_reentrant=use_reentrant).sum(),
    )
    assert ours == theirs == [(4, 3)] and len(plain) == 7
    assert ra.graph_names(out) == ra.graph_names(tout)
    out.backward()
    tout.backward()
    assert len(calls) == 2  # once in forward, once recomputed in backward
    close(a.grad, ta.grad)


def test_checkpoint_without_use_reentrant_warns_as_torch_and_refuses_kwargs():
    a, ta = pair(torch.randn(2, dtype=F64))
    messages = []
    for fn, x in ((checkpoint, a), (torch_checkpoint, ta)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn(block, x)
        messages.append([str(w.message) for w in caught])
    assert messages[0] == messages[1] and len(messages[0]) == 1
    assert raised(lambda: checkpoint(block, a, use_reentrant=True, scale=2)) == raised(
        lambda: torch_checkpoint(block, ta, use_reentrant=True, scale=2)
    )


# ---------------------------------------------------------------- anomaly mode, gradcheck


def anomaly_report(lib, build):
    detect = ra.detect_anomaly if lib is ra else torch.autograd.detect_anomaly
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with detect():
            error = raised(lambda: build(lib).backward())
    # torch's C++ warning ends with where in torch's source it was raised: not ours to copy.
    texts = [re.sub(r" \(Triggered internally at .*\)$", "", str(w.message)) for w in caught]
    return error, [text.split("\n") for text in texts]


def test_anomaly_mode_names_the_forward_op_and_its_line():
    build = lambda lib: ((lib_ops.leaf(lib, [0.0, 1.0]) * 0).log() * 0).sum()  # noqa: E731
    ours, theirs = anomaly_report(ra, build), anomaly_report(torch, build)
    nan_error = "Function 'LogBackward0' returned nan values in its 0th output."
    assert ours[0] == theirs[0] == (RuntimeError, nan_error)
    # The anomaly warning, then the forward traceback, frame for frame as torch's.
    assert ours[1] == theirs[1]
    error_detected = ours[1][1]
    assert error_detected[0] == (
        "Error detected in LogBackward0. Traceback of forward call that caused the error:"
    )
    assert "build = lambda lib" in error_detected[-2]  # the user's line that made the node


def test_anomaly_mode_on_a_version_error():
    def build(lib):
        b = lib_ops.leaf(lib, [1.0, 2.0]).exp()
        c = b * b
        b.add_(1)
        return c.sum()

    ours, theirs = anomaly_report(ra, build), anomaly_report(torch, build)
    assert ours == theirs
    assert ours[0][1].endswith("Good luck!")


def test_gradcheck():
    x = ra.tensor(torch.randn(3, 2, dtype=F64), requires_grad=True)
    assert ra.gradcheck(lambda t: (t.exp() * t).sum(1).log_softmax(0), [x])

    class Wrong(ra.Function):
        @staticmethod
        def forward(ctx, t):
            return ra.tensor(t.data * 2)

        @staticmethod
        def backward(ctx, g):
            return g * 3  # wrong on purpose: gradcheck must notice

    with pytest.raises(RuntimeError, match="Jacobian mismatch"):
        ra.gradcheck(lambda t: Wrong.apply(t), [x])
    assert not ra.gradcheck(lambda t: Wrong.apply(t), [x], raise_exception=False)


# ---------------------------------------------------------------- training steps


def model(p, ce):
    """A tiny attention block with layer norm from primitives, then an MLP head."""
    q, k, v = p["x"] @ p["wq"], p["x"] @ p["wk"], p["x"] @ p["wv"]
    att = (q @ k.transpose(1, 2) / 8**0.5).softmax(-1)
    h = att @ v + p["x"]
    mean = h.mean(-1, keepdim=True)
    h = (h - mean) / (((h - mean) ** 2).mean(-1, keepdim=True) + 1e-5) ** 0.5 * p["gamma"]
    logits = ((h @ p["w1"] + p["b1"]).relu() @ p["w2"]).reshape(10, 3)
    return ce(logits, torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0]))


def test_training_an_attention_block_and_mlp_gives_torchs_gradients_each_step():
    torch.manual_seed(5)
    shapes = dict(
        x=(2, 5, 8), wq=(8, 8), wk=(8, 8), wv=(8, 8), gamma=(8,), w1=(8, 16), b1=(16,), w2=(16, 3)
    )
    data = {k: torch.randn(s, dtype=F64) * (0.3 if k != "x" else 1) for k, s in shapes.items()}
    ours = {k: ra.tensor(v.clone(), requires_grad=k != "x") for k, v in data.items()}
    theirs = {k: v.clone().requires_grad_(k != "x") for k, v in data.items()}
    for _ in range(3):
        loss, tloss = model(ours, ra.cross_entropy), model(theirs, F.cross_entropy)
        close(loss, tloss.detach())
        loss.backward()
        tloss.backward()
        for k in data:
            if k != "x":
                close(ours[k].grad, theirs[k].grad)
                with ra.no_grad():  # an SGD step on both
                    ours[k].data -= 0.5 * ours[k].grad.data
                    ours[k].grad = None
                with torch.no_grad():
                    theirs[k] -= 0.5 * theirs[k].grad
                    theirs[k].grad = None


# ---------------------------------------------------------------- drawing


def test_make_dot_draws_torchvizs_graph_with_stable_ids():
    from torchviz import make_dot

    def drawing(dot):
        """Node labels and labelled edges, whatever the node ids."""
        labels = dict(re.findall(r'(?m)^\t(\w+) \[label=("[^"]*"|[^ \]]+)', dot.source))
        edges = re.findall(r"(?m)^\t(\w+) -> (\w+)", dot.source)
        return sorted(labels.values()), sorted((labels[a], labels[b]) for a, b in edges)

    (w, tw), (b, tb) = pair(torch.randn(4, 2, dtype=F64)), pair(torch.randn(2, dtype=F64))
    x = torch.randn(3, 4, dtype=F64)
    loss = ((ra.tensor(x) @ w + b).tanh() * (ra.tensor(x) @ w)).sum()
    tloss = ((x @ tw + tb).tanh() * (x @ tw)).sum()
    ours = ra.make_dot(loss, params={"w": w, "b": b})
    assert drawing(ours) == drawing(make_dot(tloss, params={"w": tw, "b": tb}))
    assert ours.source == ra.make_dot(loss, params={"w": w, "b": b}).source
    assert '"w\n (4, 2)"' in ours.source


# ---------------------------------------------------------------- errors, as torch raises them


def error_cases(lib):
    leaf = lambda v=(1.0, 2.0): lib_ops.leaf(lib, list(v))  # noqa: E731
    grad = lib_ops.grad(lib)

    def second_backward():
        y = (leaf() * leaf()).sum()
        y.backward()
        y.backward()

    return {
        "second backward": second_backward,
        "non-scalar": lambda: (leaf() * 2).backward(),
        "no grad_fn": lambda: (leaf().detach() * 2).sum().backward(),
        "unused input": lambda: (lambda a, b: grad((a * 2).sum(), [a, b]))(
            leaf([1.0]), leaf([2.0])
        ),
        "input needs no grad": lambda: grad((leaf() * 2).sum(), [leaf().detach()]),
        "grad_output shape": lambda: (leaf() * 2).backward(
            (torch.ones(3) if lib is torch else ra.tensor(torch.ones(3)))
        ),
        "gradient count": lambda: (ra.backward if lib is ra else torch.autograd.backward)(
            [leaf().sum(), leaf().sum()], [None]
        ),
        "empty inputs": lambda: (leaf() * 2).sum().backward(inputs=[]),
        "requires_grad_ on non-leaf": lambda: (leaf() * 2).requires_grad_(False),
        "hook without grad": lambda: leaf().detach().register_hook(lambda g: g),
        "retain_grad without grad": lambda: leaf().detach().retain_grad(),
        "hook changes size": lambda: (
            lambda y: (y.register_hook(lambda g: g[:1]), y.sum().backward())
        )(leaf() * 2),
    }


@pytest.mark.parametrize("case", list(error_cases(torch)))
def test_errors_match_torch_type_and_message(case):
    same_errors(lambda lib: error_cases(lib)[case])


def test_trace_backward_records_each_pop_and_matches_torchs_order():
    """The engine's step hook sees the ready queue ordered by sequence number (AccumulateGrad
    first) and the dependency counts; the order it records is the one torch runs."""
    from retorch.autograd.graphviz import node_labels, torch_order, trace_backward

    def expression(a, b):
        r = a.exp() * b.sigmoid()
        return (b.tanh() + r).sum()

    (a, ta), (b, tb) = pair(torch.randn(3, dtype=F64)), pair(torch.randn(3, dtype=F64))
    y, ty = expression(a, b), expression(ta, tb)
    labels = node_labels(y, {"a": a, "b": b})
    steps = trace_backward(y, {"a": a, "b": b})
    assert [s.runs for s in steps] == torch_order(ty, y, labels)
    assert [s.runs for s in steps] == [
        "Sum#5", "Add#4", "Tanh#3", "Mul#2", "Sigmoid#1", "Acc(b)", "Exp#0", "Acc(a)"
    ]  # fmt: skip
    assert steps[2].ready == ["Mul#2"]  # Tanh (input 0, created later) before Mul (input 1)
    assert steps[5].ready == ["Exp#0"]  # Acc(b) became ready after Exp and runs before it
    assert steps[0].waiting["Acc(b)"] == 2 and steps[3].waiting["Acc(b)"] == 1
    close(a.grad, ta.grad)
    close(b.grad, tb.grad)


def test_a_view_follows_its_base_changed_in_place():
    """A view taken before its base changed in place regenerates its grad_fn on top of the
    base's new history, as torch's VariableHooks::grad_fn does."""
    results = []
    data = torch.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=F64)
    for x in pair(data):
        y = x * 1
        row = y[1]
        y.mul_(3).add_(x)  # the base changes; the row sees the new values and history
        loss = (row * row).sum() + y.sum()
        name = row.grad_fn.name()
        loss.backward()
        results.append((name, x.grad.tolist()))
    assert results[0] == results[1]


# ---------------------------------------------------------------- inference mode


def inference_mode_behaviour(lib, make, inference_mode):
    """What inference mode makes, and what may and may not be done with it afterwards."""
    w = make([1.0, 2.0, 3.0])
    with inference_mode():
        i = w * 2
        inside = (i.is_inference(), i.requires_grad, lib.is_grad_enabled())
        i.add_(1)  # allowed inside
        view = i[1:]
        made = lib.tensor([1.0]) if lib is ra else torch.tensor([1.0])
    outcomes = [inside, view.is_inference(), made.is_inference(), i.detach().is_inference()]
    for attempt in (lambda: i._version, lambda: i.add_(1), lambda: view.mul_(2),
                    lambda: i.requires_grad_(), lambda: (w * i).sum().backward()):  # fmt: skip
        try:
            attempt()
            outcomes.append("ok")
        except RuntimeError as e:
            outcomes.append(str(e))
    (w + i).sum().backward()  # nothing of i is saved: allowed
    outcomes.append(w.grad.tolist())
    with lib.no_grad():
        n = w * 2
    outcomes.append((n.is_inference(), n._version))
    return outcomes


def test_inference_mode_as_torch():
    ours = inference_mode_behaviour(
        ra, lambda v: ra.tensor(torch.tensor(v), requires_grad=True), ra.inference_mode
    )
    theirs = inference_mode_behaviour(
        torch, lambda v: torch.tensor(v, requires_grad=True), torch.inference_mode
    )
    assert ours == theirs
    assert not ra.is_inference_mode_enabled() and ra.is_grad_enabled()


def test_expanded_view_of_a_base_changed_in_place_accumulates_as_torch():
    """The view's regenerated AsStridedBackward0 has an overlapping geometry (stride 0): each
    base element's gradient is the sum over the view elements reading it, as torch's
    as_strided_backward (a copy would keep one of them, and torch refuses it)."""
    x0 = torch.randn(3, 3, dtype=torch.float64)
    grads = []
    for lib in (ra, torch):
        x = ra.tensor(x0, requires_grad=True) if lib is ra else x0.clone().requires_grad_()
        base = x * 2
        view = base.expand(2, 3, 3)
        base.add_(1)  # the view's history is regenerated from its base's new one
        (view * torch.arange(18.0, dtype=torch.float64).view(2, 3, 3)).sum().backward()
        grads.append(x.grad.data if lib is ra else x.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("linear", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("backend", ["chapter 3 (torch arrays)", "chapter 5 (retorch.Tensor)"])
def test_accumulate_grad_obeys_the_layout_contract_as_torch(layout, backend, linear):
    """A leaf's first .grad is laid out as the leaf (clone_obey_contract): a transposed
    gradient (mm's formula for a Linear weight) is stored with the weight's strides; a leaf
    that is not dense gets a row-major gradient."""
    import numpy as np

    base = torch.arange(24.0, dtype=torch.float64).reshape(4, 6)
    leaf_t = {"contiguous": base[:, :3].contiguous(), "transposed": base.t().contiguous().t(),
              "strided": base[:, ::2]}[layout].clone(memory_format=torch.preserve_format)  # fmt: skip
    if layout == "strided":
        leaf_t = base[:, ::2]
    leaf_t = leaf_t.detach().requires_grad_(True)
    x = torch.ones(5, leaf_t.shape[1 if linear else 0], dtype=torch.float64)

    def use(x, w):  # as a Linear uses its weight (x @ w.t()), or as a matmul's right side
        return (x @ w.t()) if linear else (x @ w)

    use(x, leaf_t).t().sum().backward()
    if backend.startswith("chapter 3"):
        leaf = ra.Tensor(leaf_t.detach(), requires_grad=True)
        use(ra.Tensor(x), leaf).t().sum().backward()
        strides, values = leaf.grad.data.stride(), leaf.grad.data.numpy()
    else:
        from retorch.dispatch import Tensor
        from retorch.tensor import from_numpy

        arr = np.lib.stride_tricks.as_strided(
            base.numpy(), leaf_t.shape, [s * 8 for s in leaf_t.stride()]
        ).copy(order="K") if layout != "strided" else base.numpy()[:, ::2]  # fmt: skip
        leaf = Tensor(from_numpy(arr), requires_grad=True)
        assert leaf.data.stride() == leaf_t.stride()
        use(Tensor(from_numpy(x.numpy())), leaf).t().sum().backward()
        strides, values = leaf.grad.data.stride(), leaf.grad.data.numpy()
    assert tuple(strides) == leaf_t.grad.stride(), (layout, backend)
    assert (values == leaf_t.grad.numpy()).all()


@pytest.mark.parametrize("mat2_layout", ["row-major", "column-major"])
@pytest.mark.parametrize("mat1_layout", ["row-major", "column-major"])
@pytest.mark.parametrize("backend", ["chapter 3 (torch arrays)", "chapter 5 (retorch.Tensor)"])
def test_mm_backward_lays_out_gradients_as_torch(mat1_layout, mat2_layout, backend):
    """mm_mat1_backward / mm_mat2_backward: a column-major input (``w.t()`` of a row-major
    ``w``) gets a column-major gradient, computed as ``(g.t() @ x).t()``."""
    import numpy as np

    rng = np.random.default_rng(3)

    def laid_out(shape, layout):  # (numpy values, torch leaf, the mm input: a view of it)
        base = rng.standard_normal(shape if layout == "row-major" else shape[::-1])
        leaf = torch.from_numpy(base.copy()).requires_grad_(True)
        return base, leaf, (leaf if layout == "row-major" else leaf.t())

    (b1, _, x1), (b2, _, x2) = laid_out((5, 3), mat1_layout), laid_out((3, 4), mat2_layout)
    g = rng.standard_normal((5, 4))
    expected = torch.autograd.grad(x1.mm(x2), (x1, x2), torch.from_numpy(g))
    if backend.startswith("chapter 3"):
        make, wrap, grad = (lambda b: ra.Tensor(torch.from_numpy(b.copy()), requires_grad=True),
                            lambda b: ra.Tensor(torch.from_numpy(b)), ra.grad)  # fmt: skip
    else:
        from retorch.autograd.backend import array_backend
        from retorch.dispatch import Tensor
        from retorch.tensor import from_numpy

        def grad(*args):  # (what retorch.Tensor.backward does around the engine)
            with array_backend("retorch"):
                return ra.grad(*args)

        make = lambda b: Tensor(from_numpy(b.copy()), requires_grad=True)  # noqa: E731
        wrap = lambda b: Tensor(from_numpy(b))  # noqa: E731
    views = []
    for base, layout in ((b1, mat1_layout), (b2, mat2_layout)):
        leaf = make(base)
        views.append(leaf if layout == "row-major" else leaf.t())
    got = grad(views[0].mm(views[1]), views, wrap(g))
    for ours, theirs in zip(got, expected):
        assert tuple(ours.data.stride()) == theirs.stride(), (mat1_layout, mat2_layout)
        # exact on torch's arrays; retorch's matmul adds in its own order (1e-12 in float64)
        tol = 0 if backend.startswith("chapter 3") else 1e-12
        np.testing.assert_allclose(np.asarray(ours.data.numpy()), theirs.numpy(), 0, tol)

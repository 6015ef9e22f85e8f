"""retorch.autograd against torch.autograd: gradients, graphs, order, hooks and errors."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import retorch.autograd as ra
from retorch.utils.checkpoint import checkpoint

F64 = torch.float64


def pair(data, requires_grad=True):
    """The same leaf in both libraries."""
    return ra.tensor(data.clone(), requires_grad=requires_grad), data.clone().requires_grad_(
        requires_grad
    )


def torch_names(t):
    out, seen, stack = [], set(), [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        out.append(type(fn).__name__)
        stack.extend(f for f, _ in reversed(fn.next_functions) if f is not None)
    return out


def close(a, b):
    torch.testing.assert_close(a.data if isinstance(a, ra.Tensor) else a, b, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- every op, with broadcasting

UNARY = {
    "exp": lambda x: x.exp(),
    "log": lambda x: (x * x + 1).log(),
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(),
    "relu": lambda x: x.relu(),
    "neg": lambda x: -x,
    "pow": lambda x: x**3,
    "rpow_div": lambda x: 2 / (x * x + 1),
    "rsub": lambda x: 1 - x,
    "sum": lambda x: x.sum(),
    "sum1": lambda x: x.sum(1),
    "sum_keep": lambda x: x.sum(0, keepdim=True),
    "mean": lambda x: x.mean(),
    "mean1": lambda x: x.mean(1),
    "max": lambda x: x.max(),
    "max1": lambda x: x.max(1)[0],
    "reshape": lambda x: x.reshape(12),
    "t_reshape": lambda x: x.t().reshape(12),
    "view": lambda x: x.view(4, 3),
    "transpose": lambda x: x.transpose(0, 1),
    "permute": lambda x: x.permute(1, 0),
    "unsqueeze": lambda x: x.unsqueeze(1),
    "squeeze": lambda x: x.unsqueeze(0).squeeze(0),
    "squeeze_all": lambda x: x.unsqueeze(0).squeeze(),
    "expand": lambda x: x[0].expand(5, 4),
    "select": lambda x: x[1],
    "slice": lambda x: x[:, 1:3],
    "select2": lambda x: x[0, 2],
    "row_slice": lambda x: x[1:2],
    "softmax": lambda x: x.softmax(1),
    "log_softmax": lambda x: x.log_softmax(0),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_ops_match_torch(name):
    torch.manual_seed(0)
    ours, theirs = pair(torch.randn(3, 4, dtype=F64))
    y, ty = UNARY[name](ours), UNARY[name](theirs)
    assert ra.graph_names(y) == torch_names(ty)
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
}
SHAPES = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((3, 1), (1, 4)),
    ((2, 3, 4), (3, 1)),
    ((4,), (2, 1, 4)),
]


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("shapes", SHAPES)
def test_binary_ops_reduce_gradients_to_each_inputs_shape(name, shapes):
    torch.manual_seed(1)
    (a, ta), (b, tb) = (
        pair(torch.randn(shapes[0], dtype=F64)),
        pair(torch.randn(shapes[1], dtype=F64)),
    )
    BINARY[name](a, b).sum().backward()
    BINARY[name](ta, tb).sum().backward()
    close(a.grad, ta.grad)
    close(b.grad, tb.grad)


@pytest.mark.parametrize(
    "shapes",
    [
        ((3, 4), (4, 5)),
        ((3, 4), (4,)),
        ((4,), (4,)),
        ((2, 3, 4), (4, 5)),
        ((2, 3, 4), (2, 4, 5)),
        ((2, 2, 3, 4), (2, 2, 4, 3)),
    ],
)
def test_matmul_variants(shapes):
    torch.manual_seed(2)
    (a, ta), (b, tb) = (
        pair(torch.randn(shapes[0], dtype=F64)),
        pair(torch.randn(shapes[1], dtype=F64)),
    )
    y, ty = a @ b, ta @ tb
    if len(shapes[0]) <= 3 and len(shapes[1]) <= 2:
        assert ra.graph_names(y)[0] == torch_names(ty)[0]
    y.sum().backward()
    ty.sum().backward()
    close(a.grad, ta.grad)
    close(b.grad, tb.grad)


def test_cross_entropy_and_index():
    torch.manual_seed(3)
    (x, tx) = pair(torch.randn(5, 4, dtype=F64))
    target = torch.tensor([0, 3, 1, 1, 2])
    y = ra.cross_entropy(x[ra.tensor(torch.tensor([4, 0, 1, 1, 2]))], target)
    ty = torch.nn.functional.cross_entropy(tx[torch.tensor([4, 0, 1, 1, 2])], target)
    close(y, ty)
    assert ra.graph_names(y) == torch_names(ty)
    y.backward()
    ty.backward()
    close(x.grad, tx.grad)


# ---------------------------------------------------------------- random expression graphs

OPS = [
    "add",
    "sub",
    "mul",
    "div",
    "tanh",
    "exp",
    "sigmoid",
    "sum_keep",
    "mean_keep",
    "transpose_back",
    "relu",
]


@st.composite
def programs(draw):
    """A random straight-line program over a pool of leaves; values are reused (shared subexpressions)."""
    shapes = draw(st.lists(st.sampled_from([(3, 4), (1, 4), (3, 1), (4,)]), min_size=2, max_size=4))
    steps = draw(
        st.lists(
            st.tuples(st.sampled_from(OPS), st.integers(0, 100), st.integers(0, 100)),
            min_size=1,
            max_size=12,
        )
    )
    return shapes, steps


def run_program(values, steps):
    values = list(values)
    for op, i, j in steps:
        a, b = values[i % len(values)], values[j % len(values)]
        if op == "add":
            out = a + b
        elif op == "sub":
            out = a - b
        elif op == "mul":
            out = a * b
        elif op == "div":
            out = a / (b * b + 1)
        elif op == "tanh":
            out = a.tanh()
        elif op == "exp":
            out = (a * 0.1).exp()
        elif op == "sigmoid":
            out = a.sigmoid()
        elif op == "relu":
            out = a.relu()
        elif op == "sum_keep":
            out = a.sum(-1, keepdim=True)
        elif op == "mean_keep":
            out = a.mean(0, keepdim=True) if a.dim() == 2 else a.mean(0, keepdim=True)
        else:
            out = a.transpose(0, 1).transpose(0, 1) if a.dim() == 2 else a * 1.5
        values.append(out)
    return values[-1], values


@given(programs(), st.integers(0, 2**16), st.booleans())
def test_random_graphs_match_torch(program, seed, use_grad_outputs):
    shapes, steps = program
    torch.manual_seed(seed)
    leaves = [pair(torch.randn(s, dtype=F64)) for s in shapes]
    ours, our_values = run_program([a for a, _ in leaves], steps)
    theirs, _ = run_program([b for _, b in leaves], steps)
    assert ra.graph_names(ours) == torch_names(theirs) if theirs.grad_fn is not None else True
    if theirs.grad_fn is None:
        return
    if use_grad_outputs:  # a non-scalar output with explicit grad_outputs
        g = torch.randn(theirs.shape, dtype=F64)
        got = ra.grad(ours, [a for a, _ in leaves], ra.tensor(g), allow_unused=True)
        want = torch.autograd.grad(theirs, [b for _, b in leaves], g, allow_unused=True)
    else:
        got = ra.grad(ours.sum(), [a for a, _ in leaves], allow_unused=True)
        want = torch.autograd.grad(theirs.sum(), [b for _, b in leaves], allow_unused=True)
    for x, y in zip(got, want):
        assert (x is None) == (y is None)
        if y is not None:
            close(x, y)


@given(st.sampled_from(["x**3", "tanh", "exp*x", "sigmoid", "softmax", "div"]), st.integers(0, 999))
def test_double_backward_matches_torch(expr, seed):
    fns = {
        "x**3": lambda x: (x**3).sum(),
        "tanh": lambda x: x.tanh().sum(),
        "exp*x": lambda x: (x.exp() * x).sum(),
        "sigmoid": lambda x: (x.sigmoid() * x).sum(),
        "softmax": lambda x: (x.softmax(0) * x).sum(),
        "div": lambda x: (1 / (x * x + 1)).sum(),
    }
    torch.manual_seed(seed)
    x, tx = pair(torch.randn(5, dtype=F64))
    (g,) = ra.grad(fns[expr](x), x, create_graph=True)
    (tg,) = torch.autograd.grad(fns[expr](tx), tx, create_graph=True)
    close(g, tg)
    (g2,) = ra.grad((g * g).sum(), x)
    (tg2,) = torch.autograd.grad((tg * tg).sum(), tx)
    close(g2, tg2)


# ---------------------------------------------------------------- engine behaviour


def test_execution_order_matches_torch():
    torch.manual_seed(4)
    for build in [
        lambda a: ((a.exp() * a + a.exp()).tanh() * a).sum(),
        lambda a: (a @ a.t()).relu().sum() + a.sigmoid().mean(),
        lambda a: (
            ra.cross_entropy(a, torch.tensor([0, 1, 2]))
            if isinstance(a, ra.Tensor)
            else torch.nn.functional.cross_entropy(a, torch.tensor([0, 1, 2]))
        ),
    ]:
        a, ta = pair(torch.randn(3, 4, dtype=F64))
        ours, theirs = ra.backward_order(build(a), build(ta))
        assert ours == theirs


def test_accumulation_and_retain_graph():
    a, ta = pair(torch.tensor([1.0, 2.0], dtype=F64))
    for x in (a, ta):
        y = (x * x).sum()
        y.backward(retain_graph=True)
        y.backward()
    close(a.grad, ta.grad)


def test_hooks_retain_grad_and_node_hooks():
    log = {"ours": [], "torch": []}
    for key, (x, _) in {
        "ours": (ra.tensor(torch.ones(3, dtype=F64), requires_grad=True), True),
        "torch": (torch.ones(3, dtype=F64, requires_grad=True), False),
    }.items():
        y = x * 2
        y.retain_grad()
        y.register_hook(lambda g: g * 10)  # replaces the gradient flowing on
        x.register_hook(lambda g, key=key: log[key].append(("leaf hook", g.sum().item())))
        z = (y * y).sum()
        z.grad_fn.register_prehook(lambda grads, key=key: log[key].append(("pre", len(grads))))
        z.grad_fn.register_hook(lambda gi, go, key=key: log[key].append(("post", len(gi))))
        z.backward()
        log[key].append(("y.grad", y.grad.sum().item()))
        log[key].append(("x.grad", x.grad.sum().item()))
    assert log["ours"] == log["torch"]


def test_no_grad_and_enable_grad():
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


def test_custom_function_matches_torch():
    class Cube(ra.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return ra.tensor(x.data**3)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x * x

    class TCube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x * x

    a, ta = pair(torch.tensor([1.0, -2.0, 0.5], dtype=F64))
    y, ty = Cube.apply(a), TCube.apply(ta)
    assert (
        y.grad_fn.name() == type(ty.grad_fn).__name__ == "CubeBackward"
        or y.grad_fn.name() == "CubeBackward"
    )
    (y * a).sum().backward()
    (ty * ta).sum().backward()
    close(a.grad, ta.grad)


def test_checkpoint_same_gradients_fewer_saved_tensors():
    def block(x):
        return ((x.exp() * x).tanh() * x).sigmoid()

    def saved_count(t):
        count, seen, stack = 0, set(), [t.grad_fn]
        while stack:
            fn = stack.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            count += sum(
                isinstance(v, ra.SavedVariable) for v in getattr(fn, "__dict__", {}).values()
            )
            stack.extend(e.function for e in fn.next_functions if e is not None)
        return count

    a, ta = pair(torch.randn(4, 3, dtype=F64))
    plain = block(a).sum()
    checked = checkpoint(block, a).sum()
    assert saved_count(checked) < saved_count(plain)
    checked.backward()
    torch.utils.checkpoint.checkpoint(block, ta, use_reentrant=False).sum().backward()
    close(a.grad, ta.grad)


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


def test_mlp_and_attention_gradients_equal_torch():
    torch.manual_seed(5)
    data = {
        k: torch.randn(s, dtype=F64)
        for k, s in dict(
            x=(2, 5, 8), wq=(8, 8), wk=(8, 8), wv=(8, 8), w1=(8, 16), w2=(16, 3)
        ).items()
    }
    ours = {k: ra.tensor(v.clone(), requires_grad=k != "x") for k, v in data.items()}
    theirs = {k: v.clone().requires_grad_(k != "x") for k, v in data.items()}

    def model(p, ce):
        q, k, v = p["x"] @ p["wq"], p["x"] @ p["wk"], p["x"] @ p["wv"]
        att = (q @ k.transpose(1, 2) / 8**0.5).softmax(-1)
        h = att @ v
        mean = h.mean(-1, keepdim=True)
        h = (h - mean) / (
            ((h - mean) ** 2).mean(-1, keepdim=True) + 1e-5
        ) ** 0.5  # layer norm from primitives
        logits = ((h @ p["w1"]).relu() @ p["w2"]).reshape(10, 3)
        return ce(logits, torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0]))

    model(ours, ra.cross_entropy).backward()
    model(theirs, torch.nn.functional.cross_entropy).backward()
    for k in data:
        if k != "x":
            close(ours[k].grad, theirs[k].grad)


# ---------------------------------------------------------------- errors, as torch raises them


def _errors(lib_tensor, grad_fn, backward_fn):
    cases = []

    def second_backward():
        a = lib_tensor([1.0, 2.0])
        y = (a * a).sum()
        backward_fn(y)
        backward_fn(y)

    def non_scalar():
        backward_fn(lib_tensor([1.0, 2.0]) * 2)

    def no_grad_root():
        backward_fn((lib_tensor([1.0, 2.0]).detach() * 2).sum())

    def unused():
        a, b = lib_tensor([1.0]), lib_tensor([2.0])
        grad_fn((a * 2).sum(), [a, b])

    def inplace_saved():
        a = lib_tensor([1.0, 2.0, 3.0])
        b = a.exp()
        c = b * b
        b.add_(1)
        backward_fn(c.sum())

    def inplace_leaf():
        lib_tensor([1.0]).add_(1)

    for case in (second_backward, non_scalar, no_grad_root, unused, inplace_saved, inplace_leaf):
        with pytest.raises(Exception) as info:
            case()
        cases.append((type(info.value), str(info.value)))
    return cases


def test_errors_match_torch_type_and_message():
    ours = _errors(
        lambda v: ra.tensor(torch.tensor(v), requires_grad=True), ra.grad, lambda t: t.backward()
    )
    theirs = _errors(
        lambda v: torch.tensor(v, requires_grad=True), torch.autograd.grad, lambda t: t.backward()
    )
    assert ours == theirs


def test_anomaly_mode_names_the_forward_op():
    messages = []
    for lib_tensor, detect in [
        (lambda v: ra.tensor(torch.tensor(v), requires_grad=True), ra.detect_anomaly),
        (lambda v: torch.tensor(v, requires_grad=True), torch.autograd.detect_anomaly),
    ]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with detect():
                x = lib_tensor([0.0, 1.0])
                with pytest.raises(RuntimeError) as info:
                    ((x * 0).log() * 0).sum().backward()
        messages.append(
            (
                str(info.value),
                any("Error detected in LogBackward0" in str(w.message) for w in caught),
            )
        )
    assert (
        messages[0]
        == messages[1]
        == ("Function 'LogBackward0' returned nan values in its 0th output.", True)
    )

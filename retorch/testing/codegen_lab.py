"""The graded checks of lab 6b (codegen), kept off the student's page.

Each ``check_*`` takes the ``grading`` comparison object and the student's code, runs it on
inputs where the usual mistakes give a different answer, and compares with torch (or, where
torch has no counterpart, with the rebuild's own rule, said so in the comparison's text):

1. ``check_fits``: the scheduler's shape rule, plugged into retorch.inductor; outputs against
   eager torch on two input shapes (the second is not the one the lab prints), the number of
   kernels against Inductor's on the first and against the reference rule's on the second.
2. ``check_relu``: the ops-handler method, compiled into graphs that use ``relu``; bit for bit
   against eager torch on floats with NaN and signed zeros, on int64 (including values beyond
   2**53, which a float anywhere in the expression rounds), with the output's dtype.
3. ``check_saved``: the tensors ``default_partition`` saves, against torch's, on functions
   with inputs that need no gradient, several outputs, an op with several results, views.
4. ``check_backend``: a counting AOTAutograd backend, against torch's aten graphs, with a graph
   break, keyword arguments in the aten graph, and an input that needs no gradient.
"""

from __future__ import annotations

import collections
import re

import torch
import torch.nn.functional as F
from functorch.compile import aot_function, make_boxed_func
from torch._functorch.partitioners import default_partition
from torch.fx.experimental.proxy_tensor import make_fx

import retorch.inductor as ri
from retorch.inductor import scheduler
from retorch.inductor.codegen import common, cpp
from retorch.inductor.decomposition import select_decomp_table

# -- exercise 1: the fusion rule -----------------------------------------------------------

FUSION_CASES = {
    "gelu": lambda x: 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x**3))),
    "softmax": lambda x: torch.softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],)),
    "x - row mean": lambda x: x - x.mean(-1, keepdim=True),
    "x / row norm": lambda x: x / x.square().sum(-1, keepdim=True).sqrt(),
    "two row sums": lambda x: x.sum(-1) + x.exp().sum(-1),
    "column sum of exp(x) + 1": lambda x: (x.exp() + 1).sum(0),
}
# Where Inductor fuses more than the rebuild can (one kernel for row and column loops), and
# where loops alike in rank, size or start differ, only the outputs are compared with torch: a
# rule that fuses too much computes wrong values there.
VALUES_ONLY = {
    "row sums + column sums": lambda x: x.exp().sum(-1, keepdim=True) + x.sum(0, keepdim=True),
    "softmax over columns": lambda x: torch.softmax(x, 0),
    "row sum + sum of 4 blocks of columns":
        lambda x: x.sum(-1) + x.reshape(x.shape[0], 4, -1).sum((1, 2)),
    "row sums over half the columns and over all":
        lambda x: x[:, : x.shape[1] // 2].exp().sum(-1) + x.sum(-1),
    "row sums over the rows and over pairs of rows":
        lambda x: x.sum(-1) + x.exp().reshape(x.shape[0] // 2, 2, -1).sum(-1).reshape(-1),
    "a (rows, 2, columns / 2) view minus its row mean":
        lambda x: x.reshape(x.shape[0], 2, -1) - x.mean(-1).reshape(-1, 1, 1),
    "x plus its transpose (square)": lambda x: x[:, : x.shape[0]] + x[:, : x.shape[0]].t().exp(),
    "x / the sum of all of x": lambda x: x / x.exp().sum(),
    "two outputs, the second over the transpose": lambda x: (x.exp() * 2, x.t().tanh() * 3),
}  # fmt: skip

FUSION_X = torch.randn(64, 128, generator=torch.Generator().manual_seed(0))  # the lab's input
OTHER_X = torch.randn(48, 96, generator=torch.Generator().manual_seed(1))  # not printed


def inductor_kernel_count(fn, x) -> int:
    """How many C++ kernels torch's Inductor generates for fn(x)."""
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with inductor_config.patch(fx_graph_cache=False):
        _, (code,) = run_and_get_code(torch.compile(fn), x)
    return len(set(re.findall(r"(cpp_fused_\w+) = async_compile", code)))


def inductor_kernel_counts() -> dict:
    return {what: inductor_kernel_count(fn, FUSION_X) for what, fn in FUSION_CASES.items()}


def _compile_all(cmp, x, hint, check_values=True) -> dict:
    """Compile every case on ``x`` with the rule now in the scheduler: {case: kernel count}."""
    counts = {}
    for what, fn in {**FUSION_CASES, **VALUES_ONLY}.items():
        ri.reset()
        torch._dynamo.reset()
        label = f"{what} on a {tuple(x.shape)} input"
        out = cmp.call(lambda: torch.compile(fn, backend=ri.compile_fx, dynamic=False)(x),
                       f"{label}: compiling with your rule ran", hint)  # fmt: skip
        if check_values:
            want = fn(x)
            for i, (o, w) in enumerate(
                zip(*((t if isinstance(t, tuple) else (t,)) for t in (out, want)), strict=True)
            ):
                cmp.close(o, w, f"{label}: the compiled output {i}", hint, rtol=1e-4, atol=1e-4)
        counts[what] = len(ri.last_compile().kernels)
    return counts


_REFERENCE: dict = {}


def check_fits(cmp, fits, inductor_kernels: dict):
    hint = ("a reduction fits only a kernel with the same outer and inner loops (the same "
            "sizes, not only as many dims or elements, and the same rows); a pointwise "
            "buffer fits when its loops are exactly kernel.outer + kernel.inner (one value per "
            "element) or kernel.outer (one value per row), not any loops that start with "
            "kernel.outer, and not sizes taken from the example")  # fmt: skip
    original = scheduler.FusedKernel.fits
    if not _REFERENCE:  # the scheduler's own rule, once per process
        _REFERENCE.update(_compile_all(cmp, OTHER_X, hint, check_values=False))
    reference = dict(_REFERENCE)
    scheduler.FusedKernel.fits = lambda kernel, node: fits(kernel, node)
    try:
        probe = make_fx(FUSION_CASES["softmax"], decomposition_table=select_decomp_table())(
            FUSION_X)  # an aten graph, no Dynamo  # fmt: skip
        cmp.call(lambda: ri.compile_graph(probe, [FUSION_X], record=False),
                 "compiling softmax's aten graph with your rule ran", hint)  # fmt: skip
        counts = _compile_all(cmp, FUSION_X, hint)
        for what, n in inductor_kernels.items():
            cmp.equal(counts[what], n, f"{what}: number of kernels (Inductor's count)", hint)
        counts = _compile_all(cmp, OTHER_X, hint)
        for what in counts:
            cmp.equal(counts[what], reference[what],
                      f"{what} on a (48, 96) input: number of kernels (the scheduler's own rule)",
                      hint)  # fmt: skip
    finally:
        scheduler.FusedKernel.fits = original


# -- exercise 2: code for one op -----------------------------------------------------------

FLOATS, INTS, BIG_INTS = "float32 with NaN and -0.0", "int64", "int64 beyond 2**53"
RELU_CASES = {  # what: (fn, the inputs it runs on)
    "relu(x)": (lambda x: torch.relu(x), (FLOATS, INTS, BIG_INTS)),
    "relu(x) * 2 + x": (lambda x: torch.relu(x) * 2 + x, (FLOATS, INTS)),
    "relu(x - 1).sum(-1)": (lambda x: torch.relu(x - 1).sum(-1), (FLOATS,)),
    # int64 cubes up to 2000 ** 3 need more bits than float32 has: a relu whose result is
    # declared float32 has its cube rounded through float32.
    "relu(x) ** 3": (lambda x: torch.relu(x) ** 3, (INTS,)),
    # 2**53 + 1 and its neighbours are not floats: a float anywhere rounds them, and squares
    # up to 9e18 need int64's 63 bits where float64 has 53.
    "relu(x) + 1": (lambda x: torch.relu(x) + 1, (BIG_INTS,)),
    "relu(x) ** 2": (lambda x: torch.relu(x) ** 2, (BIG_INTS,)),
}


def relu_inputs() -> dict:
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([float("nan"), -0.0, 0.0, -1.5, 2.5, float("-inf")])
    floats = torch.cat([special, torch.randn(250, generator=g)]).reshape(16, 16)
    ints = torch.randint(-2000, 2000, (16, 16), generator=g)
    big = 2**53 + torch.randint(-64, 64, (8, 8), generator=g)
    big = torch.cat([big, torch.randint(-3 * 10**9, 3 * 10**9, (8, 8), generator=g)])
    return {FLOATS: floats, INTS: ints, BIG_INTS: big * torch.where(big % 3 == 0, -1, 1)}


def _bitwise_equal(out, want) -> bool:
    if out.dtype != want.dtype or out.shape != want.shape:
        return False
    if not want.is_floating_point():
        return torch.equal(out, want)
    return (torch.equal(out.isnan(), want.isnan())
            and torch.equal(torch.nan_to_num(out), torch.nan_to_num(want))
            and torch.equal(torch.signbit(out), torch.signbit(want)))  # fmt: skip


def check_relu(cmp, lab_ops):
    hint = ("emit one expression through self.emit(..., x.dtype): zero (a constant of x's "
            "dtype, made by self.constant) where x < 0, else x itself, so NaN and -0.0 pass "
            "through unchanged and an int64 stays an int64 (no float literal, no float cast); "
            "the result's dtype is x.dtype, never a fixed one")  # fmt: skip
    original, inherited = cpp.CppKernel.ops_handler, common.KernelOps.relu
    cpp.CppKernel.ops_handler = lambda self, *args, **kw: lab_ops(self, *args, **kw)
    del common.KernelOps.relu  # the student's relu must stand on its own
    try:
        x = relu_inputs()[FLOATS]
        cmp.call(lambda: ri.compile_graph(make_fx(torch.relu)(x), [x], record=False),
                 "compiling relu's aten graph with your relu ran", hint)  # fmt: skip
        for what, (fn, kinds) in RELU_CASES.items():
            for kind, x in relu_inputs().items():
                if kind not in kinds:
                    continue
                torch._dynamo.reset()
                out = cmp.call(
                    lambda: torch.compile(fn, backend=ri.compile_fx)(x),
                    f"{what} on {kind}: compiling with your relu ran",
                    hint,
                )
                cmp.equal(
                    _bitwise_equal(out, fn(x)),
                    True,
                    f"{what} on {kind}: equal to torch bit for bit, dtype included",
                    hint,
                )
    finally:
        cpp.CppKernel.ops_handler, common.KernelOps.relu = original, inherited


# -- exercise 3: what the backward reads ---------------------------------------------------


def joint_graph_of(fn, *args):
    """torch's joint graph of ``fn`` on ``args``, and the names its default_partition saves."""
    seen = {}

    def partition(joint, joint_inputs, **kw):
        fw, bw = default_partition(joint, joint_inputs, **kw)
        seen["joint"], seen["saved"] = joint, [
            n.name for n in bw.graph.find_nodes(op="placeholder")
            if not n.name.startswith("tangents")]  # fmt: skip
        return fw, bw

    aot_function(fn, lambda gm, ex: make_boxed_func(gm.forward), partition_fn=partition)(*args)
    return seen["joint"], seen["saved"]


def gelu_pow(x):
    return 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x**3)))


def saved_cases() -> dict:
    g = torch.Generator().manual_seed(0)

    def r(*s, grad=True):
        return torch.randn(*s, generator=g).requires_grad_(grad)

    return {
        "gelu": (gelu_pow, [r(4)]),
        "x * c": (lambda x, c: x * c, [r(4), r(4)]),
        "sin(x * c), c without grad": (lambda x, c: (x * c).sin(), [r(4), r(4, grad=False)]),
        "c.exp() * x.t(), c without grad, first":
            (lambda c, x: c.exp() * x.t(), [r(3, 2, grad=False), r(2, 3)]),
        "layer_norm": (lambda x, w, b: F.layer_norm(x, (4,), w, b), [r(3, 4), r(4), r(4)]),
        "two outputs": (lambda x: (x.sin(), x.exp()), [r(4)]),
        "relu(x @ w)": (lambda x, w: torch.relu(x @ w), [r(3, 4), r(4, 5)]),
        "x + y": (lambda x, y: (x + y).sum(), [r(4), r(4)]),
        "exp then log": (lambda x: x.exp().log1p() * x, [r(4)]),
        "a (1, 4) input broadcast": (lambda x, y: (x * y).tanh(), [r(3, 4), r(1, 4)]),
    }  # fmt: skip


def check_saved(cmp, saved_for_backward):
    hint = ("the forward: non-tangent nodes up to the last forward node; save a forward node "
            "when a node outside the forward, other than the output node, uses it; skip a node "
            "whose users are all getitem (its getitems are the tensors); an input that needs "
            "no gradient may still be read; keep graph order")  # fmt: skip
    for what, (fn, args) in saved_cases().items():
        joint, expected = joint_graph_of(fn, *args)
        got = cmp.call(lambda: saved_for_backward(joint), f"saved_for_backward({what}) ran",
                       hint)  # fmt: skip
        cmp.equal(got, expected, f"{what}: the tensors saved for the backward", hint)


# -- exercise 4: a backend that counts aten ops ----------------------------------------------


def branchy(x):
    y = torch.sin(x) * 2
    if y.sum() > 0:  # a graph break: two graphs
        return y.cos()
    return y - 1


def relu_matmul(x, w):
    return torch.relu(x @ w).sum(-1)


def norm(x):
    return F.layer_norm(x, (x.shape[-1],)) * 3


def ramp(x):
    """An aten graph with keyword arguments: arange(..., dtype=..., device=...)."""
    return x * torch.arange(x.shape[-1], dtype=x.dtype) + x.sum(-1, keepdim=True)


def scaled_by_constant(x, w):
    """``w`` needs no gradient: no gradient edge for it in the backward."""
    return (x * w.exp()).tanh()


def _args(fn, x, w):
    return [x, w] if fn in (relu_matmul, scaled_by_constant) else [x]


def reference_counts(fn, args) -> dict:
    """Every aten op of fn's forward and backward, traced by torch below autograd."""
    from torch._dynamo.backends.common import aot_autograd

    counted = {"forward": collections.Counter(), "backward": collections.Counter()}

    def tracer(kind):
        def compiler(gm, example_inputs):
            counted[kind].update(str(n.target) for n in gm.graph.nodes
                                 if isinstance(n.target, torch._ops.OpOverload))  # fmt: skip
            return make_boxed_func(gm.forward)

        return compiler

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=tracer("forward"), bw_compiler=tracer("backward"))
    torch.compile(fn, backend=backend)(*args).sum().backward()
    return counted


def check_backend(cmp, counting_compiler, counting_backend, counts):
    hint = (
        "count only call_function nodes whose target is a torch._ops.OpOverload, by "
        "str(target), whatever their arguments (keyword ones included), into "
        "COUNTS['forward'] for the forward compiler and COUNTS['backward'] for the backward "
        "one; add to the counts, never reset them; return make_boxed_func(gm.forward)"
    )
    counts["forward"].clear(), counts["backward"].clear()
    probe = make_fx(lambda t: t * 2)(torch.ones(2))
    compiled = cmp.call(
        lambda: counting_compiler("forward")(probe, [torch.ones(2)]),
        "counting_compiler('forward') on the graph of t * 2 ran",
        hint,
    )
    result = cmp.call(
        lambda: compiled([torch.ones(2)]),
        "the compiled graph, called with one list of arguments, ran",
        hint,
    )
    cmp.equal(result, torch.full((2,), 2.0), "the compiled graph's output", hint)
    cmp.equal(dict(counts["forward"]), {"aten.mul.Tensor": 1}, "the counts for t * 2", hint)
    g = torch.Generator().manual_seed(0)
    for fn in (branchy, relu_matmul, norm, ramp, scaled_by_constant):
        x = torch.randn(3, 4, generator=g, requires_grad=True)
        w = torch.randn(
            4, 5 if fn is relu_matmul else 4, generator=g, requires_grad=fn is relu_matmul
        )
        w = w[:3] if fn is scaled_by_constant else w
        expected = reference_counts(fn, _args(fn, x, w))
        counts["forward"].clear(), counts["backward"].clear()
        torch._dynamo.reset()
        args = _args(fn, x, w)
        out = cmp.call(
            lambda: torch.compile(fn, backend=counting_backend)(*args),
            f"torch.compile({fn.__name__}, backend=counting_backend) ran",
            hint,
        )
        cmp.close(out, fn(*args), f"{fn.__name__}: the compiled output", hint)
        cmp.call(lambda: out.sum().backward(), f"{fn.__name__}: the backward ran", hint)
        for kind in ("forward", "backward"):
            cmp.equal(
                dict(sorted(counts[kind].items())),
                dict(sorted(expected[kind].items())),
                f"{fn.__name__}: aten ops counted in the {kind}",
                hint,
            )

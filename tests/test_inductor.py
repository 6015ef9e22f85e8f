"""retorch.inductor against eager torch: forward and backward of a corpus under torch.compile,
fusion counts, fallbacks, the CUDA code under the simulator, and PTX for the generated kernels.

Float32 tolerance: rtol 1e-5, atol 1e-6 (our exp is within 1 ulp; sums run in another order)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch.inductor as ri
from bench.bench_inductor import gelu  # the GELU the benchmark times is the one tested
from retorch.inductor.compile_fx import compile_fx
from retorch.inductor.virtualized import ops
from tools.course import ROOT

pytestmark = pytest.mark.slow

TOL = {"rtol": 1e-5, "atol": 1e-6}


torch.manual_seed(0)
LAYER_NORM = torch.nn.LayerNorm(16)
MLP = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))


def randn(*shape):
    return torch.randn(*shape, requires_grad=True)


CORPUS = {  # name: (function, input shapes)
    "pointwise_chain": (lambda x, y: (x.exp() - y) * 2.0 + x.sigmoid() / (y.abs() + 1.0),
                        [(8, 16), (8, 16)]),
    "gelu_ops": (gelu, [(8, 16)]),
    "softmax": (lambda x: torch.softmax(x, -1), [(8, 16)]),
    "log_softmax": (lambda x: F.log_softmax(x, dim=-1), [(6, 20)]),
    "layer_norm": (LAYER_NORM, [(8, 16)]),
    "mlp": (MLP, [(4, 16)]),
    "broadcast": (lambda x, y, z: x + y * z, [(4, 1, 8), (3, 1), (8,)]),
    "reduce_dims": (lambda x: x.sum(0) * 2.0 + x.amax(1).sum(0), [(5, 6, 7)]),
    "mean_var": (lambda x: (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True) + 1e-5).sqrt(),
                 [(8, 16)]),
    "where_relu": (lambda x, y: torch.where(x > 0, x, 0.1 * x) + torch.relu(y), [(8, 16)] * 2),
    "views": (lambda x, y: (x.t() * y).reshape(-1, 4).permute(1, 0).sum(1), [(8, 16), (16, 8)]),
    "silu_pow": (lambda x: F.silu(x) + x**2 - x.neg() / 3.0, [(32,)]),
    "full_sum": (lambda x: (x * x).sum(), [(8, 16)]),
    "fallback_cumsum": (lambda x: torch.cumsum(x.exp(), 1) * 2.0, [(4, 8)]),
    "fallback_kwargs": (lambda x, y: torch.add(x, y, alpha=2.0) + torch.div(x, y.abs() + 1.0,
                        rounding_mode="floor"), [(4, 8), (4, 8)]),
}  # fmt: skip


def run_both(fn, shapes, backend=compile_fx, seed=0):
    torch.manual_seed(seed)
    args = [randn(*s) for s in shapes]
    torch._dynamo.reset()
    ri.reset()
    out = torch.compile(fn, backend=backend, dynamic=False)(*args)
    grad = torch.randn_like(out)
    ours = [out] + list(torch.autograd.grad(out, args, grad))
    expected = fn(*args)
    theirs = [expected] + list(torch.autograd.grad(expected, args, grad))
    return ours, theirs


@pytest.mark.parametrize("name", list(CORPUS))
def test_forward_and_backward_match_eager(name):
    fn, shapes = CORPUS[name]
    ours, theirs = run_both(fn, shapes)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, **TOL)
    kinds = [c.kind for c in ri.compiled_graphs()]
    assert kinds == ["forward", "backward"]


def kernels_of(name, kind="forward"):
    fn, shapes = CORPUS[name]
    run_both(fn, shapes)
    return ri.last_compile(kind)


def test_gelu_chain_is_one_kernel():
    fw = kernels_of("gelu_ops")
    assert list(fw.fusion_groups) == ["kernel0"] and not fw.fallbacks
    assert "tanh(" in fw.source and "prange" not in fw.source  # 128 elements: one thread


def test_large_rows_run_in_parallel_blocks():
    ours, theirs = run_both(CORPUS["softmax"][0], [(80, 512)])
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, **TOL)
    fw = ri.last_compile("forward")
    assert "numba.njit(parallel=True)" in fw.source and "numba.prange(2)" in fw.source


def test_softmax_and_layer_norm_are_one_kernel_per_row():
    assert len(kernels_of("softmax").fusion_groups) == 1
    assert len(kernels_of("log_softmax").fusion_groups) == 1
    ln = kernels_of("layer_norm")
    assert len(ln.fusion_groups) == 1
    assert any("its row loop" in d for d in ln.decisions)


def test_fallbacks_are_recorded():
    fw = kernels_of("fallback_cumsum")
    assert [op for _, op in fw.fallbacks] == ["aten.cumsum.default"]
    kw = kernels_of("fallback_kwargs")
    assert [op for _, op in kw.fallbacks] == ["aten.add.Tensor", "aten.div.Tensor_mode"]
    assert "aten.cumsum.default(" in fw.wrapper_source
    mlp = kernels_of("mlp")
    assert {op for _, op in mlp.fallbacks} == {"aten.mm.default"}
    assert "kernel0" in mlp.fusion_groups  # bias + relu fused between the matmuls


def test_report_ir_and_wrapper_are_printable():
    fw = kernels_of("softmax")
    text = fw.ir()
    assert "Reduction('max'" in text and "ops.exp(" in text
    assert fw.report().startswith("forward graph on cpu: 1 kernel(s), 0 fallback(s)")
    assert fw.wrapper_source.startswith("def call(args):")


@settings(max_examples=4, deadline=None)
@given(rows=st.integers(1, 9), cols=st.integers(1, 40), which=st.sampled_from(
    ["softmax", "layer_norm_fn", "gelu_ops"]))  # fmt: skip
def test_random_shapes(rows, cols, which):
    fn = {"softmax": CORPUS["softmax"][0], "gelu_ops": gelu,
          "layer_norm_fn": lambda x: F.layer_norm(x, (cols,))}[which]  # fmt: skip
    ours, theirs = run_both(fn, [(rows, cols)])
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, **TOL)


def test_non_contiguous_and_float64_inputs():
    x = torch.randn(16, 8).t()  # not contiguous
    torch._dynamo.reset()
    out = torch.compile(lambda t: torch.softmax(t, -1), backend=compile_fx, dynamic=False)(x)
    torch.testing.assert_close(out, torch.softmax(x, -1), **TOL)
    x64 = torch.randn(4, 8, dtype=torch.float64)
    torch._dynamo.reset()
    out = torch.compile(gelu, backend=compile_fx, dynamic=False)(x64)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, gelu(x64), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["gelu_ops", "softmax", "layer_norm"])
def test_cuda_codegen_matches_torch(name):
    """Numba-CUDA kernels: under the simulator here; on a GPU with NUMBA_ENABLE_CUDASIM=0."""
    fn, shapes = CORPUS[name]
    shapes = [(3, *s[1:]) for s in shapes]  # few rows: each simulated thread is a Python thread
    ours, theirs = run_both(fn, shapes, backend=functools.partial(compile_fx, device="cuda"))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, **TOL)
    fw = ri.last_compile("forward")
    assert fw.device == "cuda" and '@kernel("void(float32[:]' in fw.source


def test_errors_name_the_misuse():
    with pytest.raises(RuntimeError, match="outside a kernel"):
        ops.add("a", "b")
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        ri.compile_graph(None, [], device="tpu")
    ri.reset()
    with pytest.raises(RuntimeError, match="nothing compiled yet"):
        ri.last_compile()


PTX = """
import retorch.cuda as rc
import retorch.inductor.examples
for spec in rc.KERNELS:
    if spec.name.startswith("retorch.inductor"):
        print(spec.name, [len(rc.compile_ptx(spec, cc)) > 0 for cc in rc.PTX_TARGETS])
"""


def test_generated_cuda_kernels_compile_to_ptx():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    out = subprocess.run([sys.executable, "-c", PTX], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    for name in ("gelu", "softmax", "layer_norm"):
        assert f"examples.{name}.kernel0 [True, True, True]" in out.stdout, out.stdout


def test_relu_keeps_nan_and_negative_zero_as_torch():
    x = torch.tensor([float("nan"), -0.0, -1.0, 2.0] * 10_000)
    torch._dynamo.reset()
    got = torch.compile(torch.relu, backend=compile_fx)(x)
    want = torch.relu(x)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(torch.signbit(got), torch.signbit(want))


def compile_forward(fn, *args):
    """Forward only (no autograd): our compiled outputs, eager's, and what was compiled."""
    torch._dynamo.reset()
    ri.reset()
    with torch.no_grad():
        got = torch.compile(fn, backend=compile_fx, dynamic=False)(*args)
        want = fn(*args)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    return got, want, ri.last_compile()


@pytest.mark.parametrize("n", [5, 33])
def test_a_buffer_read_at_a_transposed_index_is_not_fused_into_its_kernel(n):
    """`y` is an output (a buffer); `y + y.t()` reads it at [j, i] while the kernel that writes
    it is still at row i: fused, it would read rows not yet written (Inductor's MemoryDep)."""

    def fn(x):
        y = (x * 2.0).tanh()
        return y, y + y.t(), (y * y.t()).sum(-1)

    x = torch.randn(n, n, generator=torch.Generator().manual_seed(n))
    got, want, compiled = compile_forward(fn, x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL)
    assert any("reads a row of it elsewhere" in d for d in compiled.decisions), compiled.decisions
    assert len(compiled.fusion_groups) >= 2 and compiled.fusion_groups["kernel0"] == ["buf0"]


def test_a_buffer_read_at_its_own_index_is_fused():
    def fn(x):
        y = (x * 2.0).tanh()
        return y, y + y * 3.0

    got, want, compiled = compile_forward(fn, torch.randn(6, 6))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL)
    assert len(compiled.fusion_groups) == 1


UNARY_OPS = [
    torch.tanh,
    torch.sigmoid,
    torch.neg,
    torch.relu,
    torch.abs,
    lambda v: v.tanh().exp(),
    lambda v: (v.abs() + 1.0).reciprocal(),
]  # all lowered
BINARY_OPS = [torch.add, torch.sub, torch.mul, torch.maximum]


@st.composite
def square_programs(draw):
    """A random straight-line program on two (n, n) inputs: pointwise ops, transposes, row
    reductions kept as (n, 1) (broadcast back). Every value is an output, so each is a buffer
    that later values may read at another index (a transpose of it)."""
    steps = []
    for k in range(draw(st.integers(2, 7))):
        live = k + 2
        kind = draw(st.sampled_from(["unary", "binary", "binary", "t", "t", "rowsum", "rowmax"]))
        a = draw(st.integers(0, live - 1))
        if kind == "unary":
            steps.append((kind, draw(st.integers(0, len(UNARY_OPS) - 1)), a))
        elif kind == "binary":
            b = draw(st.integers(0, live - 1))
            steps.append((kind, draw(st.integers(0, len(BINARY_OPS) - 1)), a, b))
        else:
            steps.append((kind, 0, a))
    return steps


def square_program(steps):
    def fn(x, y):
        vals = [x, y]
        for kind, op, *args in steps:
            v = [vals[i] for i in args]
            vals.append({"unary": lambda: UNARY_OPS[op](v[0]),
                         "binary": lambda: BINARY_OPS[op](*v),
                         "t": lambda: v[0].t(),
                         "rowsum": lambda: v[0].sum(-1, keepdim=True) / 8.0,
                         "rowmax": lambda: v[0].amax(-1, keepdim=True)}[kind]())  # fmt: skip
        return tuple(vals[2:])

    return fn


@settings(max_examples=10, deadline=None)
@given(steps=square_programs(), n=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_random_graphs_match_eager(steps, n, seed):
    """Random small graphs through retorch.inductor against eager torch: transposed reads of
    buffers, reductions broadcast back into rows, size-1 dims, several outputs."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    got, want, _ = compile_forward(square_program(steps), x, y)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, **TOL)

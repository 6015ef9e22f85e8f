"""The vectorized elementwise kernels (``CUDALoops.cuh``'s ``vectorized_elementwise_kernel``):
16-byte loads where every operand is aligned, the unrolled scalar kernel where one is not, a
scalar tail in the last block. Values against torch's CPU results, bit for bit, where kernels
run (the simulator here: blocks of ``SIMULATED_VEC_THREADS`` threads, so a few hundred
elements already fill several blocks and leave a tail); the PTX of the vector path with the
real compiler, in a subprocess with the simulator off."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch.tensor as rt
from retorch.tensor import cuda_kernels as K
from tools.course import ROOT

pytestmark = pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaIRAssumptionWarning")

#: Binary ops whose float32/float64 results are correctly rounded in both libraries.
EXACT_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
#: Unary ops computed exactly (neg, relu) or correctly rounded (reciprocal) in both.
EXACT_UNARY = ("neg", "relu", "reciprocal")


@pytest.fixture
def launched(monkeypatch):
    """The names of the kernels the ops launch, through the launch path or directly."""
    names = []
    real_launch = K.launch
    monkeypatch.setattr(K, "launch", lambda k, *a, **kw: (names.append(k.py_func.__name__),
                                                          real_launch(k, *a, **kw))[1])  # fmt: skip

    class Spy:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, config):
            names.append(self.kernel.py_func.__name__)
            return self.kernel[config]

    for name in ("binary_contiguous_kernel", "unary_contiguous_kernel"):
        monkeypatch.setattr(K, name, Spy(getattr(K, name)))
    return names


def operands(n, offset, dtype, seed=0):
    """Two cuda tensors of ``n`` elements starting at element ``offset`` of their storage
    (offset 1: 4 or 8 bytes past a 16-byte boundary), and torch's copies."""
    rng = np.random.default_rng(seed)
    data = [rng.standard_normal(n + offset).astype(dtype) for _ in range(2)]
    data[1][data[1] == 0] = 1  # no 0/0
    ours = [rt.from_numpy(d).to("cuda")[offset:] for d in data]
    return ours, [torch.from_numpy(d[offset:]) for d in data]


def same_bits(ours, theirs):
    assert ours.device == "cuda" and ours.shape == tuple(theirs.shape)
    a, b = ours.cpu().numpy(), theirs.numpy()
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


def full_blocks_and_tail(n):
    per_block = K.ELEMS_PER_THREAD * K._vectorized_config(1)[1]
    return n // per_block, n % per_block


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_aligned_operands_take_16_byte_loads_with_a_scalar_tail(dtype, launched):
    n = 8 * K.ELEMS_PER_THREAD * K._vectorized_config(1)[1] // 2 + 13  # 4.x blocks
    assert full_blocks_and_tail(n)[0] >= 2 and full_blocks_and_tail(n)[1] > 0
    (a, b), (ta, tb) = operands(n, 0, dtype)
    assert a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0
    for name in EXACT_BINARY:
        same_bits(getattr(rt, name)(a, b), getattr(torch, name)(ta, tb))
    # a + alpha * b: the simulator rounds the float32 product first (NumPy 2 keeps float32 *
    # float in float32), torch fuses a multiply-add: an error of the product's size
    ours, theirs = rt.add(a, b, alpha=3), torch.add(ta, tb, alpha=3)
    scale = np.finfo(dtype).eps * (np.abs(ta.numpy()) + 3 * np.abs(tb.numpy()))
    assert (np.abs(ours.cpu().numpy() - theirs.numpy()) <= scale).all()
    for name in EXACT_UNARY:
        same_bits(getattr(rt, name)(b), getattr(torch, name)(tb))
    assert set(launched) == {"binary_vectorized_kernel", "unary_vectorized_kernel"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_misaligned_operand_sends_the_op_to_the_unrolled_kernel(dtype, launched):
    n = 300
    (a, b), (ta, tb) = operands(n, 1, dtype)  # both start at element 1
    (c, _), (tc, _) = operands(n + 1, 0, dtype, seed=1)
    c = c[:n]  # aligned, beside the misaligned b
    tc = tc[:n]
    same_bits(rt.add(a, b), torch.add(ta, tb))
    same_bits(rt.mul(c, b), torch.mul(tc, tb))
    same_bits(rt.neg(b), torch.neg(tb))
    assert launched == ["binary_contiguous_kernel"] * 2 + ["unary_contiguous_kernel"]
    launched.clear()
    same_bits(rt.div(c, c), torch.div(tc, tc))
    assert launched == ["binary_vectorized_kernel"]


def test_an_empty_tensor_launches_nothing(launched):
    (a, b), (ta, tb) = operands(0, 0, np.float32)
    same_bits(rt.add(a, b), torch.add(ta, tb))
    same_bits(rt.relu(a), torch.relu(ta))
    assert launched == []


def test_strided_operands_still_take_the_general_kernel(launched):
    (a, b), (ta, tb) = operands(200, 0, np.float32)
    x, tx = a.view(20, 10).t(), ta.view(20, 10).t()
    y, ty = b.view(10, 20), tb.view(10, 20)  # x transposed, y not: no common linear order
    same_bits(rt.sub(x, y), torch.sub(tx, ty))
    same_bits(rt.neg(a[::3]), torch.neg(ta[::3]))
    assert launched == ["binary_kernel", "unary_kernel"]  # the offset calculator's kernels


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(1, 3 * K.ELEMS_PER_THREAD * K._vectorized_config(1)[1] + 5),
    offset=st.integers(0, 5),
    dtype=st.sampled_from([np.float32, np.float64]),
    op=st.sampled_from(EXACT_BINARY),
)
def test_random_sizes_and_offsets_give_torchs_bits(n, offset, dtype, op):
    (a, b), (ta, tb) = operands(n, offset, dtype, seed=n)
    same_bits(getattr(rt, op)(a, b), getattr(torch, op)(ta, tb))
    same_bits(rt.reciprocal(b), torch.reciprocal(tb))


PTX = """
import tools.check_ptx as check
import retorch.cuda as rcuda
from retorch.tensor import cuda_kernels as K

for kernel in (K.binary_vectorized_kernel, K.unary_vectorized_kernel):
    (spec,) = [s for s in rcuda.KERNELS if s.pyfunc is kernel.py_func]
    for sig in spec.signatures:
        one = rcuda.KernelSpec(spec.pyfunc, (sig,))
        ptx = rcuda.compile_ptx(one, (8, 0))
        words = [line.split()[0] for line in ptx.splitlines() if line.strip()]
        counts = {w: words.count(w) for w in sorted(set(words)) if w.startswith(("ld.global", "st.global", "ld.local", "st.local"))}
        (used,) = check.resources(one, (9, 0))
        print(kernel.py_func.__name__, sig.split(",")[-1].strip(" )"), counts,
              used["stack_bytes"] + used["spilled_bytes"])
"""


@pytest.mark.slow
def test_vector_path_compiles_to_v4_loads_and_no_local_memory():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(PTX)], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    lines = {tuple(line.split()[:2]): line for line in out.splitlines()}
    quads = K.ELEMS_PER_THREAD // K.VEC  # 16-byte accesses per operand per thread
    for kernel, inputs in (("binary_vectorized_kernel", 2), ("unary_vectorized_kernel", 1)):
        f32, f64 = lines[(kernel, "float32")], lines[(kernel, "float64")]
        assert f"'ld.global.v4.f32': {inputs * quads}" in f32, out
        assert f"'st.global.v4.f32': {quads}" in f32, out
        assert f"'ld.global.v2.f64': {2 * inputs * quads}" in f64, out
        assert f"'st.global.v2.f64': {2 * quads}" in f64, out
        for line in (f32, f64):
            assert "local" not in line and line.endswith(" 0"), out

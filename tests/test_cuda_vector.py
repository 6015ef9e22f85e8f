"""The vectorized elementwise kernels (``CUDALoops.cuh``'s ``vectorized_elementwise_kernel``,
``retorch/tensor/cuda_vectorized.py``): vectors of 4 or 2 elements where every pointer allows
them (``can_vectorize_up_to``), the unrolled scalar kernel where one does not, a scalar tail in
the last block. Values against torch's CPU results, bit for bit, where kernels run (the
simulator here: blocks of ``SIMULATED_THREADS`` threads, so 64 elements fill a block and a few
hundred leave several blocks and a tail; the simulator's vector accesses raise on a misaligned
address, as a GPU faults); the PTX of the vector path with the real compiler, in a subprocess
with the simulator off."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch.tensor as rt
from retorch.tensor import cuda_kernels as K
from retorch.tensor import cuda_vectorized as V
from tools.course import ROOT

pytestmark = pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaIRAssumptionWarning")

#: Binary ops whose float32/float64 results are correctly rounded in both libraries.
EXACT_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
#: Unary ops computed exactly (neg, relu) or correctly rounded (reciprocal) in both.
EXACT_UNARY = ("neg", "relu", "reciprocal")
#: Elements of one block (``io_block_work_size``) where the tests run.
BLOCK = V.ELEMS_PER_THREAD * V.config(1)[1]


@pytest.fixture
def launched(monkeypatch):
    """The names of the elementwise kernels the ops launch (vectorized, unrolled, general)."""
    names = []

    class Spy:
        def __init__(self, kernel):
            self.kernel = kernel
            self.py_func = kernel.py_func

        def __getitem__(self, config):  # the launch path caches what this returns
            run = self.kernel[config]
            return lambda *args: (names.append(self.py_func.__name__), run(*args))[1]

    for table in (V.BINARY, V.UNARY):
        for vec, kernel in list(table.items()):
            monkeypatch.setitem(table, vec, Spy(kernel))
    for k in ("binary", "unary"):
        for name in (f"{k}_contiguous_kernel", f"{k}_kernel"):
            monkeypatch.setattr(K, name, Spy(getattr(K, name)))
    return names


def operands(n, offset, dtype, seed=0, count=2):
    """``count`` cuda tensors of ``n`` elements starting at element ``offset`` of their storage
    (a fresh storage is 16-byte aligned: offset 1 is 4 or 8 bytes past it), and torch's copies."""
    rng = np.random.default_rng(seed)
    data = [rng.standard_normal(n + offset).astype(dtype) for _ in range(count)]
    data[-1][data[-1] == 0] = 1  # no 0/0
    ours = [rt.from_numpy(d).to("cuda")[offset:] for d in data]
    return ours, [torch.from_numpy(d[offset:]) for d in data]


def same_bits(ours, theirs):
    assert ours.device == "cuda" and ours.shape == tuple(theirs.shape)
    a, b = ours.cpu().numpy(), theirs.numpy()
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


def test_vec_size_is_can_vectorize_up_to_capped_at_16_bytes():
    """float32: 4 on 16-byte pointers, 2 on 8-byte ones, else 1; float64: 2 on 16-byte
    pointers (a 32-byte aligned one allows 4, and the 16-byte cap makes it 2), else 1; the
    minimum over every pointer, the output's included."""
    assert [V.vec_size([p], 4) for p in (0, 4, 8, 12, 16, 32, 40)] == [4, 1, 2, 1, 4, 4, 2]
    assert [V.vec_size([p], 8) for p in (0, 8, 16, 24, 32, 48)] == [2, 1, 2, 1, 2, 2]
    assert V.vec_size([16, 32, 8], 4) == 2 and V.vec_size([4, 32, 32], 4) == 1
    assert V.vec_size([32, 32, 40], 8) == 1


@pytest.mark.parametrize(
    "dtype, offset, kernel",
    [
        (np.float32, 0, "vectorized4"),
        (np.float32, 1, "contiguous"),
        (np.float32, 2, "vectorized2"),
        (np.float32, 3, "contiguous"),
        (np.float32, 4, "vectorized4"),
        (np.float64, 0, "vectorized2"),
        (np.float64, 1, "contiguous"),
        (np.float64, 2, "vectorized2"),
    ],
)
def test_the_pointers_alignment_picks_the_kernel(dtype, offset, kernel, launched):
    n = 4 * BLOCK + 13  # four full blocks and a tail
    (a, b), (ta, tb) = operands(n, offset, dtype)
    for name in EXACT_BINARY:
        same_bits(getattr(rt, name)(a, b), getattr(torch, name)(ta, tb))
    for name in EXACT_UNARY:
        same_bits(getattr(rt, name)(b), getattr(torch, name)(tb))
    assert launched == [f"binary_{kernel}_kernel"] * len(EXACT_BINARY) + [
        f"unary_{kernel}_kernel"
    ] * len(EXACT_UNARY)


def test_one_misaligned_operand_decides_for_all(launched):
    n = 3 * BLOCK
    (a, b), (ta, tb) = operands(n, 0, np.float32)  # aligned to 16 bytes
    (c,), (tc,) = operands(n, 1, np.float32, count=1)  # 4 bytes past
    (d,), (td,) = operands(n, 2, np.float32, count=1)  # 8 bytes past
    same_bits(rt.mul(a, c), torch.mul(ta, tc))
    same_bits(rt.mul(a, d), torch.mul(ta, td))
    same_bits(rt.mul(d, a), torch.mul(td, ta))
    out, tout = operands(n, 2, np.float32, count=1)  # an 8-byte output, 16-byte inputs
    rt.add(a, b, out=out[0]), torch.add(ta, tb, out=tout[0])
    same_bits(out[0], tout[0])
    assert launched == ["binary_contiguous_kernel"] + ["binary_vectorized2_kernel"] * 3


def at_32_bytes(n, dtype, seed):
    """A cuda tensor of ``n`` elements whose address is a multiple of 32 bytes, and torch's."""
    data = np.random.default_rng(seed).standard_normal(n + 8).astype(dtype)
    base = rt.from_numpy(data).to("cuda")
    skip = (-base.data_ptr() % 32) // data.itemsize
    return base[skip : skip + n], torch.from_numpy(data[skip : skip + n])


def test_float64_takes_16_byte_vectors_even_where_32_would_fit(launched):
    """Every pointer a multiple of 32 bytes allows 4 doubles (``can_vectorize_up_to``), and
    ``launch_vectorized_kernel`` caps the vector at ``16 / sizeof(double)`` = 2."""
    n = 2 * BLOCK + 1
    (a, ta), (b, tb), (out, tout) = (at_32_bytes(n, np.float64, seed) for seed in range(3))
    assert all(t.data_ptr() % 32 == 0 for t in (a, b, out))
    rt.div(a, b, out=out), torch.div(ta, tb, out=tout)
    same_bits(out, tout)
    assert launched == ["binary_vectorized2_kernel"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "n", [1, 7, 8, 9, 63, 64, 65, *(pytest.param(n, marks=pytest.mark.slow) for n in (1023, 4097))]
)
def test_sizes_around_the_vector_and_the_block(n, dtype):
    for offset in (0, 1, 2):
        (a, b), (ta, tb) = operands(n, offset, dtype, seed=n)
        same_bits(rt.sub(a, b), torch.sub(ta, tb))
        same_bits(rt.neg(a), torch.neg(ta))


@pytest.mark.simulator  # it watches the simulator's threads (on a GPU: a subprocess with it on)
@pytest.mark.parametrize("dtype, offset, vec", [(np.float32, 0, 4), (np.float32, 2, 2),
                                               (np.float64, 0, 2)])  # fmt: skip
def test_a_threads_vectors_are_a_block_apart_as_torchs_policy(dtype, offset, vec, monkeypatch):
    """``load_vector<vec_size>(from, thread_idx + i * num_threads())``: in step ``i`` the
    threads of a block read neighbouring vectors (a warp's loads coalesce), and a thread's
    next vector is a block's width of vectors further, never its own neighbour."""
    loads = []
    real = {4: V.load4, 2: V.load2}[vec]

    def spy(array, i):  # runs in the simulator's thread of the CUDA thread (a BlockThread)
        me = threading.current_thread()
        loads.append((me.blockIdx.x, me.threadIdx.x, i))
        return real(array, i)

    monkeypatch.setattr(V, f"load{vec}", spy)
    n = 2 * BLOCK + 3  # two full blocks (vector loads) and a tail (scalar loads)
    (a, b), (ta, tb) = operands(n, offset, dtype)
    same_bits(rt.sub(a, b), torch.sub(ta, tb))
    threads = V.config(n)[1]
    steps = V.ELEMS_PER_THREAD // vec
    expected = [
        (block, t, block * BLOCK + (t + k * threads) * vec)
        for block in range(2) for t in range(threads) for k in range(steps) for _ in "ab"
    ]  # fmt: skip
    assert sorted(loads) == sorted(expected)
    for block, t in {(bl, t) for bl, t, _ in loads}:  # in each thread's own order
        mine = [i for bl, tt, i in loads if (bl, tt) == (block, t)]
        assert mine == [x for bl, tt, x in expected if (bl, tt) == (block, t)]


def test_an_empty_tensor_launches_nothing(launched):
    (a, b), (ta, tb) = operands(0, 0, np.float32)
    same_bits(rt.add(a, b), torch.add(ta, tb))
    same_bits(rt.relu(a), torch.relu(ta))
    assert launched == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_in_place_ops_read_each_vector_before_writing_it(dtype, launched):
    n = 2 * BLOCK + 5
    (a, b), (ta, tb) = operands(n, 0, dtype, seed=3)
    rt.add_(a, b), ta.add_(tb)
    same_bits(a, ta)
    rt.mul(b, a, out=b), torch.mul(tb, ta, out=tb)
    same_bits(b, tb)
    vec = 4 if dtype == np.float32 else 2
    assert launched == [f"binary_vectorized{vec}_kernel"] * 2


def test_broadcast_and_strided_operands_take_the_general_kernel(launched):
    (a, b), (ta, tb) = operands(200, 0, np.float32)
    x, tx = a.view(20, 10).t(), ta.view(20, 10).t()
    y, ty = b.view(10, 20), tb.view(10, 20)  # x transposed, y not: no common linear order
    same_bits(rt.sub(x, y), torch.sub(tx, ty))
    same_bits(rt.mul(a.view(20, 10), b[:10]), torch.mul(ta.view(20, 10), tb[:10]))  # broadcast
    same_bits(rt.neg(a[::3]), torch.neg(ta[::3]))
    assert launched == ["binary_kernel", "binary_kernel", "unary_kernel"]


def test_add_with_alpha_differs_from_torch_by_one_rounding_at_most(launched):
    """a + alpha * b: the kernel rounds the product, torch's CPU loop fuses a multiply-add,
    so they may differ by the product's rounding error, never more."""
    (a, b), (ta, tb) = operands(3 * BLOCK + 1, 0, np.float32)
    ours, theirs = rt.add(a, b, alpha=3), torch.add(ta, tb, alpha=3)
    scale = np.finfo(np.float32).eps * (np.abs(ta.numpy()) + 3 * np.abs(tb.numpy()))
    assert (np.abs(ours.cpu().numpy() - theirs.numpy()) <= scale).all()
    assert launched == ["binary_vectorized4_kernel"]


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 3 * BLOCK + 5),
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
from retorch.tensor import cuda_vectorized as V

for kernel in (*V.BINARY.values(), *V.UNARY.values()):
    (spec,) = [s for s in rcuda.KERNELS if s.pyfunc is kernel.py_func]
    for sig in spec.signatures:
        one = rcuda.KernelSpec(spec.pyfunc, (sig,))
        for cc in ((7, 5), (8, 0), (9, 0)):
            ptx = rcuda.compile_ptx(one, cc)
            words = [line.split()[0] for line in ptx.splitlines() if line.strip()]
            ops = sorted(w for w in set(words) if w.startswith(("ld.", "st.")))
            (used,) = check.resources(one, cc)
            local = used["stack_bytes"] + used["spilled_bytes"]
            counts = " ".join(f"{w}={words.count(w)}" for w in ops)
            print(kernel.py_func.__name__, sig.split(",")[-1].strip(" )"), f"sm_{cc[0]}{cc[1]}",
                  f"registers={used['registers']}", f"local={local}", counts)
"""


@pytest.mark.slow
def test_vector_path_compiles_to_vector_loads_and_no_local_memory():
    """For sm_75/80/90: each thread of a full block issues ``8 / vec`` vector loads per input
    and as many vector stores (``ld.global.v4.f32``; ``.v2.f32`` where the pointers allow only
    8 bytes; ``.v2.f64`` for float64), the scalar tail's accesses, and no local memory."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(PTX)], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=900)  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    print(out)
    lines = {tuple(line.split()[:3]): line.split()[3:] for line in out.splitlines()}
    cases = [(4, "float32", "v4.f32"), (2, "float32", "v2.f32"), (2, "float64", "v2.f64")]
    for (vec, dtype, vector), (kernel, inputs) in (
        (case, kernel) for case in cases for kernel in (("binary", 2), ("unary", 1))
    ):
        loads = V.ELEMS_PER_THREAD // vec  # vectors per operand per thread
        for cc in ("sm_75", "sm_80", "sm_90"):
            words = lines[(f"{kernel}_vectorized{vec}_kernel", dtype, cc)]
            assert "local=0" in words, (kernel, vec, dtype, cc, words)
            assert f"ld.global.{vector}={inputs * loads}" in words, (kernel, vec, dtype, words)
            assert f"st.global.{vector}={loads}" in words, (kernel, vec, dtype, words)
            assert not any(w.startswith(("ld.local", "st.local")) for w in words), words
    assert len(lines) == 2 * 3 * 3  # (binary, unary) x (v4 f32, v2 f32, v2 f64) x 3 archs

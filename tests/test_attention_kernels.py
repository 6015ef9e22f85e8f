"""The fused attention kernels (retorch/tensor/attention_kernels.py) against torch's CPU flash
attention (``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu`` and its
``_backward``: the same algorithm, our inputs) and ``F.scaled_dot_product_attention`` with
autograd; the CUDA kernels (under the simulator here, on the GPU when there is one) and their
PTX; and the capstone GPT trained through them.

Tolerances, measured on this machine:
- float64: every output within 1e-12 of torch's, relative to its largest magnitude (absolute
  where that is below 1; measured ~1e-15: the same sums in another order);
- float32: within 1e-5 relative to the largest magnitude (the same way) (measured 1.5e-6 over 30 random
  shapes up to T_q = 300, T_k = 700, D = 64: torch sums with vectors and takes ``exp_u20``,
  a polynomial exp);
- the capstone: test_capstone.py's own (1e-6 in float32, 1e-13 in float64).
A missed rescale of the running output, a causal mask one key off, a logsumexp without the
max or a backward without ``rowsum(dO * O)`` move the results by 1e-2 or more.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import test_capstone as capstone
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import retorch.tensor as rt
from retorch.models import attention as attn_mod
from retorch.tensor import attention_kernels as ak
from tools.ptx_report import float_kernel_rows

ROOT = Path(__file__).resolve().parent.parent
FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
TOL = {np.float64: 1e-12, np.float32: 1e-5}


def _inputs(n, tq, tk, d, dtype, seed=0, dv=None):
    g = np.random.default_rng(seed)
    shapes = [
        (n, tq, d),
        (n, tk, d),
        (n, tk, d if dv is None else dv),
        (n, tq, d if dv is None else dv),
    ]
    return [g.standard_normal(s).astype(dtype) for s in shapes]


def _close(ours, theirs, dtype, what=""):
    ours, theirs = ours.cpu().numpy(), theirs.detach().numpy()
    assert ours.shape == theirs.shape, (what, ours.shape, theirs.shape)
    assert ours.dtype == theirs.dtype, (what, ours.dtype, theirs.dtype)
    if theirs.size:
        err = np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1.0)
        assert err <= TOL[dtype], (what, err)


def _versus_flash(n, tq, tk, d, causal, dtype, device="cpu", seed=0, views=None):
    """Our forward and backward against torch's flash kernels on the same (N, T, D) inputs
    (given to torch as (1, N, T, D): batch 1, N heads). ``views`` maps the inputs to the
    tensors our kernels receive (non-contiguous views)."""
    q, k, v, g = _inputs(n, tq, tk, d, dtype, seed)
    scale = 1 / np.sqrt(d)
    ours = [rt.from_numpy(x.copy()).to(device) for x in (q, k, v, g)]
    if views is not None:
        ours = [views(x) for x in ours]
    out, lse = ak.attention_forward(*ours[:3], causal, scale)
    assert out.is_contiguous() and lse.is_contiguous()
    t = [torch.from_numpy(x)[None] for x in (q, k, v, g)]
    tout, tlse = FLASH(*t[:3], is_causal=causal, scale=scale)
    _close(out, tout[0], dtype, "out")
    _close(lse, tlse[0], dtype, "logsumexp")
    grads = ak.attention_backward(ours[3], *ours[:3], out, lse, causal, scale)
    tgrads = FLASH_BACKWARD(t[3], *t[:3], tout, tlse, 0.0, causal, scale=scale)
    for ours_g, theirs_g, name in zip(grads, tgrads, ("dq", "dk", "dv"), strict=True):
        _close(ours_g, theirs_g[0], dtype, name)


# ---- CPU ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tq,tk", [(11, 11), (5, 9), (9, 5), (1, 1)])
def test_cpu_equals_torch_flash_attention(tq, tk, causal, dtype):
    _versus_flash(3, tq, tk, 8, causal, dtype)


@pytest.mark.parametrize("causal", [False, True])
def test_cpu_across_query_and_key_blocks(causal):
    """T_q = 200 (two 64-row query blocks, the second partial) and T_k = 1100 (three 512-key
    blocks): the running max and sum carried from block to block, the causal mask cut
    inside the last block; T_q = 800 (256-row blocks) against 40 keys."""
    _versus_flash(2, 200, 1100, 8, causal, np.float64)
    _versus_flash(1, 800, 40, 4, causal, np.float64, seed=1)


@given(
    n=st.integers(1, 3),
    tq=st.integers(1, 40),
    tk=st.integers(1, 40),
    d=st.integers(1, 17),
    causal=st.booleans(),
    f32=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_cpu_random_shapes_equal_torch(n, tq, tk, d, causal, f32, seed):
    _versus_flash(n, tq, tk, d, causal, np.float32 if f32 else np.float64, seed=seed)


def _strided_views(x):
    """Each input as a view the kernels read in place (dims 0 and 1 restrided: every other
    row of a twice-as-long tensor, its dims 0 and 1 swapped), or copy (the last dim strided)."""
    n, t, d = x.shape
    rows = rt.zeros(n, 2 * t, d, dtype=x.dtype, device=x.device)
    rows[:, ::2].copy_(x)
    swapped = rt.zeros(t, n, d, dtype=x.dtype, device=x.device)
    swapped.copy_(x.transpose(0, 1))
    cols = rt.zeros(n, d, t, dtype=x.dtype, device=x.device)
    cols.copy_(x.transpose(1, 2))
    return {0: rows[:, ::2], 1: swapped.transpose(0, 1), 2: cols.transpose(1, 2)}


@pytest.mark.parametrize("which", [0, 1, 2])
def test_cpu_reads_strided_views(which):
    v = _strided_views(rt.zeros(2, 3, 4))[which]
    assert not v.is_contiguous()
    _versus_flash(2, 7, 9, 4, True, np.float64, views=lambda x: _strided_views(x)[which])


def test_cpu_equals_sdpa_with_autograd_and_another_value_width():
    """``F.scaled_dot_product_attention`` (its math backend: D_v = 5 differs from D = 3) and
    autograd give the same output and gradients."""
    q, k, v, g = _inputs(4, 6, 8, 3, np.float64, seed=3, dv=5)
    for causal in (False, True):
        tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
        tout = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal, scale=0.7)
        tout.backward(torch.from_numpy(g))
        r = [rt.from_numpy(x) for x in (q, k, v, g)]
        out, lse = ak.attention_forward(*r[:3], causal, 0.7)
        _close(out, tout, np.float64, "out")
        grads = ak.attention_backward(r[3], *r[:3], out, lse, causal, 0.7)
        for ours, theirs in zip(grads, (tq.grad, tk.grad, tv.grad), strict=True):
            _close(ours, theirs, np.float64)


@pytest.mark.slow  # ~1 s
def test_cpu_threads_give_the_same_bits_as_one_thread():
    """Above at::internal::GRAIN_SIZE the loops run in threads, each on its own slice of the
    scratch buffer: the same values as the serial twin, bit for bit (each task's arithmetic
    is the same whichever thread runs it). Tasks long enough (T = 300) that the threads
    overlap: with one buffer shared by all threads, the forward gave NaN here."""
    q, k, v, g = (rt.from_numpy(x) for x in _inputs(16, 300, 300, 32, np.float32, seed=4))
    a = ak.attention_forward(q, k, v, True, 0.25)
    threshold = ak._pick.__globals__["GRAIN_SIZE"]
    try:
        ak._pick.__globals__["GRAIN_SIZE"] = 1 << 62  # every call serial
        b = ak.attention_forward(q, k, v, True, 0.25)
        gb = ak.attention_backward(g, q, k, v, *b, True, 0.25)
    finally:
        ak._pick.__globals__["GRAIN_SIZE"] = threshold
    ga = ak.attention_backward(g, q, k, v, *a, True, 0.25)
    for x, y in zip((*a, *ga), (*b, *gb), strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def test_misuse_raises_torchs_exception_types():
    x = rt.zeros(2, 3, 4)
    with pytest.raises(RuntimeError, match="Expected data type in FP32, FP64, but got Long"):
        ak.attention_forward(*(rt.zeros(2, 3, 4, dtype=rt.int64),) * 3, False, 1.0)
    with pytest.raises(RuntimeError, match="query.dtype: float key.dtype: double"):
        ak.attention_forward(x, rt.zeros(2, 3, 4, dtype=rt.float64), x, False, 1.0)
    with pytest.raises(RuntimeError, match="must agree on D"):
        ak.attention_forward(x, rt.zeros(2, 3, 5), rt.zeros(2, 3, 5), False, 1.0)
    with pytest.raises(RuntimeError, match="key and value on T"):
        ak.attention_forward(x, x, rt.zeros(2, 4, 4), False, 1.0)
    with pytest.raises(RuntimeError, match="3-d"):
        ak.attention_forward(rt.zeros(3, 4), x, x, False, 1.0)
    out, lse = ak.attention_forward(x, x, x, False, 1.0)
    with pytest.raises(RuntimeError, match="grad_out"):
        ak.attention_backward(rt.zeros(2, 3, 5), x, x, x, out, lse, False, 1.0)
    # torch raises RuntimeError for the same cases
    with pytest.raises(RuntimeError):
        FLASH(*(torch.zeros(1, 2, 3, 4, dtype=torch.long),) * 3)
    with pytest.raises(RuntimeError):
        FLASH(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4).double(), torch.zeros(1, 2, 3, 4))


def test_no_keys_gives_zero_output_as_sdpa():
    q = rt.from_numpy(np.ones((2, 3, 4)))
    empty = rt.zeros(2, 0, 4, dtype=rt.float64)
    out, lse = ak.attention_forward(q, empty, empty, False, 0.5)
    ref = F.scaled_dot_product_attention(torch.ones(2, 3, 4, dtype=torch.float64),
                                         *(torch.zeros(2, 0, 4, dtype=torch.float64),) * 2)  # fmt: skip
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    np.testing.assert_array_equal(lse.numpy(), np.zeros((2, 3)))  # flash's "sum 0 -> 1" rule


def test_softmax_is_already_one_kernel(monkeypatch):
    """Chapter 4's softmax over the last dim is one pass per row already (the CPU kernel of
    ``stub("softmax_lastdim")``, called once): the attention kernels fuse it into theirs, and
    no second softmax kernel is written. (Its backward is composed by autograd.)"""
    from retorch.tensor.dispatch_stub import STUBS

    table = STUBS["softmax_lastdim"].table
    calls = []
    kernel = table["cpu"]
    monkeypatch.setitem(table, "cpu", lambda *a: calls.append(1) or kernel(*a))
    x = np.random.default_rng(0).standard_normal((3, 5))
    np.testing.assert_allclose(rt.softmax(rt.from_numpy(x), -1).numpy(),
                               torch.softmax(torch.from_numpy(x), -1).numpy(), rtol=1e-15)  # fmt: skip
    assert calls == [1]


# ---- CUDA (the simulator here: small shapes, 8 threads a block) ----------------------------------
@pytest.mark.slow  # the simulator runs a Python thread per CUDA thread: ~4 s
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cuda_equals_torch_flash_attention(dtype):
    """T = 11 and 9 cross a tile of 8 keys (or queries) under the simulator; T_q != T_k both
    ways, causal and not."""
    _versus_flash(2, 11, 9, 5, True, dtype, "cuda")
    _versus_flash(1, 9, 11, 3, False, dtype, "cuda", seed=1)


@pytest.mark.slow
def test_cuda_causal_more_queries_than_keys_and_views():
    _versus_flash(1, 10, 4, 4, True, np.float64, "cuda", seed=2)
    _versus_flash(
        1, 5, 9, 4, True, np.float64, "cuda", seed=3, views=lambda x: _strided_views(x)[1]
    )


def test_cuda_one_small_case():
    _versus_flash(1, 3, 4, 2, True, np.float32, "cuda", seed=5)


@pytest.mark.slow  # ~20 s: 18 compilations
def test_ptx_compiles_without_local_memory_and_float32_stays_float32():
    lines = float_kernel_rows("retorch.tensor.attention_kernels",
                              ["flash_attention_kernel", "flash_attention_backward_dq_kernel",
                               "flash_attention_backward_dkdv_kernel"])  # fmt: skip
    assert len(lines) == 18, lines
    assert all(line[-2] == "0" for line in lines), f"local memory: {lines}"
    f32 = [line for line in lines if line[1] == "float32"]
    assert len(f32) == 9 and all(line[-1] == "0" for line in f32), f"float64 math: {f32}"


# ---- the capstone through the fused backend --------------------------------------------------
@pytest.fixture
def fused(monkeypatch):
    """``BACKEND[0] = "fused"`` for one test (restored after it), counting the kernel calls."""
    calls = []
    forward, backward = ak.attention_forward, ak.attention_backward

    def counted(fn, name):
        def call(*args):
            calls.append(name)
            return fn(*args)

        return call

    monkeypatch.setattr(ak, "attention_forward", counted(forward, "forward"))
    monkeypatch.setattr(ak, "attention_backward", counted(backward, "backward"))
    before = list(attn_mod.BACKEND)
    attn_mod.BACKEND[0] = "fused"
    try:
        yield calls
    finally:
        attn_mod.BACKEND[:] = before


@pytest.mark.parametrize(
    "dtype,tol",
    [pytest.param(torch.float32, 1e-6, marks=pytest.mark.slow), (torch.float64, 1e-13)],
)
def test_capstone_one_step_equals_torch_through_the_fused_kernels(fused, dtype, tol):
    """test_capstone.py's own test, its tolerances, on the fused backend."""
    capstone.test_one_step_loss_and_gradients_equal_torch(dtype, tol)
    assert fused == ["forward"] * 2 + ["backward"] * 2  # both layers, both ways


@pytest.mark.slow
@pytest.mark.parametrize("dtype,steps,tol", [(torch.float32, 10, 1e-6), (torch.float64, 10, 1e-12)])
def test_capstone_training_steps_equal_torch_through_the_fused_kernels(fused, dtype, steps, tol):
    capstone.test_training_steps_equal_torch(dtype, steps, tol)
    assert fused.count("forward") == 2 * steps and fused.count("backward") == 2 * steps


def test_capstone_char_model_forward_equals_torch_through_the_fused_kernels(fused):
    capstone.test_char_model_forward_equals_torch()
    assert fused == ["forward"]

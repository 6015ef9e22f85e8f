"""The fused GELU (tanh approximation) of retorch/tensor/gelu_kernels.py against torch's
``F.gelu(approximate="tanh")`` and its gradient (``gelu_backward``), on CPU and on CUDA (the
simulator here, the GPU under ``make test-gpu``), and the one op and node it gives the model.

Tolerances (measured on 2.5 million inputs: a dense grid over [-30, 30] and normals of
standard deviation 3, with random output gradients ``dy``), with ``eps`` the dtype's epsilon:

- forward: ``|ours - torch| <= 4 eps * max(|torch|, 1)``; measured 1.96 eps (float32),
  1.99 eps (float64). ~97% of the values are bit-equal: torch's vectorised ``tanh`` (Sleef,
  within 1 ulp) and libm's differ in the last bit now and then.
- backward: ``|ours - torch| <= 64 eps * max(|torch|, |dy|)``; measured 9.5 eps (float32),
  23.5 eps (float64). The derivative's ``1 - tanh^2`` is multiplied by ``x (1 + 3 kKappa x^2)``,
  so one ulp of ``tanh`` near ``|x| = 7`` becomes ~20 eps of ``dy``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import retorch.tensor as rt
from retorch.dispatch import from_torch
from retorch.models import functional
from retorch.tensor import gelu_kernels as gk
from retorch.utils.checkpoint_memory import memory_totals
from tools.ptx_report import float_kernel_rows

ROOT = Path(__file__).resolve().parent.parent
FWD_TOL, BWD_TOL = 4, 64  # in eps, see the module docstring


def _versus_torch(x, dy, device="cpu", view=None):
    """Our forward and backward on (copies of) ``x`` and ``dy`` against torch's, within the
    tolerances above; ``view`` maps our inputs to the tensors the kernels receive."""
    eps = np.finfo(x.dtype).eps
    ours = [rt.from_numpy(a.copy()).to(device) for a in (x, dy)]
    if view is not None:
        ours = [view(a) for a in ours]
        x, dy = (view(torch.from_numpy(a)).numpy() for a in (x, dy))
    y = gk.gelu(ours[0]).cpu().numpy()
    dx = gk.gelu_backward(ours[1], ours[0]).cpu().numpy()
    tx = torch.from_numpy(np.array(x, order="C")).requires_grad_()
    ty = F.gelu(tx, approximate="tanh")
    ty.backward(torch.from_numpy(np.array(dy, order="C")))
    ry, rdx = ty.detach().numpy(), tx.grad.numpy()
    assert y.shape == ry.shape and dx.shape == rdx.shape
    assert y.dtype == ry.dtype and dx.dtype == rdx.dtype
    fwd = np.abs(y - ry) / np.maximum(np.abs(ry), 1)
    bwd = np.abs(dx - rdx) / np.maximum(np.maximum(np.abs(rdx), np.abs(dy)), np.finfo(x.dtype).tiny)
    assert fwd.max(initial=0) <= FWD_TOL * eps, fwd.max() / eps
    assert bwd.max(initial=0) <= BWD_TOL * eps, bwd.max() / eps


def _inputs(shape, dtype, scale=3.0, seed=0):
    g = np.random.default_rng(seed)
    return (np.asarray(g.standard_normal(shape) * scale, dtype=dtype),
            np.asarray(g.standard_normal(shape), dtype=dtype))  # fmt: skip


# ---- CPU ----------------------------------------------------------------------------------------
@pytest.mark.slow  # ~1 s, most of it starting Numba's threads
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cpu_grid_equals_torch(dtype):
    """Every region of the curve: the tails (tanh = +-1), the bend near -7 where ``1 + tanh``
    cancels, and 0."""
    x = np.linspace(-30, 30, 60_001).astype(dtype)  # threaded (past GRAIN_SIZE)
    dy = np.random.default_rng(1).standard_normal(x.shape).astype(dtype)
    _versus_torch(x, dy)


@pytest.mark.slow  # ~1 s: the first calls compile the kernels for each dtype
@given(
    shape=st.lists(st.integers(0, 7), min_size=0, max_size=3),
    scale=st.sampled_from([0.01, 1.0, 4.0, 50.0]),
    f32=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_cpu_random_equals_torch(shape, scale, f32, seed):
    _versus_torch(*_inputs(tuple(shape), np.float32 if f32 else np.float64, scale, seed))


def test_cpu_reads_strided_views():
    x, dy = _inputs((5, 6), np.float64, seed=3)
    _versus_torch(x, dy, view=lambda a: a.transpose(0, 1)[1:])


@pytest.mark.slow  # ~1 s
def test_cpu_threads_give_the_same_bits_as_one_thread():
    x, dy = _inputs((40_000,), np.float32, seed=4)
    whole = gk.gelu(rt.from_numpy(x)).numpy()
    whole_dx = gk.gelu_backward(rt.from_numpy(dy), rt.from_numpy(x)).numpy()
    parts = [gk.gelu(rt.from_numpy(x[i : i + 1000])).numpy() for i in range(0, x.size, 1000)]
    parts_dx = [gk.gelu_backward(rt.from_numpy(dy[i : i + 1000]), rt.from_numpy(x[i : i + 1000]))
                .numpy() for i in range(0, x.size, 1000)]  # fmt: skip
    assert np.array_equal(whole, np.concatenate(parts))
    assert np.array_equal(whole_dx, np.concatenate(parts_dx))


def test_misuse_raises_torchs_exception_types():
    x = torch.arange(3.0)
    for ours, theirs in ((rt.arange(3), torch.arange(3)),):  # integer input: no kernel
        with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
            gk.gelu(ours)
        with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
            F.gelu(theirs, approximate="tanh")
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        gk.gelu(from_torch(x).data, approximate="sigmoid")
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        F.gelu(x, approximate="sigmoid")
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        F.gelu(from_torch(x), approximate="sigmoid")
    with pytest.raises(NotImplementedError, match="tanh approximation only"):
        F.gelu(from_torch(x))  # the exact GELU needs erf
    with pytest.raises(RuntimeError, match="must have the input's shape"):
        gk.gelu_backward(rt.ones(2), rt.ones(3))


# ---- the op and its node, in the model's call ----------------------------------------------------
def test_f_gelu_is_one_op_one_node_named_as_torchs_and_one_allocation_each_way():
    """``F.gelu(x, approximate="tanh")`` on a retorch Tensor: one autograd node,
    ``GeluBackward0`` as torch's, whose input is x's; forward and backward allocate one tensor
    each (counted by chapter 4's storages), where the composed ``GeluTanh`` allocates 9 + 14."""
    x0, dy0 = _inputs((4, 8), np.float32, seed=5)
    tx = torch.from_numpy(x0).requires_grad_()
    ty = F.gelu(tx, approximate="tanh")
    x = from_torch(tx.detach()).requires_grad_()
    y = F.gelu(x, approximate="tanh")
    assert type(y.grad_fn).__name__ == y.grad_fn.name() == ty.grad_fn.name() == "GeluBackward0"
    assert len(y.grad_fn.next_functions) == 1
    assert y.grad_fn.next_functions[0][0] is x._gradient_edge()[0]
    ty.backward(torch.from_numpy(dy0))
    y.backward(from_torch(torch.from_numpy(dy0)))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=0, atol=BWD_TOL * 1.2e-7)

    def counted(fn):
        def run():
            xr = from_torch(torch.from_numpy(x0)).requires_grad_()
            fn(xr).backward(from_torch(torch.from_numpy(dy0)))

        totals = np.diff(np.array(memory_totals("retorch", run), dtype=np.int64), prepend=0)
        return int((totals == x0.nbytes).sum())  # allocations of the input's size

    base = counted(lambda a: a.view(a.shape))  # x, dy and x.grad: the test's own
    assert counted(lambda a: F.gelu(a, approximate="tanh")) - base == 2  # y, then dx
    assert counted(functional.GeluTanh.apply) - base == 9 + 14  # an op's result each


# ---- CUDA (the simulator here) -------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cuda_equals_torch(dtype):
    """37 elements: more than the simulator's 32 threads of one block (the grid-stride loop
    goes round twice)."""
    _versus_torch(*_inputs((37,), dtype, seed=6), device="cuda")
    _versus_torch(np.linspace(-12, 12, 9).astype(dtype), np.ones(9, dtype), device="cuda")


def test_cuda_reads_strided_views_and_empty():
    x, dy = _inputs((5, 6), np.float32, seed=7)
    _versus_torch(x, dy, device="cuda", view=lambda a: a.transpose(0, 1)[1:])
    _versus_torch(*_inputs((0, 3), np.float32), device="cuda")


@pytest.mark.slow  # ~10 s: 12 compilations
def test_ptx_compiles_without_local_memory_and_float32_stays_float32():
    lines = float_kernel_rows("retorch.tensor.gelu_kernels",
                              ["gelu_tanh_kernel", "gelu_tanh_backward_kernel"])  # fmt: skip
    assert len(lines) == 12, lines
    assert all(line[-2] == "0" for line in lines), f"local memory: {lines}"
    f32 = [line for line in lines if line[1] == "float32"]
    assert len(f32) == 6 and all(line[-1] == "0" for line in f32), f"float64 math: {f32}"
    f64 = [line for line in lines if line[1] == "float64"]
    assert all(line[-1] != "0" for line in f64), f"float64 kernels without float64 math: {f64}"

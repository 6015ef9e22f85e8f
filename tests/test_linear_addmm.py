"""``addmm`` and ``linear`` as torch composes them (``Linear.cpp``, ``LinearAlgebra.cpp``).

- ``retorch.tensor``'s ``addmm`` against ``torch.addmm``: random sizes (empty ones included),
  every bias shape that broadcasts, ``beta``/``alpha`` of 0, 1 and others; float64 values
  within 1e-12 (the two matmuls sum in different orders), misuse with torch's message;
- ``linear`` through chapter 5's dispatcher: the backend ops it reaches equal those torch's
  ``__torch_dispatch__`` sees, its ``grad_fn`` is torch's (``AddmmBackward0``,
  ``ViewBackward0``, ``MmBackward0``, ``UnsafeViewBackward0``), values and gradients within 1e-12.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

import retorch.tensor as rt
from retorch.dispatch import Tensor, aten
from retorch.dispatch.dispatcher import get_dispatcher
from retorch.tensor import ops as rops

TOL = 1e-12


@st.composite
def addmm_cases(draw):
    m, k, n = (draw(st.integers(0, 5)) for _ in range(3))
    bias_shape = draw(st.sampled_from([(n,), (1, n), (m, 1), (m, n), (), (1,)]))
    beta = draw(st.sampled_from([1, 0, 2, -0.5]))
    alpha = draw(st.sampled_from([1, 0, 3, 0.25]))
    seed = draw(st.integers(0, 2**16))
    return m, k, n, bias_shape, beta, alpha, seed


@settings(max_examples=120, deadline=None)
@given(addmm_cases())
def test_addmm_equals_torch(case):
    m, k, n, bias_shape, beta, alpha, seed = case
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in (bias_shape, (m, k), (k, n))]
    if beta == 0:
        arrays[0] = np.full(bias_shape, np.nan)  # beta=0 ignores self, NaN included
    mine = rops.addmm(*(rt.from_numpy(a.copy()) for a in arrays), beta=beta, alpha=alpha)
    torchs = torch.addmm(*(torch.from_numpy(a) for a in arrays), beta=beta, alpha=alpha)
    assert mine.shape == tuple(torchs.shape)
    np.testing.assert_allclose(mine.numpy(), torchs.numpy(), rtol=TOL, atol=TOL)


@pytest.mark.parametrize(
    "bias, mat1, mat2",
    [
        ((5,), (2, 3), (3, 4)),  # a bias that does not broadcast
        ((3,), (3,), (3, 4)),  # mat1 not a matrix
        ((4,), (2, 3), (3,)),  # mat2 not a matrix
        ((4,), (2, 3), (4, 4)),  # shapes that cannot be multiplied
    ],
)
def test_addmm_misuse_raises_torchs_error(bias, mat1, mat2):
    arrays = [np.ones(s) for s in (bias, mat1, mat2)]
    with pytest.raises(RuntimeError) as theirs:
        torch.addmm(*(torch.from_numpy(a) for a in arrays))
    with pytest.raises(RuntimeError) as ours:
        rops.addmm(*(rt.from_numpy(a) for a in arrays))
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("which", ["self", "mat1"])
def test_addmm_dtype_mismatch_raises_torchs_error(which):
    arrays = {"self": np.ones(4), "mat1": np.ones((2, 3)), "mat2": np.ones((3, 4))}
    arrays[which] = arrays[which].astype(np.float32)
    with pytest.raises(RuntimeError) as theirs:
        torch.addmm(*(torch.from_numpy(a) for a in arrays.values()))
    with pytest.raises(RuntimeError) as ours:
        rops.addmm(*(rt.from_numpy(a) for a in arrays.values()))
    assert str(ours.value) == str(theirs.value)


class _BackendOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(func._schema.name)
        return func(*args, **(kwargs or {}))


# input shape, bias, a transposed (non-contiguous) input
LINEAR_CASES = [
    ((2, 3), True, False),
    ((2, 3), False, False),
    ((3, 2), True, True),
    ((5, 2, 3), True, False),
    ((5, 2, 3), False, False),
    ((4, 5, 2, 3), True, False),
    ((3,), True, False),
    ((0, 3), True, False),
]


@pytest.mark.parametrize("shape, bias, transposed", LINEAR_CASES)
def test_linear_reaches_torchs_ops_and_grad_fn(shape, bias, transposed):
    rng = np.random.default_rng(len(shape) * 10 + bias)
    arrays = [rng.standard_normal(s) for s in (shape, (4, 3), (4,))]
    t = [torch.from_numpy(a.copy()).requires_grad_() for a in arrays]
    r = [Tensor.from_numpy(a.copy()).requires_grad_() for a in arrays]
    tx, rx = (t[0].t(), aten.t(r[0])) if transposed else (t[0], r[0])
    with _BackendOps() as mode:
        ty = F.linear(tx, t[1], t[2] if bias else None)
    with get_dispatcher().trace() as seen:
        ry = F.linear(rx, r[1], r[2] if bias else None)
    assert [op for op, key in seen if key == "CPU"] == mode.seen
    assert ry.grad_fn.name() == ty.grad_fn.name()
    ty.sum().backward()
    ry.sum().backward()
    np.testing.assert_allclose(ry.detach().numpy(), ty.detach().numpy(), rtol=TOL, atol=TOL)
    for mine, torchs in zip(r if bias else r[:2], t if bias else t[:2], strict=True):
        np.testing.assert_allclose(mine.grad.numpy(), torchs.grad.numpy(), rtol=TOL, atol=TOL)


@pytest.mark.parametrize("beta, alpha", [(1, 1), (2, 1), (1, 3), (0.5, -2)])
def test_addmm_backward_equals_torchs(beta, alpha):
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s) for s in ((4,), (2, 3), (3, 4))]
    t = [torch.from_numpy(a.copy()).requires_grad_() for a in arrays]
    r = [Tensor.from_numpy(a.copy()).requires_grad_() for a in arrays]
    ty = torch.addmm(*t, beta=beta, alpha=alpha)
    ry = aten.addmm(*r, beta=beta, alpha=alpha)
    assert ry.grad_fn.name() == ty.grad_fn.name() == "AddmmBackward0"
    g = rng.standard_normal((2, 4))
    ty.backward(torch.from_numpy(g))
    ry.backward(Tensor.from_numpy(g))
    for mine, torchs in zip(r, t, strict=True):
        np.testing.assert_allclose(mine.grad.numpy(), torchs.grad.numpy(), rtol=TOL, atol=TOL)

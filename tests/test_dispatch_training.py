"""The whole stack on retorch alone: retorch.nn modules with retorch.Tensor parameters,
retorch.optim stepping them, retorch.utils.data feeding them, against the same model in torch.

200 steps of a 2-layer MLP (float64, same initial weights, same batches): no torch kernel runs
in retorch's loop (``count_aten_calls``: 0), and every loss equals torch's within 1e-12
(float64: the kernels differ from torch's in summation order only, ~1e-16 per op, and the
curves measured 2e-15 apart at most; a wrong gradient or a missed optimizer step moves the
curve by far more within a few steps: a 0.1% error in addcdiv_'s value gave 3e-3).
"""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from retorch import nn
from retorch.autograd import count_aten_calls
from retorch.dispatch import Tensor, collate, to_retorch
from retorch.optim import SGD, Adam
from retorch.utils.data import DataLoader, TensorDataset

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow

STEPS, BATCH, TOL = 200, 16, 1e-12


def _data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((STEPS * BATCH, 10))
    w = rng.standard_normal((10, 4))
    y = np.argmax(x @ w + 0.5 * rng.standard_normal((STEPS * BATCH, 4)), axis=1)
    order = rng.permutation(STEPS * BATCH).tolist()  # the same batches for both
    return x, y, order


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 4)).double()


def _train(model, opt, loader):
    losses = []
    for xb, yb in loader:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


OPTIMIZERS = {
    "sgd-loop": lambda p: SGD(p, lr=0.1, momentum=0.9, foreach=False),
    "sgd-foreach": lambda p: SGD(p, lr=0.1, momentum=0.9, foreach=True),
    "adam-loop": lambda p: Adam(p, lr=1e-2, foreach=False),
    "adam-foreach": lambda p: Adam(p, lr=1e-2, foreach=True),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_mlp_trains_on_retorch_alone_as_torch(name):
    x, y, order = _data()
    torch_model = _model()
    ours = to_retorch(copy.deepcopy(torch_model))
    assert all(isinstance(p, Tensor) for p in ours.parameters())

    t_loader = DataLoader(
        TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=BATCH, sampler=order
    )
    expected = _train(torch_model, OPTIMIZERS[name](torch_model.parameters()), t_loader)

    r_data = TensorDataset(Tensor.from_numpy(x), Tensor.from_numpy(y))
    r_loader = DataLoader(r_data, batch_size=BATCH, sampler=order, collate_fn=collate)
    batches = iter(r_loader)  # draws the loader's base seed with torch, as torch's does
    opt = OPTIMIZERS[name](ours.parameters())
    with count_aten_calls() as calls:
        got = _train(ours, opt, batches)
    assert calls.total == 0, calls.calls
    assert len(got) == len(expected) == STEPS
    diff = np.abs(np.array(got) - np.array(expected))
    assert diff.max() < TOL, (diff.max(), int(diff.argmax()))
    assert got[-1] < 0.6 * got[0]  # it learned
    for p, q in zip(ours.parameters(), torch_model.parameters(), strict=True):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=0, atol=1e-12)

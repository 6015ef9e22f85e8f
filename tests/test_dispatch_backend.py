"""A PrivateUse1 backend registered through the Library API only: an arena allocator and
NumPy kernels, dispatched by the PrivateUse1 rows, autograd from the AutogradPrivateUse1 rows."""

import numpy as np
import pytest
import torch

from retorch.dispatch import native_functions as nf
from retorch.dispatch.backend_registration import ArenaBackend, rename_privateuse1_backend
from retorch.dispatch.dispatch_key import DispatchKey

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow

aten = nf.aten


@pytest.fixture
def arena():
    backend = ArenaBackend("arena", nbytes=1 << 16)
    yield backend
    backend.destroy()


def test_forward_runs_the_backend_kernels_in_its_own_memory(arena):
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    x, w = arena.tensor(xv), arena.tensor(wv)
    assert repr(x.key_set) == (
        "DispatchKeySet(PrivateUse1, ADInplaceOrView, AutogradPrivateUse1, AutocastPrivateUse1)"
    )
    assert x.key_set.remove(DispatchKey.AutocastPrivateUse1).highest_priority_type_id() == (
        DispatchKey.AutogradPrivateUse1
    )
    assert x.device == "arena" and x.device.type == "arena"
    before = arena.allocator.allocations
    y = (x.mm(w.t())).relu()
    assert arena.allocator.allocations - before == 2  # mm and relu; t() is a view
    assert arena.allocator.owns(y.data.numpy()) and y.device == "arena"
    expected = torch.relu(torch.tensor(xv) @ torch.tensor(wv).T).numpy()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-12, atol=1e-14)
    rows = aten.mm.default.dump_table()
    assert "PrivateUse1: registered at" in rows and "AutogradPrivateUse1" in rows


def test_autograd_comes_from_the_autograd_rows(arena):
    rng = np.random.default_rng(1)
    xv, wv = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    x, w = arena.tensor(xv), arena.tensor(wv, requires_grad=True)
    loss = x.mm(w.t()).relu().sum()
    loss.backward()
    tw = torch.tensor(wv, requires_grad=True)
    tloss = torch.relu(torch.tensor(xv).mm(tw.t())).sum()
    tloss.backward()
    node, tnode = loss.grad_fn, tloss.grad_fn
    while tnode is not None:  # the same chain of nodes, by exact name, down to the leaf
        assert node.name() == tnode.name()
        node = next((n for n, _ in node.next_functions if n is not None), None)
        tnode = next((n for n, _ in tnode.next_functions if n is not None), None)
    assert node is None
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_missing_kernel_and_registration_errors(arena):
    x = arena.tensor(np.ones((2, 2)))
    with pytest.raises(NotImplementedError, match="Could not run 'aten::exp' with arguments "
                       "from the 'PrivateUse1' backend"):  # fmt: skip
        x.exp()
    with pytest.raises(RuntimeError, match="already registered to the PrivateUse1"):
        ArenaBackend("arena")
    with pytest.raises(RuntimeError, match="has already been set! Current backend: arena"):
        rename_privateuse1_backend("other")
    small = ArenaBackend.__new__(ArenaBackend)
    from retorch.dispatch.backend_registration import ArenaAllocator

    small.allocator = ArenaAllocator(128)
    with pytest.raises(RuntimeError, match="arena out of memory"):
        small.allocator.allocate((64,), np.float64)


def test_destroy_deregisters_every_kernel():
    backend = ArenaBackend("arena", nbytes=1 << 12)
    assert aten.add.Tensor.has_kernel_for_dispatch_key("PrivateUse1")
    backend.destroy()
    assert not aten.add.Tensor.has_kernel_for_dispatch_key("PrivateUse1")
    assert not aten.add.Tensor.has_computed_kernel_for_dispatch_key("PrivateUse1")

"""retorch.tensor's Storage and Tensor basics: 64-byte alignment, sizes in bytes as torch's,
memory shared with NumPy both ways, torch's errors for non-resizable storage and bad arrays,
the CUDA allocator hook, and the array interface chapter 3's engine calls (_ops.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retorch.tensor as rt
from retorch.tensor import storage as storage_mod


def outcome(fn):
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001
        return "error", (type(e), str(e))


@pytest.mark.parametrize("n", [1, 3, 7, 64, 1000, 4097])
def test_cpu_storage_is_64_byte_aligned(n):
    for dtype in (rt.float32, rt.float64, rt.int32, rt.bool):
        t = rt.empty(n, dtype=dtype)
        assert rt.ALIGNMENT == 64
        assert t.untyped_storage().data_ptr() % 64 == 0


def test_storage_sizes_match_torch():
    for make in (
        lambda m: m.empty(3, 5),
        lambda m: m.zeros(2, 3, dtype=m.float64),
        lambda m: m.empty_strided((2, 3), (1, 2)),
        lambda m: m.empty_strided((2, 3), (10, 1)),
        lambda m: m.empty(0, 4),
        lambda m: m.arange(10)[2:5],
    ):
        ours, theirs = make(rt), make(torch)
        assert ours.untyped_storage().nbytes() == theirs.untyped_storage().nbytes()


def test_from_numpy_shares_memory_both_ways():
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:]
    t = rt.from_numpy(arr)
    assert t.stride() == torch.from_numpy(arr).stride()
    assert t.data_ptr() == arr.ctypes.data
    arr[0, 0] = 100
    assert t[0, 0].item() == 100
    t.numpy()[2, 2] = -1
    assert arr[2, 2] == -1
    t.add_(1)  # an op writing in place reaches the NumPy array
    assert arr[2, 2] == 0


def test_from_numpy_errors_match_torch():
    rev = np.arange(5)[::-1]
    assert outcome(lambda: rt.from_numpy(rev)) == outcome(lambda: torch.from_numpy(rev))
    objs = np.array([object()])
    assert (
        outcome(lambda: rt.from_numpy(objs))[1][0] is outcome(lambda: torch.from_numpy(objs))[1][0]
    )


def test_resize_of_a_borrowed_storage_fails_as_torch():
    arr = np.arange(5)
    r = outcome(lambda: rt.from_numpy(arr).untyped_storage().resize_(80))
    t = outcome(lambda: torch.from_numpy(arr).untyped_storage().resize_(80))
    assert r == t
    own = rt.arange(4)
    own.untyped_storage().resize_(64)
    assert own.untyped_storage().nbytes() == 64 and own.tolist() == [0, 1, 2, 3]


def test_cuda_storage_goes_through_the_allocator_hook():
    seen = []

    def allocator(nbytes):
        from numba import cuda

        seen.append(nbytes)
        return cuda.device_array(nbytes, dtype=np.uint8)

    previous = storage_mod.set_cuda_allocator(allocator)
    try:
        rt.empty(3, 5, device="cuda")
    finally:
        storage_mod.set_cuda_allocator(previous)
    assert seen == [60]


def test_tensor_satisfies_the_autograd_array_interface():
    """The contract of retorch/autograd/_ops.py: .shape (tuple), .dtype, .device, .dim(),
    .item() and a repr."""
    x = rt.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert isinstance(x.shape, tuple) and x.shape == (2, 2)
    assert x.dtype is rt.float32 and x.device == "cpu" and x.dim() == 2
    assert x.sum().item() == 10.0 and isinstance(x.sum().item(), float)
    assert repr(x).startswith("tensor(")
    z = rt.zeros(x.shape, dtype=x.dtype, device=x.device)
    assert z.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert rt.ones_like(x).sum().item() == 4.0


def test_len_bool_and_iteration():
    x, tx = rt.arange(6).view(2, 3), torch.arange(6).view(2, 3)
    assert len(x) == len(tx)
    assert [r.tolist() for r in x] == [r.tolist() for r in tx]
    assert outcome(lambda: bool(x)) == outcome(lambda: bool(tx))
    assert outcome(lambda: len(rt.tensor(1.0))) == outcome(lambda: len(torch.tensor(1.0)))


def test_every_array_function_autograd_needs_has_a_counterpart():
    """Each entry of retorch/autograd/_ops.py's contract exists here (the backend switch that
    plugs them in is later work)."""
    functions = (
        "add sub mul div neg pow exp log tanh sigmoid relu reciprocal gt le eq where sum mean "
        "amax max mm mv dot bmm softmax log_softmax nll_loss view reshape expand permute "
        "transpose t unsqueeze squeeze clone index_select zeros zeros_like ones_like "
        "scalar_tensor tensor isnan any"
    ).split()
    missing = [f for f in functions if not callable(getattr(rt, f, None))]
    methods = (
        "__getitem__ __setitem__ is_contiguous stride contiguous add_ mul_ zero_ scatter "
        "index_add_ numel tolist type item dim"
    ).split()
    missing += [m for m in methods if not callable(getattr(rt.Tensor, m, None))]
    assert missing == []


@pytest.mark.slow  # seconds each: make unit runs it, check-fast stays under a minute
def test_layering_no_torch_autograd_or_nn_in_retorch_tensor():
    """retorch.tensor sits at the bottom of the stack: importing and using it loads no torch."""
    import subprocess
    import sys

    code = (
        "import sys, retorch.tensor as rt\n"
        "x = rt.arange(6.0).view(2, 3); (x + 1).sum(); x.cuda() @ x.t().cuda()\n"
        "print(sorted(m for m in ('torch', 'retorch.autograd', 'retorch.nn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr

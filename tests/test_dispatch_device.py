"""Moving retorch.Tensors between devices, and the whole stack training on CUDA tensors.

``Tensor.to`` goes through ``aten::to.dtype_layout`` (CompositeImplicitAutograd: ``self`` when
nothing changes) to ``aten::_to_copy``, whose autograd kernel records ``ToCopyBackward0``;
chapter 1's ``Module.to("cuda")`` and ``to_retorch(module, device="cuda")`` move a model. On a
machine without a GPU the CUDA kernels run under Numba's CUDA simulator, on a GPU for real.
"""

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchgen
import yaml

from retorch import nn
from retorch.autograd import count_aten_calls
from retorch.dispatch import Tensor, native_functions, to_retorch
from retorch.dispatch import tensor as rtensor
from retorch.optim import SGD

#: torch ships its operator list with torchgen
NATIVE_FUNCTIONS = Path(torchgen.__file__).parent / "packaged/ATen/native/native_functions.yaml"


def test_to_returns_self_when_nothing_changes_as_torch():
    ours, theirs = rtensor([1.0, 2.0]), torch.tensor([1.0, 2.0])
    for args in [("cpu",), (torch.float32,), (), ("cpu", torch.float32)]:
        assert theirs.to(*args) is theirs
        assert ours.to(*args) is ours, args
    assert theirs.to(theirs) is theirs and ours.to(ours) is ours
    assert theirs.to("cpu", copy=True) is not theirs
    copied = ours.to("cpu", copy=True)
    assert copied is not ours and copied.data.data_ptr() != ours.data.data_ptr()


def test_to_cuda_records_the_move_and_its_gradient_comes_back_to_the_cpu():
    a = rtensor([[1.0, -2.0, 3.0]], requires_grad=True)
    b = a.to("cuda")
    assert b.device == "cuda" and "AutogradCUDA" in str(b.key_set)
    ta = torch.tensor([[1.0, -2.0, 3.0]], requires_grad=True)
    assert type(b.grad_fn).__name__ == ta.to(torch.float64).grad_fn.name()  # a move is a copy
    (b * b).sum().backward()
    (ta.to(torch.float64) * ta.to(torch.float64)).sum().backward()  # the same function, on CPU
    assert a.grad.device == "cpu" and a.grad.data.dtype.name == "float32"
    assert a.to(b).device == "cuda" and b.to(a).device == "cpu"
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())
    np.testing.assert_array_equal(b.cpu().numpy(), a.numpy())
    assert torch.equal(b.to_torch(), ta.detach())


def test_a_dtype_cast_and_its_gradient_match_torch():
    ours = rtensor([0.5, 1.5], requires_grad=True)
    theirs = torch.tensor([0.5, 1.5], requires_grad=True)
    for t in (ours, theirs):
        (t.to(torch.float64) * 3.0).sum().backward()
    assert ours.grad.data.dtype.name == str(theirs.grad.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


def test_mixed_devices_raise_torchs_errors():
    cpu, cuda = rtensor([[1.0, 2.0]]), rtensor([[1.0, 2.0]], device="cuda")
    # mm keeps torchgen's device check (wrapper_CUDA_mm), with adaption.cpp's message
    with pytest.raises(RuntimeError) as info:
        cpu.mm(cuda.t())
    assert str(info.value) == (
        "Expected all tensors to be on the same device, but got mat2 is on cuda:0, different "
        "from other tensors on cpu (when checking argument in method wrapper_CUDA_mm)"
    )
    # add is device_check: NoCheck: TensorIterator checks, with its own message
    with pytest.raises(RuntimeError, match="found at least two devices, cuda:0 and cpu"):
        cpu + cuda
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda, meta device type"):
        cpu.to("xla")


@pytest.mark.slow  # reads torch's whole native_functions.yaml: make unit runs it
def test_the_ops_that_keep_a_device_check_are_those_torchs_yaml_names():
    entries = yaml.safe_load(NATIVE_FUNCTIONS.read_text())
    checked = {
        e["func"].split("(")[0]
        for e in entries
        if e["func"].split("(")[0] in native_functions.BACKEND and "device_check" not in e
    }
    assert checked == set(native_functions.DEVICE_CHECK)


def _batches(n, size=8):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n * size, 10))
    y = np.argmax(x @ rng.standard_normal((10, 4)), axis=1)
    return [(x[i * size : (i + 1) * size], y[i * size : (i + 1) * size]) for i in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["to_retorch(device=)", "Module.to"])
def test_the_mlp_trains_on_cuda_tensors_with_no_torch_kernel(how):
    """Three SGD steps on CUDA retorch tensors (simulated where there is no GPU) against the
    same model in torch on the CPU: losses within 1e-12 (float64), no aten op in our loop."""
    torch.manual_seed(0)
    theirs = nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 4)).double()
    if how == "Module.to":
        ours = to_retorch(copy.deepcopy(theirs)).to("cuda")
    else:
        ours = to_retorch(copy.deepcopy(theirs), device="cuda")
    assert {p.device for p in ours.parameters()} == {"cuda"}
    assert all(p.is_leaf and p.requires_grad for p in ours.parameters())
    opt = SGD(ours.parameters(), lr=0.1, momentum=0.9, foreach=False)
    topt = torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9, foreach=False)
    for x, y in _batches(3):
        xb, yb = Tensor.from_numpy(x).to("cuda"), Tensor.from_numpy(y).cuda()
        with count_aten_calls() as calls:
            loss = F.cross_entropy(ours(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert calls.total == 0 and loss.device == "cuda"
        tloss = F.cross_entropy(theirs(torch.from_numpy(x)), torch.from_numpy(y))
        topt.zero_grad()
        tloss.backward()
        topt.step()
        assert abs(loss.item() - tloss.item()) < 1e-12
    back = ours.to("cpu")
    assert len(list(back.parameters())) == len(list(theirs.parameters()))
    for p, q in zip(back.parameters(), theirs.parameters(), strict=True):
        assert p.device == "cpu"
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=0, atol=1e-12)

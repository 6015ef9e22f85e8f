"""The default device (retorch/_switches.py) against torch's (``torch/__init__.py``
``set_default_device`` / ``get_default_device``, ``torch/utils/_device.py`` ``DeviceContext``):
which factories obey it, an explicit device winning, ``with device(...)`` nesting over the
global default, reset with ``None``, and misuse. On a CPU-only torch the device both libraries
have is ``meta`` (besides ``cpu``); retorch's ``cuda`` runs on the simulator."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
import torch.utils._device as torch_device

import retorch
import retorch.dispatch
import retorch.tensor as rt
from retorch import _switches

#: factory call -> the same call for a library (retorch.tensor or torch)
FACTORIES = {
    "empty(2)": lambda lib: lib.empty(2),
    "empty_strided((2,), (1,))": lambda lib: lib.empty_strided((2,), (1,)),
    "zeros(2, 3)": lambda lib: lib.zeros(2, 3),
    "ones(2)": lambda lib: lib.ones(2),
    "full((2,), 1.5)": lambda lib: lib.full((2,), 1.5),
    "arange(3)": lambda lib: lib.arange(3),
    "tensor([1.0, 2.0])": lambda lib: lib.tensor([1.0, 2.0]),
    "scalar_tensor(1.0)": lambda lib: lib.scalar_tensor(1.0),
    "zeros(2, device=None)": lambda lib: lib.zeros(2, device=None),
    "zeros(2, device='cpu')": lambda lib: lib.zeros(2, device="cpu"),
    "tensor([1], device='cpu')": lambda lib: lib.tensor([1], device="cpu"),
    "from_numpy": lambda lib: lib.from_numpy(np.zeros(2)),
    "zeros_like(a cpu tensor)": lambda lib: lib.zeros_like(lib.zeros(2, device="cpu")),
    "ones_like(a cpu tensor)": lambda lib: lib.ones_like(lib.zeros(2, device="cpu")),
    "empty_like(a cpu tensor)": lambda lib: lib.empty_like(lib.zeros(2, device="cpu")),
}


def _device_type(t) -> str:
    return str(t.device).split(":")[0]


@pytest.fixture(autouse=True)
def _reset_both():
    yield
    torch.set_default_device(None)
    retorch.set_default_device(None)
    assert _switches._device_contexts == [] and _switches._unwrapped_constructors == {}


def test_constructor_list_is_torchs_where_retorch_has_the_factory():
    """Every factory of retorch.tensor that takes a device and whose torch namesake is in
    torch's ``_device_constructors()`` is wrapped, and no other."""
    torch_names = {f.__name__ for f in torch_device._device_constructors()}
    ours = {name for module, name in _switches.DEVICE_CONSTRUCTORS if module == "retorch.tensor"}
    with_device = {n for n in rt.__all__ if inspect.isfunction(getattr(rt, n, None))
                   and "device" in inspect.signature(getattr(rt, n)).parameters}  # fmt: skip
    assert ours == with_device & torch_names
    assert ours <= torch_names


@pytest.mark.parametrize("default", ["meta", "cpu", torch.device("meta")])
def test_factories_follow_the_default_as_torchs_do(default):
    torch.set_default_device(default)
    retorch.set_default_device(default)
    assert str(retorch.get_default_device()) == str(torch.get_default_device())
    for case, make in FACTORIES.items():
        assert _device_type(make(rt)) == _device_type(make(torch)), case
    assert _device_type(retorch.dispatch.tensor([1.0])) == _device_type(torch.tensor([1.0]))


def test_meta_default_reaches_every_constructor_and_not_the_rest():
    """The expected column written out, so that both libraries agreeing on "cpu" everywhere
    (a default that does nothing) fails too."""
    torch.set_default_device("meta")
    retorch.set_default_device("meta")
    follows = {"empty(2)", "empty_strided((2,), (1,))", "zeros(2, 3)", "ones(2)",
               "full((2,), 1.5)", "arange(3)", "tensor([1.0, 2.0])", "scalar_tensor(1.0)",
               "zeros(2, device=None)"}  # fmt: skip
    for case, make in FACTORIES.items():
        want = "meta" if case in follows else "cpu"
        assert (_device_type(make(rt)), _device_type(make(torch))) == (want, want), case


def test_ops_on_cpu_tensors_stay_on_the_cpu_under_a_default_device():
    """torch's C++ (a Python number wrapped as a CPU tensor, a kernel's temporaries) never
    meets the default; retorch's packages that stand for it (``_switches.INTERNAL_CALLERS``)
    do not either, while Python modules such as ``nn.Linear`` follow it in both."""
    import retorch.dispatch as rd
    import retorch.nn as rn

    torch.set_default_device("meta")
    retorch.set_default_device("meta")
    a, ta = rd.tensor([0.0, 1.0], device="cpu"), torch.tensor([0.0, 1.0], device="cpu")
    for case, ours, theirs in [("a + 2", a + 2, ta + 2), ("a * 2.5", a * 2.5, ta * 2.5),
                               ("2 - a", 2 - a, 2 - ta), ("a.sum()", a.sum(), ta.sum()),
                               ("a.exp()", a.exp(), ta.exp())]:  # fmt: skip
        assert (_device_type(ours), _device_type(theirs)) == ("cpu", "cpu"), case
    assert _device_type(rn.Linear(2, 3).weight) == _device_type(torch.nn.Linear(2, 3).weight)
    assert _device_type(torch.nn.Linear(2, 3).weight) == "meta"


def test_with_device_nests_over_the_global_default_and_restores():
    seen = {}
    for mod, zeros in ((torch, torch.zeros), (retorch, lambda n: rt.zeros(n))):
        steps = seen[mod.__name__] = []

        def record():
            steps.append((str(mod.get_default_device()), _device_type(zeros(1))))  # noqa: B023

        record()
        mod.set_default_device("meta")
        record()
        with mod.device("cpu"):
            record()
            with mod.device("meta"):
                record()
            record()
        record()
        mod.set_default_device(None)
        record()
    assert seen["retorch"] == seen["torch"]
    assert seen["torch"] == [(d, d) for d in ("cpu", "meta", "cpu", "meta", "cpu", "meta", "cpu")]


def test_an_exception_in_the_block_restores_the_default():
    with pytest.raises(ZeroDivisionError), retorch.device("meta"):
        assert rt.ones(1).device == "meta"
        raise ZeroDivisionError
    assert str(retorch.get_default_device()) == "cpu" and rt.ones(1).device == "cpu"
    assert rt.ones is rt.tensor_factories.ones  # the wrapper is gone: nothing costs while unset


def test_reset_with_none_unwraps_the_factories():
    zeros = rt.zeros
    retorch.set_default_device("meta")
    assert rt.zeros is not zeros and rt.zeros(1).device == "meta"
    retorch.set_default_device("cpu")  # replaces the global default: one context, not two
    assert len(_switches._device_contexts) == 1 and rt.zeros(1).device == "cpu"
    retorch.set_default_device(None)
    assert rt.zeros is zeros and _switches._device_contexts == []


@pytest.mark.parametrize(
    "bad, exc, text",
    [("gpu", RuntimeError, "device type at start of device string: gpu"),
     (1.5, TypeError, "device() received an invalid combination of arguments - got (float)")],
)  # fmt: skip
def test_misuse_raises_torchs_exception_and_drops_the_default(bad, exc, text):
    """torch exits the old default before it parses the new device: after the error the
    default is the CPU, in both libraries."""
    torch.set_default_device("meta")
    retorch.set_default_device("meta")
    for lib in (torch, retorch):
        with pytest.raises(exc) as info:
            lib.set_default_device(bad)
        assert text in str(info.value), (lib.__name__, str(info.value))
        with pytest.raises(exc):
            lib.device(bad)
    assert str(retorch.get_default_device()) == str(torch.get_default_device()) == "cpu"
    assert rt.zeros(1).device == _device_type(torch.zeros(1)) == "cpu"


@pytest.mark.simulator
def test_cuda_default_allocates_on_the_simulated_gpu():
    """Where torch would need a GPU, retorch's ``cuda`` runs on Numba's simulator: the default
    device reaches the CUDA allocation, and ``get_default_device`` adds the index 0, as torch's
    adds the current device's."""
    with retorch.device("cuda"):
        t = rt.full((3,), 2.0)
        assert str(retorch.get_default_device()) == "cuda:0"
    assert t.device == "cuda" and t.cpu().numpy().tolist() == [2.0, 2.0, 2.0]

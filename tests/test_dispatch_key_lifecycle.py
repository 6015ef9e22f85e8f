"""A tensor's dispatch keys through its life, beside torch's: views, in-place ops,
requires_grad_, detach, no_grad, inference mode (c10/core/InferenceMode.h; TensorImpl's key
set at creation and for views) and meta tensors. Each scenario runs the same code on torch and
on retorch (``lib`` names the tensor factory and the modes); what is compared is the key set
(its raw 64 bits), ``is_inference()``, and the version counter where both have one."""

import numpy as np
import pytest
import torch

import retorch.dispatch as rd
import retorch.tensor as rt
from retorch.dispatch import tls_local_dispatch_key_set
from retorch.dispatch.inference_mode import inference_mode


class Torch:
    inference_mode = staticmethod(torch.inference_mode)
    no_grad = staticmethod(torch.no_grad)

    @staticmethod
    def new(device="cpu", requires_grad=False):
        return torch.ones(2, 3, dtype=torch.float64, device=device, requires_grad=requires_grad)

    @staticmethod
    def keys(t):
        return torch._C._dispatch_keys(t)

    @staticmethod
    def tls():
        return (
            torch._C._dispatch_tls_local_include_set(),
            torch._C._dispatch_tls_local_exclude_set(),
        )


class Ours:
    inference_mode = staticmethod(inference_mode)

    @staticmethod
    def no_grad():
        from retorch.autograd import no_grad

        return no_grad()

    @staticmethod
    def new(device="cpu", requires_grad=False):
        raw = rt.ones((2, 3), dtype=rt.float64, device=device)
        return rd.Tensor(raw, requires_grad=requires_grad)

    @staticmethod
    def keys(t):
        return t.key_set

    @staticmethod
    def tls():
        return tls_local_dispatch_key_set()


def _fresh(L):
    return L.new()


def _fresh_requires_grad(L):
    return L.new(requires_grad=True)


def _requires_grad_(L):
    return L.new().requires_grad_()


def _view_t(L):
    return L.new().t()


def _view_of_result(L):
    return (L.new(requires_grad=True) * 2).view(6)


def _detach(L):
    return (L.new(requires_grad=True) * 2).detach()


def _inplace(L):
    x = L.new()
    x.add_(L.new())
    return x


def _meta(L):
    return L.new(device="meta")


def _meta_view(L):
    return L.new(device="meta").t()


def _under_no_grad(L):
    with L.no_grad():
        return L.new() * 2


def _inference_fresh(L):
    with L.inference_mode():
        return L.new()


def _inference_op_on_normal(L):
    x = L.new()
    with L.inference_mode():
        return x * 2


def _inference_view_of_normal(L):
    x = L.new()
    with L.inference_mode():
        return x.t()


def _inference_detach_of_normal(L):
    x = L.new(requires_grad=True)
    with L.inference_mode():
        return x.detach()


def _inference_inplace_on_normal(L):
    x = L.new()
    with L.inference_mode():
        x.add_(L.new())
    return x


def _inference_mixed(L):
    x = L.new()
    with L.inference_mode():
        return x + L.new()


def _inference_meta(L):
    with L.inference_mode():
        return L.new(device="meta")


def _view_of_inference_outside(L):
    with L.inference_mode():
        i = L.new()
    return i.t()


def _detach_of_inference_outside(L):
    with L.inference_mode():
        i = L.new()
    return i.detach()


def _op_on_inference_outside(L):
    with L.inference_mode():
        i = L.new()
    return i + 1


def _inference_mode_false_inside(L):
    with L.inference_mode(), L.inference_mode(False):
        return L.new()


def _inference_decorated(L):
    return L.inference_mode()(lambda: L.new() * 2)()


SCENARIOS = [
    _fresh, _fresh_requires_grad, _requires_grad_, _view_t, _view_of_result, _detach, _inplace,
    _meta, _meta_view, _under_no_grad, _inference_fresh, _inference_op_on_normal,
    _inference_view_of_normal, _inference_detach_of_normal, _inference_inplace_on_normal,
    _inference_mixed, _inference_meta, _view_of_inference_outside, _detach_of_inference_outside,
    _op_on_inference_outside, _inference_mode_false_inside, _inference_decorated,
]  # fmt: skip


def _state(L, t):
    ks = L.keys(t)
    version = None if t.is_inference() else t._version
    return repr(ks), ks.raw_repr(), t.is_inference(), version, t.requires_grad


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__.strip("_"))
def test_key_set_through_a_tensors_life_equals_torch(scenario):
    assert _state(Ours, scenario(Ours)) == _state(Torch, scenario(Torch))


def test_the_scenarios_see_both_kinds_of_tensor():
    """The list is not all-normal or all-inference: a bug that ignores the mode shows."""
    kinds = {scenario(Torch).is_inference() for scenario in SCENARIOS}
    assert kinds == {True, False}


@pytest.mark.parametrize("mode", [True, False])
def test_thread_key_sets_inside_inference_mode_equal_torch(mode):
    def sets(L):
        with L.inference_mode():
            with L.inference_mode(mode):
                inside = [s.raw_repr() for s in L.tls()]
        return inside, [s.raw_repr() for s in L.tls()]

    assert sets(Ours) == sets(Torch)


def test_inference_mode_runs_no_autograd_kernel_and_records_nothing():
    x = Ours.new(requires_grad=True)
    with rd.get_dispatcher().trace() as seen, inference_mode():
        y = x * 2
    assert [key for _, key in seen] == ["CPU"]
    with torch.inference_mode():
        ty = Torch.new(requires_grad=True) * 2
    assert (y.requires_grad, y.grad_fn) == (ty.requires_grad, ty.grad_fn) == (False, None)
    np.testing.assert_array_equal(y.numpy(), ty.numpy())


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001  (the type is what is compared)
        return type(e).__name__, str(e)
    return None


def test_inference_tensor_misuse_outside_the_mode_raises_torchs_errors():
    def inplace(L):
        with L.inference_mode():
            i = L.new()
        i.add_(L.new())

    def saved(L):
        with L.inference_mode():
            i = L.new()
        L.new(requires_grad=True) * i

    def requires_grad(L):
        with L.inference_mode():
            i = L.new()
        i.requires_grad_()

    for misuse in (inplace, saved, requires_grad):
        ours, theirs = _error(lambda: misuse(Ours)), _error(lambda: misuse(Torch))
        assert theirs is not None and ours == theirs, misuse.__name__

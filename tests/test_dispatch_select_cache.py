"""The dispatcher's cached kernel choice (OperatorEntry.select_cache) never goes stale.

c10 keeps an operator's ``dispatchTable_`` array in step with every registration; retorch caches
the walk from a call's key set to its kernel on the OperatorEntry. Each case calls an operator
(so the choice is cached), changes what should run (a kernel registered, a library destroyed,
a TLS guard entered and left), and calls again, beside torch doing the same.
"""

import pytest
import torch
import torch.library

from retorch.dispatch import library as rlib
from retorch.dispatch.dispatch_key import DispatchKey
from retorch.dispatch.dispatch_key_set import DispatchKeySet, tensor_key_set_for
from retorch.dispatch.dispatcher import Dispatcher
from retorch.dispatch.local_dispatch_key_set import ExcludeDispatchKeyGuard

NS = "rtselcache"


class FakeCPU:
    key_set = tensor_key_set_for(DispatchKey.CPU)


def _kernel(i):
    return lambda self: torch.full((1,), float(i)) if isinstance(self, torch.Tensor) else i


def _libs():
    tlib, rl = torch.library.Library(NS, "FRAGMENT"), rlib.Library(NS, "FRAGMENT")
    tlib.define("op(Tensor self) -> Tensor")
    rl.define("op(Tensor self) -> Tensor")
    tlib.impl("op", _kernel(0), "CPU")
    rl.impl("op", _kernel(0), "CPU")
    return tlib, rl


def _calls():
    ours = Dispatcher.singleton().find_schema_or_throw(f"{NS}::op")
    theirs = getattr(torch.ops, NS).op.default
    return lambda: (ours(FakeCPU()), int(theirs(torch.ones(1)).item()))


def test_registering_and_deregistering_a_kernel_changes_the_cached_choice():
    tlib, rl = _libs()
    try:
        call = _calls()
        assert call() == (0, 0)  # the CPU kernel, cached for {CPU, AutogradCPU, ...}
        tlib2, rl2 = torch.library.Library(NS, "FRAGMENT"), rlib.Library(NS, "FRAGMENT")
        tlib2.impl("op", _kernel(1), "AutogradCPU")
        rl2.impl("op", _kernel(1), "AutogradCPU")
        assert call() == (1, 1)  # the new AutogradCPU kernel, not the cached CPU one
        tlib2._destroy()
        rl2._destroy()
        assert call() == (0, 0)  # deregistered: the CPU kernel again
    finally:
        tlib._destroy()
        rl._destroy()


def test_a_tls_guard_changes_the_choice_and_leaving_it_restores_it():
    tlib, rl = _libs()
    tlib.impl("op", _kernel(1), "AutogradCPU")
    rl.impl("op", _kernel(1), "AutogradCPU")
    try:
        call = _calls()
        assert call() == (1, 1)
        autograd = DispatchKeySet(DispatchKey.AutogradCPU)
        with (
            ExcludeDispatchKeyGuard(autograd),
            torch._C._ExcludeDispatchKeyGuard(
                torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradCPU)
            ),
        ):
            assert call() == (0, 0)
        assert call() == (1, 1)
    finally:
        tlib._destroy()
        rl._destroy()


def test_a_dispatch_trace_still_records_every_call_when_the_choice_is_cached():
    tlib, rl = _libs()
    try:
        call, d = _calls(), Dispatcher.singleton()
        call()
        with d.trace() as seen:
            call()
            call()
        # the autograd fallback, then its redispatch to CPU, for each call
        assert seen == [(f"{NS}::op", "AutogradCPU"), (f"{NS}::op", "CPU")] * 2
    finally:
        tlib._destroy()
        rl._destroy()


def test_keys_read_without_binding_only_where_binding_could_not_fail():
    """A call with every positional argument and no keyword skips the stack; any other call
    binds, so misuse raises as torch's, and so does a call once the schema is gone."""
    d = Dispatcher.singleton()
    tdef, rdef = torch.library.Library(NS, "FRAGMENT"), rlib.Library(NS, "FRAGMENT")
    tdef.define("two(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")
    rdef.define("two(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")
    rimpl = rlib.Library(NS, "FRAGMENT")
    rimpl.impl("two", lambda a, b, alpha=1: 7, "CPU")
    try:
        ours, theirs = d.find_schema_or_throw(f"{NS}::two"), getattr(torch.ops, NS).two.default
        assert ours(FakeCPU(), FakeCPU()) == 7
        for bad in [(FakeCPU(),), (FakeCPU(), FakeCPU(), FakeCPU())]:
            with pytest.raises(TypeError) as ours_e:
                ours(*bad)
            with pytest.raises(RuntimeError):  # torch's C++ binding: a RuntimeError
                theirs(*[torch.ones(1)] * len(bad))
            assert "argument" in str(ours_e.value)
        rdef._destroy()
        with pytest.raises(RuntimeError, match="has kernels but no schema"):
            ours(FakeCPU(), FakeCPU())
    finally:
        tdef._destroy()
        rdef._destroy()
        rimpl._destroy()

"""retorch.dispatch's keys and key sets beside torch's (c10/core/DispatchKeySet.h)."""

import threading

import torch
from hypothesis import given
from hypothesis import strategies as st

from retorch._torch_version import torch_has
from retorch.dispatch import dispatch_key_set as dks
from retorch.dispatch import local_dispatch_key_set as local
from retorch.dispatch.dispatch_key import (
    BACKENDS,
    FUNCTIONALITIES,
    BackendComponent,
    DispatchKey,
    parse_dispatch_key,
    torch_key_layout,
)
from retorch.dispatch.dispatch_key_set import DispatchKeySet

TK = torch._C.DispatchKey
# Runtime keys both sides can put in a set (torch's Python enum names most of them).
RUNTIME = [k for k in DispatchKeySet.full() if k.name in TK.__members__]


def test_every_torch_key_has_torch_number():
    assert set(TK.__members__) <= set(DispatchKey.__members__)
    for name, value in TK.__members__.items():
        assert int(DispatchKey[name]) == int(value), name


def test_the_layout_read_from_torch_is_ours():
    """Lab 5 takes the backend and functionality order from the torch it runs on (Colab's may
    be older); on the pinned torch that reading gives exactly retorch's tables."""
    assert torch_key_layout() == (BACKENDS, FUNCTIONALITIES)


def test_full_and_full_after_are_torch_bits():
    assert DispatchKeySet.full().raw_repr() == torch._C._dispatch_keyset_full().raw_repr()
    for k in (DispatchKey.AutogradOther, DispatchKey.ADInplaceOrView, DispatchKey.Python):
        ours = DispatchKeySet.full_after(k).raw_repr()
        assert ours == torch._C._dispatch_keyset_full_after(getattr(TK, k.name)).raw_repr()
    assert dks.after_autograd_keyset.raw_repr() == torch._C._after_autograd_keyset.raw_repr()
    ad = torch._C._after_ADInplaceOrView_keyset.raw_repr()
    assert dks.after_ADInplaceOrView_keyset.raw_repr() == ad


def _torch_set(keys):
    ts = torch._C.DispatchKeySet(TK.Undefined)
    for k in keys:
        ts = ts.add(getattr(TK, k.name))
    return ts


@given(st.lists(st.sampled_from(RUNTIME), max_size=6), st.sampled_from(RUNTIME))
def test_key_sets_equal_torch(keys, other):
    ours, theirs = DispatchKeySet(keys), _torch_set(keys)
    assert ours.raw_repr() == theirs.raw_repr()
    assert repr(ours) == repr(theirs)
    assert ours.highest_priority_type_id().name == theirs.highestPriorityTypeId().name
    assert ours.has(other) == theirs.has(getattr(TK, other.name))
    removed = ours.remove(other)
    assert removed.raw_repr() == theirs.remove(getattr(TK, other.name)).raw_repr()


def test_priority_order_follows_torch():
    """Adding keys one at a time, torch and retorch agree on which key runs first."""
    keys = [DispatchKey.CPU, DispatchKey.BackendSelect, DispatchKey.Python,
            DispatchKey.ADInplaceOrView, DispatchKey.AutogradCPU, DispatchKey.AutocastCPU,
            DispatchKey.PythonTLSSnapshot]  # fmt: skip
    ours, theirs, firsts = DispatchKeySet(), torch._C.DispatchKeySet(TK.Undefined), []
    for k in keys:
        ours, theirs = ours.add(k), theirs.add(getattr(TK, k.name))
        assert ours.highestPriorityTypeId().name == theirs.highestPriorityTypeId().name
        firsts.append(ours.highestPriorityTypeId())
    assert firsts == keys  # each added key outranks all before it


def test_backend_bits_are_shared():
    """One backend bit serves every per-backend functionality: AutogradCPU + CUDA adds AutogradCUDA."""
    ks = DispatchKeySet(DispatchKey.AutogradCPU).add(DispatchKey.CUDA)
    theirs = torch._C.DispatchKeySet(TK.AutogradCPU).add(TK.CUDA)
    assert repr(ks) == repr(theirs) == "DispatchKeySet(CPU, CUDA, AutogradCPU, AutogradCUDA)"
    assert ks.highest_backend_key() == BackendComponent.CUDABit


def test_tensor_key_sets_as_torch():
    for device in ("cpu", "meta"):
        t = torch.ones(2, device=device)
        dense = DispatchKey.CPU if device == "cpu" else DispatchKey.Meta
        ks = dks.tensor_key_set_for(dense)
        assert ks.raw_repr() == torch._C._dispatch_keys(t).raw_repr(), device


def test_tls_defaults_and_guards():
    inc, exc = local.tls_local_dispatch_key_set()
    assert inc.raw_repr() == torch._C._dispatch_tls_local_include_set().raw_repr()
    assert exc.raw_repr() == torch._C._dispatch_tls_local_exclude_set().raw_repr()
    ag = dks.autograd_dispatch_keyset
    with local.ExcludeDispatchKeyGuard(ag):
        assert local.tls_is_dispatch_key_excluded(DispatchKey.AutogradFunctionality)
        seen = []
        t = threading.Thread(target=lambda: seen.append(local.tls_local_dispatch_key_set()))
        t.start()
        t.join()
        assert seen[0][1] == exc  # thread-local: another thread keeps the defaults
    if torch_has("exclude_guard_restores_set"):
        assert local.tls_local_dispatch_key_set() == (inc, exc)
    else:  # torch < 2.12 leaves the added backend bits excluded (tests/test_torch_versions.py)
        assert local.tls_local_dispatch_key_set()[0] == inc
        local._tls.excluded = exc
    with local.IncludeDispatchKeyGuard(DispatchKey.Python):
        assert local.tls_is_dispatch_key_included(DispatchKey.Python)
    assert not local.tls_is_dispatch_key_included(DispatchKey.Python)


def test_alias_expansion_and_parse_errors():
    assert dks.get_runtime_dispatch_key_set(DispatchKey.Autograd).has(DispatchKey.AutogradMeta)
    assert not dks.backend_dispatch_keyset.has(DispatchKey.AutogradCPU)
    assert dks.math_dispatch_keyset.has(DispatchKey.AutogradCPU)
    assert parse_dispatch_key("AutogradCPU") is DispatchKey.AutogradCPU
    try:
        parse_dispatch_key("CPUU")
    except ValueError as e:
        assert "'CPUU'" in str(e)
    else:
        raise AssertionError("no error for an unknown key")


def test_guards_change_tls_as_torch_guards():
    """The same guard on both sides leaves the same excluded and included sets, then restores."""
    ag = DispatchKeySet(DispatchKey.AutogradCPU)
    with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(TK.AutogradCPU)):
        with local.ExcludeDispatchKeyGuard(ag):
            ours = local.tls_local_dispatch_key_set()[1]
            assert ours.raw_repr() == torch._C._dispatch_tls_local_exclude_set().raw_repr()
    with torch._C._IncludeDispatchKeyGuard(TK.Python):
        with local.IncludeDispatchKeyGuard(DispatchKey.Python):
            ours = local.tls_local_dispatch_key_set()[0]
            assert ours.raw_repr() == torch._C._dispatch_tls_local_include_set().raw_repr()
    assert local.tls_local_dispatch_key_set()[1].raw_repr() == (
        torch._C._dispatch_tls_local_exclude_set().raw_repr()
    )

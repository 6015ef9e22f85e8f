"""Thread-local included and excluded key sets, and the guards that change them.

Mirrors ``c10/core/impl/LocalDispatchKeySet.h``. Every call computes its key set as
``(keys of the tensor arguments | included) - excluded``: ``included`` adds keys no tensor
carries (``BackendSelect``, ``ADInplaceOrView`` by default; ``Python`` under a dispatch mode),
``excluded`` hides keys that must not run again (an autograd kernel excludes the autograd keys
while it calls the kernels below it; autocast is excluded until ``autocast`` is entered).
Guards restore the previous sets on exit, as torch's RAII guards do in their destructor.
"""

from __future__ import annotations

import threading

from retorch._torch_version import torch_has

from .dispatch_key import DispatchKey
from .dispatch_key_set import DispatchKeySet, default_excluded_set, default_included_set


class _LocalDispatchKeySet(threading.local):
    def __init__(self) -> None:
        self.included = default_included_set
        self.excluded = default_excluded_set


_tls = _LocalDispatchKeySet()


def tls_local_dispatch_key_set() -> tuple[DispatchKeySet, DispatchKeySet]:
    """``(included, excluded)`` of this thread (``tls_local_dispatch_key_set()``)."""
    return _tls.included, _tls.excluded


def tls_is_dispatch_key_excluded(k: DispatchKey) -> bool:
    return _tls.excluded.has(k)


def tls_is_dispatch_key_included(k: DispatchKey) -> bool:
    return _tls.included.has(k)


def _as_set(keys) -> DispatchKeySet:
    return keys if isinstance(keys, DispatchKeySet) else DispatchKeySet(keys)


class IncludeDispatchKeyGuard:
    """``with IncludeDispatchKeyGuard(ks):`` adds ``ks`` to the included set for the block."""

    def __init__(self, keys) -> None:
        self.keys = _as_set(keys)

    def __enter__(self):
        self._saved = _tls.included
        _tls.included = self._saved | self.keys
        return self

    def __exit__(self, *exc) -> None:
        _tls.included = self._saved


class ExcludeDispatchKeyGuard:
    """``with ExcludeDispatchKeyGuard(ks):`` hides ``ks`` from every call in the block."""

    def __init__(self, keys) -> None:
        self.keys = _as_set(keys)

    def __enter__(self):
        self._saved = _tls.excluded
        self._delta = self.keys - self._saved  # what the guard adds (torch < 2.12 kept this)
        _tls.excluded = self._saved | self.keys
        return self

    def __exit__(self, *exc) -> None:
        if torch_has("exclude_guard_restores_set"):
            _tls.excluded = self._saved
        else:  # subtracting keeps backend bits: a guard on AutogradCPU leaves CPUBit excluded
            _tls.excluded = _tls.excluded - self._delta


class ForceDispatchKeyGuard:
    """Set both sets outright for the block (``c10::impl::ForceDispatchKeyGuard``)."""

    def __init__(self, included: DispatchKeySet, excluded: DispatchKeySet) -> None:
        self.sets = (included, excluded)

    def __enter__(self):
        self._saved = (_tls.included, _tls.excluded)
        _tls.included, _tls.excluded = self.sets
        return self

    def __exit__(self, *exc) -> None:
        _tls.included, _tls.excluded = self._saved

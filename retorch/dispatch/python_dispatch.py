"""The Python key: ``TorchDispatchMode`` and its mode stack.

Mirrors ``torch/utils/_python_dispatch.py`` (the mode class and stack),
``aten/src/ATen/core/PythonFallbackKernel.cpp`` (the boxed fallback at ``Python``, and the one
at ``PythonTLSSnapshot``) and ``c10/core/impl/TorchDispatchModeTLS.cpp`` (pushing the first
mode adds ``Python`` and ``PythonTLSSnapshot`` to the thread's included keys; popping the last
removes them). The Python key sits just above the backends, below autograd: a mode sees the
aten operators that reach the backend, after autograd has recorded them. The fallback pops the
top mode for the duration of its ``__torch_dispatch__`` (so an op called inside goes to the
next mode down, or to the backend), unboxes the stack into ``(args, kwargs)``, calls it, and
boxes the result back.
"""

from __future__ import annotations

from .dispatch_key import DispatchKey
from .dispatch_key_set import DispatchKeySet, python_ks
from .library import Library
from .local_dispatch_key_set import _tls

_mode_stack: list = []


def _set_python_keys() -> None:
    """Included iff a mode is on the stack (``TorchDispatchModeTLS::set_state``)."""
    if _mode_stack:
        _tls.included = _tls.included | python_ks
    else:
        _tls.included = _tls.included - python_ks


class TorchDispatchMode:
    """Subclass and define ``__torch_dispatch__(self, func, types, args=(), kwargs=None)``;
    ``with Mode():`` routes every aten op below autograd through it."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        raise NotImplementedError(f"{type(self).__name__} defines no __torch_dispatch__")

    def __enter__(self):
        _mode_stack.append(self)
        _set_python_keys()
        return self

    def __exit__(self, *exc) -> None:
        if not _mode_stack or _mode_stack[-1] is not self:
            raise RuntimeError("TorchDispatchMode exited out of order: not the top of the stack")
        _mode_stack.pop()
        _set_python_keys()


def _get_current_dispatch_mode_stack() -> list:
    return list(_mode_stack)


class _PopModeTemporarily:
    def __enter__(self):
        self.mode = _mode_stack.pop()
        _set_python_keys()
        return self.mode

    def __exit__(self, *exc) -> None:
        _mode_stack.append(self.mode)
        _set_python_keys()


class _Func:
    """What ``__torch_dispatch__`` gets as ``func``: the operator, callable, with its name."""

    def __init__(self, op) -> None:
        self._op = op
        self.name = op.name

    def __call__(self, *args, **kwargs):
        return self._op(*args, **kwargs)

    def __repr__(self) -> str:
        return self.name.replace("::", ".") + ("" if "." in self.name[6:] else ".default")


def _python_fallback(op, keyset: DispatchKeySet, stack: list) -> None:
    """``pythonFallback``: the top mode's ``__torch_dispatch__`` runs the op."""
    if not _mode_stack:  # no mode (a tensor subclass would go here): run below the key
        op.redispatch_boxed(keyset.remove(DispatchKey.Python), stack)
        return
    args, kwargs = op.schema.unbind(stack)
    with _PopModeTemporarily() as mode:
        out = mode.__torch_dispatch__(_Func(op), (), args, kwargs)
    stack[:] = list(out) if isinstance(out, tuple) else [out]


def _tls_snapshot_fallback(op, keyset: DispatchKeySet, stack: list) -> None:
    """``pythonTLSSnapshotFallback``: in torch it saves the TLS a mode will see; here the
    thread's sets are already the mode's, so it only steps below its key."""
    op.redispatch_boxed(keyset.remove(DispatchKey.PythonTLSSnapshot), stack)


_LIB = Library("_", "IMPL")
_LIB.fallback(_python_fallback, "Python")
_LIB.fallback(_tls_snapshot_fallback, "PythonTLSSnapshot")

"""Which arrays autograd computes with: torch tensors (chapter 3) or retorch tensors (chapter 4).

Everything in ``retorch.autograd`` reaches raw data through the module ``_ops`` (``_ops.add``,
``_ops.mm``...), looking each function up when it is called. :func:`set_array_backend`
rebinds those names: ``"torch"`` restores the functions ``_ops.py`` defines over
``torch.Tensor``; ``"retorch"`` installs ``_ops_retorch.py``'s, over ``retorch.tensor.Tensor``.
The engine, the formulas and forward-mode AD do not change; only the kernels under them do. In
torch that cut is the dispatcher's step from the Autograd key down to a backend key
(``c10/core/DispatchKey.h``; the redispatch in ``aten/src/ATen/core/dispatch/Dispatcher.h``).

Tensors made under one backend hold that backend's arrays: make new leaves after switching.
:func:`count_aten_calls` shows the switch at work: a ``TorchDispatchMode``
(``torch/utils/_python_dispatch.py``) that counts every aten op torch runs inside it.
"""

from __future__ import annotations

import collections
import contextlib
import types

from . import _ops

#: The names of the op contract (``_ops.py``'s docstring), read from ``_ops`` before any switch.
CONTRACT: tuple[str, ...] = tuple(
    sorted(
        name
        for name, value in vars(_ops).items()
        if not name.startswith("_")
        and name != "annotations"
        and not isinstance(value, types.ModuleType)
    )
)
_TORCH_IMPL = {name: getattr(_ops, name) for name in CONTRACT}
BACKENDS = ("torch", "retorch")
_current = "torch"


def _implementation(name: str) -> dict:
    if name == "torch":
        return _TORCH_IMPL
    from . import _ops_retorch  # imports retorch.tensor: only now, never at package import

    missing = [n for n in CONTRACT if not hasattr(_ops_retorch, n)]
    if missing:
        raise NotImplementedError(f"_ops_retorch lacks {missing} of the op contract")
    return {n: getattr(_ops_retorch, n) for n in CONTRACT}


def set_array_backend(name: str) -> str:
    """Make autograd compute over ``"torch"`` or ``"retorch"`` arrays; returns the previous."""
    global _current
    if name not in BACKENDS:
        raise RuntimeError(
            f"Expected one of {', '.join(BACKENDS)} array backend, but got: {name!r}"
        )
    vars(_ops).update(_implementation(name))
    previous, _current = _current, name
    return previous


def get_array_backend() -> str:
    """``"torch"`` (the default) or ``"retorch"``."""
    return _current


@contextlib.contextmanager
def array_backend(name: str):
    """``with array_backend("retorch"): ...`` switches for the block, then switches back."""
    previous = set_array_backend(name)
    try:
        yield
    finally:
        set_array_backend(previous)


_counter_class = None


def count_aten_calls():
    """A context manager that counts the aten ops torch runs inside it, by overload name::

        with count_aten_calls() as calls:
            loss.backward()
        calls.total, calls.calls  # 0, Counter() when no torch kernel ran

    Every op that reaches torch's dispatcher passes the Python dispatch mode on the stack
    (``TorchDispatchMode.__torch_dispatch__``), factory functions with no tensor input too.
    """
    global _counter_class
    if _counter_class is None:
        from torch.utils._python_dispatch import TorchDispatchMode

        class AtenCallCounter(TorchDispatchMode):
            """Counts each aten overload (``aten.mm.default``...) it sees, then runs it."""

            def __init__(self):
                super().__init__()
                self.calls: collections.Counter = collections.Counter()

            @property
            def total(self) -> int:
                return sum(self.calls.values())

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self.calls[str(func)] += 1
                return func(*args, **(kwargs or {}))

        _counter_class = AtenCallCounter
    return _counter_class()

"""``ops``: operators by name, as ``torch.ops.aten.add.Tensor``. Mirrors ``torch/_ops.py``.

``ops.ns.name`` is the packet of an operator's overloads; calling it runs the default overload
(``""``), ``ops.ns.name.overload`` names one. Each overload is the dispatcher's
``OperatorHandle``: calling it dispatches.
"""

from __future__ import annotations

from .dispatcher import get_dispatcher


class OpOverloadPacket:
    def __init__(self, qualified: str) -> None:
        self._qualified = qualified

    def __getattr__(self, overload: str):
        if overload.startswith("__"):
            raise AttributeError(overload)
        name = self._qualified if overload == "default" else f"{self._qualified}.{overload}"
        return get_dispatcher().find_schema_or_throw(name)

    def __call__(self, *args, **kwargs):
        return get_dispatcher().find_schema_or_throw(self._qualified)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<OpOverloadPacket(op='{self._qualified}')>"


class _OpNamespace:
    def __init__(self, ns: str) -> None:
        self._ns = ns

    def __getattr__(self, name: str) -> OpOverloadPacket:
        if name.startswith("__"):
            raise AttributeError(name)
        qualified = f"{self._ns}::{name}"
        d = get_dispatcher()
        if not any(op == qualified or op.startswith(qualified + ".") for op in d.operators):
            raise AttributeError(f"'_OpNamespace' '{self._ns}' object has no attribute '{name}'")
        return OpOverloadPacket(qualified)


class _Ops:
    def __getattr__(self, ns: str) -> _OpNamespace:
        if ns.startswith("__"):
            raise AttributeError(ns)
        return _OpNamespace(ns)


ops = _Ops()

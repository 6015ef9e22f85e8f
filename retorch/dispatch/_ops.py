"""``ops``: operators by name, as ``torch.ops.aten.add.Tensor``. Mirrors ``torch/_ops.py``.

``ops.ns.name`` is the packet of an operator's overloads; calling it runs the default overload
(``""``), ``ops.ns.name.overload`` names one. Each overload is the dispatcher's
``OperatorHandle``: calling it dispatches.

As torch's, each lookup is done once: a namespace keeps its packets and a packet its overloads
as attributes (``setattr`` in ``_OpNamespace.__getattr__`` and ``OpOverloadPacket.__getattr__``),
so ``ops.aten.add.Tensor`` is two attribute reads from the second call on. Undoing a ``define``
drops the namespace's packet (``_del_library`` in ``torch/library.py``: "the next time
torch.ops.ns.foo gets called, it'll be recomputed").
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
        handle = get_dispatcher().find_schema_or_throw(name)
        setattr(self, overload, handle)
        return handle

    def __call__(self, *args, **kwargs):
        return self.default(*args, **kwargs)

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
        packet = OpOverloadPacket(qualified)
        setattr(self, name, packet)
        return packet


class _Ops:
    def __getattr__(self, ns: str) -> _OpNamespace:
        if ns.startswith("__"):
            raise AttributeError(ns)
        namespace = _OpNamespace(ns)
        setattr(self, ns, namespace)
        return namespace


ops = _Ops()


def _uncache(operator_name: str) -> None:
    """Forget the packet of ``ns::name`` (any overload), as ``_del_library`` does when a
    library that defined it is destroyed."""
    ns, name = operator_name.split("::", 1)
    namespace = ops.__dict__.get(ns)
    if namespace is not None:
        namespace.__dict__.pop(name.split(".")[0], None)

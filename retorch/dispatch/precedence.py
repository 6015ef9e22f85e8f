"""Which registered kernel a call at a given key runs: the precedence of
``computeDispatchTableEntryWithDebug`` observed from outside, on torch and on retorch.

Mirrors nothing by itself: it is the experiment chapter 5 runs on
``aten/src/ATen/core/dispatch/OperatorEntry.cpp``. A fresh operator ``ns::f(Tensor x) ->
Tensor`` gets one kernel per registration key, each recording its key's name when it runs;
then the operator is *redispatched* with a key set holding one runtime key only
(``OpOverload.redispatch`` in torch, ``OperatorHandle.redispatch`` here), so the dispatcher
reads exactly that row of its table and runs the kernel stored there. The kernels are
registered with the ``CompositeImplicitAutograd`` one last: a table row is recomputed only when
a registration can change it (``updateDispatchTable_``), and this order leaves no row stale.
"""

from __future__ import annotations

#: The order registrations are made in (CompositeImplicitAutograd last: see above).
REGISTRATION_ORDER = (
    "CPU",
    "Autograd",
    "CompositeExplicitAutogradNonFunctional",
    "CompositeExplicitAutograd",
    "CompositeImplicitAutograd",
)


def kernels_run(lib: str, registered, keys, ns: str = "prec5") -> list[str]:
    """For each runtime key in ``keys``, the registration key whose kernel a call at that key
    runs, on ``lib`` ("torch" or "retorch"): the kernel is identified by running the row
    (``"fallback"`` where the table's dump says the row holds the dispatcher's backend
    fallback, ``"missing"`` where it has no row)."""
    ran: list[str] = []

    def kernel(name):
        def k(x):
            ran.append(name)
            return x

        return k

    order = [k for k in REGISTRATION_ORDER if k in registered]
    out = []
    with _library(lib, ns) as (define_impl, call_at, dump):
        define_impl(order, kernel)
        why = dict(line.split(": ", 1) for line in dump().splitlines() if ": " in line)
        for key in keys:
            if key not in why:
                out.append("missing")
            elif why[key].endswith("[backend fallback]"):
                out.append("fallback")
            else:
                ran.clear()
                call_at(key)
                out.append(ran[0])
    return out


class _library:
    """A scoped library on ``lib`` with ``ns::f`` defined; yields (register, call_at)."""

    def __init__(self, lib: str, ns: str) -> None:
        self.lib, self.ns = lib, ns

    def __enter__(self):
        if self.lib == "torch":
            import torch

            self._cm = torch.library._scoped_library(self.ns, "DEF")
            library = self._cm.__enter__()
            library.define("f(Tensor x) -> Tensor")
            x = torch.ones(1)

            def call_at(key):
                ks = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))
                getattr(torch.ops, self.ns).f.default.redispatch(ks, x)

            def dump():
                return torch._C._dispatch_dump_table(f"{self.ns}::f")
        else:
            import retorch.tensor as rt

            from ._tensor import Tensor
            from .dispatch_key import DispatchKey
            from .dispatch_key_set import DispatchKeySet
            from .dispatcher import get_dispatcher
            from .library import _scoped_library

            self._cm = _scoped_library(self.ns, "DEF")
            library = self._cm.__enter__()
            library.define("f(Tensor x) -> Tensor")
            x = Tensor(rt.ones(1))
            handle = get_dispatcher().find_schema_or_throw(f"{self.ns}::f")

            def call_at(key):
                handle.redispatch(DispatchKeySet(DispatchKey[key]), x)

            dump = handle.dump_table

        def define_impl(order, kernel):
            for key in order:
                library.impl("f", kernel(key), key)

        return define_impl, call_at, dump

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)

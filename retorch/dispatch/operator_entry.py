"""``OperatorEntry``: one operator's kernels, by key, and its computed dispatch table.

Mirrors ``aten/src/ATen/core/dispatch/OperatorEntry.cpp`` (and ``KernelFunction.h`` for the
kernel wrapper). Kernels are registered to runtime keys (``CPU``, ``AutogradCPU``) or to alias
keys (``CompositeImplicitAutograd``...); the *dispatch table* says, for every runtime key, which
kernel a call with that key runs. ``compute_dispatch_table_entry_with_debug`` decides one row
in torch's order: (1) a kernel registered to the key itself; (2.1/2.2) a
CompositeExplicitAutograd[NonFunctional] kernel for a backend key; (2.3) a
CompositeImplicitAutograd kernel, unless the backend (or CompositeExplicitAutograd) has its
own kernel; (2.4) an Autograd-alias kernel for an autograd key; (3) the dispatcher's backend
fallback for the key; (4) missing. Torch updates the rows a registration can change; retorch
updates the same rows torch updates (``updateDispatchTable_``), so it keeps torch's stale rows
too: ``dump_computed_table`` recomputes every row (as torch's dump), ``lookup`` reads the table
(as a call does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .dispatch_key import (
    DispatchKey,
    get_autograd_key_from_backend,
    is_alias_dispatch_key,
    to_backend_component,
)
from .dispatch_key_set import (
    DispatchKeySet,
    all_runtime_keys,
    autogradother_backends,
    get_backend_key_set_from_autograd,
    get_runtime_dispatch_key_set,
    is_backend_dispatch_key,
    is_included_in_alias,
)

K = DispatchKey


@dataclass
class KernelFunction:
    """A kernel as the dispatcher holds it (``c10::KernelFunction``).

    Unboxed: ``fn(*args, **kwargs)`` (``fn(keyset, *args, **kwargs)`` with ``with_keyset``).
    Boxed: ``fn(op, keyset, stack)``, reading its arguments from the list ``stack`` (all of
    them, in schema order) and leaving its results there: one function for every operator,
    as backend fallbacks must be. A fallthrough kernel is never called: the key is skipped.
    """

    fn: Callable | None
    boxed: bool = False
    with_keyset: bool = False
    fallthrough: bool = False

    def call(self, op, keyset: DispatchKeySet, args: tuple, kwargs: dict):
        if self.boxed:  # unboxed call, boxed kernel: box, call, unbox
            stack = op.schema.bind(args, kwargs)
            self.fn(op, keyset, stack)
            return stack[0] if len(stack) == 1 else tuple(stack)
        if self.with_keyset:
            return self.fn(keyset, *args, **kwargs)
        return self.fn(*args, **kwargs)

    def call_boxed(self, op, keyset: DispatchKeySet, stack: list) -> None:
        if self.boxed:
            self.fn(op, keyset, stack)
            return
        args, kwargs = op.schema.unbind(stack)
        out = self.call(op, keyset, args, kwargs)
        stack[:] = list(out) if isinstance(out, tuple) else [out]


def fallthrough_kernel() -> KernelFunction:
    """``c10::KernelFunction::makeFallthrough()``: skip this key, go to the next one."""
    return KernelFunction(None, fallthrough=True)


@dataclass
class AnnotatedKernel:
    kernel: KernelFunction
    debug: str


def _ambiguous_autograd_other(name: str) -> AnnotatedKernel:
    """The row torch puts at AutogradOther when both a CompositeImplicitAutograd kernel and a
    kernel for one of AutogradOther's backends exist: calling it is an error."""

    def fail(op, ks, stack):
        raise NotImplementedError(
            f"{name} has kernels registered to both CompositeImplicitAutograd and a backend "
            f"mapped to AutogradOther. To fix this, register the backend's kernel to its own "
            f"Autograd key or to CompositeExplicitAutograd (ambiguous autogradother)"
        )

    return AnnotatedKernel(KernelFunction(fail, boxed=True), "ambiguous_autogradother")


class OperatorEntry:
    """An operator: its name, its schema once defined, its kernels and its dispatch table."""

    def __init__(self, name: str, dispatcher) -> None:
        self._dispatcher = dispatcher
        self.name = name  # "ns::op" or "ns::op.overload"
        self.schema = None
        self.schema_debug = ""
        self.kernels: dict[DispatchKey, AnnotatedKernel] = {}
        self.dispatch_table: dict[DispatchKey, tuple[AnnotatedKernel | None, str]] = {}
        #: the dispatcher's kernel choice per call key set (raw bits -> (kernel, keys after
        #: fallthroughs)), a cache of the walk over ``dispatch_table``; every row update
        #: empties it, as c10 keeps its ``dispatchTable_`` array in step with registrations
        self.select_cache: dict[int, tuple] = {}

    # ------------------------------------------------------------------ registration
    def register_kernel(self, dispatcher, key: DispatchKey, kernel: KernelFunction, debug: str):
        if key == K.Undefined:
            raise RuntimeError(f"cannot register a kernel for {self.name} to the Undefined key")
        if key in self.kernels:
            raise RuntimeError(
                f"a kernel for {self.name} is already registered to the {key.name} dispatch "
                f"key ({self.kernels[key].debug}); new registration: {debug}. Torch's C++ "
                f"warns and overrides; retorch refuses: deregister the first one (destroy its "
                f"Library) or register to another key"
            )
        self.kernels[key] = AnnotatedKernel(kernel, debug)
        self.update_dispatch_table(dispatcher, key)

    def deregister_kernel(self, dispatcher, key: DispatchKey) -> None:
        self.kernels.pop(key, None)
        self.update_dispatch_table(dispatcher, key)

    # ------------------------------------------------------------------ the table
    def has_kernel_for_dispatch_key(self, k: DispatchKey) -> bool:
        return k in self.kernels

    def has_kernel_for_any_dispatch_key(self, ks: DispatchKeySet) -> bool:
        return any(not is_alias_dispatch_key(k) and ks.has(k) for k in self.kernels)

    def compute_dispatch_table_entry_with_debug(self, dispatcher, k: DispatchKey):
        """``(kernel or None, why)`` for runtime key ``k``, in OperatorEntry.cpp's order."""
        kernels = self.kernels
        if k in kernels:  # 1. registered to this key
            return kernels[k], "kernel"
        for alias in (K.CompositeExplicitAutogradNonFunctional, K.CompositeExplicitAutograd):
            if (k == K.Undefined or is_included_in_alias(k, alias)) and alias in kernels:
                return kernels[alias], "default backend kernel"  # 2.1, 2.2
        has_backend_kernel = self.has_kernel_for_any_dispatch_key(
            get_backend_key_set_from_autograd(k)
        ) or (K.CompositeExplicitAutograd in kernels)
        if (
            k == K.Undefined or is_included_in_alias(k, K.CompositeImplicitAutograd)
        ) and K.CompositeImplicitAutograd in kernels:  # 2.3
            if k == K.AutogradOther and self.has_kernel_for_any_dispatch_key(
                autogradother_backends
            ):
                return _ambiguous_autograd_other(self.name), "ambiguous autogradother"
            if not has_backend_kernel:
                return kernels[K.CompositeImplicitAutograd], "math kernel"
        if is_included_in_alias(k, K.Autograd) and K.Autograd in kernels:  # 2.4
            return kernels[K.Autograd], "autograd kernel"
        fallback = dispatcher.backend_fallback_kernels.get(k)  # 3.
        if fallback is not None:
            return fallback, "backend fallback"
        return None, "missing"  # 4.

    def _update_entry(self, dispatcher, k: DispatchKey) -> None:
        self.dispatch_table[k] = self.compute_dispatch_table_entry_with_debug(dispatcher, k)
        self.select_cache.clear()

    def update_dispatch_table(self, dispatcher, key: DispatchKey) -> None:
        """Recompute the rows a registration at ``key`` can change (``updateDispatchTable_``):
        the key's runtime keys, Undefined for a Composite alias, and a backend's autograd key.
        Rows outside these keep their value, so the table can go stale where torch's does."""
        if key == K.Undefined:
            self._update_entry(dispatcher, key)
            return
        for k in get_runtime_dispatch_key_set(key):
            self._update_entry(dispatcher, k)
        if key in (
            K.CompositeImplicitAutograd,
            K.CompositeExplicitAutograd,
            K.CompositeExplicitAutogradNonFunctional,
        ):
            self._update_entry(dispatcher, K.Undefined)
        if is_backend_dispatch_key(key):
            autograd = get_autograd_key_from_backend(to_backend_component(key))
            self._update_entry(dispatcher, autograd)

    def update_dispatch_table_full(self, dispatcher) -> None:
        """Every row (``updateDispatchTableFull_``): when the operator is first made."""
        for k in [K.Undefined] + all_runtime_keys():
            self._update_entry(dispatcher, k)

    def lookup(self, k: DispatchKey) -> AnnotatedKernel | None:
        return self.dispatch_table.get(k, (None, "missing"))[0]

    def is_fallthrough(self, k: DispatchKey) -> bool:
        entry = self.lookup(k)
        return entry is not None and entry.kernel.fallthrough

    # ------------------------------------------------------------------ dumps, as torch's
    def list_all_dispatch_keys(self) -> list[str]:
        """The runtime keys with a kernel (fallthroughs too), in table order."""
        return [k.name for k in all_runtime_keys() if self.lookup(k) is not None]

    def dump_computed_table(self) -> str:
        """As ``torch._C._dispatch_dump_table``: ``Key: [fallthrough ]registered at ... [why]``."""
        lines = []
        for k in [K.Undefined] + all_runtime_keys():  # recomputed, as torch's dump does
            kernel, why = self.compute_dispatch_table_entry_with_debug(self._dispatcher, k)
            if kernel is None:
                continue
            ft = "fallthrough " if kernel.kernel.fallthrough else ""
            where = kernel.debug if why.startswith("ambiguous") else f"registered at {kernel.debug}"
            lines.append(f"{k.name}: {ft}{where} [{why}]")
        return "\n".join(lines) + "\n"

    def dump_state(self) -> str:
        """As ``torch._C._dispatch_dump``: name, schema, and the kernels by registered key."""
        lines = [f"name: {self.name}"]
        lines.append(f"schema: {self.schema}" if self.schema else "schema: (none)")
        for k, ak in self.kernels.items():
            tag = "[alias]" if is_alias_dispatch_key(k) else ""
            lines.append(f"{k.name}{tag}: registered at {ak.debug}")
        return "\n".join(lines) + "\n"

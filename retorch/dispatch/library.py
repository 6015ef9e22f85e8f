"""``Library``: the registration API, as ``torch.library.Library`` and ``TORCH_LIBRARY``.

Mirrors ``torch/library.py`` (and the C++ ``Library`` of ``aten/src/ATen/core/library.cpp``
behind ``TORCH_LIBRARY`` / ``TORCH_LIBRARY_IMPL`` / ``TORCH_LIBRARY_FRAGMENT``). A library is a
namespace and a kind:

- ``"DEF"``: the one library that defines the namespace's operators (``TORCH_LIBRARY``); a
  second ``DEF`` of the same namespace is an error;
- ``"FRAGMENT"``: more definitions for a namespace (``TORCH_LIBRARY_FRAGMENT``);
- ``"IMPL"``: kernels only, optionally all for one key (``TORCH_LIBRARY_IMPL(ns, CPU, m)``);
  ``Library("_", "IMPL", "CPU").fallback(fn)`` gives every operator a fallback for a key.

Each registration returns an undo; ``_destroy()`` runs them all (torch's library destructor),
and :func:`_scoped_library` destroys on exit, so a test or a notebook cell can run twice.
"""

from __future__ import annotations

import contextlib
import sys

from .dispatch_key import DispatchKey, is_alias_dispatch_key, parse_dispatch_key
from .dispatch_key_set import get_runtime_dispatch_key_set
from .dispatcher import Dispatcher, get_dispatcher
from .function_schema import parse_schema
from .operator_entry import KernelFunction
from .operator_entry import fallthrough_kernel as _make_fallthrough

_KINDS = ("DEF", "IMPL", "FRAGMENT")


def _parse_key(key) -> DispatchKey:
    try:
        return parse_dispatch_key(key)
    except ValueError as e:
        raise RuntimeError(str(e)) from None


def _caller() -> str:
    # sys._getframe, not inspect.stack(): the latter reads every frame's source lines, which
    # made importing retorch.dispatch take seconds once many modules were loaded.
    frame = sys._getframe(2)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


class Library:
    """``Library(ns, kind, dispatch_key="")``: define operators and register kernels."""

    def __init__(
        self, ns: str, kind: str, dispatch_key: str = "", dispatcher: Dispatcher | None = None
    ):
        if kind not in _KINDS:
            raise ValueError(f"Unsupported kind: {kind!r}; expected one of {', '.join(_KINDS)}")
        if ns == "_" and kind != "IMPL":
            raise ValueError("the '_' namespace (every namespace) is only for IMPL libraries")
        self.ns, self.kind = ns, kind
        self.dispatch_key = _parse_key(dispatch_key) if dispatch_key else None
        self.dispatcher = dispatcher or get_dispatcher()
        self._undo: list = []
        self._debug = _caller()
        if kind == "DEF":
            previous = self.dispatcher.libraries.get(ns)
            if previous is not None:
                raise RuntimeError(
                    f"Only a single TORCH_LIBRARY can be used to register the namespace {ns}; "
                    f"please put all of your definitions in a single TORCH_LIBRARY block. If "
                    f"you were trying to specify implementations, consider using "
                    f"TORCH_LIBRARY_IMPL (which can be duplicated). If you really intended to "
                    f"define operators for a single namespace in a distributed way, you can use "
                    f"TORCH_LIBRARY_FRAGMENT to explicitly indicate this. Previous "
                    f"registration of TORCH_LIBRARY was registered at {previous}; latest "
                    f"registration was registered at {self._debug}"
                )
            self.dispatcher.libraries[ns] = self._debug
            self._undo.append(lambda: self.dispatcher.libraries.pop(ns, None))

    def __repr__(self) -> str:
        return f"Library(kind={self.kind}, ns={self.ns}, dispatch_key={self.dispatch_key})"

    def define(self, schema: str) -> str:
        """Define an operator from its schema string; returns its name (``ns::op.overload``)."""
        if self.kind == "IMPL":
            raise RuntimeError(
                "Cannot define an operator inside of a TORCH_LIBRARY_IMPL block. All def() "
                "calls should go in a TORCH_LIBRARY or TORCH_LIBRARY_FRAGMENT block: make this "
                f"library with Library({self.ns!r}, 'DEF') or 'FRAGMENT'"
            )
        parsed = parse_schema(schema, self.ns)
        if parsed.name.split("::")[0] != self.ns:
            raise RuntimeError(
                f"Explicitly provided namespace ({parsed.name.split('::')[0]}) in schema string "
                f"does not match namespace of enclosing TORCH_LIBRARY ({self.ns})"
            )
        self._undo.append(self.dispatcher.register_def(parsed, _caller()))
        return parsed.operator_name

    def _name(self, op_name: str) -> str:
        return op_name if "::" in op_name else f"{self.ns}::{op_name}"

    def impl(self, op_name: str, fn, dispatch_key: str = "", *, with_keyset: bool = False):
        """Register ``fn`` as ``op_name``'s kernel for ``dispatch_key`` (runtime or alias key);
        ``fn`` may be :data:`fallthrough_kernel`."""
        if dispatch_key:
            key = _parse_key(dispatch_key)
            if self.dispatch_key is not None and key != self.dispatch_key:
                raise RuntimeError(
                    f"Explicitly provided dispatch key ({key.name}) is inconsistent with the "
                    f"dispatch key of the enclosing TORCH_LIBRARY_IMPL block "
                    f"({self.dispatch_key.name})"
                )
        elif self.dispatch_key is not None:
            key = self.dispatch_key
        else:
            key = DispatchKey.CompositeImplicitAutograd  # torch's default for a bare impl
        if fn is fallthrough_kernel:
            kernel = _make_fallthrough()
        elif isinstance(fn, KernelFunction):
            kernel = fn
        else:
            kernel = KernelFunction(fn, with_keyset=with_keyset)
        name = self._name(op_name)
        entry = self.dispatcher.operators.get(name)
        if (
            key == DispatchKey.Meta
            and entry is not None
            and (DispatchKey.CompositeImplicitAutograd in entry.kernels)
        ):  # torch/library.py's rule: let the op decompose, give its base ops Meta kernels
            raise RuntimeError(
                f"We should not register a meta kernel directly to the operator "
                f"'{op_name.split('::')[-1]}', because it has a CompositeImplicitAutograd kernel "
                f"in core. Instead we should let the operator decompose, and ensure that we have "
                f"meta kernels for the base ops that it decomposes into."
            )
        self._undo.append(self.dispatcher.register_impl(name, key, kernel, _caller()))

    def fallback(self, fn, dispatch_key: str = ""):
        """A boxed kernel ``fn(op, keyset, stack)`` for every operator at ``dispatch_key``
        (an alias key registers each of its runtime keys). Only in ``Library("_", "IMPL")``."""
        if self.ns != "_":
            raise RuntimeError(
                f"fallback() registers for every namespace: use Library('_', 'IMPL'), not "
                f"Library({self.ns!r}, {self.kind!r})"
            )
        key = _parse_key(dispatch_key) if dispatch_key else self.dispatch_key
        if key is None:
            raise RuntimeError("fallback() needs a dispatch key")
        kernel = _make_fallthrough() if fn is fallthrough_kernel else KernelFunction(fn, True)
        keys = get_runtime_dispatch_key_set(key) if is_alias_dispatch_key(key) else [key]
        for k in keys:
            self._undo.append(self.dispatcher.register_fallback(k, kernel, _caller()))

    def _destroy(self) -> None:
        """Undo every registration this library made, newest first."""
        while self._undo:
            self._undo.pop()()


@contextlib.contextmanager
def _scoped_library(ns: str, kind: str, dispatch_key: str = ""):
    lib = Library(ns, kind, dispatch_key)
    try:
        yield lib
    finally:
        lib._destroy()


def fallthrough_kernel() -> None:
    """Pass as a kernel to skip a key: ``lib.impl("op", fallthrough_kernel, "AutocastCPU")``
    (``torch.library.fallthrough_kernel``); it is never called."""
    raise NotImplementedError("fallthrough_kernel() should never be called")

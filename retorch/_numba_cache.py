"""Numba's on-disk cache, made safe for functions that inline code from other modules.

``njit(cache=True)`` stores a compiled function on disk with a stamp of *its own* source file
(a hash of ``cpu_kernels.py``, say) and reuses it while that stamp holds. A kernel that
inlines code from another module (``cpu_kernels.binary_loop`` inlines the op bodies of
``scalar_ops.py``) would then keep its stale machine code after an edit to that module: the
edit is silently masked until the cache is deleted.

The locators below stamp a function with its own file *and* every retorch module its module
refers to, directly or through those modules (their globals: modules, and functions or
classes defined in retorch), so an edit to any of them recompiles it: retorch's kernels, and
code generated elsewhere that calls retorch's helpers (Inductor's kernels). Functions that
refer to nothing of retorch's keep Numba's stamp. ``retorch/__init__.py`` installs them through Numba's setting
``NUMBA_CACHE_LOCATOR_CLASSES`` (read when Numba is imported; set directly if it already was),
so every ``cache=True`` in retorch, whichever module, is covered.
"""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path

from numba.core import caching

_PACKAGE = __name__.split(".")[0]  # "retorch", also for a copy imported from elsewhere


def _retorch_module_of(obj) -> types.ModuleType | None:
    if isinstance(obj, types.ModuleType):
        module = obj
    else:
        name = getattr(getattr(obj, "py_func", obj), "__module__", None)
        module = sys.modules.get(name) if isinstance(name, str) else None
    if module is not None and module.__name__.split(".")[0] == _PACKAGE:
        return module
    return None


def dependency_files(namespace: dict) -> list[Path]:
    """The source files of the retorch modules ``namespace`` (a module's globals) refers to,
    followed through their own globals, sorted."""
    seen: dict[str, Path] = {}
    todo = [namespace]
    while todo:
        for obj in list(todo.pop().values()):
            module = _retorch_module_of(obj)
            if module is None or module.__name__ in seen:
                continue
            path = getattr(module, "__file__", None)
            if path and path.endswith(".py"):
                seen[module.__name__] = Path(path)
                todo.append(vars(module))
    return sorted(set(seen.values()))


class _DependencyStamp:
    """Mixin: the source stamp of a retorch function covers its module's dependencies."""

    @classmethod
    def from_function(cls, py_func, py_file):
        if _retorch_module_of(py_func) is None and not dependency_files(py_func.__globals__):
            return None  # nothing of retorch's: the next locator (Numba's own) takes it
        self = super().from_function(py_func, py_file)
        if self is not None:
            self._namespace = py_func.__globals__
        return self

    def get_source_stamp(self):
        digests = tuple(
            (p.name, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in dependency_files(self._namespace)
            if p.resolve() != Path(self._py_file).resolve()
        )
        return super().get_source_stamp(), digests


class UserProvidedLocator(_DependencyStamp, caching.UserProvidedCacheLocator):
    """Numba's locator for ``NUMBA_CACHE_DIR``, with the dependency stamp."""


class InTreeLocator(_DependencyStamp, caching.InTreeCacheLocator):
    """Numba's ``__pycache__`` locator, with the dependency stamp."""


class UserWideLocator(_DependencyStamp, caching.UserWideCacheLocator):
    """Numba's per-user locator (a read-only install), with the dependency stamp."""


#: The value of ``NUMBA_CACHE_LOCATOR_CLASSES``: retorch's locators first, then Numba's own
#: default list (``CacheImpl._locator_classes``), which takes every other function.
LOCATORS = ",".join(
    [f"{__name__}.{c.__name__}" for c in (UserProvidedLocator, InTreeLocator, UserWideLocator)]
    + [c.__name__ for c in caching.CacheImpl._locator_classes]
)

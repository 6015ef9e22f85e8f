"""Small, deterministic views of what torch exposes about its own layers.

Each function wraps one of torch's introspection hooks (all real torch, nothing rebuilt):

* :func:`python_entry`: what a Python-level torch function is bound to;
* :func:`dispatch_keys`: ``torch._C._dispatch_keys`` as a list, in the order the dispatcher
  tries them (highest priority first), mirroring ``c10/core/DispatchKeySet.h``;
* :func:`dispatch_table`: rows of ``torch._C._dispatch_dump_table`` for chosen keys, with the
  build machine's paths cut to paths in torch's source tree;
* :func:`included_keys`, :func:`excluded_keys`: the thread-local include and exclude sets
  (``c10/core/impl/LocalDispatchKeySet.h``);
* :func:`dispatch_path`: the keys a call's key set holds and what the dispatcher does at each,
  computed as ``computeDispatchKeySet`` does (``aten/src/ATen/core/dispatch/DispatchKeyExtractor.h``);
* :class:`OpLog`: a ``TorchDispatchMode`` that records every aten op that reaches the
  dispatcher's Python key (torch/utils/_python_dispatch.py);
* :func:`profile_summary`: the profiler's aten ops and call counts, without the timings.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def python_entry(fn) -> str:
    """Where a torch callable is implemented: Python source, or a C++ binding."""
    if isinstance(fn, type(torch.add)):  # builtin_function_or_method
        owner = getattr(fn, "__self__", None)
        where = getattr(owner, "__name__", None) or fn.__module__
        return f"{fn.__name__}: C++ binding (builtin function of {where})"
    if isinstance(fn, type(torch.Tensor.add)):  # method_descriptor
        owner = f"{fn.__objclass__.__module__}.{fn.__objclass__.__name__}"
        return f"Tensor.{fn.__name__}: C++ binding (method of {owner})"
    code = getattr(fn, "__code__", None)
    if code is not None:
        path = code.co_filename.split("site-packages/")[-1]
        return f"{fn.__qualname__}: Python, {path}"
    return f"{fn!r}: {type(fn).__name__}"


def dispatch_keys(tensor: torch.Tensor) -> list[str]:
    """The tensor's dispatch key set, highest priority (tried first) to lowest."""
    return _names(torch._C._dispatch_keys(tensor))


_ROW = re.compile(
    r"^(?P<key>[\w ()]+?): (?P<fallthrough>fallthrough )?registered at (?P<where>\S+) "
    r"\[(?P<kind>[^\]]+)\]"
)

# Where torch's source tree starts inside a build machine's absolute path: the first
# component that is a top-level folder of the tree (or ``build/`` for generated files).
_TREE = re.compile(r"(?:^|/)((?:build/)?(?:aten|c10|torch|caffe2|functorch|torchgen)/.*)$")


def _short_path(path: str) -> str:
    """A registration path as a path in torch's tree.

    Builds print their own prefixes (``/__w/pytorch/pytorch/``, ``/pytorch/``,
    ``.../site-packages/``); the part from the tree's top-level folder on is the same.
    """
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1]
    m = _TREE.search(path)
    return m.group(1) if m else path


def dispatch_table(op: str, keys: list[str]) -> list[tuple[str, str, str]]:
    """(key, kind of kernel, file:line in torch's tree) for each of ``keys`` in ``op``'s table.

    A key with no entry is reported as ``(key, "no kernel", "")``.
    """
    rows = {}
    for line in torch._C._dispatch_dump_table(op).splitlines():
        m = _ROW.match(line)
        if m:
            kind = ("fallthrough " if m["fallthrough"] else "") + m["kind"]
            rows[m["key"]] = (m["key"], kind, _short_path(m["where"]))
    return [rows.get(k, (k, "no kernel", "")) for k in keys]


def _names(keyset) -> list[str]:
    """A key set's keys, highest priority first (its repr lists them lowest first)."""
    text = str(keyset)
    inside = text[text.index("(") + 1 : text.rindex(")")]
    return [k.strip() for k in inside.split(",") if k.strip()][::-1]


def included_keys() -> list[str]:
    """Keys this thread adds to every call's key set (``BackendSelect``, ``ADInplaceOrView``;
    ``Python`` and ``PythonTLSSnapshot`` while a dispatch mode is active)."""
    return _names(torch._C._dispatch_tls_local_include_set())


def excluded_keys() -> list[str]:
    """Keys this thread removes from every call's key set (autocast's keys, unless enabled)."""
    return _names(torch._C._dispatch_tls_local_exclude_set())


def dispatch_path(op: str, *tensors: torch.Tensor) -> list[tuple[str, str, str, str]]:
    """What the dispatcher does with each key of a call to ``op`` on ``tensors``, right now.

    Mirrors ``computeDispatchKeySet`` (``DispatchKeyExtractor.h``): the union of the tensors'
    key sets, plus the thread's include set, minus its exclude set; keys whose kernel for
    ``op`` is a fallthrough are masked out. Rows, highest priority first:
    ``(key, where the key comes from, what happens, kernel's file:line)``.
    """
    union = set()
    for t in tensors:
        union |= set(dispatch_keys(t))
    included, excluded = set(included_keys()), set(excluded_keys())
    keys = union | included
    table = {k: (kind, where) for k, kind, where in dispatch_table(op, sorted(keys))}
    order = dispatch_keys_order(keys)
    rows, first = [], True
    for key in order:
        source = "tensor" if key in union else "thread include set"
        kind, where = table[key]
        if key in excluded:
            what = "excluded in this thread: skipped"
        elif kind.startswith("fallthrough"):
            what = "fallthrough kernel: masked out"
        elif kind == "no kernel":
            what = "no kernel: skipped"
        elif first:
            what, first = f"{kind}: runs first", False
        else:
            what = f"{kind}: reached if a kernel above redispatches"
        rows.append((key, source, what, where))
    return rows


def dispatch_keys_order(keys) -> list[str]:
    """``keys`` (names) sorted as the dispatcher tries them, highest priority first."""
    ks = None
    for name in keys:
        k = torch._C._parse_dispatch_key(name)
        ks = torch._C.DispatchKeySet(k) if ks is None else ks.add(k)
    return _names(ks) if ks is not None else []


class OpLog(TorchDispatchMode):
    """Record every aten op (``aten.add.Tensor``...) dispatched while the mode is active.

    Set ``phase`` to label entries (for example ``"forward"``, ``"backward"``, ``"step"``).
    """

    def __init__(self):
        super().__init__()
        self.phase = ""
        self.ops: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append((self.phase, str(func)))
        return func(*args, **(kwargs or {}))

    def names(self, phase: str | None = None) -> list[str]:
        return [op for ph, op in self.ops if phase is None or ph == phase]

    def counts(self) -> list[tuple[str, str, int]]:
        """(phase, op, count) in order of first appearance."""
        return [(ph, op, n) for (ph, op), n in Counter(self.ops).items()]


@contextlib.contextmanager
def profile(**kwargs):
    """``torch.profiler.profile(**kwargs)`` with Kineto's start/stop log lines silenced.

    Kineto (the profiler's C++ core) writes ``profiler_start``/``profiler_stop`` lines with a
    timestamp and process id straight to file descriptor 2; in a notebook they would land in a
    later cell's output. Everything the profiler records is unchanged.
    """
    import torch.profiler

    @contextlib.contextmanager
    def fd2_silenced():
        sys.stderr.flush()
        saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)

    prof = torch.profiler.profile(**kwargs)
    with fd2_silenced():
        prof.__enter__()
    try:
        yield prof
    finally:
        with fd2_silenced():
            prof.__exit__(None, None, None)


def profile_summary(prof, prefix: str = "aten::") -> list[tuple[str, int]]:
    """(op name, calls) from a ``torch.profiler`` run, sorted by name; timings left out."""
    rows = [(e.key, e.count) for e in prof.key_averages() if e.key.startswith(prefix)]
    return sorted(rows)

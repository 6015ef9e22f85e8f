"""Small, deterministic views of what torch exposes about its own layers.

Each function wraps one of torch's introspection hooks (all real torch, nothing rebuilt):

* :func:`python_entry`: what a Python-level torch function is bound to;
* :func:`dispatch_keys`: ``torch._C._dispatch_keys`` as a list, in the order the dispatcher
  tries them (highest priority first), mirroring ``c10/core/DispatchKeySet.h``;
* :func:`dispatch_table`: rows of ``torch._C._dispatch_dump_table`` for chosen keys, with the
  build machine's paths cut to paths in torch's source tree;
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
        return f"Tensor.{fn.__name__}: C++ binding (method of {fn.__objclass__.__module__}.{fn.__objclass__.__name__})"
    code = getattr(fn, "__code__", None)
    if code is not None:
        path = code.co_filename.split("site-packages/")[-1]
        return f"{fn.__qualname__}: Python, {path}"
    return f"{fn!r}: {type(fn).__name__}"


def dispatch_keys(tensor: torch.Tensor) -> list[str]:
    """The tensor's dispatch key set, highest priority (tried first) to lowest."""
    text = str(torch._C._dispatch_keys(tensor))
    inside = text[text.index("(") + 1 : text.rindex(")")]
    return [k.strip() for k in inside.split(",") if k.strip()][::-1]


_ROW = re.compile(
    r"^(?P<key>[\w ()]+?): (?P<fallthrough>fallthrough )?registered at (?P<where>\S+) \[(?P<kind>[^\]]+)\]"
)


def _short_path(path: str) -> str:
    for marker in ("/pytorch/pytorch/", "site-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


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

"""The ``ops`` handler: one name for "do this op", whose meaning is set by who is listening.

Mirrors torch/_inductor/virtualized.py (``V.ops``, ``V.set_ops_handler``) and
torch/_inductor/ops_handler.py (the ``OpsHandler`` protocol). An IR node's ``inner_fn`` calls
``ops.load``, ``ops.add``, ``ops.exp``... without knowing whether they will be printed as kernel
source (:class:`retorch.inductor.codegen.common.KernelOps`), counted, or checked for the buffers
they read (:class:`ReadsHandler`). Swapping the handler is how one loop body serves all three.
"""

from __future__ import annotations

import contextlib

_handlers: list = []


class _Ops:
    """``ops.add(a, b)`` calls ``add`` on the handler installed now (``V.ops`` in torch)."""

    def __getattr__(self, name):
        def call(*args, **kwargs):
            if not _handlers:
                raise RuntimeError(
                    f"ops.{name} was called outside a kernel: install a handler with "
                    "retorch.inductor.virtualized.set_ops_handler(...) first"
                )
            return getattr(_handlers[-1], name)(*args, **kwargs)

        return call


ops = _Ops()


class _V:
    """``V.graph``: the GraphLowering being built, for lowerings that must realize a node."""

    graph = None

    @contextlib.contextmanager
    def set_graph_handler(self, graph):
        old, self.graph = self.graph, graph
        try:
            yield graph
        finally:
            self.graph = old


V = _V()


@contextlib.contextmanager
def set_ops_handler(handler):
    """Make ``handler`` receive every ``ops.*`` call in the block (``V.set_ops_handler``)."""
    _handlers.append(handler)
    try:
        yield handler
    finally:
        _handlers.pop()


class ReadsHandler:
    """Records the ``(buffer, index)`` pairs a loop body loads and counts its other ops: a small
    ``dependencies.py`` (``extract_read_writes``) for the scheduler's fusion checks."""

    def __init__(self):
        self.reads: list[tuple[str, str]] = []
        self.num_ops = 0
        self.names: set[str] = set()

    def load(self, name, index):
        self.reads.append((name, index))
        return "v"

    def reduction(self, dtype, reduction_type, value):
        return "v"

    def __getattr__(self, name):
        def op(*args, **kwargs):
            self.num_ops += 1
            self.names.add(name)
            return "v"

        return op

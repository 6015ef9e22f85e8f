"""The scheduler: which realized buffers share a kernel, and why.

Mirrors torch/_inductor/scheduler.py (``Scheduler.fuse_nodes``, ``can_fuse``) with the grouping
of torch/_inductor/codegen/simd.py: a kernel iterates ``outer`` ranges (one row per step) and,
inside each row, ``inner`` (reduction) ranges; sizes of 1 are dropped, as torch's ``(numel,
rnumel)`` groups ignore them. Walking the buffers in order, a buffer joins the open kernel when

* its loops fit: a pointwise node over ``outer + inner`` (a loop inside the row) or over
  ``outer`` (one value per row), or a reduction over ``outer`` x ``inner``; a pointwise kernel
  becomes a reduction kernel when a reduction over its rows arrives (torch fuses a reduction's
  pointwise producers into it), and
* it is legal: every buffer of the kernel it reads, it reads at the index that buffer was
  written, so a row never waits for another row (torch's ``MemoryDep`` comparison).

A fallback (eager torch) ends the open kernel. :attr:`Scheduler.decisions` says why each
buffer went where; softmax and LayerNorm become one kernel per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import ir
from .graph import count_ops
from .virtualized import ReadsHandler, set_ops_handler


def strip1(sizes) -> tuple[int, ...]:
    return tuple(s for s in sizes if s != 1)


def assign_vars(sizes, names) -> list[str]:
    """The index of one element of ``sizes``: dims of size 1 get ``"0"``, the others ``names``."""
    it = iter(names)
    return ["0" if s == 1 else next(it) for s in sizes]


@dataclass
class FusedKernel:
    """Buffers computed by one generated kernel (torch's ``FusedSchedulerNode``)."""

    name: str
    outer: tuple[int, ...]
    inner: tuple[int, ...]
    nodes: list[ir.ComputedBuffer] = field(default_factory=list)

    @property
    def xvars(self):
        return [f"x{i}" for i in range(len(self.outer))]

    @property
    def rvars(self):
        return [f"r{i}" for i in range(len(self.inner))]

    def kind(self, node: ir.ComputedBuffer) -> str:
        """The node's loops here: "reduction", "row" (one value per row) or "loop" (per element)."""
        if node.is_reduction():
            return "reduction"
        return "row" if strip1(node.size) == self.outer else "loop"

    def index(self, node: ir.ComputedBuffer):
        """The arguments of ``node.data.inner_fn`` for one element, in this kernel's names."""
        if node.is_reduction():
            return (assign_vars(node.data.ranges, self.xvars),
                    assign_vars(node.data.reduction_ranges, self.rvars))  # fmt: skip
        return (assign_vars(node.size, self.xvars + self.rvars),)

    def store_index(self, node) -> str:
        full = self.index(node)[0]
        return ir.index_expr(full, ir.contiguous_strides(node.size))

    def reads(self, node) -> list[tuple[str, str]]:
        handler = ReadsHandler()
        with set_ops_handler(handler):
            node.data.inner_fn(*self.index(node))
        return handler.reads

    def fits(self, node) -> bool:
        outer, inner = node.ranges()
        outer, inner = strip1(outer), strip1(inner)
        if node.is_reduction():
            return (outer, inner) == (self.outer, self.inner)
        return outer in (self.outer, self.outer + self.inner)

    def legal(self, node) -> bool:
        mine = {n.name: n for n in self.nodes}
        return all(idx == self.store_index(mine[b]) for b, idx in self.reads(node) if b in mine)


class Scheduler:
    def __init__(self, graph):
        self.graph = graph
        self.decisions: list[str] = []
        self.steps: list = []  # FusedKernel or ir.FallbackKernel, in execution order
        self.fuse_nodes()

    def _open(self, node) -> FusedKernel:
        outer, inner = node.ranges()
        k = FusedKernel(f"kernel{sum(isinstance(s, FusedKernel) for s in self.steps)}",
                        strip1(outer), strip1(inner), [node])  # fmt: skip
        self.steps.append(k)
        self.decisions.append(f"{node.name}: opens {k.name} ({describe(node)})")
        return k

    def fuse_nodes(self):
        """Each buffer joins the latest kernel it fits, going back as far as it may move: not
        past a kernel that computes a buffer it reads, nor past a fallback."""
        open_kernels: list[FusedKernel] = []
        for node in self.graph.buffers:
            if not isinstance(node, ir.ComputedBuffer):
                self.steps.append(node)
                if isinstance(node, ir.FallbackKernel):
                    self.decisions.append(f"{node.name}: eager torch {node.op} (fallback)")
                open_kernels = []
                continue
            reads = {name for name, _ in count_ops(node.data).reads}
            for k in reversed(open_kernels):
                if self.try_fuse(k, node):
                    break
                if reads & {n.name for n in k.nodes}:
                    open_kernels.append(self._open(node))
                    break
            else:
                open_kernels.append(self._open(node))

    def try_fuse(self, k: FusedKernel, node) -> bool:
        outer, inner = (strip1(r) for r in node.ranges())
        widened = None
        if not k.inner and node.is_reduction() and k.outer in (outer + inner, outer):
            widened = FusedKernel(k.name, outer, inner, k.nodes)  # rows of a reduction
        trial = widened or k
        if not trial.fits(node):
            return False
        if not trial.legal(node):
            self.decisions.append(f"{node.name}: not into {k.name}: reads a row of it elsewhere")
            return False
        k.outer, k.inner = trial.outer, trial.inner
        k.nodes.append(node)
        how = "its row loop" if trial.inner else "the same loop"
        self.decisions.append(f"{node.name}: fused into {k.name}, {how} ({describe(node)})")
        return True

    def kernels(self) -> list[FusedKernel]:
        return [s for s in self.steps if isinstance(s, FusedKernel)]

    def fusion_groups(self) -> dict[str, list[str]]:
        """``{"kernel0": ["buf0", "buf1"], ...}``: which buffers each kernel computes."""
        return {k.name: [n.name for n in k.nodes] for k in self.kernels()}


def describe(node: ir.ComputedBuffer) -> str:
    if node.is_reduction():
        d = node.data
        return f"{d.reduction_type} over {d.reduction_ranges} for each of {d.ranges}"
    return f"pointwise over {node.size}"

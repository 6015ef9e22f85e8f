"""One fused kernel as source: the part both backends share (torch/_inductor/codegen/simd.py).

``SIMDKernel`` walks a :class:`~retorch.inductor.scheduler.FusedKernel`'s buffers in order and
cuts them into *segments*: a ``row`` segment runs once per outer index (a value per row, such
as ``1/sqrt(var + eps)``); a ``loop`` segment runs over the row's inner range, storing pointwise
buffers and accumulating reductions. A buffer joins the open loop unless it reads a reduction
of that loop (which is only complete after it). A per-row value that no other kernel reads is
kept in a local variable and never stored (torch's removed buffers). Subclasses say how a
backend spells the loops: ``codegen/cpp.py`` (Numba, CPU) and ``codegen/triton.py``
(Numba-CUDA).
"""

from __future__ import annotations

import torch

from .. import ir
from .common import NP_DTYPES, KernelOps

ACC_INIT = {"sum": "0.0", "max": "-np.inf", "min": "np.inf"}


class SIMDKernel:
    def __init__(self, fused, graph, users: dict[str, set]):
        self.fused, self.graph, self.users = fused, graph, users
        self.tmp = 0
        self.mine = {n.name for n in fused.nodes}
        self.row_values: dict[str, str] = {}  # per-row results, by buffer name
        self.body_stores: dict[tuple[str, str], str] = {}  # stores of the current loop body
        self.loads: list[str] = []
        self.loop_names = {"rindex", "rbase", "lane", *fused.rvars}  # names that vary in a loop

    def next_tmp(self):
        self.tmp += 1
        return self.tmp - 1

    # ---- what a load means inside this kernel
    def buffer_dtype(self, name):
        for buf in self.graph.graph_inputs + self.graph.buffers:
            if buf.name == name:
                return buf.dtype
        raise KeyError(name)

    def local_value(self, name, index):
        """The variable holding ``name[index]`` in this kernel, if one does."""
        if name in self.row_values:
            return self.row_values[name]
        return self.body_stores.get((name, index))

    def load_target(self, name, index) -> str:
        if name in self.mine and self.is_local_row(self.graph.name_to_buffer[name]):
            return f"{name}_row[{self.subscript(self.row_index())}]"
        if name not in self.loads and name not in self.mine:
            self.loads.append(name)
        return f"{name}[{self.subscript(index)}]"

    def is_local_row(self, node) -> bool:
        """A row-sized buffer no other kernel reads: kept per row, never written to memory
        (the CPU backend only; torch's codegen/cpp_utils.py ``LocalBufferContext``)."""
        return (self.backend == "cpu" and self.fused.kind(node) == "loop"
                and not self.users.get(node.name, set()) - self.mine)  # fmt: skip

    def row_index(self) -> str:
        return ir.index_expr(self.fused.rvars, ir.contiguous_strides(self.fused.inner))

    def is_stored(self, node) -> bool:
        if self.fused.kind(node) == "loop":
            return not self.is_local_row(node)
        return bool(self.users.get(node.name, set()) - self.mine)

    def stored(self):
        return [n.name for n in self.fused.nodes if self.is_stored(n)]

    def local_rows(self):
        return [n for n in self.fused.nodes if self.is_local_row(n)]

    # ---- segments
    def segments(self):
        segs = []
        for node in self.fused.nodes:
            kind = self.fused.kind(node)
            if kind == "row":
                segs.append(("row", [node]))
                continue
            if segs and segs[-1][0] == "loop":
                reds = {n.name for n in segs[-1][1] if n.is_reduction()}
                if not any(b in reds for b, _ in self.fused.reads(node)):
                    segs[-1][1].append(node)
                    continue
            segs.append(("loop", [node]))
        return segs

    # ---- bodies
    def ops_handler(self, lines, cache, indent, hoist=None):
        return KernelOps(self, lines, cache, indent, hoist)

    def emit_row(self, node, lines, cache, indent):
        from ..virtualized import set_ops_handler

        with set_ops_handler(self.ops_handler(lines, cache, indent)):
            value = node.data.inner_fn(*self.fused.index(node))
        self.row_values[node.name] = value
        if self.is_stored(node):
            lines.append(self.store_line(node, value, indent))

    def emit_body(self, nodes, lines, cache, indent, accumulate, hoist):
        """One iteration of a loop segment: stores of pointwise buffers, updates of reductions.
        ``hoist`` says where loop-invariant lines go: ``(lines, [position], row cache, indent)``."""
        from ..virtualized import set_ops_handler

        row_cache, cache, self.body_stores = cache, dict(cache), {}
        hoist = (lines, hoist[0], row_cache, hoist[1])
        with set_ops_handler(self.ops_handler(lines, cache, indent, hoist)):
            for node in nodes:
                value = node.data.inner_fn(*self.fused.index(node))
                if node.is_reduction():
                    accumulate(node, value)
                else:
                    lines.append(self.store_line(node, value, indent))
                    self.body_stores[(node.name, self.fused.store_index(node))] = value
        self.body_stores = {}

    def subscript(self, index: str) -> str:
        return index

    def store_line(self, node, value, indent):
        if self.is_local_row(node):
            return f"{indent}{node.name}_row[{self.subscript(self.row_index())}] = {value}"
        return f"{indent}{node.name}[{self.subscript(self.fused.store_index(node))}] = {value}"

    def rvar_lines(self, rindex, indent):
        """``r0, r1...`` from the flat inner index ``rindex``."""
        if len(self.fused.inner) == 1:
            return [f"{indent}r0 = {rindex}"]
        strides = ir.contiguous_strides(self.fused.inner)
        rindex = rindex if rindex.isidentifier() else f"({rindex})"
        return [f"{indent}r{i} = ({rindex} // {st}) % {sz}"
                for i, (st, sz) in enumerate(zip(strides, self.fused.inner))]  # fmt: skip

    def combine(self, rtype, acc, value):
        if rtype == "sum":
            return f"{acc} + {value}"
        op = ">" if rtype == "max" else "<"  # NaN wins, as in torch.amax
        return f"{value} if ({value} {op} {acc} or {value} != {value}) else {acc}"

    def rnumel(self):
        return _prod(self.fused.inner)

    def signature_types(self, names):
        out = []
        for name in names:
            np_name = NP_DTYPES[self.buffer_dtype(name)].removeprefix("np.")
            out.append({"bool_": "boolean"}.get(np_name, np_name) + "[:]")
        return out

    def generate(self) -> str:
        """The kernel's source; sets ``self.args`` (loaded buffers, then stored ones)."""
        body = self.codegen_body()
        self.args = self.loads + [n for n in self.stored() if n not in self.loads]
        return self.header() + body


def _prod(xs):
    n = 1
    for x in xs:
        n *= x
    return n


def acc_dtype(node, backend):
    """Float32 sums accumulate in float32, as Inductor's vectorized reductions do, except on
    the CPU over more than 4096 elements, where each of 16 lanes would add over 256 terms."""
    rnumel = _prod(node.data.reduction_ranges)
    if node.data.reduction_type == "sum" and backend == "cpu" and rnumel > 4096:
        return torch.float64 if node.dtype == torch.float32 else node.dtype
    return node.dtype

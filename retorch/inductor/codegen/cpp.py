"""CPU kernels: Numba source with ``prange`` over rows (torch/_inductor/codegen/cpp.py).

Inductor's C++ backend writes an OpenMP-parallel loop over the outer range and, inside, a
vectorized main loop plus a scalar tail loop over the inner range (``CppKernelProxy``,
``CppVecKernel`` beside ``CppKernel``). This backend writes the same shape in Numba:
``numba.prange`` over the first outer dim, then per row the segments of
:class:`~retorch.inductor.codegen.simd.SIMDKernel`. A reduction keeps 16 partial results, one
per lane of ``rindex % 16``, combined in a fixed order after the loop: LLVM vectorizes the lane
loop without being allowed to reorder float additions (no fastmath), so results do not depend
on the machine's vector width. Sums of float32 accumulate in float64, torch's CPU ``acc_type``.
Indices are cast to ``np.uint64``: Numba wraps a negative signed index around, a branch per
load that keeps LLVM from vectorizing (3x slower here).
"""

from __future__ import annotations

import torch

from .common import NP_DTYPES, CSEVariable, KernelOps
from .simd import ACC_INIT, SIMDKernel, acc_dtype

LANES = 16
XBLOCK = 64
#: Loops over fewer elements run on one thread (torch's ``decide_parallel_depth`` with
#: ``config.cpp.min_chunk_size``); a fixed count, so the source does not depend on the machine.
PARALLEL_MIN_NUMEL = 32768
PRELUDE = """import math

import numba
import numpy as np

from retorch.inductor.runtime.cpu_helpers import exp, maximum, minimum, sigmoid, tanh
"""


class CppOps(KernelOps):
    """``exp``/``tanh``/``sigmoid`` through the vectorizable helpers of runtime/cpu_helpers.py."""

    def exp(self, x):
        if x.dtype != torch.float32:
            return super().exp(x)
        return self.emit(f"exp({x})", x.dtype)

    def tanh(self, x):
        if x.dtype != torch.float32:
            return super().tanh(x)
        return self.emit(f"tanh({x})", x.dtype)

    def sigmoid(self, x):
        if x.dtype != torch.float32:
            return super().sigmoid(x)
        return self.emit(f"sigmoid({x})", x.dtype)


class CppKernel(SIMDKernel):
    backend = "cpu"

    def ops_handler(self, lines, cache, indent, hoist=None):
        return CppOps(self, lines, cache, indent, hoist)

    def subscript(self, index: str) -> str:
        """Unsigned, so Numba drops its negative-index wraparound, which stops vectorization."""
        return index if index.isdigit() else f"np.uint64({index})"

    def combine(self, rtype, acc, value):
        if rtype == "sum":
            return f"{acc} + {value}"
        return f"{'maximum' if rtype == 'max' else 'minimum'}({acc}, {value})"

    def parallel(self) -> bool:
        return bool(self.fused.outer) and self.numel() >= PARALLEL_MIN_NUMEL

    def numel(self) -> int:
        n = self.rnumel()
        for s in self.fused.outer:
            n *= s
        return n

    def header(self):
        parallel = "parallel=True" if self.parallel() else ""
        return f"@numba.njit({parallel})\ndef {self.fused.name}({', '.join(self.args)}):\n"

    def codegen_body(self) -> str:
        """Rows in blocks of :data:`XBLOCK` per ``prange`` step when there is an inner loop, so a
        block allocates its accumulators and row buffers once, not once per row."""
        lines, indent, outer = [], "    ", self.fused.outer
        self.allocs, alloc_at, alloc_indent = [], 0, indent
        prange = "numba.prange" if self.parallel() else "range"
        if outer and self.fused.inner:
            nblocks = -(-outer[0] // XBLOCK)
            lines.append(f"{indent}for xblock in {prange}({nblocks}):")
            alloc_at, alloc_indent = 1, indent + "    "
            lines.append(f"{alloc_indent}for x0 in range(xblock * {XBLOCK}, "
                         f"min(xblock * {XBLOCK} + {XBLOCK}, {outer[0]})):")  # fmt: skip
            indent += "        "
        elif outer:
            lines.append(f"{indent}for x0 in {prange}({outer[0]}):")
            indent += "    "
        for var, n in zip(self.fused.xvars[1:], outer[1:]):
            lines.append(f"{indent}for {var} in range({n}):")
            indent += "    "
        for n in self.local_rows():
            self.allocs.append(f"{n.name}_row = np.empty({self.rnumel()}, {NP_DTYPES[n.dtype]})")
        cache = {}
        for kind, nodes in self.segments():
            if kind == "row":
                self.emit_row(nodes[0], lines, cache, indent)
            else:
                self.emit_loop(nodes, lines, cache, indent)
        lines[alloc_at:alloc_at] = [alloc_indent + line for line in self.allocs]
        return "\n".join(lines) + "\n"

    def emit_loop(self, nodes, lines, cache, indent):
        rn, reds = self.rnumel(), [n for n in nodes if n.is_reduction()]
        if not reds:
            hoist = ([len(lines)], indent)
            lines.append(f"{indent}for rindex in range({rn}):")
            lines.extend(self.rvar_lines("rindex", indent + "    "))
            self.emit_body(nodes, lines, cache, indent + "    ", None, hoist)
            return
        accs = {}
        for n in reds:
            accs[n.name] = acc = f"acc{self.next_tmp()}"
            init, dt = ACC_INIT[n.data.reduction_type], NP_DTYPES[acc_dtype(n, "cpu")]
            self.allocs.append(f"{acc} = np.empty({LANES}, {dt})")
            lines += [f"{indent}for lane in range({LANES}):", f"{indent}    {acc}[lane] = {init}"]
        main = rn - rn % LANES
        hoist = ([len(lines)], indent)

        def update(lane, ind):
            def accumulate(node, value):
                a = f"{accs[node.name]}[{lane}]"
                combined = self.combine(node.data.reduction_type, a, value)
                lines.append(f"{ind}{a} = {combined}")

            return accumulate

        if main:
            ind = indent + "        "
            lines.append(f"{indent}for rbase in range(0, {main}, {LANES}):")
            lines.append(f"{indent}    for lane in range({LANES}):")
            lines.extend(self.rvar_lines("rbase + lane", ind))
            self.emit_body(nodes, lines, cache, ind, update("lane", ind), hoist)
        if rn % LANES:
            ind = indent + "    "
            lines.append(f"{indent}for rindex in range({main}, {rn}):")
            lines.extend(self.rvar_lines("rindex", ind))
            if main:
                lines.append(f"{ind}lane = rindex - {main}")
            self.emit_body(
                nodes, lines, cache, ind, update("lane" if main else "rindex", ind), hoist
            )
        for n in reds:
            acc, rtype, res = accs[n.name], n.data.reduction_type, f"tmp{self.next_tmp()}"
            lines.append(f"{indent}{res} = {acc}[0]")
            lines.append(f"{indent}for lane in range(1, {min(LANES, rn)}):")
            lines.append(f"{indent}    {res} = {self.combine(rtype, res, f'{acc}[lane]')}")
            value = CSEVariable(f"tmp{self.next_tmp()}", n.dtype)
            lines.append(f"{indent}{value} = {NP_DTYPES[n.dtype]}({res})")
            self.row_values[n.name] = value
            if self.is_stored(n):
                lines.append(self.store_line(n, value, indent))

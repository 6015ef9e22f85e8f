"""CUDA kernels: Numba-CUDA source, one block per row (torch/_inductor/codegen/triton.py).

Inductor's Triton backend gives each program a block of ``xindex`` (rows) and loops, or holds
the whole row (a persistent reduction), over ``rindex``. This backend writes Numba-CUDA:

* a pointwise kernel: one thread per element, ``xindex = cuda.grid(1)``;
* a kernel with an inner range: one block of :data:`BLOCK` threads per row; each thread strides
  over ``rindex``, then a tree reduction in shared memory combines the threads' partial
  results, which every thread reads (Triton's ``tl.sum(..., axis=1)`` does this in registers).

Kernels are declared with :func:`retorch.cuda.kernel` and explicit float32 signatures, so
``tools/check_ptx.py`` compiles them (runtime-generated ones too, see examples.py).
"""

from __future__ import annotations

from ...cuda import simulator_enabled
from .common import NP_DTYPES, CSEVariable
from .simd import ACC_INIT, SIMDKernel, acc_dtype

#: Threads per block: 128 on a GPU; 32 under the simulator, where each is a Python thread.
BLOCK = 32 if simulator_enabled() else 128
PRELUDE = """import math

import numba
import numpy as np
from numba import cuda

from retorch.cuda import kernel
"""


class TritonKernel(SIMDKernel):
    backend = "cuda"

    def header(self):
        sig = f"void({', '.join(self.signature_types(self.args))})"
        return f'@kernel("{sig}")\ndef {self.fused.name}({", ".join(self.args)}):\n'

    def launch(self) -> tuple[int, int]:
        """(blocks, threads per block)."""
        xnumel = 1
        for n in self.fused.outer:
            xnumel *= n
        if self.fused.inner:
            return xnumel, BLOCK
        return (xnumel + BLOCK - 1) // BLOCK, BLOCK

    def xvar_lines(self, indent):
        outer = self.fused.outer
        if len(outer) == 1:
            return [f"{indent}x0 = xindex"]
        strides = [1] * len(outer)
        for i in range(len(outer) - 2, -1, -1):
            strides[i] = strides[i + 1] * outer[i + 1]
        return [
            f"{indent}x{i} = (xindex // {st}) % {n}"
            for i, (st, n) in enumerate(zip(strides, outer))
        ]

    def codegen_body(self) -> str:
        lines, ind = [], "    "
        if self.fused.inner:
            lines += [f"{ind}xindex = cuda.blockIdx.x", f"{ind}tid = cuda.threadIdx.x"]
        else:
            xnumel = 1
            for n in self.fused.outer:
                xnumel *= n
            lines += [f"{ind}xindex = cuda.grid(1)", f"{ind}if xindex < {xnumel}:"]
            ind += "    "
        if self.fused.outer:
            lines += self.xvar_lines(ind)
        cache = {}
        for kind, nodes in self.segments():
            if kind == "row":
                self.emit_row(nodes[0], lines, cache, ind)
            else:
                self.emit_loop(nodes, lines, cache, ind)
        return "\n".join(lines) + "\n"

    def store_line(self, node, value, indent):
        line = super().store_line(node, value, indent)
        row = self.fused.inner and self.fused.kind(node) != "loop"
        return f"{indent}if tid == 0:\n    {line}" if row else line

    def emit_loop(self, nodes, lines, cache, ind):
        accs = {}
        for n in nodes:
            if n.is_reduction():
                accs[n.name] = acc = f"acc{self.next_tmp()}"
                lines.append(
                    f"{ind}{acc} = {NP_DTYPES[acc_dtype(n, 'cuda')]}({ACC_INIT[n.data.reduction_type]})"
                )

        def accumulate(node, value):
            acc = accs[node.name]
            lines.append(f"{ind}    {acc} = {self.combine(node.data.reduction_type, acc, value)}")

        hoist = ([len(lines)], ind)
        lines.append(f"{ind}for rindex in range(tid, {self.rnumel()}, {BLOCK}):")
        lines.extend(self.rvar_lines("rindex", ind + "    "))
        self.emit_body(nodes, lines, cache, ind + "    ", accumulate, hoist)
        for n in nodes:
            if n.is_reduction():
                self.emit_block_reduce(n, accs[n.name], lines, ind)

    def emit_block_reduce(self, n, acc, lines, ind):
        sh, rtype = f"shared{self.next_tmp()}", n.data.reduction_type
        dt = NP_DTYPES[acc_dtype(n, "cuda")].replace("np.", "numba.")
        value = CSEVariable(f"tmp{self.next_tmp()}", n.dtype)
        lines += [
            f"{ind}{sh} = cuda.shared.array({BLOCK}, {dt})",
            f"{ind}{sh}[tid] = {acc}",
            f"{ind}cuda.syncthreads()",
            f"{ind}stride = {BLOCK // 2}",
            f"{ind}while stride > 0:",
            f"{ind}    if tid < stride:",
            f"{ind}        {sh}[tid] = {self.combine(rtype, f'{sh}[tid]', f'{sh}[tid + stride]')}",
            f"{ind}    cuda.syncthreads()",
            f"{ind}    stride //= 2",
            f"{ind}{value} = {sh}[0]",
            f"{ind}cuda.syncthreads()",
        ]
        self.row_values[n.name] = value
        if self.is_stored(n):
            lines.append(self.store_line(n, value, ind))

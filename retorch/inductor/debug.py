"""Looking inside a compilation: the IR as text, and torch Inductor's own output code.

Mirrors torch/_inductor/debug.py (``ir_pre_fusion.txt``: every buffer and its loop body,
written under ``TORCH_COMPILE_DEBUG=1``) and torch/_inductor/utils.py's
``run_and_get_code``, which returns the source Inductor generated for a call.
"""

from __future__ import annotations

import torch

from . import ir
from .virtualized import set_ops_handler


class IRPrinterOps:
    """An ops handler that writes each call as ``tmpN = ops.name(args)``."""

    def __init__(self, lines):
        self.lines = lines

    def __getattr__(self, name):
        def op(*args):
            var = f"tmp{len(self.lines)}"
            shown = ", ".join(repr(a) if not str(a).startswith("tmp") else str(a) for a in args)
            self.lines.append(f"    {var} = ops.{name}({shown})")
            return var

        return op


def loop_body(node: ir.ComputedBuffer) -> list[str]:
    lines: list[str] = []
    with set_ops_handler(IRPrinterOps(lines)):
        d = node.data
        if isinstance(d, ir.Reduction):
            index = [f"x{i}" for i in range(len(d.ranges))]
            rindex = [f"r{i}" for i in range(len(d.reduction_ranges))]
            value = d.inner_fn(index, rindex)
            lines.append(f"    return ops.reduction({d.reduction_type!r}, {value})")
            head = f"  def inner_fn(index={index}, rindex={rindex}):"
        else:
            index = [f"x{i}" for i in range(len(d.ranges))]
            lines.append(f"    return {d.inner_fn(index)}")
            head = f"  def inner_fn(index={index}):"
    return [head] + ["  " + line for line in lines]


def ir_text(graph) -> str:
    """Each input and buffer of a GraphLowering, with its loop body (``ir_pre_fusion.txt``)."""
    out = [f"{b.name}: InputBuffer size={b.size} dtype={b.dtype}" for b in graph.graph_inputs]
    for buf in graph.buffers:
        kind = type(buf).__name__
        if isinstance(buf, ir.ComputedBuffer):
            d = buf.data
            what = (f"Reduction({d.reduction_type!r}, ranges={d.ranges}, "
                    f"reduction_ranges={d.reduction_ranges})" if isinstance(d, ir.Reduction)
                    else f"Pointwise(ranges={d.ranges})")  # fmt: skip
            out.append(f"{buf.name}: {kind} {what} dtype={buf.dtype}")
            out.extend(loop_body(buf))
        elif isinstance(buf, ir.MultiOutput):
            out.append(f"{buf.name}: MultiOutput {buf.parent.name}[{buf.index}] size={buf.size}")
        else:
            out.append(f"{buf.name}: {kind} {buf.op} (node {buf.node_name}) size={buf.size}")
    return "\n".join(out)


def inductor_code(fn, *args, **compile_kwargs) -> list[str]:
    """The output code torch Inductor generates for ``fn(*args)`` (``run_and_get_code``)."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    _, code = run_and_get_code(torch.compile(fn, **compile_kwargs), *args)
    return code

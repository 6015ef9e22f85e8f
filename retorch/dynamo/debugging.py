"""explain(fn)(*args): graphs, graph breaks and guards, as torch._dynamo.explain reports them.

Mirrors torch/_dynamo/backends/debugging.py (`ExplainOutput`, `_explain_graph_detail`) and
`explain` in torch/_dynamo/eval_frame.py at torch v2.13.0, with the same conventions:
`graph_count` counts compiled graphs, `graph_break_count` is `graph_count - 1`, a break
reason is recorded with the graph compiled before it (a break with no graph before it leaves
no reason), and `ops_per_graph` lists the targets of each graph's call_function nodes (calls
of Tensor methods are call_method nodes and are not listed, in torch either). `all_breaks`
also keeps the breaks that had no graph before them, and `skipped` the frames that ran
uncompiled.
"""

import dataclasses

from .eval_frame import CompileContext, OptimizedFunction


@dataclasses.dataclass
class ExplainOutput:
    graphs: list
    graph_count: int
    graph_break_count: int
    break_reasons: list
    op_count: int
    ops_per_graph: list
    out_guards: list
    all_breaks: list
    compile_count: int
    skipped: list  # frames run uncompiled, and why (torch logs these as skipped frames)

    def __str__(self) -> str:
        lines = [f"Graph Count: {self.graph_count}", f"Graph Break Count: {self.graph_break_count}",
                 f"Op Count: {self.op_count}", "Break Reasons:"]  # fmt: skip
        lines += [f"  Break Reason {i + 1}: {r}" for i, r in enumerate(self.break_reasons)]
        lines.append("Ops per Graph:")
        for i, ops in enumerate(self.ops_per_graph):
            lines.append(
                f"  Ops {i + 1}: " + ", ".join(getattr(o, "__name__", str(o)) for o in ops)
            )
        lines.append("Out Guards:")
        lines += [f"  {g}" for g in self.out_guards]
        return "\n".join(lines)


def explain(fn):
    """`explain(fn)(*args, **kwargs)`: run fn once, captured, and report what was captured."""

    def inner(*args, **kwargs):
        ctx = CompileContext("eager")
        opt = OptimizedFunction(fn, ctx)
        opt(*args, **kwargs)
        graphs, reasons, ops, guards, breaks = [], [], [], [], []
        for gm, brk, gm_guards, _ in ctx.graphs:
            if brk is not None:
                breaks.append(brk)
            guards.extend(gm_guards)
            if gm is None:
                continue
            graphs.append(gm)
            ops.append([n.target for n in gm.graph.nodes if n.op == "call_function"])
            if brk is not None:
                reasons.append(brk)
        return ExplainOutput(graphs, len(graphs), max(len(graphs) - 1, 0), reasons,
                             sum(map(len, ops)), ops, guards, breaks, len(ctx.graphs),
                             list(ctx.skipped))  # fmt: skip

    return inner

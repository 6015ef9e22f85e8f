"""Draw a retorch graph as torchviz draws torch's (torchviz/dot.py ``make_dot``).

Same labels and colours: each node by its name, leaves (through their ``AccumulateGrad``) as a
light-blue box with the shape, the output as a green box. Node ids are assigned in the order of
the walk, so the drawing is the same on every run.
"""

from __future__ import annotations

from .graph import AccumulateGrad, Node


def make_dot(var, params: dict | None = None):
    import graphviz

    names = {id(t): n for n, t in (params or {}).items()}
    dot = graphviz.Digraph(
        node_attr=dict(
            style="filled",
            shape="box",
            align="left",
            fontsize="10",
            ranksep="0.1",
            height="0.2",
            fontname="monospace",
        ),
        graph_attr=dict(size="12,12"),
    )
    ids: dict[int, str] = {}

    def node_id(obj) -> str:
        if id(obj) not in ids:
            ids[id(obj)] = f"n{len(ids)}"
        return ids[id(obj)]

    def shape(t) -> str:
        return "(" + ", ".join(map(str, t.shape)) + ")"

    seen = set()

    def add(fn) -> None:
        if fn in seen:
            return
        seen.add(fn)
        if isinstance(fn, AccumulateGrad):
            var_ = fn.variable
            label = f"{names.get(id(var_), '')}\n {shape(var_)}"
            dot.node(node_id(var_), label, fillcolor="lightblue")
            dot.edge(node_id(var_), node_id(fn))
        dot.node(node_id(fn), fn.name())
        for edge in fn.next_functions:
            if edge.function is not None:
                dot.edge(node_id(edge.function), node_id(fn))
                add(edge.function)

    dot.node(node_id(var), "\n " + shape(var), fillcolor="darkolivegreen1")
    if var.grad_fn is not None:
        add(var.grad_fn)
        dot.edge(node_id(var.grad_fn), node_id(var))
    return dot


def graph_names(var) -> list[str]:
    """Names of all nodes reachable from ``var.grad_fn``, each once, in walk order.

    Works on a retorch Tensor or a torch tensor, so the two graphs can be compared.
    """
    out, seen, stack = [], set(), [var.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        out.append(fn.name() if isinstance(fn, Node) else type(fn).__name__)
        stack.extend(e[0] for e in reversed(fn.next_functions) if e[0] is not None)
    return out


def backward_order(output, torch_output=None) -> tuple[list[str], list[str] | None]:
    """The order in which the engine runs nodes, observed through node pre-hooks.

    Registers a pre-hook on every node of the graph of ``output`` (a retorch Tensor) and, if
    given, of ``torch_output`` (a torch tensor), runs backward on both, and returns the names in
    the order the hooks fired.
    """
    ours: list[str] = []
    seen, stack = set(), [output.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        fn.register_prehook(lambda grads, fn=fn: ours.append(fn.name()))
        stack.extend(e.function for e in fn.next_functions if e.function is not None)
    output.backward()
    if torch_output is None:
        return ours, None
    theirs: list[str] = []
    seen, stack = set(), [torch_output.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        fn.register_prehook(lambda grads, fn=fn: theirs.append(type(fn).__name__))
        stack.extend(f for f, _ in fn.next_functions if f is not None)
    torch_output.backward()
    return ours, theirs

"""Draw a retorch graph as torchviz draws torch's, and watch the engine's order and steps.

``make_dot`` follows torchviz/dot.py ``make_dot`` (same labels, colours and layout): each node
by its class name; leaves (through their ``AccumulateGrad``) as light-blue boxes with their
shape; tensors saved by custom Functions in orange; the output in green, and the base of an
output that is a view in dark green. Node ids are numbers given in the order of the walk (not
``id()``), so the drawing is the same on every run.
"""

from __future__ import annotations

from typing import NamedTuple


def _shape(t) -> str:
    return "(" + ", ".join(str(int(v)) for v in t.shape) + ")"


def make_dot(var, params: dict | None = None):
    """A ``graphviz.Digraph`` of the graph that produced ``var`` (a Tensor or a tuple of them)."""
    import graphviz

    param_map = {id(v): k for k, v in (params or {}).items()}
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
    seen: set[int] = set()

    def node_id(obj) -> str:
        return ids.setdefault(id(obj), str(len(ids)))

    def var_label(t, name=None) -> str:
        return f"{name or param_map.get(id(t), '')}\n {_shape(t)}"

    def add_nodes(fn) -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        if hasattr(fn, "variable"):  # AccumulateGrad: draw the leaf it accumulates into
            leaf = fn.variable
            seen.add(id(leaf))
            dot.node(node_id(leaf), var_label(leaf), fillcolor="lightblue")
            dot.edge(node_id(leaf), node_id(fn))
        dot.node(node_id(fn), type(fn).__name__)
        for nxt, _ in fn.next_functions:
            if nxt is not None:
                dot.edge(node_id(nxt), node_id(fn))
                add_nodes(nxt)
        if hasattr(fn, "saved_tensors"):  # a custom Function's saved tensors
            for t in fn.saved_tensors:
                seen.add(id(t))
                dot.edge(node_id(t), node_id(fn), dir="none")
                dot.node(node_id(t), var_label(t), fillcolor="orange")

    def add_base_tensor(t, color="darkolivegreen1") -> None:
        if id(t) in seen:
            return
        seen.add(id(t))
        dot.node(node_id(t), var_label(t), fillcolor=color)
        if t.grad_fn is not None:
            add_nodes(t.grad_fn)
            dot.edge(node_id(t.grad_fn), node_id(t))
        if t._base is not None:
            add_base_tensor(t._base, color="darkolivegreen3")
            dot.edge(node_id(t._base), node_id(t), style="dotted")

    for t in var if isinstance(var, tuple) else (var,):
        add_base_tensor(t)
    size = max(12, len(dot.body) * 0.15)  # torchviz's resize_graph
    dot.graph_attr.update(size=f"{size},{size}")
    return dot


def graph_names(var) -> list[str]:
    """Class names of all nodes reachable from ``var.grad_fn``, each once, in walk order.

    Works on a retorch Tensor or a torch tensor, so the two graphs can be compared.
    """
    out, seen, stack = [], set(), [var.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        out.append(type(fn).__name__)
        stack.extend(f for f, _ in reversed(fn.next_functions) if f is not None)
    return out


def _record_order(output, order: list) -> None:
    seen, stack = set(), [output.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        fn.register_prehook(lambda grads, fn=fn: order.append(type(fn).__name__))
        stack.extend(f for f, _ in fn.next_functions if f is not None)


def backward_order(output, torch_output=None) -> tuple[list[str], list[str] | None]:
    """The order in which the engine runs nodes, observed through node pre-hooks.

    Registers a pre-hook on every node of the graph of ``output`` (a retorch Tensor) and, if
    given, of ``torch_output`` (a torch tensor), runs backward on both, and returns the node
    names in the order the hooks fired.
    """
    ours: list[str] = []
    _record_order(output, ours)
    output.backward()
    if torch_output is None:
        return ours, None
    theirs: list[str] = []
    _record_order(torch_output, theirs)
    torch_output.backward()
    return ours, theirs


class Step(NamedTuple):
    """The engine's state when it pops a node: what runs, what else is ready, what waits."""

    runs: str
    ready: list[str]  # the rest of the ready queue, in the order it would pop
    waiting: dict[str, int]  # nodes not yet ready -> gradients they still wait for


def node_labels(output, leaves: dict | None = None) -> dict:
    """Short, run-independent labels for the nodes of ``output``'s graph: the class name without
    ``Backward0``, numbered by sequence number within this graph (``Mul#3``), and
    ``Acc(name)`` for the AccumulateGrad of a leaf named in ``leaves`` ({name: tensor})."""
    names = {id(t): k for k, t in (leaves or {}).items()}
    nodes, seen, stack = [], set(), [output.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        nodes.append(fn)
        stack.extend(f for f, _ in fn.next_functions if f is not None)
    inner = sorted(
        (fn for fn in nodes if not hasattr(fn, "variable")), key=lambda f: f._sequence_nr()
    )
    labels = {fn: f"{fn.name().split('Backward')[0]}#{i}" for i, fn in enumerate(inner)}
    for fn in nodes:
        if hasattr(fn, "variable"):
            labels[fn] = f"Acc({names.get(id(fn.variable), '?')})"
    return labels


def trace_backward(output, leaves: dict | None = None) -> list[Step]:
    """Run ``output.backward()`` in retorch's engine and record each step (``engine._step_hook``)."""
    from . import engine

    labels = node_labels(output, leaves)
    steps: list[Step] = []

    def hook(task, fn) -> None:
        ready = [labels[t.fn] for _, t in sorted(task.ready, key=lambda e: e[0])]
        ran = {s.runs for s in steps} | {labels[fn]} | set(ready)
        waiting = {
            labels[n]: c for n, c in task.dependencies.items() if labels[n] not in ran and c > 0
        }
        steps.append(Step(labels[fn], ready, dict(sorted(waiting.items()))))

    engine._step_hook = hook
    try:
        output.backward()
    finally:
        engine._step_hook = None
    return steps


def torch_order(torch_output, output, labels: dict) -> list[str]:
    """The order torch's engine runs the nodes of ``torch_output``, seen through a pre-hook on
    each, named with ``labels`` (from :func:`node_labels`) of the same graph built by retorch
    (``output``): the two graphs are walked in step, so matching nodes get the same label."""
    ours, theirs = [output.grad_fn], [torch_output.grad_fn]
    pairs, seen = {}, set()
    while theirs:
        a, t = ours.pop(), theirs.pop()
        if t is None or t in seen:
            continue
        seen.add(t)
        pairs[t] = labels[a]
        ours.extend(f for f, _ in a.next_functions)
        theirs.extend(f for f, _ in t.next_functions)
    order: list = []
    for t in pairs:
        t.register_prehook(lambda grads, t=t: order.append(pairs[t]))
    torch_output.backward()
    return order

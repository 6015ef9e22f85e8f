"""The backward engine. Mirrors torch/csrc/autograd/engine.cpp (single-threaded, CPU).

``backward`` and ``grad`` both call ``run_backward``, which does what ``Engine::execute`` does:

1. ``compute_dependencies``: count, for every node reachable from the roots, how many edges
   point at it; a node may run only when all its gradients have arrived.
2. A ready queue ordered like torch's CPU ``ReadyQueue``: the node with the highest sequence
   number (the most recently created) first; ``AccumulateGrad`` has the highest of all.
3. ``evaluate_function``: run the node's pre-hooks, the node, its post-hooks; sum each output
   gradient into the ``InputBuffer`` of the node it flows to (reducing broadcast gradients to
   the input's shape, ``validate_outputs``); when a node's count reaches zero, queue it.
4. Unless ``retain_graph``, release every executed node's saved tensors.
"""

from __future__ import annotations

import heapq
import warnings
from typing import Sequence

from . import _ops, anomaly_mode, grad_mode
from .graph import AccumulateGrad, Node
from .tensor import Tensor


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def compute_dependencies(roots: Sequence[Node]) -> dict[Node, int]:
    """Number of edges into each node reachable from ``roots`` (engine.cpp: compute_dependencies)."""
    dependencies: dict[Node, int] = {}
    seen, stack = set(roots), list(roots)
    while stack:
        node = stack.pop()
        for edge in node.next_functions:
            nxt = edge.function
            if nxt is None:
                continue
            dependencies[nxt] = dependencies.get(nxt, 0) + 1
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return dependencies


def _needed_nodes(roots, targets) -> set[Node]:
    """Nodes whose outputs lead to a target (torch's exec_info for autograd.grad): only they run."""
    leads: dict[Node, bool] = {}  # node -> is a target, or runs into one

    def visit(node) -> bool:
        if node not in leads:
            leads[node] = False  # the graph is a DAG; this only guards repeated visits
            downstream = [visit(e.function) for e in node.next_functions if e.function is not None]
            leads[node] = node in targets or any(downstream)
        return leads[node]

    for root in roots:
        visit(root)
    return {
        n
        for n in leads
        if any(e.function is not None and leads[e.function] for e in n.next_functions)
    }


def _sum_to_input(grad: Tensor, shape) -> Tensor:
    """validate_outputs: a gradient in a broadcast shape is summed back to the input's shape."""
    if grad.data.shape == shape:
        return grad
    return Tensor._sum_to(grad, shape)


def _call_function(node: Node, inputs: list) -> tuple:
    if not (
        node._tensor_pre_hooks
        or node._retains_grad_hooks
        or node._pre_hooks
        or node._post_hooks
        or anomaly_mode._enabled
    ):
        return node.apply(inputs)  # the common case: no hooks, no anomaly checks
    for i, hooks in node._tensor_pre_hooks.items():
        for hook in hooks:
            result = hook(inputs[i])
            if result is not None:
                inputs[i] = result
    for i, hook in node._retains_grad_hooks.items():  # retain_grad sees the grad after tensor hooks
        hook(inputs[i])
    for hook in node._pre_hooks:
        result = hook(tuple(inputs))
        if result is not None:
            inputs = list(result)
    outputs = node.apply(inputs)
    for hook in node._post_hooks:
        result = hook(outputs, tuple(inputs))
        if result is not None:
            outputs = result
    if anomaly_mode.is_anomaly_enabled():
        for i, out in enumerate(outputs):
            if out is not None and _ops.any_nan(out.data):
                if node._trace:
                    warnings.warn(
                        f"Error detected in {node.name()}. Traceback of forward call that caused the error:\n"
                        + "".join(node._trace),
                        stacklevel=2,
                    )
                raise RuntimeError(
                    f"Function '{node.name()}' returned nan values in its {i}th output."
                )
    return outputs


def run_backward(
    outputs,
    grad_outputs,
    keep_graph: bool,
    create_graph: bool,
    inputs=None,
    allow_unused: bool = False,
    accumulate_grad: bool = True,
):
    outputs = _as_tuple(outputs)
    grad_outputs = _as_tuple(grad_outputs) if grad_outputs is not None else (None,) * len(outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(
            f"grad requires one gradient per output: got {len(grad_outputs)} for {len(outputs)}"
        )
    roots, root_grads = [], []
    for i, (out, grad) in enumerate(zip(outputs, grad_outputs)):
        edge = out._gradient_edge()
        if edge is None:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn"
            )
        if grad is None:
            if out.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            grad = Tensor(_ops.ones_like(out.data))
        elif not isinstance(grad, Tensor):
            grad = Tensor(grad)
        roots.append(edge)
        root_grads.append(grad)

    # autograd.grad: capture the gradient flowing into each input instead of accumulating it.
    captures: dict[tuple[Node, int], int] = {}
    inputs = _as_tuple(inputs) if inputs is not None else ()
    for i, t in enumerate(inputs):
        edge = t._gradient_edge()
        if edge is None:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
        captures[(edge.function, edge.input_nr)] = i
    captured: list = [None] * len(inputs)
    needed = (
        _needed_nodes([e.function for e in roots], {f for f, _ in captures})
        if not accumulate_grad
        else None
    )

    graph_roots = list(dict.fromkeys(e.function for e in roots))
    dependencies = compute_dependencies(graph_roots)
    buffers: dict[Node, list] = {}

    def add_to_buffer(node: Node, input_nr: int, grad: Tensor) -> None:
        buf = buffers.setdefault(node, [None] * max(len(node.input_metadata), input_nr + 1))
        buf[input_nr] = grad if buf[input_nr] is None else buf[input_nr] + grad

    for edge, grad in zip(roots, root_grads):
        add_to_buffer(edge.function, edge.input_nr, grad)

    ready: list = []
    for node in graph_roots:
        if dependencies.get(node, 0) == 0:
            heapq.heappush(ready, (-node._sequence_nr, id(node), node))

    executed = []
    with grad_mode.set_grad_enabled(create_graph):
        while ready:
            _, _, node = heapq.heappop(ready)
            grads = buffers.pop(node, [])
            for input_nr, grad in enumerate(grads):
                if (node, input_nr) in captures:
                    captured[captures[(node, input_nr)]] = grad
            if (needed is not None and node not in needed) or (
                not accumulate_grad and isinstance(node, AccumulateGrad)
            ):
                continue  # autograd.grad runs only what leads to its inputs, and accumulates nothing
            if any(g is not None for g in grads):
                grads = [
                    g if g is not None else Tensor(_zeros(shape, grads))
                    for g, shape in zip(grads, node.input_metadata)
                ]
                outputs = _call_function(node, grads)
                executed.append(node)
            else:  # nothing arrived: pass nothing on, but still release the nodes waiting on us
                outputs = (None,) * len(node.next_functions)
            for edge, grad in zip(node.next_functions, outputs):
                nxt = edge.function
                if nxt is None:
                    continue
                if grad is not None:
                    add_to_buffer(
                        nxt, edge.input_nr, _sum_to_input(grad, nxt.input_metadata[edge.input_nr])
                    )
                dependencies[nxt] -= 1
                if dependencies[nxt] == 0:
                    heapq.heappush(ready, (-nxt._sequence_nr, id(nxt), nxt))
    if not keep_graph:
        for node in executed:
            node.release_variables()
    if inputs:
        for i, grad in enumerate(captured):
            if grad is None and not allow_unused:
                raise RuntimeError(
                    f"The differentiated Tensor at index {i} appears to not have been used in the graph. "
                    "Set allow_unused=True if this is the desired behavior."
                )
        return tuple(captured)
    return None


def _zeros(shape, like):
    sample = next(g for g in like if g is not None)
    return _ops.zeros(shape, sample.data)


def backward(
    tensors, grad_tensors=None, retain_graph=None, create_graph: bool = False, inputs=None
) -> None:
    """Accumulate d(tensors)/d(leaves) into the leaves' ``.grad`` (``torch.autograd.backward``)."""
    if retain_graph is None:
        retain_graph = create_graph
    if inputs is not None:
        grads = run_backward(
            tensors,
            grad_tensors,
            retain_graph,
            create_graph,
            inputs=inputs,
            allow_unused=True,
            accumulate_grad=False,
        )
        for t, g in zip(_as_tuple(inputs), grads):
            if g is not None:
                t.grad = g if t.grad is None else t.grad + g
        return
    run_backward(tensors, grad_tensors, retain_graph, create_graph)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph: bool = False,
    allow_unused: bool | None = None,
):
    """Return d(outputs)/d(inputs) without touching ``.grad`` (``torch.autograd.grad``)."""
    if retain_graph is None:
        retain_graph = create_graph
    return run_backward(
        outputs,
        grad_outputs,
        retain_graph,
        create_graph,
        inputs=inputs,
        allow_unused=bool(allow_unused),
        accumulate_grad=False,
    )

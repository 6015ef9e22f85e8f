"""The backward engine. Mirrors torch/csrc/autograd/engine.cpp (single-threaded, CPU).

``backward`` and ``grad`` both call ``run_backward``, which does what ``Engine::execute`` does:

1. ``compute_dependencies``: count, for every node reachable from the root, how many edges
   point at it; a node may run only when all its gradients have arrived.
2. For ``grad`` (and ``backward(inputs=...)``), ``init_to_execute`` marks the nodes that lead
   to the inputs; no other node runs.
3. A ready queue ordered like torch's CPU ``ReadyQueue``: the node with the highest sequence
   number (the most recently created) first; ``AccumulateGrad`` has the highest of all.
4. ``evaluate_function``: run the node and its hooks (``call_function``), free its saved
   tensors unless ``retain_graph``, and add each gradient it returns into the input buffer of
   the node it flows to; a node whose dependency count reaches zero is ready.
"""

from __future__ import annotations

import heapq
import warnings
from typing import Callable

from . import anomaly_mode, grad_mode
from .graph import Node
from .tensor import Tensor, _ops


class GraphRoot(Node):
    """The node a backward from several outputs starts at (functions/basic_ops.h)."""

    def __init__(self, edges: list, grads: list) -> None:
        super().__init__(tuple(edges))
        self.grads = grads

    def apply(self, grads: list) -> tuple:
        return tuple(self.grads)


class NodeTask:
    """A ready node with its gradients: an entry of the ready queue (engine.h).

    The queue holds ``(-sequence_nr, task)`` pairs in a heap, so that the node with the
    highest sequence number runs first (ReadyQueue's CompareNodeTaskTime). Python's heapq
    moves entries exactly as std::priority_queue does, so even ties come out in torch's
    order: only leaves' AccumulateGrad nodes tie, and then the tasks compare as torch's do,
    neither before the other.
    """

    __slots__ = ("fn", "inputs")

    def __init__(self, fn: Node, inputs: list) -> None:
        self.fn, self.inputs = fn, inputs

    def __lt__(self, other: NodeTask) -> bool:
        return False


class ExecInfo:
    """For ``grad``: does the node run (``needed``), whose gradients are captured (``captures``)."""

    __slots__ = ("needed", "captures")

    def __init__(self) -> None:
        self.needed, self.captures = False, []

    def should_execute(self) -> bool:
        return self.needed or bool(self.captures)


class GraphTask:
    """The state of one backward pass (engine.h)."""

    def __init__(self, keep_graph: bool) -> None:
        self.keep_graph = keep_graph
        self.dependencies: dict[Node, int] = {}
        self.not_ready: dict[Node, list] = {}  # input buffers of nodes still waiting
        self.exec_info: dict[Node, ExecInfo] = {}  # empty: every node runs
        self.captured_vars: list = []
        self.ready: list[tuple[int, NodeTask]] = []


#: For teaching and debugging: called as ``_step_hook(task, fn)`` each time the engine pops
#: ``fn`` from the ready queue, before running it (``graphviz.trace_backward`` records them).
_step_hook: Callable | None = None


def compute_dependencies(root: Node) -> dict[Node, int]:
    """How many edges point at each node reachable from ``root``
    (engine.cpp: ``Engine::compute_dependencies``)."""
    dependencies: dict[Node, int] = {}
    seen, stack = {root}, [root]
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            dependencies[nxt] = dependencies.get(nxt, 0) + 1
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return dependencies


def init_to_execute(task: GraphTask, root: Node, input_edges: list, accumulate_grad: bool) -> None:
    """Mark the nodes on a path to an input (engine.cpp: GraphTask::init_to_execute).

    ``grad`` captures the gradient arriving at each input's edge; ``backward(inputs=...)``
    instead runs the inputs' nodes (their AccumulateGrad, or their retain_grad hook).
    """
    info = task.exec_info
    info[root] = ExecInfo()
    info[root].needed = True
    for i, (fn, input_nr) in enumerate(input_edges):
        entry = info.setdefault(fn, ExecInfo())
        if accumulate_grad:
            entry.needed = True
        else:
            entry.captures.append((input_nr, i))
    task.captured_vars = [None] * (0 if accumulate_grad else len(input_edges))

    def should_execute(fn) -> bool:
        return fn in info and info[fn].should_execute()

    # Depth first, iteratively (graphs can be far deeper than Python's recursion limit): a node
    # is needed when any child should execute, which is final once all its children are done.
    seen, stack = {root}, [(root, iter(root.next_functions))]
    while stack:
        fn, children = stack[-1]
        for child, _ in children:
            if child is None:
                continue
            if child not in seen:
                seen.add(child)
                stack.append((child, iter(child.next_functions)))
                break
            if should_execute(child):
                info.setdefault(fn, ExecInfo()).needed = True
        else:
            stack.pop()
            if stack and should_execute(fn):
                info.setdefault(stack[-1][0], ExecInfo()).needed = True


def _is_expandable_to(shape, desired) -> bool:
    """Whether ``shape`` broadcasts to ``desired`` (ATen's ``is_expandable_to``)."""
    if len(shape) > len(desired):
        return False
    return all(n == 1 or n == d for n, d in zip(reversed(shape), reversed(desired)))


def validate_outputs(fn: Node, grads) -> tuple:
    """One gradient per edge, each in its input's shape: broadcast ones are summed back."""
    edges = fn.next_functions
    if len(grads) != len(edges):
        raise RuntimeError(
            f"Function {fn.name()} returned an invalid number of gradients - expected "
            f"{len(edges)}, but got {len(grads)}"
        )
    for i, (nxt, input_nr) in enumerate(edges):
        grad = grads[i]
        if nxt is None or grad is None:
            continue
        shape = nxt.input_metadata[input_nr]
        if grad.shape != shape:
            if not _is_expandable_to(shape, grad.shape):
                raise RuntimeError(
                    f"Function {fn.name()} returned an invalid gradient at index {i} - got "
                    f"{list(grad.shape)} but expected shape compatible with {list(shape)}"
                )
            grads = (*grads[:i], Tensor._sum_to(grad, shape), *grads[i + 1 :])
    return grads


def call_tensor_pre_hooks(fn: Node, inputs: list) -> list:
    """Hooks registered on the tensors this node's gradients are for, then retain_grad's."""
    for output_nr, hooks in fn._tensor_pre_hooks.items():
        for hook in list(hooks.values()):
            grad = inputs[output_nr]
            if grad is None:
                continue
            result = hook(grad)
            if result is not None:
                if result.shape != grad.shape:
                    raise RuntimeError(
                        f"hook '{getattr(hook, '__name__', hook)}' has changed the size of value"
                    )
                inputs[output_nr] = result
    for output_nr, hook in fn._retains_grad_hooks.items():
        if inputs[output_nr] is not None:
            hook(inputs[output_nr])
    return inputs


def call_pre_hooks(fn: Node, inputs: list) -> list:
    for hook in list(fn._pre_hooks.values()):
        result = hook(tuple(inputs))
        if result is not None:
            inputs = list(result)
    return inputs


def call_post_hooks(fn: Node, outputs: tuple, inputs: list) -> tuple:
    for hook in list(fn._post_hooks.values()):
        result = hook(tuple(outputs), tuple(inputs))
        if result is not None:
            outputs = tuple(result)
    return outputs


def call_function(fn: Node, inputs: list) -> tuple:
    """Run one node with its hooks: tensor pre-hooks, pre-hooks, the node, post-hooks."""
    if fn._tensor_pre_hooks or fn._retains_grad_hooks:
        inputs = call_tensor_pre_hooks(fn, inputs)
    if fn._pre_hooks:
        inputs = call_pre_hooks(fn, inputs)
    outputs = validate_outputs(fn, fn.apply(inputs))
    if fn._post_hooks:
        outputs = call_post_hooks(fn, outputs, inputs)
    return outputs


def evaluate_function(task: GraphTask, fn: Node, inputs: list) -> None:
    """Run a ready node and pass its gradients on (engine.cpp: Engine::evaluate_function)."""
    exec_info = task.exec_info
    if exec_info:  # grad(): capture what reaches the inputs; run only what leads to them
        info = exec_info[fn]
        if not info.needed:  # the tensor hooks still run (once: here or in call_function)
            inputs = call_tensor_pre_hooks(fn, inputs)
        for input_nr, output_idx in info.captures:
            task.captured_vars[output_idx] = inputs[input_nr]
        if not info.needed:
            return
    outputs = call_function(fn, inputs)
    if not task.keep_graph:
        fn.release_variables()
    if anomaly_mode._enabled and anomaly_mode._check_nan:
        for i, out in enumerate(outputs):
            if out is not None and _ops.any_nan(out.data):
                raise RuntimeError(
                    f"Function '{fn.name()}' returned nan values in its {i}th output."
                )

    dependencies, not_ready = task.dependencies, task.not_ready
    for (nxt, input_nr), grad in zip(fn.next_functions, outputs):
        if nxt is None:
            continue
        dependencies[nxt] -= 1
        is_ready = dependencies[nxt] == 0
        buffer = not_ready.get(nxt)
        if buffer is None:  # the first gradient for nxt: make its input buffer
            if exec_info and not (nxt in exec_info and exec_info[nxt].should_execute()):
                continue
            buffer = [None] * len(nxt.input_metadata)
            if not is_ready:
                not_ready[nxt] = buffer
        elif is_ready:
            del not_ready[nxt]
        if grad is not None:  # the InputBuffer: gradients for the same input are summed
            old = buffer[input_nr]
            buffer[input_nr] = grad if old is None else old + grad
        if is_ready:
            heapq.heappush(task.ready, (-nxt.sequence_nr, NodeTask(nxt, buffer)))


def _print_stack(fn: Node) -> None:
    """Anomaly mode: show where the failing node was created (python_anomaly_mode.cpp)."""
    stack = fn.__dict__.get("_metadata", {}).get("traceback_")
    if stack is None:
        warnings.warn(
            "Error detected in " + fn.name() + ". No forward pass information available. Enable "
            "detect anomaly during forward pass for more information.",
            stacklevel=3,
        )
    else:
        warnings.warn(
            f"Error detected in {fn.name()}. Traceback of forward call that caused the error:\n"
            + "".join(stack),
            stacklevel=3,
        )


def run_backward(
    outputs,
    grad_outputs,
    keep_graph: bool,
    create_graph: bool,
    inputs=(),
    allow_unused: bool = False,
    accumulate_grad: bool = True,
):
    """Engine::execute: backpropagate ``grad_outputs`` from ``outputs`` through the graph."""
    roots = []
    for i, out in enumerate(outputs):
        edge = out._gradient_edge()
        if edge is None:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn"
            )
        roots.append(edge)
    input_edges = []
    for t in inputs:
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
        if accumulate_grad and t.grad_fn is not None:
            t.retain_grad()  # backward(inputs=[non-leaf]) fills its .grad
        input_edges.append(t._gradient_edge())

    task = GraphTask(keep_graph)
    if len(roots) == 1:  # one root: start at its node, with the gradient in its input buffer
        root = roots[0].function
        buffer = [None] * len(root.input_metadata)
        buffer[roots[0].input_nr] = grad_outputs[0]
    else:
        root, buffer = GraphRoot(roots, grad_outputs), []
    task.dependencies = compute_dependencies(root)
    if input_edges:
        init_to_execute(task, root, input_edges, accumulate_grad)
    heapq.heappush(task.ready, (-root.sequence_nr, NodeTask(root, buffer)))

    with grad_mode.set_grad_enabled(create_graph):
        while task.ready:
            _, node_task = heapq.heappop(task.ready)
            if _step_hook is not None:
                _step_hook(task, node_task.fn)
            try:
                evaluate_function(task, node_task.fn, node_task.inputs)
            except Exception:
                if anomaly_mode._enabled:
                    _print_stack(node_task.fn)
                raise

    if not accumulate_grad:
        for i, grad in enumerate(task.captured_vars):
            if grad is None and not allow_unused:
                raise RuntimeError(
                    f"The differentiated Tensor at index {i} appears to not have been used "
                    "in the graph. Set allow_unused=True if this is the desired behavior."
                )
        return tuple(task.captured_vars)
    return None


def _tensor_or_tensors_to_tuple(tensors) -> tuple:
    return tuple(tensors) if isinstance(tensors, (tuple, list)) else (tensors,)


def _make_grads(outputs: tuple, grads) -> list:
    """The gradient each output starts with: ones for a scalar, else the one given (autograd/__init__.py)."""
    grads = (None,) * len(outputs) if grads is None else _tensor_or_tensors_to_tuple(grads)
    if len(grads) != len(outputs):
        raise RuntimeError(f"got {len(outputs)} tensors and {len(grads)} gradients")
    new_grads = []
    for i, (out, grad) in enumerate(zip(outputs, grads)):
        if grad is None:
            if out.requires_grad and out.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            grad = Tensor(_ops.ones_like(out.data))
        elif not isinstance(grad, Tensor):
            grad = Tensor(_ops.as_array(grad))
        if grad.shape != out.shape:
            raise RuntimeError(
                f"Mismatch in shape: grad_output[{i}] has a shape of {grad.shape} and "
                f"output[{i}] has a shape of {out.shape}."
            )
        new_grads.append(grad)
    return new_grads


def backward(
    tensors, grad_tensors=None, retain_graph=None, create_graph: bool = False, inputs=None
) -> None:
    """Accumulate d(tensors)/d(leaves) into the leaves' ``.grad`` (``torch.autograd.backward``)."""
    tensors = _tensor_or_tensors_to_tuple(tensors)
    if inputs is not None and not _tensor_or_tensors_to_tuple(inputs):
        raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    inputs = () if inputs is None else _tensor_or_tensors_to_tuple(inputs)
    if retain_graph is None:
        retain_graph = create_graph
    run_backward(tensors, _make_grads(tensors, grad_tensors), retain_graph, create_graph, inputs)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph: bool = False,
    allow_unused: bool | None = None,
):
    """Return d(outputs)/d(inputs) without touching ``.grad`` (``torch.autograd.grad``)."""
    outputs = _tensor_or_tensors_to_tuple(outputs)
    inputs = _tensor_or_tensors_to_tuple(inputs)
    if retain_graph is None:
        retain_graph = create_graph
    return run_backward(
        outputs,
        _make_grads(outputs, grad_outputs),
        retain_graph,
        create_graph,
        inputs,
        allow_unused=bool(allow_unused),
        accumulate_grad=False,
    )

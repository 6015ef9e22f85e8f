"""Wrong answers a student could plausibly write for lab 3; each must fail its graded check.

Used by ``tools/check_wrong_answers.py 03_autograd_lab``. Each entry replaces the BEGIN/END
SOLUTION region(s) of the exercise's solution cell.
"""

_COUNT = """\
    deps, seen, stack = {}, {root}, [root]
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is not None:
                deps[nxt] = deps.get(nxt, 0) + 1
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
"""

_ORDER_STACK = (
    _COUNT
    + """\
    ready, order = [root], []
    while ready:
        node = ready.pop()
        order.append(type(node).__name__)
        for nxt, _ in node.next_functions:
            if nxt is not None:
                deps[nxt] -= 1
                if deps[nxt] == 0:
                    ready.append(nxt)
    return order
"""
)

_ORDER_FIFO = _ORDER_STACK.replace("node = ready.pop()", "node = ready.pop(0)")

_ORDER_LOWEST_FIRST = (
    _COUNT
    + """\
    ready, order = [(root._sequence_nr(), id(root), root)], []
    while ready:
        _, _, node = heapq.heappop(ready)
        order.append(type(node).__name__)
        for nxt, _ in node.next_functions:
            if nxt is not None:
                deps[nxt] -= 1
                if deps[nxt] == 0:
                    heapq.heappush(ready, (nxt._sequence_nr(), id(nxt), nxt))
    return order
"""
)

_ORDER_NO_COUNTS = """\
    ready, order, seen = [(-root._sequence_nr(), id(root), root)], [], set()
    while ready:
        _, _, node = heapq.heappop(ready)
        order.append(type(node).__name__)
        for nxt, _ in node.next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                heapq.heappush(ready, (-nxt._sequence_nr(), id(nxt), nxt))
    return order
"""

_ENGINE_COUNT = """\
    root = output.grad_fn
    dependencies, seen, stack = {}, {root}, [root]
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is not None:
                dependencies[nxt] = dependencies.get(nxt, 0) + 1
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
"""

_ENGINE = (
    _ENGINE_COUNT
    + """\
    buffers, order = {root: torch.ones_like(output.data)}, []
    ready = [(-root.sequence_nr, id(root), root)]
    while ready:
        _, _, node = heapq.heappop(ready)
        order.append(type(node).__name__)
        grads = node.apply(buffers.pop(node))
        for (nxt, _), grad in zip(node.next_functions, grads):
            if nxt is None:
                continue
            buffers[nxt] = grad if nxt not in buffers else buffers[nxt] + grad
            dependencies[nxt] -= 1
            if dependencies[nxt] == 0:
                heapq.heappush(ready, (-nxt.sequence_nr, id(nxt), nxt))
    return order
"""
)

_ENGINE_STACK = (
    _ENGINE.replace("ready = [(-root.sequence_nr, id(root), root)]", "ready = [root]")
    .replace("_, _, node = heapq.heappop(ready)", "node = ready.pop()")
    .replace("heapq.heappush(ready, (-nxt.sequence_nr, id(nxt), nxt))", "ready.append(nxt)")
)

_SAVED_UNPACK = """\
var = self.var
if var._version != self.saved_version:
    shape = ", ".join(str(n) for n in var.data.shape)
    raise RuntimeError(
        "one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: [{var.data.type()} [{shape}]] is at version {var._version}; "
        f"expected version {self.saved_version} instead."
    )
return var
"""

WRONG = {
    "ex1_sum_to": [
        (
            "sums only the leading dimensions, not the ones that were 1",
            """\
lead = grad.dim() - len(shape)
return grad.sum(dim=tuple(range(lead))) if lead else grad
""",
        ),
        (
            "sums the size-1 dimensions without keepdim",
            """\
lead = grad.dim() - len(shape)
if lead:
    grad = grad.sum(dim=tuple(range(lead)))
dims = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
return grad.sum(dim=dims) if dims else grad
""",
        ),
        (
            "looks for the size-1 dimensions before removing the leading ones (left-aligned)",
            """\
dims = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
if dims:
    grad = grad.sum(dim=dims, keepdim=True)
lead = grad.dim() - len(shape)
return grad.sum(dim=tuple(range(lead))) if lead else grad
""",
        ),
        (
            "averages instead of summing",
            """\
lead = grad.dim() - len(shape)
if lead:
    grad = grad.mean(dim=tuple(range(lead)))
dims = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
return grad.mean(dim=dims, keepdim=True) if dims else grad
""",
        ),
    ],
    "ex2_execution_order": [
        ("a stack: runs the node pushed last", _ORDER_STACK),
        ("a FIFO queue: runs the node pushed first", _ORDER_FIFO),
        ("a heap that pops the lowest sequence number first", _ORDER_LOWEST_FIRST),
        ("no dependency counts: a node runs as soon as one gradient reaches it", _ORDER_NO_COUNTS),
    ],
    "ex3_backward_into": [
        (
            "overwrites .grad instead of adding to it",
            """\
grads = torch.autograd.grad(loss, leaves, allow_unused=True)
for leaf, g in zip(leaves, grads):
    if g is not None:
        leaf.grad = g.clone()
""",
        ),
        (
            "forgets allow_unused=True (torch raises for the unused leaf)",
            """\
grads = torch.autograd.grad(loss, leaves)
for leaf, g in zip(leaves, grads):
    leaf.grad = g.clone() if leaf.grad is None else leaf.grad + g
""",
        ),
        (
            "does not skip a None gradient",
            """\
grads = torch.autograd.grad(loss, leaves, allow_unused=True)
for leaf, g in zip(leaves, grads):
    leaf.grad = g if leaf.grad is None else leaf.grad + g
""",
        ),
    ],
    "ex4_saved_variable": [
        (
            "reads the version at unpack time, not when saved (never raises)",
            ["self.var = var", _SAVED_UNPACK.replace("self.saved_version", "self.var._version")],
        ),
        (
            "the two versions swapped in the message",
            [
                None,
                _SAVED_UNPACK.replace("{var._version}; ", "{self.saved_version}; ").replace(
                    "expected version {self.saved_version}", "expected version {var._version}"
                ),
            ],
        ),
        (
            "versions hard-coded as 1 and 0",
            [
                None,
                _SAVED_UNPACK.replace("{var._version}; ", "1; ").replace(
                    "expected version {self.saved_version}", "expected version 0"
                ),
            ],
        ),
        (
            "raises ValueError instead of RuntimeError",
            [None, _SAVED_UNPACK.replace("raise RuntimeError(", "raise ValueError(")],
        ),
        (
            "a message of its own instead of torch's",
            [
                None,
                _SAVED_UNPACK.replace(
                    '"one of the variables needed for gradient computation has been modified by an "',
                    '"saved variable changed "',
                ),
            ],
        ),
    ],
    "ex5_run_backward": [
        ("a stack: runs the node pushed last", _ENGINE_STACK),
        (
            "a FIFO queue: runs the node pushed first",
            _ENGINE_STACK.replace("ready.pop()", "ready.pop(0)"),
        ),
        (
            "overwrites a node's buffered gradient instead of summing",
            _ENGINE.replace(
                "buffers[nxt] = grad if nxt not in buffers else buffers[nxt] + grad",
                "buffers[nxt] = grad",
            ),
        ),
        (
            "runs a node as soon as its first gradient arrives (no dependency counts)",
            _ENGINE.replace(
                "            dependencies[nxt] -= 1\n            if dependencies[nxt] == 0:\n",
                "            if True:\n",
            ),
        ),
        (
            "ignores sequence numbers: a heap keyed on id(node), an arbitrary order",
            _ENGINE.replace("(-root.sequence_nr, id(root), root)", "(id(root), root)")
            .replace("_, _, node = heapq.heappop(ready)", "_, node = heapq.heappop(ready)")
            .replace("(-nxt.sequence_nr, id(nxt), nxt)", "(id(nxt), nxt)"),
        ),
    ],
}

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
        if not retain_graph:
            node.release_variables()
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

_FREED = """\
if var is None:
    raise RuntimeError(
        "Trying to backward through the graph a second time (or directly access saved "
        "tensors after they have already been freed). Saved intermediate values of the "
        "graph are freed when you call .backward() or autograd.grad(). Specify "
        "retain_graph=True if you need to backward through the graph a second time or if "
        "you need to access saved tensors after calling backward."
    )
"""

_SAVED_UNPACK = """\
var = self.var
""" + _FREED + """\
if var._version != self.saved_version:
    shape = ", ".join(str(n) for n in var.data.shape)
    raise RuntimeError(
        "one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: [{var.data.type()} [{shape}]] is at version {var._version}; "
        f"expected version {self.saved_version} instead."
    )
return var
"""

_ORDER_DISTINCT_DECREMENT = _ORDER_LOWEST_FIRST.replace(
    "ready, order = [(root._sequence_nr(), id(root), root)], []",
    "ready, order = [(-root._sequence_nr(), id(root), root)], []",
).replace(
    "        for nxt, _ in node.next_functions:\n            if nxt is not None:\n                deps[nxt] -= 1",
    "        for nxt in {f for f, _ in node.next_functions}:\n            if nxt is not None:\n                deps[nxt] -= 1",
).replace("(nxt._sequence_nr(), id(nxt), nxt)", "(-nxt._sequence_nr(), id(nxt), nxt)")

_ORDER_HEAP = _ORDER_DISTINCT_DECREMENT.replace(
    "for nxt in {f for f, _ in node.next_functions}:", "for nxt, _ in node.next_functions:"
)

_ORDER_COUNT_TWICE = _ORDER_HEAP.replace(
    "                if nxt not in seen:\n                    seen.add(nxt)\n                    stack.append(nxt)",
    "                stack.append(nxt)",
)

_ORDER_AT_PUSH = (
    _ORDER_HEAP.replace("        order.append(type(node).__name__)\n", "")
    .replace(
        "ready, order = [(-root._sequence_nr(), id(root), root)], []",
        "ready, order = [(-root._sequence_nr(), id(root), root)], [type(root).__name__]",
    )
    .replace(
        "                    heapq.heappush(ready, (-nxt._sequence_nr(), id(nxt), nxt))",
        "                    order.append(type(nxt).__name__)\n"
        "                    heapq.heappush(ready, (-nxt._sequence_nr(), id(nxt), nxt))",
    )
)

_ORDER_DFS_POSTORDER = """\
    post, seen = [], set()

    def visit(node):
        seen.add(node)
        for nxt, _ in node.next_functions:
            if nxt is not None and nxt not in seen:
                visit(nxt)
        post.append(type(node).__name__)

    visit(root)
    return post[::-1]
"""

_ENGINE_SKIP_NONE_EDGES = _ENGINE.replace(
    "        for (nxt, _), grad in zip(node.next_functions, grads):\n"
    "            if nxt is None:\n                continue\n",
    "        edges = [e for e in node.next_functions if e.function is not None]\n"
    "        for (nxt, _), grad in zip(edges, grads):\n",
)

_ENGINE_INPLACE_BUFFER = _ENGINE.replace(
    "            buffers[nxt] = grad if nxt not in buffers else buffers[nxt] + grad\n",
    "            if nxt in buffers:\n                buffers[nxt] += grad\n"
    "            else:\n                buffers[nxt] = grad\n",
)

_ENGINE_COUNT_TWICE = _ENGINE.replace(
    "                if nxt not in seen:\n                    seen.add(nxt)\n                    stack.append(nxt)",
    "                stack.append(nxt)",
)

_ENGINE_LOWEST_FIRST = _ENGINE.replace("-root.sequence_nr", "root.sequence_nr").replace(
    "-nxt.sequence_nr", "nxt.sequence_nr"
)

_ENGINE_COUNT_PARENTS = _ENGINE.replace(
    "        for nxt, _ in node.next_functions:\n            if nxt is not None:\n"
    "                dependencies[nxt] = dependencies.get(nxt, 0) + 1",
    "        for nxt in {f for f, _ in node.next_functions}:\n            if nxt is not None:\n"
    "                dependencies[nxt] = dependencies.get(nxt, 0) + 1",
)

_SUM_TO = """\
lead = grad.dim() - len(shape)
if lead:
    grad = grad.sum(dim=tuple(range(lead)))
dims = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
return grad.sum(dim=dims, keepdim=True) if dims else grad
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
        (
            "finds the dims to sum by their sizes, not their positions (right unless sizes repeat)",
            _SUM_TO.replace(
                "dims = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)",
                "dims = tuple(i for i, n in enumerate(grad.shape) if n not in shape)",
            ),
        ),
        (
            "reshapes to (-1, *shape) and sums dim 0 (right only when the size-1 dims lead)",
            "return grad.reshape(-1, *shape).sum(0)\n",
        ),
        (
            "negative dims off by one: -i instead of -(i + 1)",
            _SUM_TO.replace(
                "dims = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)",
                "dims = tuple(-i for i, n in enumerate(reversed(shape)) if n == 1)",
            ),
        ),
        (
            "squeezes the result at the end, dropping the size-1 dims of shape",
            _SUM_TO.replace(
                "return grad.sum(dim=dims, keepdim=True) if dims else grad",
                "return (grad.sum(dim=dims, keepdim=True) if dims else grad).squeeze()",
            ),
        ),
    ],
    "ex2_execution_order": [
        ("a stack: runs the node pushed last", _ORDER_STACK),
        ("a FIFO queue: runs the node pushed first", _ORDER_FIFO),
        ("a heap that pops the lowest sequence number first", _ORDER_LOWEST_FIRST),
        ("no dependency counts: a node runs as soon as one gradient reaches it", _ORDER_NO_COUNTS),
        (
            "decrements once per distinct next node, so a node with two edges to one child never frees it",
            _ORDER_DISTINCT_DECREMENT,
        ),
        ("counts the edges below a shared node twice (no seen set)", _ORDER_COUNT_TWICE),
        ("records a node when it is queued, not when it runs", _ORDER_AT_PUSH),
        ("a textbook topological sort: reversed DFS post-order", _ORDER_DFS_POSTORDER),
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
        (
            "resets .grad to None for a leaf that gets no gradient",
            """\
grads = torch.autograd.grad(loss, leaves, allow_unused=True)
for leaf, g in zip(leaves, grads):
    if g is None:
        leaf.grad = None
        continue
    leaf.grad = g.clone() if leaf.grad is None else leaf.grad + g
""",
        ),
        (
            "stops at the first None gradient (break instead of continue)",
            """\
grads = torch.autograd.grad(loss, leaves, allow_unused=True)
for leaf, g in zip(leaves, grads):
    if g is None:
        break
    leaf.grad = g.clone() if leaf.grad is None else leaf.grad + g
""",
        ),
        (
            "stores zeros for a leaf that gets no gradient",
            """\
grads = torch.autograd.grad(loss, leaves, allow_unused=True)
for leaf, g in zip(leaves, grads):
    if g is None:
        g = torch.zeros_like(leaf)
    leaf.grad = g.clone() if leaf.grad is None else leaf.grad + g
""",
        ),
        (
            "adds the new gradient twice once .grad exists",
            """\
grads = torch.autograd.grad(loss, leaves, allow_unused=True)
for leaf, g in zip(leaves, grads):
    if g is not None:
        leaf.grad = g.clone() if leaf.grad is None else g + g
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
        (
            "hard-codes torch.FloatTensor as the type (right only for float32)",
            [None, _SAVED_UNPACK.replace("{var.data.type()}", "torch.FloatTensor")],
        ),
        (
            "writes only the first size (right only for 1-d tensors)",
            [None, _SAVED_UNPACK.replace(
                'shape = ", ".join(str(n) for n in var.data.shape)', "shape = var.data.shape[0]"
            )],
        ),
        (
            "joins the sizes with ',' and no space (right only for 1-d tensors)",
            [None, _SAVED_UNPACK.replace('", ".join', '",".join')],
        ),
        (
            "names the dtype (torch.float32) instead of the tensor type",
            [None, _SAVED_UNPACK.replace("{var.data.type()}", "{var.data.dtype}")],
        ),
        (
            "says how many times it changed instead of the version now",
            [None, _SAVED_UNPACK.replace(
                "is at version {var._version}; ", "is at version {var._version - self.saved_version}; "
            )],
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
        (
            "drops the None edges before zipping, so gradients shift onto the wrong inputs",
            _ENGINE_SKIP_NONE_EDGES,
        ),
        (
            "accumulates into the buffer in place (+=), changing the gradient AddBackward0 "
            "handed to both its inputs",
            _ENGINE_INPLACE_BUFFER,
        ),
        ("counts the edges below a shared node twice (no seen set)", _ENGINE_COUNT_TWICE),
        ("a heap that pops the lowest sequence number first", _ENGINE_LOWEST_FIRST),
        (
            "counts parents, not edges: a * a frees its leaf after one of its two gradients",
            _ENGINE_COUNT_PARENTS,
        ),
    ],
}

# Third review (issue 27): the kinds an outside trial found slipping through checks that used
# contiguous float32 tensors that all need a gradient: size-0 dims, the wrong dtype or device,
# non-contiguous gradients, None edges, all-zero gradients, .grad written instead of accumulated,
# a change detected by values instead of version counters.
_BACKWARD_INTO = """\
needing = [leaf for leaf in leaves if leaf.requires_grad]
grads = torch.autograd.grad(loss, needing, allow_unused=True)
for leaf, g in zip(needing, grads):
    if g is None:
        continue
    if leaf.grad is None:
        leaf.grad = torch.empty_like(leaf).copy_(g)
    else:
        leaf.grad += g
"""

_SAVED_INIT = "self.var, self.saved_version = var, var._version"

WRONG["ex1_sum_to"] += [
    (
        "sums where shape is smaller than grad (n < grad.shape[i]): misses a size-1 dim broadcast "
        "to size 0",
        _SUM_TO.replace("n == 1 and grad.shape[i] != 1", "n < grad.shape[i]"),
    ),
    (
        "writes the result into torch.zeros(shape): float32 on the CPU, whatever the gradient",
        _SUM_TO.replace(
            "return grad.sum(dim=dims, keepdim=True) if dims else grad",
            "return torch.zeros(shape).add_(grad.sum(dim=dims, keepdim=True) if dims else grad)",
        ),
    ),
    (
        "sums the leading dims through a view (-1, *rest), which a transposed gradient refuses",
        _SUM_TO.replace(
            "grad = grad.sum(dim=tuple(range(lead)))",
            "grad = grad.view(-1, *grad.shape[lead:]).sum(0)",
        ),
    ),
]

WRONG["ex2_execution_order"] += [
    (
        "no test for None edges (an input that needs no gradient)",
        _ORDER_HEAP.replace("            if nxt is not None:\n", "            if True:\n"),
    ),
    (
        "stops reading a node's edges at the first None edge (break, not continue)",
        _ORDER_HEAP.replace(
            "            if nxt is not None:\n",
            "            if nxt is None:\n                break\n            if True:\n",
        ),
    ),
    (
        "heap entries without a tie-breaker ((-seq, node)): leaves' AccumulateGrads tie",
        _ORDER_HEAP.replace("id(root), ", "").replace("id(nxt), ", "").replace(
            "_, _, node = heapq.heappop(ready)", "_, node = heapq.heappop(ready)"
        ),
    ),
]

WRONG["ex3_backward_into"] += [
    (
        "adds by rebinding (leaf.grad = leaf.grad + g): whoever holds the old .grad misses the sum",
        _BACKWARD_INTO.replace("leaf.grad += g", "leaf.grad = leaf.grad + g"),
    ),
    (
        "stores a clone of autograd.grad's tensor: its strides, not the leaf's",
        _BACKWARD_INTO.replace("torch.empty_like(leaf).copy_(g)", "g.clone()"),
    ),
    (
        "stores autograd.grad's tensor itself (no copy): gradients that alias are added twice",
        _BACKWARD_INTO.replace("torch.empty_like(leaf).copy_(g)", "g"),
    ),
    (
        "skips an all-zero gradient, as if it were None",
        _BACKWARD_INTO.replace("if g is None:", "if g is None or not g.any():"),
    ),
    (
        "passes every leaf to autograd.grad, also one that needs no gradient",
        _BACKWARD_INTO.replace(
            "needing = [leaf for leaf in leaves if leaf.requires_grad]", "needing = leaves"
        ),
    ),
]

WRONG["ex4_saved_variable"] += [
    (
        "detects a change by comparing values with a snapshot, not versions (add_(0) passes)",
        [
            _SAVED_INIT + "\nself.snapshot = var.data.clone()",
            _SAVED_UNPACK.replace(
                "if var._version != self.saved_version:",
                "if not torch.equal(var.data, self.snapshot):",
            ),
        ],
    ),
    (
        "type names from a dict of float32 and float64 only",
        [
            None,
            _SAVED_UNPACK.replace(
                "{var.data.type()}",
                "{ {torch.float32: 'torch.FloatTensor', torch.float64: 'torch.DoubleTensor'}"
                ".get(var.data.dtype)}",
            ),
        ],
    ),
    (
        "the saved version kept on the Var: a second save of the same Var overwrites it",
        [
            "self.var = var\nvar.saved_version = var._version",
            _SAVED_UNPACK.replace("self.saved_version", "var.saved_version"),
        ],
    ),
]

_ENGINE_SEED_FLOAT32 = _ENGINE.replace(
    "buffers, order = {root: torch.ones_like(output.data)}, []",
    "buffers, order = {root: torch.tensor(1.0)}, []",
)

_ENGINE_SKIP_ZERO = _ENGINE.replace(
    "            if nxt is None:\n                continue\n",
    "            if nxt is None or not grad.any():\n                continue\n",
)

_ENGINE_WRITE_GRAD = _ENGINE.replace(
    "        grads = node.apply(buffers.pop(node))\n",
    "        if isinstance(node, AccumulateGrad):\n"
    "            node.var.grad = buffers.pop(node)\n"
    "            continue\n"
    "        grads = node.apply(buffers.pop(node))\n",
)

WRONG["ex5_run_backward"] += [
    (
        "the first gradient is torch.tensor(1.0): float32, whatever the output's dtype",
        _ENGINE_SEED_FLOAT32,
    ),
    ("skips an all-zero gradient (neither buffered nor counted)", _ENGINE_SKIP_ZERO),
    (
        "writes a leaf's gradient into .grad itself instead of AccumulateGrad.apply (overwrites)",
        _ENGINE_WRITE_GRAD,
    ),
]

# Exercise 2 now asks for torch.autograd.grad's order too (execution_order(root, inputs)), which
# chapter 3 does not trace. The wrong answers above get the right pruning, so that each keeps its
# own single mistake; the ones below get the pruning wrong.
_PRUNE = """\
    leads = {}

    def receives(node):
        return any(node is x.grad_fn or getattr(node, "variable", None) is x for x in inputs)

    def needed(node):
        if inputs is None:
            return True
        if node not in leads:
            leads[node] = any(nxt is not None and (receives(nxt) or needed(nxt))
                              for nxt, _ in node.next_functions)
        return leads[node]

"""


def _pruned(code):
    return _PRUNE + code.replace(
        "if deps[nxt] == 0:", "if deps[nxt] == 0 and needed(nxt):"
    ).replace(
        "if nxt is not None and nxt not in seen:",
        "if nxt is not None and nxt not in seen and needed(nxt):",
    )


WRONG["ex2_execution_order"] = [(what, _pruned(code)) for what, code in WRONG["ex2_execution_order"]]
_ORDER_GRAD = _pruned(_ORDER_HEAP)

WRONG["ex2_execution_order"] += [
    ("runs every node, as loss.backward() does (inputs ignored)", _ORDER_HEAP),
    (
        "prunes the AccumulateGrad nodes only: branches that lead to no input still run",
        _ORDER_GRAD.replace(
            "if deps[nxt] == 0 and needed(nxt):",
            'if deps[nxt] == 0 and (inputs is None or type(nxt).__name__ != "AccumulateGrad"):',
        ),
    ),
    (
        "runs an input's own node too (it only receives the gradient)",
        _ORDER_GRAD.replace(
            "if deps[nxt] == 0 and needed(nxt):",
            "if deps[nxt] == 0 and (needed(nxt) or receives(nxt)):",
        ),
    ),
    (
        "looks for a path to an input through each node's first edge only",
        _ORDER_GRAD.replace(
            "for nxt, _ in node.next_functions)", "for nxt, _ in node.next_functions[:1])"
        ),
    ),
    (
        "finds an input's node by AccumulateGrad's .variable only (a non-leaf input is missed)",
        _ORDER_GRAD.replace('node is x.grad_fn or getattr(node, "variable", None) is x',
                            'getattr(node, "variable", None) is x'),
    ),
]

# Exercise 4 asks for reset_data too (the graph freed after backward), a third solution region.
WRONG["ex4_saved_variable"] = [
    (what, [*code, None]) for what, code in WRONG["ex4_saved_variable"]
]
WRONG["ex4_saved_variable"] += [
    ("reset_data does nothing: a freed variable still unpacks", [None, None, "pass"]),
    (
        "a message of its own for a freed variable",
        [None, _SAVED_UNPACK.replace(_FREED, _FREED.replace(
            '"Trying to backward through the graph a second time (or directly access saved "',
            '"the saved variable was freed "')), None],
    ),
    (
        "unpack checks the version first, so a freed variable raises AttributeError",
        [None, _SAVED_UNPACK.replace(_FREED, ""), None],
    ),
    ("reset_data deletes self.var: unpack raises AttributeError", [None, None, "del self.var"]),
]

# Exercise 5 frees the saved variables after each node unless retain_graph (the template _ENGINE
# above does it, so the earlier answers keep their one mistake).
WRONG["ex5_run_backward"] += [
    (
        "never frees what the nodes saved (retain_graph ignored)",
        _ENGINE.replace("        if not retain_graph:\n            node.release_variables()\n", ""),
    ),
    (
        "frees a node's saved variables before calling apply, which needs them",
        _ENGINE.replace("        if not retain_graph:\n            node.release_variables()\n", "")
        .replace(
            "        grads = node.apply(buffers.pop(node))\n",
            "        if not retain_graph:\n            node.release_variables()\n"
            "        grads = node.apply(buffers.pop(node))\n",
        ),
    ),
    (
        "frees even with retain_graph=True",
        _ENGINE.replace("        if not retain_graph:\n            node.release_variables()\n",
                        "        node.release_variables()\n"),
    ),
]

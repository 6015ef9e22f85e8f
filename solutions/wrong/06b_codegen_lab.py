"""Wrong answers a student could plausibly write for lab 6b; each must fail its graded check.

Used by ``tools/check_wrong_answers.py 06b_codegen_lab``. Each entry replaces the
BEGIN/END SOLUTION region of the exercise's solution cell.
"""

_FITS = """\
outer, inner = loops_of(node)
if node.is_reduction():
    return (outer, inner) == (kernel.outer, kernel.inner)
return outer in (kernel.outer, kernel.outer + kernel.inner)
"""

_RELU = """\
zero = self.constant(0, x.dtype)
expr = f"{zero} if {x} < {zero} else {x}"  # NaN < 0 is False: NaN passes
return self.emit(expr, x.dtype)
"""

_SAVED = """\
nodes = list(joint.graph.nodes)
last = max(i for i, n in enumerate(nodes) if is_forward(n))
forward = [n for n in nodes[: last + 1] if not n.name.startswith("tangents")]
names = {n.name for n in forward}
saved = []
for n in forward:
    if n.users and all(u.target is operator.getitem for u in n.users):
        continue
    if any(u.name not in names and u.op != "output" for u in n.users):
        saved.append(n.name)
return saved
"""

_COUNT = """\
for node in gm.graph.nodes:
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
        COUNTS[kind][str(node.target)] += 1
return make_boxed_func(gm.forward)
"""


def _sub(text: str, old: str, new: str) -> str:
    assert old in text, old  # a wrong answer must change the solution where it says
    return text.replace(old, new)


WRONG = {
    "ex1_fits": [
        (
            "every buffer fits every kernel",
            "return True\n",
        ),
        (
            "only a buffer with exactly the kernel's loops fits (no pointwise inside a row)",
            "return loops_of(node) == (kernel.outer, kernel.inner)\n",
        ),
        (
            "no one-value-per-row pointwise buffers (LayerNorm's rsqrt of the variance)",
            _sub(_FITS, "outer in (kernel.outer, kernel.outer + kernel.inner)",
                 "outer == kernel.outer + kernel.inner"),
        ),
        (
            "a reduction fits any kernel with the same rows, whatever it reduces over",
            _sub(_FITS, "(outer, inner) == (kernel.outer, kernel.inner)", "outer == kernel.outer"),
        ),
        (
            "nothing ever fits: one kernel per buffer",
            "return False\n",
        ),
        (
            "the loops compared with their sizes of 1 kept (strip1 forgotten)",
            _sub(_FITS, "outer, inner = loops_of(node)", "outer, inner = node.ranges()"),
        ),
        (
            "a reduction fits when it reduces over as many dims, whatever their sizes",
            _sub(_FITS, "(outer, inner) == (kernel.outer, kernel.inner)",
                 "outer == kernel.outer and len(inner) == len(kernel.inner)"),
        ),
        (
            "a reduction fits when it reduces over as many elements (4 x 32 as good as 128)",
            _sub(_FITS, "(outer, inner) == (kernel.outer, kernel.inner)",
                 "outer == kernel.outer and math.prod(inner) == math.prod(kernel.inner)")
            .replace("outer, inner = loops_of(node)", "import math\nouter, inner = loops_of(node)"),
        ),
        (
            "a reduction fits when it reduces over the same loop, whatever its rows",
            _sub(_FITS, "(outer, inner) == (kernel.outer, kernel.inner)", "inner == kernel.inner"),
        ),
        (
            "one value per element read as the kernel's inner loop alone, not outer + inner",
            _sub(_FITS, "kernel.outer + kernel.inner", "kernel.inner"),
        ),
        (
            "the loops concatenated the wrong way round (inner + outer)",
            _sub(_FITS, "kernel.outer + kernel.inner", "kernel.inner + kernel.outer"),
        ),
        (
            "a pointwise buffer fits when it starts with the kernel's rows, whatever follows",
            _sub(_FITS, "outer in (kernel.outer, kernel.outer + kernel.inner)",
                 "outer[: len(kernel.outer)] == kernel.outer"),
        ),
        (
            "the total number of elements compared instead of the loops",
            "import math\nouter, inner = loops_of(node)\n"
            "n, rows = math.prod(outer + inner), math.prod(kernel.outer)\n"
            "return n in (rows, rows * math.prod(kernel.inner))\n",
        ),
        (
            "hard-coded from the check's visible input: pointwise fits when it spans 64 rows",
            _sub(_FITS, "return outer in (kernel.outer, kernel.outer + kernel.inner)",
                 "return outer in ((64,), (64, 128)) and outer[:1] == kernel.outer[:1]"),
        ),
        (
            "a pointwise buffer over the kernel's loops transposed fits too (128 x 64 in 64 x 128)",
            _sub(_FITS, "return outer in (kernel.outer, kernel.outer + kernel.inner)",
                 "return outer in (kernel.outer, kernel.outer + kernel.inner) or sorted(outer)"
                 " == sorted(kernel.outer + kernel.inner)"),
        ),
        (
            "sizes of 1 dropped only from the buffer, the kernel's loops compared as they are",
            _sub(_FITS, "outer, inner = loops_of(node)",
                 "outer, inner = loops_of(node)\nif not kernel.outer:\n    return False"),
        ),
    ],
    "ex2_relu": [
        (
            "x if x > 0 else 0: NaN becomes 0",
            _sub(_RELU, 'f"{zero} if {x} < {zero} else {x}"', 'f"{x} if {x} > {zero} else {zero}"'),
        ),
        (
            "(x + abs(x)) / 2: -0.0 becomes +0.0",
            _sub(_RELU, 'f"{zero} if {x} < {zero} else {x}"', 'f"({x} + abs({x})) / 2"'),
        ),
        (
            "the inherited relu called (there is none during the check)",
            "return super().relu(x)\n",
        ),
        (
            "zero where x <= 0: -0.0 becomes +0.0",
            _sub(_RELU, 'f"{zero} if {x} < {zero} else {x}"', 'f"{zero} if {x} <= {zero} else {x}"'),
        ),
        (
            "the expression returned as text instead of emitted as a variable",
            _sub(_RELU, "return self.emit(expr, x.dtype)", "return expr"),
        ),
        (
            "max(0, x): Python's max keeps its first argument on a tie or NaN",
            _sub(_RELU, 'f"{zero} if {x} < {zero} else {x}"', 'f"max({zero}, {x})"'),
        ),
        (
            "the handler's maximum(zero, x): -0.0 becomes +0.0",
            "zero = self.constant(0, x.dtype)\nreturn self.maximum(zero, x)\n",
        ),
        (
            "x * (x > 0): a negative becomes -0.0, -inf becomes NaN",
            _sub(_RELU, 'f"{zero} if {x} < {zero} else {x}"', 'f"{x} * ({x} > {zero})"'),
        ),
        (
            "x if x >= 0 else 0: NaN becomes 0",
            _sub(_RELU, 'f"{zero} if {x} < {zero} else {x}"', 'f"{x} if {x} >= {zero} else {zero}"'),
        ),
        (
            "np.clip(x, 0, None)",
            _sub(_RELU, 'f"{zero} if {x} < {zero} else {x}"', 'f"np.clip({x}, {zero}, None)"'),
        ),
        (
            "np.fmax(x, 0): NaN becomes 0",
            _sub(_RELU, 'f"{zero} if {x} < {zero} else {x}"', 'f"np.fmax({x}, {zero})"'),
        ),
        (
            "the result declared float32 whatever the input's dtype",
            "zero = self.constant(0, torch.float32)\n"
            'return self.emit(f"{zero} if {x} < {zero} else {x}", torch.float32)\n',
        ),
        (
            "the zero constant kept on the class from the first kernel it was made in",
            "if not hasattr(type(self), 'ZERO'):\n"
            "    type(self).ZERO = self.constant(0, x.dtype)\n"
            "zero = type(self).ZERO\n"
            'return self.emit(f"{zero} if {x} < {zero} else {x}", x.dtype)\n',
        ),
        (
            "the zero written as the literal 0.0 (an int64 x becomes a float64 variable)",
            'return self.emit(f"0.0 if {x} < 0.0 else {x}", x.dtype)\n',
        ),
        (
            "x cast to float before comparing (np.float64(x)): int64 beyond 2**53 rounded",
            _sub(_RELU, 'f"{zero} if {x} < {zero} else {x}"',
                 'f"{zero} if np.float64({x}) < {zero} else np.float64({x})"'),
        ),
        (
            "the variable's dtype declared as the constant's, a Python float",
            "zero = self.constant(0, x.dtype)\n"
            'return self.emit(f"{zero} if {x} < {zero} else {x}", torch.float64)\n',
        ),
    ],
    "ex3_saved": [
        (
            "the forward's outputs saved too (a user in the output node counted)",
            _sub(_SAVED, ' and u.op != "output"', ""),
        ),
        (
            "the tangents kept among the forward nodes (they come before the last one)",
            _sub(_SAVED, ' if not n.name.startswith("tangents")', ""),
        ),
        (
            "the inputs (primals) never saved",
            _sub(_SAVED, "for n in forward:\n", 'for n in forward:\n    if n.op == "placeholder":\n'
                 "        continue\n"),
        ),
        (
            "every forward tensor saved, read by the backward or not",
            _sub(_SAVED, '    if any(u.name not in names and u.op != "output" for u in n.users):\n'
                         "        saved.append(n.name)\n", "    saved.append(n.name)\n"),
        ),
        (
            "saved from the last forward node to the first",
            _sub(_SAVED, "return saved", "return saved[::-1]"),
        ),
        (
            "the last forward node left out of the forward (nodes[:last])",
            _sub(_SAVED, "nodes[: last + 1]", "nodes[:last]"),
        ),
        (
            "every input saved, read by the backward or not",
            _sub(_SAVED, "    if any(", '    if n.op == "placeholder" or any('),
        ),
        (
            "getitem nodes skipped instead of the node with several results",
            _sub(_SAVED, "if n.users and all(u.target is operator.getitem for u in n.users):",
                 "if n.target is operator.getitem:"),
        ),
        (
            "the names sorted alphabetically instead of in graph order",
            _sub(_SAVED, "return saved", "return sorted(saved)"),
        ),
        (
            "the names collected in a set (order lost, by hash)",
            _sub(_SAVED, "return saved", "return list(set(saved))"),
        ),
        (
            "an input whose gradient is None (it needs none) never saved",
            _sub(_SAVED, "for n in forward:\n",
                 "grads = list(joint.graph.output_node().args[0])[-len([p for p in forward\n"
                 "    if p.name.startswith('primals')]):]\n"
                 "no_grad = {f'primals_{i + 1}' for i, g in enumerate(grads) if g is None}\n"
                 "for n in forward:\n    if n.name in no_grad:\n        continue\n"),
        ),
        (
            "the node with several results saved as well as its getitems",
            _sub(_SAVED, "        continue\n", "        saved.append(n.name)\n        continue\n"),
        ),
        (
            "hard-coded from the visible example: the inputs and the tanh's detach",
            "return [n.name for n in joint.graph.nodes\n"
            "        if n.name.startswith('primals') or n.name.startswith('detach')]\n",
        ),
    ],
    "ex4_backend": [
        (
            "every call_function counted, getitem included",
            _sub(_COUNT, ' and isinstance(node.target, torch._ops.OpOverload)', ""),
        ),
        (
            "the counts of each graph replace the earlier ones (a graph break loses a graph)",
            _sub(_COUNT, "for node in gm.graph.nodes:",
                 "COUNTS[kind].clear()\nfor node in gm.graph.nodes:"),
        ),
        (
            "the op's packet counted (aten.mul), not its overload (aten.mul.Tensor)",
            _sub(_COUNT, "COUNTS[kind][str(node.target)]",
                 "COUNTS[kind][str(node.target.overloadpacket)]"),
        ),
        (
            "the graph returned unboxed: AOTAutograd calls it with one list",
            _sub(_COUNT, "return make_boxed_func(gm.forward)", "return gm.forward"),
        ),
        (
            "everything counted as forward",
            _sub(_COUNT, "COUNTS[kind]", 'COUNTS["forward"]'),
        ),
        (
            "each op counted once per graph (= 1 instead of += 1)",
            _sub(_COUNT, "COUNTS[kind][str(node.target)] += 1", "COUNTS[kind][str(node.target)] = 1"),
        ),
        (
            "the ops of a graph collected in a set, then counted",
            "COUNTS[kind].update({str(n.target) for n in gm.graph.nodes\n"
            "                     if isinstance(n.target, torch._ops.OpOverload)})\n"
            "return make_boxed_func(gm.forward)\n",
        ),
        (
            "the op counted by its schema name (aten::mul.Tensor)",
            _sub(_COUNT, "COUNTS[kind][str(node.target)]", "COUNTS[kind][node.target.name()]"),
        ),
        (
            "the op counted by the node's name (mul_1), not its target",
            _sub(_COUNT, "COUNTS[kind][str(node.target)]", "COUNTS[kind][node.name]"),
        ),
        (
            "the GraphModule returned as it is (not boxed)",
            _sub(_COUNT, "return make_boxed_func(gm.forward)", "return gm"),
        ),
        (
            "the counts of a graph replace the earlier ones (a new Counter each graph)",
            _sub(_COUNT, "for node in gm.graph.nodes:",
                 "COUNTS[kind] = collections.Counter()\nfor node in gm.graph.nodes:"),
        ),
        (
            "a function that unpacks the list, not marked boxed",
            _sub(_COUNT, "return make_boxed_func(gm.forward)", "return lambda args: gm(*args)"),
        ),
        (
            "nodes called with keyword arguments skipped",
            _sub(_COUNT, "        COUNTS[kind][str(node.target)] += 1",
                 "        if not node.kwargs:\n            COUNTS[kind][str(node.target)] += 1"),
        ),
        (
            "only ops whose arguments are all tensors (nodes) counted",
            _sub(_COUNT, "        COUNTS[kind][str(node.target)] += 1",
                 "        if all(isinstance(a, torch.fx.Node) for a in node.args):\n"
                 "            COUNTS[kind][str(node.target)] += 1"),
        ),
        (
            "ops counted by their packet name without the namespace (mul.Tensor)",
            _sub(_COUNT, "COUNTS[kind][str(node.target)]",
                 "COUNTS[kind][str(node.target).removeprefix('aten.')]"),
        ),
    ],
}

"""Wrong answers a student could plausibly write for lab 6a; each must fail its graded check.

Used by ``tools/check_wrong_answers.py 06a_graph_capture_lab``. Each entry replaces the
BEGIN/END SOLUTION region(s) of the exercise's solution cell (exercise 1's cell has two:
``__getattr__``, ``__torch_function__``).
"""

_GETATTR = """\
if name.startswith("__"):
    raise AttributeError(name)

def method(*args, **kwargs):
    return record(self.node.graph, "call_method", name, (self, *args), kwargs)

return method
"""

_TORCH_FUNCTION = """\
return record(graph_of(args, kwargs), "call_function", func, args, kwargs)
"""

_DCE = """\
changed = False
for node in reversed(graph.nodes):
    if not node.users and not node.is_impure():
        graph.erase_node(node)
        changed = True
return changed
"""

_MATCH = """\
def key(t):
    return (type(t), t.dtype, t.device, t.shape, t.stride(), t.requires_grad,
            torch._C._dispatch_keys(t))

expected = key(example)

def check(value):
    return isinstance(value, torch.Tensor) and key(value) == expected

return check
"""

_BINARY = """\
ops = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod",
       "**": "pow", "@": "matmul", "&": "and_", "|": "or_", "^": "xor", "<<": "lshift",
       ">>": "rshift"}
sym = inst.argrepr
name = "i" + ops[sym[:-1]].rstrip("_") if sym.endswith("=") else ops[sym]
op = getattr(operator, name)
right, left = self.stack.pop(), self.stack.pop()
if not isinstance(left, torch.fx.Node) and not isinstance(right, torch.fx.Node):
    self.stack.append(op(left, right))
else:
    self.stack.append(self.graph.call_function(op, (left, right)))
"""


def _sub(text: str, old: str, new: str) -> str:
    assert old in text, old  # a wrong answer must change the solution where it says
    return text.replace(old, new)


WRONG = {
    "ex1_proxy": [
        (
            "a method call recorded as a call_function of the Tensor method",
            [
                _sub(_GETATTR, '"call_method", name,', '"call_function", getattr(torch.Tensor, name),'),
                None,
            ],
        ),
        (
            "the receiver left out of the method's arguments",
            [_sub(_GETATTR, "(self, *args)", "args"), None],
        ),
        (
            "the method's keyword arguments dropped",
            [_sub(_GETATTR, "(self, *args), kwargs)", "(self, *args), {})"), None],
        ),
        (
            "the method's keyword arguments appended to the positional ones",
            [_sub(_GETATTR, "(self, *args), kwargs)", "(self, *args, *kwargs.values()), {})"),
             None],
        ),
        (
            "__torch_function__ records the function's name instead of the function",
            [None, _sub(_TORCH_FUNCTION, '"call_function", func,', '"call_function", func.__name__,')],
        ),
        (
            "__torch_function__ drops the keyword arguments (torch.cat(..., dim=0))",
            [None, _sub(_TORCH_FUNCTION, "args, kwargs)\n", "args, {})\n")],
        ),
        (
            "no guard for dunder names: Python's probes (__len__, __array__...) become methods",
            [_sub(_GETATTR, 'if name.startswith("__"):\n    raise AttributeError(name)\n', ""),
             None],
        ),
        (
            "the method's keyword arguments passed as one positional dict",
            [_sub(_GETATTR, "(self, *args), kwargs)", "(self, *args, kwargs), {})"), None],
        ),
        (
            "methods cached by name on the class: a second receiver reuses the first's closure",
            [_sub(_GETATTR, "def method(*args, **kwargs):\n"
                  "    return record(self.node.graph, \"call_method\", name, (self, *args), "
                  "kwargs)\n\nreturn method\n",
                  "cache = type(self).__dict__.get(\"_methods\")\n"
                  "if cache is None:\n"
                  "    cache = {}\n"
                  "    type(self)._methods = cache\n"
                  "if name not in cache:\n"
                  "    def method(*args, **kwargs):\n"
                  "        return record(self.node.graph, \"call_method\", name, (self, *args), "
                  "kwargs)\n"
                  "    cache[name] = method\n"
                  "return cache[name]\n"),
             None],
        ),
        (
            "__torch_function__ records a call_method of the function's name (torch.relu(x) as "
            "x.relu())",
            [None, _sub(_TORCH_FUNCTION, '"call_function", func,', '"call_method", func.__name__,')],
        ),
        (
            "__torch_function__ keeps only the first argument (torch.sum(y, 0) loses its dim)",
            [None, _sub(_TORCH_FUNCTION, "func, args, kwargs)", "func, args[:1], kwargs)")],
        ),
        (
            "__torch_function__ turns a list argument into a tuple (torch.cat((x, y)))",
            [None, _sub(_TORCH_FUNCTION, "func, args, kwargs)",
                        "func, tuple(tuple(a) if isinstance(a, list) else a for a in args), "
                        "kwargs)")],
        ),
    ],
    "ex2_dce": [
        (
            "nodes visited first to last: a dead chain loses only its last node",
            _sub(_DCE, "reversed(graph.nodes)", "list(graph.nodes)"),
        ),
        (
            "impurity ignored: unused inputs and torch._assert are erased too",
            _sub(_DCE, "not node.users and not node.is_impure()",
                 'not node.users and node.op != "output"'),
        ),
        (
            "only call_function nodes are considered (dead call_method/call_module stay)",
            _sub(_DCE, "if not node.users", 'if node.op == "call_function" and not node.users'),
        ),
        (
            "always returns True",
            _sub(_DCE, "return changed", "return True"),
        ),
        (
            "passes repeated until nothing changes, returning the last pass's flag",
            """\
changed = True
while changed:
    changed = False
    for node in list(graph.nodes):
        if not node.users and not node.is_impure():
            graph.erase_node(node)
            changed = True
return changed
""",
        ),
        (
            "node.is_impure referenced, not called (a bound method is truthy: nothing erased)",
            _sub(_DCE, "not node.is_impure()", "not node.is_impure"),
        ),
        (
            "returns None, not False, when nothing was erased",
            _sub(_DCE, "return changed", "if changed:\n    return True"),
        ),
        (
            "dead nodes collected first, then erased: a dead chain loses only its last node",
            """\
dead = [n for n in graph.nodes if not n.users and not n.is_impure()]
for node in reversed(dead):
    graph.erase_node(node)
return bool(dead)
""",
        ),
        (
            "unused placeholders erased too (only torch._assert and the output kept)",
            _sub(_DCE, "not node.is_impure()",
                 '(not node.is_impure() or node.op == "placeholder")'),
        ),
        (
            "stops after the first node erased",
            _sub(_DCE, "        changed = True\n", "        return True\n"),
        ),
        (
            "returns how many nodes were erased instead of a bool",
            _sub(_sub(_DCE, "changed = False", "changed = 0"), "changed = True", "changed += 1"),
        ),
    ],
    "ex3_tensor_match": [
        (
            "only shape and dtype compared (strides, type, requires_grad ignored)",
            _sub(_MATCH, """return (type(t), t.dtype, t.device, t.shape, t.stride(), t.requires_grad,
            torch._C._dispatch_keys(t))""", "return (t.dtype, t.shape)"),
        ),
        (
            "a subclass accepted (isinstance of the example's type instead of the exact type)",
            _sub(_MATCH, "return (type(t), t.dtype", "return (t.dtype").replace(
                "isinstance(value, torch.Tensor)", "isinstance(value, type(example))"),
        ),
        (
            "the values compared as well",
            _sub(_MATCH, "key(value) == expected",
                 "key(value) == expected and torch.equal(value, example)"),
        ),
        (
            "the storage offset compared as well",
            _sub(_MATCH, "torch._C._dispatch_keys(t))", "torch._C._dispatch_keys(t), "
                 "t.storage_offset())"),
        ),
        (
            "requires_grad forgotten",
            _sub(_MATCH, "t.stride(), t.requires_grad,", "t.stride(),"),
        ),
        (
            "the very same object required (identity, as an ID_MATCH)",
            _sub(_MATCH, "return isinstance(value, torch.Tensor) and key(value) == expected",
                 "return value is example"),
        ),
        (
            "dispatch keys forgotten (a lazy conjugate matches its base)",
            _sub(_MATCH, "t.requires_grad,\n            torch._C._dispatch_keys(t))",
                 "t.requires_grad)"),
        ),
        (
            "a non-tensor not handled (its .dtype raises)",
            _sub(_MATCH, "return isinstance(value, torch.Tensor) and key(value) == expected",
                 "return key(value) == expected"),
        ),
        (
            "is_conj() compared instead of the dispatch keys (a negative-bit view matches)",
            _sub(_MATCH, "torch._C._dispatch_keys(t))", "t.is_conj())"),
        ),
        (
            "the type fixed to torch.Tensor instead of the example's type (right only for a plain "
            "tensor example)",
            _sub(_MATCH, "return (type(t), t.dtype", "return (t.dtype").replace(
                "isinstance(value, torch.Tensor)", "type(value) is torch.Tensor"),
        ),
        (
            "t.type() (the legacy type string) compared instead of the Python type",
            _sub(_MATCH, "return (type(t), t.dtype", "return (t.type(), t.dtype"),
        ),
        (
            "is_contiguous() compared instead of the strides",
            _sub(_MATCH, "t.stride(),", "t.is_contiguous(),"),
        ),
        (
            "the number of elements compared instead of the sizes",
            _sub(_MATCH, "t.device, t.shape,", "t.device, t.numel(),"),
        ),
    ],
    "ex4_binary_op": [
        (
            "operands popped in the wrong order (x - y recorded as y - x)",
            _sub(_BINARY, "right, left = self.stack.pop()", "left, right = self.stack.pop()"),
        ),
        (
            "no constant folding: k * 2 with a constant k becomes a node",
            _sub(_BINARY, "if not isinstance(left, torch.fx.Node) and not isinstance(right, "
                 "torch.fx.Node):", "if False:"),
        ),
        (
            "in-place operators recorded as the plain ones (-= as sub)",
            _sub(_BINARY, 'name = "i" + ops[sym[:-1]].rstrip("_") if sym.endswith("=") else '
                 "ops[sym]", 'name = ops[sym.rstrip("=")]'),
        ),
        (
            "folding when either operand is a constant",
            _sub(_BINARY, "if not isinstance(left, torch.fx.Node) and not", "if not isinstance("
                 "left, torch.fx.Node) or not"),
        ),
        (
            "tensor operands recorded with torch's function of the same name (torch.add, "
            "torch.pow)",
            _sub(_BINARY, "self.graph.call_function(op, (left, right))",
                 "self.graph.call_function(getattr(torch, op.__name__, op), (left, right))"),
        ),
        (
            "in-place operators always recorded, even on two constants (k |= 2 becomes a node)",
            _sub(_BINARY, "if not isinstance(left, torch.fx.Node) and not",
                 'if not sym.endswith("=") and not isinstance(left, torch.fx.Node) and not'),
        ),
        (
            "in-place names built without dropping and_'s underscore (|= looks up "
            "operator.ior_)",
            _sub(_BINARY, 'ops[sym[:-1]].rstrip("_")', "ops[sym[:-1]]"),
        ),
        (
            "constants folded with eval of the operator's text (k |= 2 is a statement)",
            _sub(_BINARY, "self.stack.append(op(left, right))",
                 'self.stack.append(eval(f"{left!r} {sym} {right!r}"))'),
        ),
        (
            "the operator's first character looked up (** as *, // as /)",
            _sub(_BINARY, 'ops[sym[:-1]].rstrip("_") if sym.endswith("=") else ops[sym]',
                 'ops[sym[0]].rstrip("_") if sym.endswith("=") else ops[sym[0]]'),
        ),
        (
            "the left operand peeked, not popped (it stays on the stack)",
            _sub(_BINARY, "right, left = self.stack.pop(), self.stack.pop()",
                 "right, left = self.stack.pop(), self.stack[-1]"),
        ),
    ],
}

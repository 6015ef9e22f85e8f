"""Wrong answers a student could plausibly write for lab 6a; each must fail its graded check.

Used by ``tools/check_wrong_answers.py 06a_graph_capture_lab``. Each entry replaces the
BEGIN/END SOLUTION region(s) of the exercise's solution cell (exercise 1's cell has two:
``__getattr__``, ``__torch_function__``). The kinds the issue's outside trial named are all
here: names starting with ``_``, operators beyond the common ones, a constant folded only for
ints, a property read when the check runs instead of when the guard is made, keyword
arguments, a hard-coded constant from the visible example, a float where an int is required.
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

_CSE = """\
def key_of(a):
    if isinstance(a, (list, tuple)):
        return (type(a).__name__, tuple(key_of(v) for v in a))
    if isinstance(a, dict):
        return ("dict", tuple((k, key_of(v)) for k, v in a.items()))
    if isinstance(a, slice):
        return ("slice", key_of(a.start), key_of(a.stop), key_of(a.step))
    return (type(a), a)

seen, changed = {}, False
for node in list(graph.nodes):
    if node.op not in ("call_function", "call_method", "call_module") or node.is_impure():
        continue
    name = node.target if isinstance(node.target, str) else ""
    if node.target in RANDOM or (node.op == "call_method" and name.endswith("_")
                                 and not name.endswith("__")):
        continue
    key = (node.op, node.target, key_of(node.args), key_of(node.kwargs))
    if key in seen:
        node.replace_all_uses_with(seen[key])
        graph.erase_node(node)
        changed = True
    else:
        seen[key] = node
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
                _sub(
                    _GETATTR,
                    '"call_method", name,',
                    '"call_function", getattr(torch.Tensor, name),',
                ),
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
            [
                _sub(_GETATTR, "(self, *args), kwargs)", "(self, *args, *kwargs.values()), {})"),
                None,
            ],
        ),
        (
            "every name starting with '_' refused, so x._conj() cannot be traced",
            [_sub(_GETATTR, 'if name.startswith("__"):', 'if name.startswith("_"):'), None],
        ),
        (
            "__torch_function__ records the function's name instead of the function",
            [
                None,
                _sub(_TORCH_FUNCTION, '"call_function", func,', '"call_function", func.__name__,'),
            ],
        ),
        (
            "__torch_function__ drops the keyword arguments (torch.cat(..., dim=0))",
            [None, _sub(_TORCH_FUNCTION, "args, kwargs)\n", "args, {})\n")],
        ),
        (
            "no guard for dunder names: Python's probes (__len__, __array__...) become methods",
            [
                _sub(_GETATTR, 'if name.startswith("__"):\n    raise AttributeError(name)\n', ""),
                None,
            ],
        ),
        (
            "the method's keyword arguments passed as one positional dict",
            [_sub(_GETATTR, "(self, *args), kwargs)", "(self, *args, kwargs), {})"), None],
        ),
        (
            "methods cached by name on the class: a second receiver reuses the first's closure",
            [
                _sub(
                    _GETATTR,
                    "def method(*args, **kwargs):\n"
                    '    return record(self.node.graph, "call_method", name, (self, *args), '
                    "kwargs)\n\nreturn method\n",
                    'cache = type(self).__dict__.get("_methods")\n'
                    "if cache is None:\n"
                    "    cache = {}\n"
                    "    type(self)._methods = cache\n"
                    "if name not in cache:\n"
                    "    def method(*args, **kwargs):\n"
                    '        return record(self.node.graph, "call_method", name, (self, *args), '
                    "kwargs)\n"
                    "    cache[name] = method\n"
                    "return cache[name]\n",
                ),
                None,
            ],
        ),
        (
            "__torch_function__ records a call_method of the function's name (torch.relu(x) as "
            "x.relu())",
            [
                None,
                _sub(_TORCH_FUNCTION, '"call_function", func,', '"call_method", func.__name__,'),
            ],
        ),
        (
            "__torch_function__ keeps only the first argument (torch.sum(y, 0) loses its dim)",
            [None, _sub(_TORCH_FUNCTION, "func, args, kwargs)", "func, args[:1], kwargs)")],
        ),
        (
            "__torch_function__ turns a list argument into a tuple (torch.cat((x, y)))",
            [
                None,
                _sub(
                    _TORCH_FUNCTION,
                    "func, args, kwargs)",
                    "func, tuple(tuple(a) if isinstance(a, list) else a for a in args), kwargs)",
                ),
            ],
        ),
    ],
    "ex2_cse": [
        (
            "keyword arguments left out of the key (x.sum(dim=0) merges with x.sum(dim=1))",
            _sub(_CSE, "key_of(node.args), key_of(node.kwargs))", "key_of(node.args))"),
        ),
        (
            "arguments compared as a set: x - y merges with y - x",
            _sub(
                _CSE,
                "key_of(node.args), key_of(node.kwargs))",
                "frozenset(key_of(node.args)[1]), key_of(node.kwargs))",
            ),
        ),
        (
            "constants compared by value only: x * 2 merges with x * 2.0",
            _sub(_CSE, "    return (type(a), a)", "    return a"),
        ),
        (
            "impure nodes merged too (two asserts, two rand_like become one)",
            _sub(_CSE, " or node.is_impure():", ":"),
        ),
        (
            "RANDOM not consulted: two dropouts become one",
            _sub(_CSE, "if node.target in RANDOM or (", "if ("),
        ),
        (
            "every method whose name starts or ends with '_' skipped (x._neg_view() twice stays)",
            _sub(
                _CSE,
                'name.endswith("_")\n                                 and not name.endswith("__")',
                '(name.startswith("_") or name.endswith("_"))',
            ),
        ),
        (
            "in-place methods merged (two y.mul_(2) become one)",
            _sub(
                _CSE,
                ' or (node.op == "call_method" and name.endswith("_")\n'
                '                                 and not name.endswith("__"))',
                "",
            ),
        ),
        (
            "only call_function nodes considered (repeated methods and modules stay)",
            _sub(
                _CSE,
                'if node.op not in ("call_function", "call_method", "call_module")',
                'if node.op != "call_function"',
            ),
        ),
        (
            "only the operations of the page's example merged (relu, -, *)",
            _sub(
                _CSE,
                "    if node.target in RANDOM",
                "    if node.target not in (torch.relu, operator.sub, operator.mul):\n"
                "        continue\n    if node.target in RANDOM",
            ),
        ),
        (
            "uses redirected but the duplicate left in the graph (nothing erased)",
            _sub(_CSE, "        graph.erase_node(node)\n", ""),
        ),
        (
            "returns how many nodes were merged instead of a bool",
            _sub(
                _sub(_CSE, "changed = {}, False", "changed = {}, 0"),
                "changed = True",
                "changed += 1",
            ),
        ),
    ],
    "ex3_tensor_match": [
        (
            "the example's properties read when the check runs, not when the guard is made",
            _sub(_MATCH, "key(value) == expected", "key(value) == key(example)"),
        ),
        (
            "the shape of the page's example, (3, 4), written in instead of the example's",
            _sub(_MATCH, "t.device, t.shape,", "t.device, torch.Size([3, 4]),"),
        ),
        (
            "only shape and dtype compared (strides, type, requires_grad ignored)",
            _sub(
                _MATCH,
                """return (type(t), t.dtype, t.device, t.shape, t.stride(), t.requires_grad,
            torch._C._dispatch_keys(t))""",
                "return (t.dtype, t.shape)",
            ),
        ),
        (
            "a subclass accepted (isinstance of the example's type instead of the exact type)",
            _sub(_MATCH, "return (type(t), t.dtype", "return (t.dtype").replace(
                "isinstance(value, torch.Tensor)", "isinstance(value, type(example))"
            ),
        ),
        (
            "the values compared as well",
            _sub(
                _MATCH,
                "key(value) == expected",
                "key(value) == expected and torch.equal(value, example)",
            ),
        ),
        (
            "the storage offset compared as well",
            _sub(
                _MATCH,
                "torch._C._dispatch_keys(t))",
                "torch._C._dispatch_keys(t), t.storage_offset())",
            ),
        ),
        (
            "requires_grad forgotten",
            _sub(_MATCH, "t.stride(), t.requires_grad,", "t.stride(),"),
        ),
        (
            "the very same object required (identity, as an ID_MATCH)",
            _sub(
                _MATCH,
                "return isinstance(value, torch.Tensor) and key(value) == expected",
                "return value is example",
            ),
        ),
        (
            "dispatch keys forgotten (a lazy conjugate matches its base)",
            _sub(
                _MATCH,
                "t.requires_grad,\n            torch._C._dispatch_keys(t))",
                "t.requires_grad)",
            ),
        ),
        (
            "a non-tensor not handled (its .dtype raises)",
            _sub(
                _MATCH,
                "return isinstance(value, torch.Tensor) and key(value) == expected",
                "return key(value) == expected",
            ),
        ),
        (
            "is_conj() compared instead of the dispatch keys (a negative-bit view matches)",
            _sub(_MATCH, "torch._C._dispatch_keys(t))", "t.is_conj())"),
        ),
        (
            "the type fixed to torch.Tensor instead of the example's type (right only for a plain "
            "tensor example)",
            _sub(_MATCH, "return (type(t), t.dtype", "return (t.dtype").replace(
                "isinstance(value, torch.Tensor)", "type(value) is torch.Tensor"
            ),
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
            "constants folded only when both are ints (2.5 ** 2 becomes a node)",
            _sub(
                _BINARY,
                "if not isinstance(left, torch.fx.Node) and not isinstance(right, torch.fx.Node):",
                "if isinstance(left, int) and isinstance(right, int):",
            ),
        ),
        (
            "only the common operators known: ^, << and >> missing",
            _sub(_BINARY, ', "^": "xor", "<<": "lshift",\n       ">>": "rshift"}', "}"),
        ),
        (
            "** folded with math.pow: a float where Dynamo's graph has an int (9.0, not 9)",
            "import math\n"
            + _sub(
                _BINARY,
                "self.stack.append(op(left, right))",
                "self.stack.append(math.pow(left, right) if "
                "op in (operator.pow, operator.ipow) else op(left, right))",
            ),
        ),
        (
            "// folded as a division then floored: 7 // 2 gives the float 3.0",
            _sub(
                _BINARY,
                "self.stack.append(op(left, right))",
                "self.stack.append((left / right) // 1 if op in (operator.floordiv, "
                "operator.ifloordiv) else op(left, right))",
            ),
        ),
        (
            "operands popped in the wrong order (x - y recorded as y - x)",
            _sub(_BINARY, "right, left = self.stack.pop()", "left, right = self.stack.pop()"),
        ),
        (
            "no constant folding: k * 2 with a constant k becomes a node",
            _sub(
                _BINARY,
                "if not isinstance(left, torch.fx.Node) and not isinstance(right, torch.fx.Node):",
                "if False:",
            ),
        ),
        (
            "in-place operators recorded as the plain ones (-= as sub)",
            _sub(
                _BINARY,
                'name = "i" + ops[sym[:-1]].rstrip("_") if sym.endswith("=") else ops[sym]',
                'name = ops[sym.rstrip("=")]',
            ),
        ),
        (
            "folding when either operand is a constant",
            _sub(
                _BINARY,
                "if not isinstance(left, torch.fx.Node) and not",
                "if not isinstance(left, torch.fx.Node) or not",
            ),
        ),
        (
            "tensor operands recorded with torch's function of the same name (torch.add, "
            "torch.pow)",
            _sub(
                _BINARY,
                "self.graph.call_function(op, (left, right))",
                "self.graph.call_function(getattr(torch, op.__name__, op), (left, right))",
            ),
        ),
        (
            "in-place operators always recorded, even on two constants (k |= 2 becomes a node)",
            _sub(
                _BINARY,
                "if not isinstance(left, torch.fx.Node) and not",
                'if not sym.endswith("=") and not isinstance(left, torch.fx.Node) and not',
            ),
        ),
        (
            "in-place names built without dropping and_'s underscore (|= looks up operator.ior_)",
            _sub(_BINARY, 'ops[sym[:-1]].rstrip("_")', "ops[sym[:-1]]"),
        ),
        (
            "constants folded with eval of the operator's text (k |= 2 is a statement)",
            _sub(
                _BINARY,
                "self.stack.append(op(left, right))",
                'self.stack.append(eval(f"{left!r} {sym} {right!r}"))',
            ),
        ),
        (
            "the operator's first character looked up (** as *, // as /)",
            _sub(
                _BINARY,
                'ops[sym[:-1]].rstrip("_") if sym.endswith("=") else ops[sym]',
                'ops[sym[0]].rstrip("_") if sym.endswith("=") else ops[sym[0]]',
            ),
        ),
        (
            "the left operand peeked, not popped (it stays on the stack)",
            _sub(
                _BINARY,
                "right, left = self.stack.pop(), self.stack.pop()",
                "right, left = self.stack.pop(), self.stack[-1]",
            ),
        ),
    ],
}

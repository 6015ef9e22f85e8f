"""Graph: the FX IR (a linked list of Nodes), its node naming, lint, DCE and Python codegen.

Mirrors torch/fx/graph.py at torch v2.13.0: `_Namespace` (unique snake_case names with `_1`
suffixes, builtins never shadowed), `Graph.create_node` and its helpers, the insert point
(`inserting_before`/`inserting_after`), `erase_node`, `node_copy`/`graph_copy`, `lint`,
`eliminate_dead_code`, and `CodeGen._gen_python_code`, which writes the `forward` source that
`GraphModule` compiles (same text as torch's `.code`: operators pretty-printed from
`magic_methods`, torch callables by qualified name, values freed after their last use).
"""

import builtins
import contextlib
import copy
import inspect
import keyword
import math
import re
from dataclasses import dataclass

import torch

try:
    from torch.utils._dtype_abbrs import dtype_abbrs  # `f32` for torch.float32
except ImportError:  # older torch builds kept this table in torch/fx/graph.py
    from torch.fx.graph import dtype_abbrs

from .node import Node, _get_qualified_name, _type_repr, map_arg

# torch/fx/graph.py: names a generated variable may not take unless it is that very object.
_illegal_names = {k: object() for k in keyword.kwlist}
_illegal_names.update(builtins.__dict__)
_custom_builtins = {"inf": math.inf, "nan": math.nan, "NoneType": type(None), "torch": torch,
                    "device": torch.device}  # fmt: skip
_illegal_names.update(_custom_builtins)

_snake_case_sub = re.compile(r"(?<=[a-z])([A-Z])").sub
_illegal_char_regex = re.compile("[^0-9a-zA-Z_]+")
_name_regex = re.compile(r"^([a-zA-Z_][0-9a-zA-Z_]*?)(?:_(\d+))?$")


def _snake_case(s: str) -> str:
    """`pascalCase` -> `pascal_case`, `ALL_CAPS` -> `all_caps`."""
    return _snake_case_sub(r"_\1", s).lower()


class _Namespace:
    """Hands out unique identifiers: `add`, `add_1`, `add_2`; `sum` -> `sum_1` (a builtin)."""

    def __init__(self):
        self._obj_to_name: dict = {}
        self._used_names: set = set()
        self._base_count: dict = {}

    def create_name(self, candidate: str, obj) -> str:
        if obj is not None and obj in self._obj_to_name:
            return self._obj_to_name[obj]
        match = _name_regex.match(candidate)
        if match is None:
            candidate = _illegal_char_regex.sub("_", candidate) or "_unnamed"
            if candidate[0].isdigit():
                candidate = f"_{candidate}"
            match = _name_regex.match(candidate)
        base, num = match.group(1, 2)
        if num is None or candidate in self._used_names:
            num = self._base_count.get(base, 0)
            if _illegal_names.get(candidate, obj) is not obj:
                num += 1
                candidate = f"{base}_{num}"
        else:
            num = int(num)
        while candidate in self._used_names:
            num += 1
            candidate = f"{base}_{num}"
        self._used_names.add(candidate)
        self._base_count[base] = num
        if obj is not None:
            self._obj_to_name[obj] = candidate
        return candidate


# Operators that codegen writes as Python syntax (graph.py `magic_methods`); the Proxy
# overloads exactly these, and the reflectable ones also as `__radd__` etc.
reflectable_magic_methods = {
    "add": "{} + {}", "sub": "{} - {}", "mul": "{} * {}", "floordiv": "{} // {}",
    "truediv": "{} / {}", "div": "{} / {}", "mod": "{} % {}", "pow": "{} ** {}",
    "lshift": "{} << {}", "rshift": "{} >> {}", "and_": "{} & {}", "or_": "{} | {}",
    "xor": "{} ^ {}", "getitem": "{}[{}]", "matmul": "{} @ {}",
}  # fmt: skip
magic_methods = {
    "eq": "{} == {}", "ne": "{} != {}", "lt": "{} < {}", "gt": "{} > {}", "le": "{} <= {}",
    "ge": "{} >= {}", "pos": "+{}", "neg": "-{}", "invert": "~{}", **reflectable_magic_methods,
}  # fmt: skip
inplace_methods = {
    "iadd": "{} += {}", "iand": "{} &= {}", "ifloordiv": "{} //= {}", "ilshift": "{} <<= {}",
    "imod": "{} %= {}", "imul": "{} *= {}", "imatmul": "{} @= {}", "ior": "{} |= {}",
    "ipow": "{} **= {}", "irshift": "{} >>= {}", "isub": "{} -= {}", "itruediv": "{} /= {}",
    "ixor": "{} ^= {}", "setitem": "{}[{}] = {}",
}  # fmt: skip


def _format_target(base: str, target: str) -> str:
    """`self` + `seq.0.weight` -> `getattr(self.seq, "0").weight`."""
    r = base
    for e in target.split("."):
        r = f"{r}.{e}" if e.isidentifier() else f'getattr({r}, "{e}")'
    return r


def _is_from_torch(obj) -> bool:
    """torch's callables are spelled by their dotted name (torch._dynamo/_inductor's are not)."""
    module = getattr(obj, "__module__", None)
    if module is not None:
        return re.fullmatch(r"torch(\.(?!_dynamo\.|_inductor\.)[^.]+)*", module) is not None
    name = getattr(obj, "__name__", None)
    return name not in (None, "torch") and any(
        getattr(g, name, None) is obj for g in (torch, torch.nn.functional)
    )


@dataclass
class PythonCode:
    """The generated source and the globals it runs in."""

    src: str
    globals: dict


class CodeGen:
    """Writes `def forward(self, ...)` from the node list (graph.py CodeGen._gen_python_code)."""

    def _gen_python_code(self, nodes, root_module: str, namespace, verbose=False) -> PythonCode:
        free_vars, body, globals_, wrapped_fns = [], [], {}, {}

        def add_global(name_hint: str, obj) -> str:
            if _is_from_torch(obj) and obj is not torch.device:
                return _get_qualified_name(obj)  # torch callables keep their dotted name
            name = namespace.create_name(name_hint, obj)
            globals_[name] = obj
            return name

        for name, obj in _custom_builtins.items():
            add_global(name, obj)

        def type_repr(o) -> str:
            return add_global(_type_repr(o), o) if isinstance(o, type) else repr(o)

        def _get_repr(arg) -> str:
            if isinstance(arg, Node):
                return repr(arg)
            if isinstance(arg, tuple) and hasattr(arg, "_fields"):
                return f"{add_global(_get_qualified_name(type(arg)), type(arg))}{tuple(arg)!r}"
            if isinstance(arg, tuple):
                inner = ", ".join(_get_repr(a) for a in arg)
                return f"({inner},)" if len(arg) == 1 else f"({inner})"
            if isinstance(arg, list):
                return "[" + ", ".join(_get_repr(a) for a in arg) + "]"
            if isinstance(arg, slice):
                return (
                    f"slice({_get_repr(arg.start)}, {_get_repr(arg.stop)}, {_get_repr(arg.step)})"
                )
            return repr(arg)

        def _format_args(args, kwargs) -> str:
            return ", ".join(
                [_get_repr(a) for a in args] + [f"{k} = {_get_repr(v)}" for k, v in kwargs.items()]
            )

        # A value dies at its last use: walk backwards, the first user seen is the last one.
        node_to_last_use, user_to_last_uses = {}, {}
        for node in reversed(nodes):
            for input_node in node._input_nodes:
                if input_node not in node_to_last_use:
                    node_to_last_use[input_node] = node
                    user_to_last_uses.setdefault(node, []).append(input_node)

        def delete_unused_values(user: Node) -> None:
            if user.op == "placeholder":
                return
            if user.op == "output":
                body.append("\n")
                return
            to_delete = user_to_last_uses.get(user, []) + ([user] if not user.users else [])
            if to_delete:
                body.append(";  " + " = ".join([repr(n) for n in to_delete] + ["None"]) + "\n")
            else:
                body.append("\n")

        def annotation(node: Node) -> str:
            meta = node.meta.get("tensor_meta")
            if verbose and hasattr(meta, "shape") and hasattr(meta, "dtype"):
                return f': "{dtype_abbrs[meta.dtype]}[{", ".join(str(s) for s in meta.shape)}]"'
            return "" if node.type is None else f" : {type_repr(node.type)}"

        def emit_node(node: Node) -> None:
            ann = annotation(node)
            if node.op == "placeholder":
                default = f" = {_get_repr(node.args[0])}" if node.args else ""
                free_vars.append(f"{node.target}{ann}{default}")
                raw_name = node.target.replace("*", "")
                if raw_name != repr(node):
                    body.append(f"{node!r} = {raw_name}\n")
            elif node.op == "call_method":
                call = _format_target(_get_repr(node.args[0]), node.target)
                body.append(f"{node!r}{ann} = {call}({_format_args(node.args[1:], node.kwargs)})")
            elif node.op == "call_function":
                t = node.target
                if getattr(t, "__module__", "") == "_operator" and t.__name__ in magic_methods:
                    syntax = magic_methods[t.__name__].format(*(_get_repr(a) for a in node.args))
                    body.append(f"{node!r}{ann} = {syntax}")
                elif getattr(t, "__module__", "") == "_operator" and t.__name__ in inplace_methods:
                    stmt = inplace_methods[t.__name__].format(*(_get_repr(a) for a in node.args))
                    body.append(f"{stmt};  {node!r}{ann} = {_get_repr(node.args[0])}")
                else:
                    global_name = add_global(_get_qualified_name(t), t)
                    a = node.args
                    if (
                        global_name == "getattr"
                        and len(a) == 2
                        and isinstance(a[1], str)
                        and a[1].isidentifier()
                    ):
                        body.append(f"{node!r}{ann} = {_format_target(_get_repr(a[0]), a[1])}")
                    else:
                        body.append(
                            f"{node!r}{ann} = {global_name}({_format_args(a, node.kwargs)})"
                        )
                    if node.meta.get("is_wrapped"):
                        wrapped_fns.setdefault(global_name)
            elif node.op == "call_module":
                call = _format_target(root_module, node.target)
                body.append(f"{node!r}{ann} = {call}({_format_args(node.args, node.kwargs)})")
            elif node.op == "get_attr":
                body.append(f"{node!r}{ann} = {_format_target(root_module, node.target)}")
            elif node.op == "output":
                if node.type is not None:
                    returns[0] = f" -> {type_repr(node.type)}"
                body.append(f"return {_get_repr(node.args[0])}")

        returns, noted = [""], False
        for node in nodes:
            if verbose and node.op not in ("placeholder", "output") and not noted:
                body.append("\n# No stacktrace found for following nodes\n")
                noted = True
            emit_node(node)
            delete_unused_values(node)
        if not body:
            body.append("pass\n")
        wrap_stmts = ""
        if wrapped_fns:  # re-register leaf functions, so re-tracing the module keeps them
            from .symbolic_trace import wrap

            wrap_name = add_global("wrap", wrap)
            wrap_stmts = "\n".join(f'{wrap_name}("{name}")' for name in wrapped_fns)
        prologue = f"def forward({', '.join(['self'] + free_vars)}){returns[0]}:"
        code = "".join(body).lstrip("\n")
        code = "\n".join("    " + line for line in code.split("\n"))
        return PythonCode(f"\n{wrap_stmts}\n\n{prologue}\n{code}", globals_)


class Graph:
    """The IR: a ring of Nodes under a sentinel `_root`, plus the namespace naming them."""

    def __init__(self, owning_module=None):
        self._root = Node(self, "", "root", "", (), {})
        self._insert = self._root.prepend  # new nodes go before the root: at the end
        self._len = 0
        self._graph_namespace = _Namespace()
        self.owning_module = owning_module
        self._codegen = CodeGen()

    @property
    def nodes(self) -> "_node_list":
        return _node_list(self)

    def output_node(self) -> Node:
        return self._root._prev

    def create_node(self, op, target, args=None, kwargs=None, name=None, type_expr=None) -> Node:
        """Make a node named after `name` or its target and insert it at the insert point."""
        candidate = name if name is not None else self._target_to_str(target)
        name = self._graph_namespace.create_name(candidate, None)
        n = Node(self, name, op, target, args or (), kwargs or {}, type_expr)
        self._graph_namespace._obj_to_name[n] = name
        self._insert(n)
        self._len += 1
        return n

    def _target_to_str(self, target) -> str:
        if callable(target):
            op = target.__name__
        else:
            op = target[2:-2] if target.startswith("__") and target.endswith("__") else target
        return _snake_case(op)

    def placeholder(self, name: str, type_expr=None, default_value=inspect.Signature.empty):
        args = () if default_value is inspect.Signature.empty else (default_value,)
        return self.create_node("placeholder", name, args=args, type_expr=type_expr)

    def get_attr(self, qualified_name: str, type_expr=None) -> Node:
        return self.create_node("get_attr", qualified_name, type_expr=type_expr)

    def call_module(self, module_name: str, args=None, kwargs=None, type_expr=None) -> Node:
        return self.create_node("call_module", module_name, args, kwargs, type_expr=type_expr)

    def call_method(self, method_name: str, args=None, kwargs=None, type_expr=None) -> Node:
        return self.create_node("call_method", method_name, args, kwargs, type_expr=type_expr)

    def call_function(self, the_function, args=None, kwargs=None, type_expr=None, name=None):
        return self.create_node("call_function", the_function, args, kwargs, name, type_expr)

    def output(self, result, type_expr=None) -> Node:
        return self.create_node("output", "output", args=(result,), type_expr=type_expr)

    def erase_node(self, to_erase: Node) -> None:
        """Unlink a node nothing reads any more, and drop it from its inputs' users."""
        if to_erase.users:
            raise RuntimeError(
                f"Tried to erase Node {to_erase} but it still had {len(to_erase.users)} users in "
                f"the graph: {to_erase.users}! Replace its uses first (replace_all_uses_with)."
            )
        if to_erase.graph is not self:
            raise RuntimeError(f"Attempting to remove {to_erase} from wrong graph!")
        to_erase._remove_from_list()
        to_erase._erased = True  # iterators may still hold it: they skip erased nodes
        self._len -= 1
        to_erase._update_args_kwargs(map_arg(to_erase.args, lambda n: None),
                                     map_arg(to_erase.kwargs, lambda n: None))  # fmt: skip

    @contextlib.contextmanager
    def _insert_point(self, new_insert):
        orig, self._insert = self._insert, new_insert
        try:
            yield
        finally:
            self._insert = orig

    def inserting_before(self, n: Node | None = None):
        """`with g.inserting_before(n):` new nodes land just before `n` (None: at the start)."""
        return self.inserting_after(self._root) if n is None else self._insert_point(n.prepend)

    def inserting_after(self, n: Node | None = None):
        return self.inserting_before(self._root) if n is None else self._insert_point(n.append)

    def node_copy(self, node: Node, arg_transform=lambda x: x) -> Node:
        """Copy `node` from another graph, mapping its node arguments with `arg_transform`."""
        args, kwargs = map_arg(node.args, arg_transform), map_arg(node.kwargs, arg_transform)
        new = self.create_node(node.op, node.target, args, kwargs, node.name, node.type)
        new.meta = dict(node.meta)
        return new

    def graph_copy(self, g: "Graph", val_map: dict):
        """Copy all of `g` into self; returns what `g`'s output node returned, mapped."""
        for node in g.nodes:
            if node in val_map:
                continue
            if node.op == "output":
                return map_arg(node.args[0], lambda n: val_map[n])
            val_map[node] = self.node_copy(node, lambda n: val_map[n])
        return None

    def __deepcopy__(self, memo=None) -> "Graph":
        """Copy node by node (the default deepcopy would recurse along the whole list)."""
        memo = memo if memo is not None else {}
        g = Graph()
        output_val = g.graph_copy(self, val_map=memo)
        old_output = self.output_node() if self._len else None
        if old_output is not None and old_output.op == "output":
            new_output = g.output(output_val, type_expr=old_output.type)
            new_output.meta = copy.copy(old_output.meta)
        return g

    def python_code(self, root_module: str, verbose: bool = False) -> PythonCode:
        """Generate `forward`; node names are re-issued in a fresh namespace shared with globals."""
        namespace = _Namespace()
        nodes = list(self.nodes)
        for node in nodes:
            node._repr_fn = lambda n: namespace.create_name(n.name, n)
        try:
            return self._codegen._gen_python_code(nodes, root_module, namespace, verbose)
        finally:
            for node in nodes:
                node._repr_fn = None

    def __str__(self) -> str:
        return "graph():" + "".join("\n    " + n.format_node() for n in self.nodes)

    def print_tabular(self) -> None:
        """One row per node: opcode, name, target, args, kwargs (needs `tabulate`, as torch's)."""
        from tabulate import tabulate

        rows = [[n.op, n.name, n.target, n.args, n.kwargs] for n in self.nodes]
        print(tabulate(rows, headers=["opcode", "name", "target", "args", "kwargs"]))

    def lint(self) -> None:
        """Check ownership, topological order, unique names and (with a module) targets."""
        seen_names, seen_values = set(), set()
        for node in self.nodes:
            if node.op not in ("placeholder", "call_method", "call_module", "call_function",
                               "get_attr", "output"):  # fmt: skip
                raise RuntimeError(f"Node {node} had unknown opcode {node.op}!")
            if node.graph is not self:
                raise RuntimeError(f"Node '{node}' does not belong to this Graph!")
            for arg in node._input_nodes:
                if arg.graph is not self:
                    raise RuntimeError(
                        f"Argument '{arg}' of Node '{node}' does not belong to this Graph, but was "
                        "used as an argument! If you are copying nodes from another graph, make "
                        "sure to use ``arg_transform`` on node_copy() to remap values"
                    )
                if arg not in seen_values:
                    raise RuntimeError(
                        f"Argument '{arg}' of Node '{node}' was used before it has been defined! "
                        "Please check that Nodes in the graph are topologically ordered"
                    )
            seen_values.add(node)
            if node.name in seen_names:
                raise RuntimeError(f"Node redefined name {node.name}!")
            seen_names.add(node.name)
        if self.owning_module is not None:
            for node in self.nodes:
                if node.op in ("get_attr", "call_module"):
                    m = self.owning_module
                    for i, atom in enumerate(node.target.split(".")):
                        if not hasattr(m, atom):
                            seen = ".".join(node.target.split(".")[:i])
                            raise RuntimeError(
                                f"Node {node} target {node.target} references nonexistent "
                                f"attribute {atom} of {seen}"
                            )
                        m = getattr(m, atom)

    def eliminate_dead_code(self, is_impure_node=None) -> bool:
        """Erase, last to first, every node nobody reads that is not impure (graph.py)."""
        self.lint()
        changed = False
        for node in reversed(self.nodes):
            impure = is_impure_node(node) if is_impure_node else node.is_impure()
            if not impure and not node.users:
                self.erase_node(node)
                changed = True
        return changed


class _node_list:
    """Iterates the ring from the root, skipping nodes erased meanwhile (graph.py)."""

    def __init__(self, graph: Graph, direction: str = "_next"):
        self.graph, self.direction = graph, direction

    def __len__(self) -> int:
        return self.graph._len

    def __iter__(self):
        root = self.graph._root
        cur = getattr(root, self.direction)
        while cur is not root:
            if not cur._erased:
                yield cur
            cur = getattr(cur, self.direction)

    def __reversed__(self):
        return iter(_node_list(self.graph, "_prev" if self.direction == "_next" else "_next"))

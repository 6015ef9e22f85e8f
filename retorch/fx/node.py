"""Node: one operation of an FX graph, and `map_arg` over the arguments that hold nodes.

Mirrors torch/fx/node.py (Node, map_arg, map_aggregate, _get_qualified_name, Node.is_impure,
Node.format_node) at torch v2.13.0. In torch the linked-list and use-def bookkeeping
(`_prepend`, `_remove_from_list`, `_update_args_kwargs`) moved to C++ (`torch._C._NodeBase`);
here they are the few lines of Python they replaced.

A node is a doubly linked list cell (`_prev`, `_next`, with the graph's `_root` sentinel closing
the ring) carrying `op`, `target`, `args`, `kwargs`, and the two directions of the use-def chain:
`_input_nodes` (the nodes this one reads, in order of first appearance) and `users` (the nodes that
read this one). Assigning `args`/`kwargs` keeps both directions in step.
"""

import builtins
import operator
import types

import torch

_legal_ops = ("placeholder", "call_method", "call_module", "call_function", "get_attr", "output")

# torch/fx/node.py `_side_effectful_functions` (Python-level entries) and
# torch/_library/utils.py `_RANDOM_FUNCTIONS`: what dead-code elimination must keep.
_side_effectful_functions = {
    torch._assert,
    torch._assert_async,
    operator.setitem,
    torch._C._set_grad_enabled,
    *(getattr(torch.amp, f, None) for f in ("_enter_autocast", "_exit_autocast")),
} - {None}  # the autocast pair is recent: older torch builds lack it
_RANDOM_FUNCTIONS = {
    torch.rand, torch.randn, torch.randint, torch.randperm, torch.rand_like, torch.randn_like,
    torch.randint_like, torch.normal, torch.poisson, torch.bernoulli, torch.multinomial,
}  # fmt: skip


def map_aggregate(a, fn):
    """Apply `fn` to every leaf of a nest of tuples, lists, dicts and slices (node.py)."""
    if isinstance(a, tuple):
        t = tuple(map_aggregate(elem, fn) for elem in a)
        return t if not hasattr(a, "_fields") else type(a)(*t)
    if isinstance(a, list):
        return [map_aggregate(elem, fn) for elem in a]
    if isinstance(a, dict):
        return {k: map_aggregate(v, fn) for k, v in a.items()}
    if isinstance(a, slice):
        return slice(*(map_aggregate(x, fn) for x in (a.start, a.stop, a.step)))
    return fn(a)


def map_arg(a, fn):
    """Apply `fn` to every Node in an argument structure, leaving the other leaves alone."""
    return map_aggregate(a, lambda x: fn(x) if isinstance(x, Node) else x)


def _get_qualified_name(func) -> str:
    """How generated code names a callable: `getattr`, `torch.Tensor.add`, `torch.relu`."""
    if getattr(builtins, func.__name__, None) is func:
        return func.__name__
    if (
        isinstance(func, (types.MethodDescriptorType, types.WrapperDescriptorType))
        and func is getattr(torch.Tensor, func.__name__, None)
    ) or (func.__module__ == "torch._tensor" and func.__qualname__ == f"Tensor.{func.__name__}"):
        return f"torch.Tensor.{func.__name__}"
    module = func.__module__
    if module is None:  # some torch builtins carry no __module__: find where torch exports them
        for guess in (torch, torch.nn.functional):
            if getattr(guess, func.__name__, None) is func:
                module = guess.__name__
    return f"{module.replace('torch._ops', 'torch.ops')}.{func.__name__}"


def _format_arg(arg) -> str:
    if isinstance(arg, list):
        return "[" + ", ".join(_format_arg(a) for a in arg) + "]"
    if isinstance(arg, tuple):
        return "(" + ", ".join(_format_arg(a) for a in arg) + ("," if len(arg) == 1 else "") + ")"
    if isinstance(arg, dict):
        return "{" + ", ".join(f"{k}: {_format_arg(v)}" for k, v in arg.items()) + "}"
    return "%" + str(arg) if isinstance(arg, Node) else str(arg)


class Node:
    """One operation: `op` says how to read `target` (see torch's Node docstring).

    placeholder: a function input named `target`; get_attr: fetch the qualified attribute `target`
    of the root module; call_function: `target(*args, **kwargs)`; call_method:
    `args[0].target(*args[1:], **kwargs)`; call_module: `root.<target>(*args, **kwargs)`;
    output: return `args[0]`.
    """

    def __init__(self, graph, name, op, target, args, kwargs, return_type=None):
        if op == "call_function" and not callable(target):
            raise ValueError(
                f"Node '{name}': call_function target {target!r} has type "
                f"{torch.typename(target)} but a Callable is expected"
            )
        if op not in (*_legal_ops, "root"):
            raise AssertionError(f"op '{op}' is not one of {_legal_ops}")
        if op != "call_function" and not isinstance(target, str):
            raise ValueError(f"Node '{name}': {op} target {target!r} must be a str")
        self.graph, self.name, self.op, self.target, self.type = (
            graph,
            name,
            op,
            target,
            return_type,
        )
        self._prev = self._next = self  # a lone ring until a graph splices it in
        self._erased = False
        self._input_nodes: dict[Node, None] = {}
        self.users: dict[Node, None] = {}
        self._repr_fn = None  # codegen renames nodes in its own namespace through this hook
        self.meta: dict = {}
        self._args, self._kwargs = (), {}
        self._update_args_kwargs(args, kwargs)

    # -- the linked list (torch/csrc/fx/node.cpp: _prepend, _remove_from_list) --
    @property
    def next(self):
        return self._next

    @property
    def prev(self):
        return self._prev

    def prepend(self, x: "Node") -> None:
        """Insert `x` just before this node (moving it if it is already in the list)."""
        if x is self:
            return
        x._remove_from_list()
        p = self._prev
        p._next, x._prev = x, p
        x._next, self._prev = self, x

    def append(self, x: "Node") -> None:
        """Insert `x` just after this node."""
        self._next.prepend(x)

    def _remove_from_list(self) -> None:
        p, n = self._prev, self._next
        p._next, n._prev = n, p

    # -- arguments and the use-def chain --
    @property
    def args(self) -> tuple:
        return self._args

    @args.setter
    def args(self, a) -> None:
        self._update_args_kwargs(a, self._kwargs)

    @property
    def kwargs(self) -> dict:
        return self._kwargs

    @kwargs.setter
    def kwargs(self, k) -> None:
        self._update_args_kwargs(self._args, k)

    @property
    def all_input_nodes(self) -> list:
        return list(self._input_nodes)

    def _update_args_kwargs(self, new_args, new_kwargs) -> None:
        self._args, self._kwargs = tuple(new_args), dict(new_kwargs)
        for old_use in self._input_nodes:
            old_use.users.pop(self)
        self._input_nodes = {}
        map_arg((self._args, self._kwargs), self._input_nodes.setdefault)
        for new_use in self._input_nodes:
            new_use.users.setdefault(self)

    def replace_input_with(self, old_input: "Node", new_input: "Node") -> None:
        swap = lambda n: new_input if n is old_input else n
        self._update_args_kwargs(map_arg(self._args, swap), map_arg(self._kwargs, swap))

    def replace_all_uses_with(self, replace_with: "Node") -> list:
        """Make every user of this node read `replace_with` instead; returns those users."""
        to_process = list(self.users)
        for use_node in to_process:
            use_node.replace_input_with(self, replace_with)
        return to_process

    def is_impure(self) -> bool:
        """Whether dead-code elimination must keep this node although nothing reads it.

        As torch: placeholders and outputs; call_function targets in the side-effect and
        random sets or with a mutable ATen schema; call_module whose module sets `_is_impure`.
        Like torch, a call_method (even `x.add_(1)`) is pure: FX's purity check is a heuristic.
        """
        if self.op in ("placeholder", "output"):
            return True
        if self.op == "call_module":
            if self.graph.owning_module is None:
                raise AssertionError("self.graph.owning_module not set for purity check")
            return getattr(self.graph.owning_module.get_submodule(self.target), "_is_impure", False)
        if self.op == "call_function":
            t = self.target
            if isinstance(t, torch._ops.OpOverloadPacket):
                t = t.default
            schema = getattr(t, "_schema", None)
            if schema is not None and schema.is_mutable:
                return True
            if getattr(t, "_nondeterministic_seeded", False):
                return True
            return t in _side_effectful_functions or t in _RANDOM_FUNCTIONS
        return False

    # -- printing --
    def __repr__(self) -> str:
        return self._repr_fn(self) if self._repr_fn else self.name

    @staticmethod
    def _pretty_print_target(target) -> str:
        if isinstance(target, str):
            return target
        if target.__module__ == "builtins":
            return f"builtins.{target.__name__}"
        if target.__module__ == "_operator":
            return f"operator.{target.__name__}"
        return _get_qualified_name(target)

    def format_node(self) -> str:
        """One line of `print(graph)`: `%add : [num_users=1] = call_function[...](...)`."""
        head = f"%{self.name} : [num_users={len(self.users)}] = {self.op}"
        if self.op == "placeholder":
            default = f"(default={self.args[0]})" if self.args else ""
            typ = f"{_type_repr(self.type)} " if self.type else ""
            return f"%{self.name} : {typ}[num_users={len(self.users)}] = placeholder[target={self.target}]{default}"
        if self.op == "get_attr":
            return f"{head}[target={self.target}]"
        if self.op == "output":
            return f"return {self.args[0]}"
        target = self._pretty_print_target(self.target)
        return f"{head}[target={target}](args = {_format_arg(self.args)}, kwargs = {_format_arg(self.kwargs)})"


def _type_repr(obj) -> str:
    """A short, importable spelling of a type annotation (node.py `_type_repr`)."""
    if isinstance(obj, type) and not isinstance(obj, types.GenericAlias):
        return (
            obj.__qualname__
            if obj.__module__ == "builtins"
            else f"{obj.__module__}.{obj.__qualname__}"
        )
    return repr(obj)

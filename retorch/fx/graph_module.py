"""GraphModule: an nn.Module whose forward is Python code generated from a Graph.

Mirrors torch/fx/graph_module.py at torch v2.13.0: a class of its own per instance (`__new__`),
`_copy_attr` of the submodules, parameters and buffers the graph's get_attr/call_module nodes
name, the `graph` setter that recompiles, `recompile()` (exec of `Graph.python_code`), `.code`,
`print_readable`, `__str__` and `__deepcopy__` (through `Graph.__deepcopy__`). Left out: pickling, `to_folder`, the `_WrappedCall` error
rewriting and the lazy (`_LazyGraphModule`) variant.
"""

import copy
import itertools
import linecache

import torch

from .graph import Graph

_eval_keys = itertools.count()


def _copy_attr(from_module, to_module, target: str) -> None:
    """Install `from_module.<target>` at the same path in `to_module` (empty Modules between)."""
    *prefix, field = target.split(".")
    for item in prefix:
        f, t = getattr(from_module, item), getattr(to_module, item, None)
        if f is t:
            return  # a parent was already installed, with all its children
        if t is None:
            t = torch.nn.Module()
            setattr(to_module, item, t)
        from_module, to_module = f, t
    orig = getattr(from_module, field)
    if isinstance(orig, torch.Tensor) and not isinstance(orig, torch.nn.Parameter):
        to_module.register_buffer(field, orig)
    else:
        setattr(to_module, field, orig)


def _assign_attr(from_obj, to_module, target: str) -> None:
    """Install `from_obj` at `target` in `to_module` (a dict root's entries)."""
    *prefix, field = target.split(".")
    for item in prefix:
        t = getattr(to_module, item, None)
        if t is None:
            t = torch.nn.Module()
            setattr(to_module, item, t)
        to_module = t
    if isinstance(from_obj, torch.Tensor) and not isinstance(from_obj, torch.nn.Parameter):
        to_module.register_buffer(field, from_obj)
    else:
        setattr(to_module, field, from_obj)


def _get_attr(model, attr_name: str):
    for atom in attr_name.split("."):
        model = getattr(model, atom)
    return model


class GraphModule(torch.nn.Module):
    """nn.Module generated from a Graph: `graph`, `code`, and `forward` compiled from `code`."""

    def __new__(cls, *args, **kwargs):
        # Each instance gets its own class, so recompile() can set `forward` on it alone.
        for t in cls.__mro__:
            if t.__qualname__.split(".")[-1] != "GraphModuleImpl":
                cls = t
                break

        class GraphModuleImpl(cls):
            pass

        return super().__new__(GraphModuleImpl)

    def __init__(self, root, graph: Graph, class_name: str = "GraphModule"):
        super().__init__()
        self.__class__.__name__ = class_name
        if isinstance(root, torch.nn.Module):
            self.training = root.training
            if isinstance(root, _CodeOnlyModule):  # a deepcopy: keep every submodule and tensor
                for k in [*dict(root.named_children()), *dict(root.named_buffers()),
                          *dict(root.named_parameters())]:  # fmt: skip
                    _copy_attr(root, self, k)
            for node in graph.nodes:
                if node.op in ("get_attr", "call_module"):
                    _copy_attr(root, self, node.target)
        elif isinstance(root, dict):
            for node in graph.nodes:
                if node.op in ("get_attr", "call_module"):
                    if node.target not in root:
                        raise RuntimeError(f"Node {node} referenced target {node.target} but "
                                           "that target was not provided in ``root``!")  # fmt: skip
            targets = sorted({n.target for n in graph.nodes if n.op in ("get_attr", "call_module")},
                             key=lambda t: t.count("."))  # fmt: skip
            for target in targets:
                _assign_attr(root[target], self, target)
        else:
            raise RuntimeError(f"Unsupported type {root} passed for root!")
        self.graph = graph
        self.meta: dict = {}

    @property
    def graph(self) -> Graph:
        return self._graph

    @graph.setter
    def graph(self, g: Graph) -> None:
        self._graph = g
        g.owning_module = self
        self.recompile()

    @property
    def code(self) -> str:
        return self._code

    def recompile(self):
        """Regenerate `code` from the graph and install it as this instance's `forward`."""
        python_code = self._graph.python_code(root_module="self")
        self._code = python_code.src
        globals_ = dict(python_code.globals)
        # As torch's _EvalCacheLoader: a numbered file name, its source in linecache, so
        # tracebacks through forward show the generated lines.
        key = f"<eval_with_key>.{next(_eval_keys)}"
        linecache.cache[key] = (len(self._code), None, self._code.splitlines(True), key)
        exec(compile(self._code, key, "exec"), globals_)
        type(self).forward = globals_["forward"]
        return python_code

    def __deepcopy__(self, memo):
        # The default would copy the class-less state and lose the generated forward.
        res = type(self).__new__(type(self))
        memo[id(self)] = res
        fake_mod = _CodeOnlyModule(copy.deepcopy(self.__dict__, memo))
        GraphModule.__init__(res, fake_mod, fake_mod.__dict__["_graph"])
        res.meta = copy.deepcopy(self.meta, memo)
        return res

    def print_readable(self, print_output: bool = True) -> str:
        """The code as a class, annotated with tensor_meta shapes where ShapeProp left them."""
        src = self._graph.python_code(root_module="self", verbose=True).src.lstrip("\n")
        src = f"class {self._get_name()}(torch.nn.Module):\n" + "\n".join(
            ("    " + line) if line.strip() else line for line in src.split("\n")
        )
        if print_output:
            print(src)
        return src

    def __str__(self) -> str:
        reminder = "# To see more debug info, please use `graph_module.print_readable()`"
        return "\n".join([super().__str__(), self._code, reminder])


class _CodeOnlyModule(torch.nn.Module):
    """A module made straight from a copied `__dict__`, as deepcopy rebuilds a GraphModule."""

    def __init__(self, body: dict):
        super().__init__()
        self.__dict__ = body

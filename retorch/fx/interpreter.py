"""Interpreter and Transformer: run a Graph node by node, or re-trace it into a new one.

Mirrors torch/fx/interpreter.py at torch v2.13.0: `Interpreter.run` (an env from node to value,
values dropped after their last use), `run_node` dispatching on `node.op` to `placeholder`,
`get_attr`, `call_function`, `call_method`, `call_module` and `output`, `fetch_attr`; and
`Transformer`, whose handlers return Proxies of a tracer that writes a fresh graph.
"""

import inspect

import torch

from .graph import Graph
from .graph_module import GraphModule
from .node import map_aggregate, map_arg
from .proxy import Proxy
from .symbolic_trace import Tracer


class Interpreter:
    """Executes `module.graph` on concrete values; override a handler to change one op kind."""

    def __init__(self, module: torch.nn.Module, garbage_collect_values: bool = True, graph=None):
        self.module = module
        self.graph = graph if graph is not None else module.graph
        self.env: dict = {}
        self.garbage_collect_values = garbage_collect_values
        self.user_to_last_uses: dict = {}
        seen = set()
        for node in reversed(self.graph.nodes):
            for n in node._input_nodes:
                if n not in seen:
                    seen.add(n)
                    self.user_to_last_uses.setdefault(node, []).append(n)

    def run(self, *args, initial_env=None):
        self.env = initial_env if initial_env is not None else {}
        self.args_iter = iter(args)
        for node in self.graph.nodes:
            if node in self.env:
                continue
            self.env[node] = self.run_node(node)
            if self.garbage_collect_values:
                for to_delete in self.user_to_last_uses.get(node, []):
                    del self.env[to_delete]
            if node.op == "output":
                return self.env[node]

    def run_node(self, n):
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        return getattr(self, n.op)(n.target, args, kwargs)

    def placeholder(self, target, args, kwargs):
        if target.startswith("*"):
            return list(self.args_iter)
        try:
            return next(self.args_iter)
        except StopIteration as si:
            if args:
                return args[0]  # the parameter's default
            raise RuntimeError(f"Expected positional argument for parameter {target}, but one "
                               "was not passed in!") from si  # fmt: skip

    def get_attr(self, target, args, kwargs):
        return self.fetch_attr(target)

    def call_function(self, target, args, kwargs):
        return target(*args, **kwargs)

    def call_method(self, target, args, kwargs):
        self_obj, *args_tail = args
        return getattr(self_obj, target)(*args_tail, **kwargs)

    def call_module(self, target, args, kwargs):
        return self.fetch_attr(target)(*args, **kwargs)

    def output(self, target, args, kwargs):
        return args[0]

    def fetch_attr(self, target: str):
        attr_itr = self.module
        atoms = target.split(".")
        for i, atom in enumerate(atoms):
            if not hasattr(attr_itr, atom):
                raise RuntimeError(f"Node referenced nonexistent target {'.'.join(atoms[: i + 1])}")
            attr_itr = getattr(attr_itr, atom)
        return attr_itr

    def fetch_args_kwargs_from_env(self, n):
        def load_arg(a):
            if a not in self.env:
                raise RuntimeError(f"Node {n} referenced nonexistent value {a}! Run Graph.lint() "
                                   "to diagnose such issues")  # fmt: skip
            return self.env[a]

        return map_arg(n.args, load_arg), map_arg(n.kwargs, load_arg)


class _TransformerTracer(Tracer):
    def __init__(self, graph: Graph):
        super().__init__()
        self.graph = graph

    def is_leaf_module(self, m, module_qualified_name) -> bool:
        return True  # re-record module calls as they are; never trace into them again


class Transformer(Interpreter):
    """Runs the graph on Proxies: each handler's result is recorded into `new_graph`."""

    def __init__(self, module: GraphModule):
        super().__init__(module)
        self.new_graph = Graph()
        self.tracer = _TransformerTracer(self.new_graph)
        self.tracer.root = module

    def placeholder(self, target, args, kwargs) -> Proxy:
        default = next(iter(args)) if args else inspect.Signature.empty
        return Proxy(self.new_graph.placeholder(target, default_value=default), self.tracer)

    def get_attr(self, target, args, kwargs) -> Proxy:
        return self.tracer.create_proxy("get_attr", target, args, kwargs)

    def call_module(self, target, args, kwargs):
        submod = self.fetch_attr(target)
        return self.tracer.call_module(submod, submod.forward, args, kwargs)

    def call_function(self, target, args, kwargs):
        return self.tracer.create_proxy("call_function", target, args, kwargs)

    def transform(self) -> GraphModule:
        result = super().run()
        if result is not None:
            strip = lambda a: a.node if isinstance(a, Proxy) else a
            self.new_graph.output(map_aggregate(result, strip))
        return GraphModule(self.module, self.new_graph)

"""Proxy: the stand-in value that records every operation it meets into a Graph.

Mirrors torch/fx/proxy.py at torch v2.13.0: `TracerBase.create_proxy`/`create_arg`/`to_bool`/
`iter`, `GraphAppendingTracer`, `TraceError`, `Proxy` (operators from graph.py's
`magic_methods`, reflected ones as `__radd__`..., attribute access as a lazy `Attribute` that
becomes `getattr` or a `call_method`, `__torch_function__` so `torch.relu(proxy)` records a
call_function), and `Attribute`.
"""

import dis
import inspect
import operator
from bisect import bisect_left

import torch

from .graph import Graph, magic_methods, reflectable_magic_methods
from .node import Node, map_aggregate

# node.py `base_types`: leaves an argument may hold as they are.
base_types = (str, int, float, bool, complex, torch.dtype, torch.Tensor, torch.device,
              torch.memory_format, torch.layout)  # fmt: skip


class TraceError(ValueError):
    """Raised when tracing meets what a graph cannot hold (data-dependent control flow)."""


class TracerBase:
    """Turns Python values into node arguments and nodes into Proxies."""

    graph: Graph

    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None) -> Node:
        return self.graph.create_node(kind, target, args, kwargs, name, type_expr)

    def proxy(self, node: Node) -> "Proxy":
        return Proxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None) -> "Proxy":
        """Record `target(*args, **kwargs)` as a node and hand back its Proxy."""
        args_, kwargs_ = self.create_arg(args), self.create_arg(kwargs)
        return self.proxy(self.create_node(kind, target, args_, kwargs_, name, type_expr))

    def create_arg(self, a):
        """Lower a traced-program value into something a node may store (Proxies -> Nodes)."""
        if isinstance(a, Proxy):
            return a.node
        if isinstance(a, tuple) and hasattr(a, "_fields"):
            return type(a)(*(self.create_arg(e) for e in a))
        if isinstance(a, (tuple, list)):
            return type(a)(self.create_arg(e) for e in a)
        if isinstance(a, dict):
            return {k: self.create_arg(v) for k, v in a.items()}
        if isinstance(a, slice):
            return slice(self.create_arg(a.start), self.create_arg(a.stop), self.create_arg(a.step))
        if isinstance(a, range):
            return range(self.create_arg(a.start), self.create_arg(a.stop), self.create_arg(a.step))
        if isinstance(a, base_types) or a is None or a is ...:
            return a
        raise NotImplementedError(f"argument of type: {type(a)}")

    def to_bool(self, obj: "Proxy") -> bool:
        raise TraceError("symbolically traced variables cannot be used as inputs to control flow")

    def iter(self, obj: "Proxy"):
        raise TraceError(
            "Proxy object cannot be iterated. This can be attempted when the Proxy is used in a "
            "loop or as a *args or **kwargs function argument. See the torch.fx docs on "
            "pytorch.org for a more detailed explanation of what types of control flow can be "
            "traced, and check out the Proxy docstring for help troubleshooting Proxy iteration "
            "errors"
        )


class GraphAppendingTracer(TracerBase):
    """The tracer of a Proxy built by hand around a node: it appends to that node's graph."""

    def __init__(self, graph: Graph):
        self.graph = graph


class Proxy:
    """A Node wrapper that flows through the traced program, recording what touches it."""

    def __init__(self, node: Node, tracer: TracerBase | None = None):
        self.tracer = tracer if tracer is not None else GraphAppendingTracer(node.graph)
        self.node = node

    def __repr__(self) -> str:
        return f"Proxy({self.node.name})"

    def __getattr__(self, k: str) -> "Attribute":
        return Attribute(self, k)  # `x.shape` or the start of `x.sum(...)`: decided on use

    def __call__(self, *args, **kwargs) -> "Proxy":
        return self.tracer.create_proxy("call_method", "__call__", (self, *args), kwargs)

    def __iter__(self):
        # `a, b = proxy` unpacks a known count: read it from the caller's UNPACK_SEQUENCE.
        frame = inspect.currentframe().f_back
        insts = list(dis.get_instructions(frame.f_code))
        inst = insts[bisect_left(insts, frame.f_lasti, key=lambda i: i.offset)]
        if inst.opname == "UNPACK_SEQUENCE":
            return (self[i] for i in range(inst.argval))
        return self.tracer.iter(self)

    def __abs__(self) -> "Proxy":
        return self.tracer.create_proxy("call_function", operator.abs, (self,), {})

    def __bool__(self) -> bool:
        return self.tracer.to_bool(self)

    def __len__(self) -> int:
        raise RuntimeError(
            "'len' is not supported in symbolic tracing by default. If you want this call to be "
            "recorded, please call retorch.fx.wrap('len') at module scope"
        )

    @classmethod
    def __torch_function__(cls, orig_method, types, args=None, kwargs=None) -> "Proxy":
        args, kwargs = args or (), kwargs or {}
        tracers = {}
        map_aggregate(
            (args, kwargs), lambda a: tracers.setdefault(a.tracer) if isinstance(a, cls) else a
        )
        if len(tracers) > 1:
            raise RuntimeError(f"Found multiple different tracers {list(tracers)} while trying to "
                               f"trace operations {orig_method}")  # fmt: skip
        tracer = next(iter(tracers))
        if torch.overrides.is_tensor_method_or_property(orig_method):
            return tracer.create_proxy("call_method", orig_method.__name__, args, kwargs)
        name = tracer.graph._target_to_str(orig_method.__name__)
        return tracer.create_proxy("call_function", orig_method, args, kwargs, name=name)


class Attribute(Proxy):
    """`proxy.attr`: a `call_method` if called, else (on first use) a `getattr` node."""

    def __init__(self, root: Proxy, attr: str):
        self.root, self.attr, self.tracer = root, attr, root.tracer
        self._node = None

    @property
    def node(self) -> Node:
        if self._node is None:
            self._node = self.tracer.create_proxy(
                "call_function", getattr, (self.root, self.attr), {}
            ).node
        return self._node

    def __call__(self, *args, **kwargs) -> Proxy:
        return self.tracer.create_proxy("call_method", self.attr, (self.root, *args), kwargs)


# Set after the class is made, as torch does: defining __eq__ in the body would make
# Proxy unhashable, and tracers keep Proxies in dicts.
def _scope(method: str) -> None:
    def impl(*args, **kwargs):
        return args[0].tracer.create_proxy("call_function", getattr(operator, method), args, kwargs)

    impl.__name__ = method
    setattr(Proxy, f"__{method.strip('_')}__", impl)


def _define_reflectable(orig_method_name: str) -> None:
    method_name = f"__r{orig_method_name.strip('_')}__"

    def impl(self, rhs):
        target = getattr(operator, orig_method_name)
        return self.tracer.create_proxy("call_function", target, (rhs, self), {})

    impl.__name__ = impl.__qualname__ = method_name
    setattr(Proxy, method_name, impl)


for _method in magic_methods:
    _scope(_method)
for _method in reflectable_magic_methods:
    _define_reflectable(_method)

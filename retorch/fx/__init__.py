"""retorch.fx: FX rebuilt (torch/fx): symbolic tracing to a graph IR, codegen, interpretation, passes.

Layering: this package sits on the compiler layer; it imports torch (it traces real torch
modules) and nothing else of retorch.
"""

from .graph import Graph
from .graph_module import GraphModule
from .interpreter import Interpreter, Transformer
from .node import Node, map_arg
from .proxy import Proxy, TraceError
from .symbolic_trace import PH, Tracer, symbolic_trace, wrap

__all__ = ["Graph", "GraphModule", "Interpreter", "Node", "PH", "Proxy", "TraceError",
           "Tracer", "Transformer", "map_arg", "symbolic_trace", "wrap"]  # fmt: skip

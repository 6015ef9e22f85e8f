"""retorch.fx: torch.fx rebuilt: symbolic tracing to a graph IR, codegen, interpretation, passes.

Each file names the torch v2.13.0 file it mirrors:

| retorch/fx/              | torch/fx/                                        |
| ------------------------ | ------------------------------------------------ |
| node.py                  | node.py (+ the C++ half, torch/csrc/fx/node.cpp) |
| graph.py                 | graph.py (Graph, _Namespace, CodeGen, DCE, lint) |
| proxy.py                 | proxy.py                                         |
| symbolic_trace.py        | _symbolic_trace.py                               |
| graph_module.py          | graph_module.py                                  |
| interpreter.py           | interpreter.py                                   |
| subgraph_rewriter.py     | subgraph_rewriter.py                             |
| passes/matcher_utils.py  | passes/utils/matcher_utils.py                    |
| passes/shape_prop.py     | passes/shape_prop.py                             |
| passes/cse_pass.py       | passes/dialect/common/cse_pass.py                |
| passes/const_fold.py     | experimental/const_fold.py                       |

Layering: the compiler layer sits on torch; it imports torch (it traces real torch modules)
and nothing else of retorch (tests/test_fx.py checks).
"""

from .graph import Graph
from .graph_module import GraphModule
from .interpreter import Interpreter, Transformer
from .node import Node, map_arg
from .proxy import Proxy, TraceError
from .symbolic_trace import PH, Tracer, symbolic_trace, wrap

__all__ = ["Graph", "GraphModule", "Interpreter", "Node", "PH", "Proxy", "TraceError",
           "Tracer", "Transformer", "map_arg", "symbolic_trace", "wrap"]  # fmt: skip

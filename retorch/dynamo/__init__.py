"""retorch.dynamo: torch._dynamo rebuilt: capture FX graphs from a function's bytecode.

Each file names the torch v2.13.0 file it mirrors:

| retorch/dynamo/        | torch/_dynamo/                                           |
| ---------------------- | -------------------------------------------------------- |
| eval_frame.py          | eval_frame.py (+ torch/csrc/dynamo/eval_frame.c's hook)  |
| convert_frame.py       | convert_frame.py (+ cache entries, codegen.py's rebuild) |
| symbolic_convert.py    | symbolic_convert.py                                      |
| variables.py           | variables/ (base, constant, tensor, lists, torch, ...)   |
| output_graph.py        | output_graph.py                                          |
| guards.py              | guards.py                                                |
| source.py              | source.py                                                |
| resume_execution.py    | resume_execution.py, bytecode_transformation.py          |
| exc.py                 | exc.py                                                   |
| debugging.py           | backends/debugging.py (explain)                          |
| testing.py             | testing.py (CompileCounter)                              |

Python: CPython 3.11 and 3.12 bytecode (the opcode subset is listed in symbolic_convert.py);
both are tested (tests/test_dynamo*.py run under either). Graphs are retorch.fx GraphModules.
"""

from .debugging import ExplainOutput, explain
from .eval_frame import OptimizedFunction, compile, optimize
from .exc import Unsupported
from .testing import CompileCounter

__all__ = ["CompileCounter", "ExplainOutput", "OptimizedFunction", "Unsupported", "compile",
           "explain", "optimize"]  # fmt: skip

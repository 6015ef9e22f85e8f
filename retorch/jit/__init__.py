"""retorch.jit: TorchScript's tracer rebuilt, recording into a retorch.fx Graph.

| retorch/jit/ | torch (v2.13.0)                                                       |
| ------------ | --------------------------------------------------------------------- |
| _trace.py    | torch/jit/_trace.py (`trace`, `TracerWarning`) and the recording half  |
|              | of torch/csrc/jit/frontend/tracer.cpp                                  |

`torch.jit.script` (torch/jit/_script.py, a compiler for a typed subset of Python) is not
rebuilt: the chapter runs torch's to contrast it with tracing.
"""

from ._trace import TracerWarning, trace

__all__ = ["TracerWarning", "trace"]

"""retorch.lazy: Lazy Tensor rebuilt: record ops as IR, compile and run the graph at a step.

| retorch/lazy/           | torch (v2.13.0)                                                 |
| ----------------------- | --------------------------------------------------------------- |
| ir.py                   | torch/csrc/lazy/core/ir.h, ir.cpp (Node, Value, shapes)          |
| tensor.py               | torch/csrc/lazy/core/tensor.cpp, tensor_impl.cpp (LazyTensor)    |
| lazy_graph_executor.py  | torch/csrc/lazy/core/lazy_graph_executor.cpp (sync, cache) and   |
|                         | torch/csrc/lazy/ts_backend/ts_lowering_context.cpp (lowering)    |
| metrics.py              | torch/_lazy/metrics.py (counters)                                |
| debug.py                | torch/_lazy/debug.py, torch/csrc/lazy/core/ir_dump_util.cpp      |

torch's lazy tensors live on a `lazy` device, a dispatch key of their own; these are a
`torch.Tensor` subclass with `__torch_dispatch__`, on the meta device (they hold no data).
"""

from . import debug, metrics
from .lazy_graph_executor import mark_step, sync
from .tensor import LazyTensor, to_lazy

__all__ = ["LazyTensor", "debug", "mark_step", "metrics", "sync", "to_lazy"]

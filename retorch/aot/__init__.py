"""retorch.aot: AOTAutograd rebuilt: a joint forward+backward graph, functionalized, partitioned.

Each file names the torch v2.13.0 file it mirrors:

| retorch/aot/          | torch/                                                          |
| --------------------- | --------------------------------------------------------------- |
| graph_capture.py      | _functorch/_aot_autograd/graph_capture_wrappers.py (create_joint), |
|                       | _functorch/_aot_autograd/graph_capture.py,                      |
|                       | fx/experimental/proxy_tensor.py (make_fx)                       |
| functional_utils.py   | _functorch/_aot_autograd/functional_utils.py,                   |
|                       | _subclasses/functional_tensor.py                                |
| partitioners.py       | _functorch/partitioners.py (default_partition, min-cut's role)  |
| min_cut.py            | _functorch/partitioners.py (min_cut_rematerialization_partition, |
|                       | solve_min_cut), _functorch/compile_utils.py (fx_graph_cse)      |
| aot_autograd.py       | _functorch/aot_autograd.py (aot_function),                      |
|                       | _functorch/_aot_autograd/runtime_wrappers.py (CompiledFunction) |

Graphs are retorch.fx Graphs and GraphModules. Layering: the compiler layer, on torch and
retorch.fx only.
"""

from .aot_autograd import AOTCompiled, aot_function
from .functional_utils import functionalize
from .graph_capture import JointGraph, trace_joint
from .min_cut import min_cut_partition, min_cut_rematerialization_partition
from .partitioners import (
    RECOMPUTABLE_OPS,
    ban_reasons,
    default_partition,
    recompute_partition,
    saved_values,
)

__all__ = ["AOTCompiled", "JointGraph", "RECOMPUTABLE_OPS", "aot_function", "ban_reasons",
           "default_partition", "min_cut_partition", "min_cut_rematerialization_partition",
           "functionalize", "recompute_partition", "saved_values", "trace_joint"]  # fmt: skip

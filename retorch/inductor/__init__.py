"""retorch.inductor: TorchInductor rebuilt: loop-level IR, fusion, Numba and Numba-CUDA code.

Each file names the torch v2.13.0 file it mirrors:

| retorch/inductor/     | torch/_inductor/                                              |
| --------------------- | ------------------------------------------------------------- |
| virtualized.py        | virtualized.py (V.ops), ops_handler.py                        |
| ir.py                 | ir.py (Pointwise, Reduction, ComputedBuffer, views)           |
| decomposition.py      | decomposition.py (select_decomp_table)                        |
| lowering.py           | lowering.py (lowerings, make_pointwise, make_fallback)        |
| graph.py              | graph.py (GraphLowering)                                      |
| scheduler.py          | scheduler.py (Scheduler, fuse_nodes, can_fuse)                |
| codegen/common.py     | codegen/common.py (CSE, the kernel's ops handler)             |
| codegen/simd.py       | codegen/simd.py (SIMDKernel)                                  |
| codegen/cpp.py        | codegen/cpp.py (CppKernel: Numba on the CPU here)             |
| codegen/triton.py     | codegen/triton.py (TritonKernel: Numba-CUDA here)             |
| codegen/wrapper.py    | codegen/wrapper.py (PythonWrapperCodegen)                     |
| runtime/cpu_helpers.py| runtime/triton_helpers.py's role                              |
| compile_fx.py         | compile_fx.py (compile_fx, compile_fx_inner)                  |
| debug.py              | debug.py, utils.py (run_and_get_code)                         |

Layering: the compiler layer, on torch, numba and retorch.cuda only.
"""

from .compile_fx import (
    CompiledGraph,
    compile_fx,
    compile_graph,
    compiled_graphs,
    last_compile,
    reset,
)
from .debug import inductor_code, ir_text

__all__ = ["CompiledGraph", "compile_fx", "compile_graph", "compiled_graphs", "inductor_code",
           "ir_text", "last_compile", "reset"]  # fmt: skip

"""retorch.export: torch.export rebuilt: a whole-program aten graph with its state lifted to
inputs, a signature, symbolic dims with ranges, and a small serialized format.

Each file names the torch v2.13.0 file it mirrors:

| retorch/export/       | torch/                                                     |
| --------------------- | ---------------------------------------------------------- |
| _trace.py             | export/_trace.py (export, lifting, the signature's specs)  |
| exported_program.py   | export/exported_program.py, export/_unlift.py (module())   |
| graph_signature.py    | export/graph_signature.py                                  |
| dynamic_shapes.py     | export/dynamic_shapes.py, export/_unlift.py (guards)       |
| serde/serialize.py    | _export/serde/serialize.py, _export/serde/schema.py        |

The graph is a retorch.fx Graph traced by retorch.aot's tracer. Layering: the compiler layer,
on torch, retorch.fx and retorch.aot only.
"""

from ._trace import export
from .dynamic_shapes import INF
from .exported_program import (
    ExportedProgram,
    aten_op_counts,
    dynamic_dims,
    format_signature,
    range_constraints_of,
)
from .graph_signature import (
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    from_torch,
    signature_rows,
)
from .serde.serialize import FORMAT_VERSION, load, save

__all__ = ["ExportGraphSignature", "ExportedProgram", "FORMAT_VERSION", "INF", "InputKind",
           "InputSpec", "OutputKind", "OutputSpec", "aten_op_counts", "dynamic_dims", "export",
           "format_signature", "from_torch", "load", "range_constraints_of", "save",
           "signature_rows"]  # fmt: skip

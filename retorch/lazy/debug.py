"""`dump_ir`: the IR of some lazy tensors as text (torch/_lazy/debug.py dump_ir "text").

Mirrors torch/csrc/lazy/core/ir_dump_util.cpp (`DumpUtil::ToText`) at torch v2.13.0: one
line per node in post-order, `%n = [Float[2,3]] aten::mm(%0, %1)`, the roots marked
`ROOT=i`. torch prints a node's non-tensor arguments as named attributes after the call
(`dim=0, keepdim=0`); here they stay in place among the operands.
"""

from . import ir

_DTYPES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
           "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
           "bool": "Bool"}  # fmt: skip


def shape_text(meta) -> str:
    """`Float[2,3]`, as torch's lazy Shape prints."""
    dtype = _DTYPES.get(str(meta.dtype).removeprefix("torch."), str(meta.dtype))
    return f"{dtype}[{','.join(str(s) for s in meta.shape)}]"


def to_text(roots: list) -> str:
    order = ir.post_order(roots)
    number = {id(n): i for i, n in enumerate(order)}
    root_of = {}
    for i, r in enumerate(roots):
        root_of.setdefault(id(r.node), i)

    def arg(a) -> str:
        if isinstance(a, ir.Value):
            return f"%{number[id(a.node)]}" + (f".{a.index}" if a.node.multi else "")
        if isinstance(a, (list, tuple)):
            return "[" + ", ".join(arg(x) for x in a) + "]"
        return repr(a)

    lines = []
    for n in order:
        args = [arg(a) for a in n.args] + [f"{k}={arg(v)}" for k, v in n.kwargs.items()]
        shapes = ", ".join(shape_text(m) for m in n.metas)
        root = f", ROOT={root_of[id(n)]}" if id(n) in root_of else ""
        lines.append(f"  %{number[id(n)]} = [{shapes}] {n.name}({', '.join(args)}){root}")
    return "IR {\n" + "\n".join(lines) + "\n}\n"


def dump_ir(tensors, ir_format: str = "text") -> str:
    """The pending IR of `tensors` (torch._lazy.debug.dump_ir(tensors, "text"))."""
    if ir_format != "text":
        raise RuntimeError(f"Unrecognized IR format: {ir_format}; the rebuild writes 'text'")
    return to_text([t.value for t in tensors])

"""The wrapper: Python that allocates buffers and calls kernels and fallbacks in order.

Mirrors torch/_inductor/codegen/wrapper.py (``PythonWrapperCodegen``): torch's output code is a
module whose ``call(args)`` unpacks the inputs, allocates each buffer (``empty_strided``),
launches each kernel, calls each extern (fallback) kernel and returns the outputs. Ours is the
same, with kernels that take flat NumPy views of torch tensors (zero-copy on the CPU).
"""

from __future__ import annotations

import torch

from .. import ir
from ..scheduler import FusedKernel


def flat_cpu(t: torch.Tensor):
    """A flat NumPy view of a contiguous CPU tensor: the kernel writes into the tensor itself."""
    return t.detach().reshape(-1).numpy()


def flat_cuda(t: torch.Tensor):
    """On a GPU a device array over the tensor's memory; under the simulator a NumPy view."""
    if t.is_cuda:
        from numba import cuda

        return cuda.as_cuda_array(t.detach().reshape(-1))
    return flat_cpu(t)


def contiguous(t):
    return t.contiguous() if isinstance(t, torch.Tensor) else t


def render(x) -> str:
    """A fallback's argument as wrapper code: buffers by name, views replayed with aten."""
    if isinstance(x, ir.Buffer):
        return x.name
    if isinstance(x, ir.ReinterpretView):
        return f"{x.buffer.name}.view({list(x.size)})"
    if isinstance(x, ir.View):
        op, arg = x.replay
        return f"{op}({render(x.data)}, {arg!r})"
    if isinstance(x, (list, tuple)):
        inner = ", ".join(render(a) for a in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner},)"
    if isinstance(x, torch.dtype):
        return str(x)
    if isinstance(x, torch.device):
        return f"torch.device({str(x)!r})"
    return repr(x)


def wrap(head, items, tail, width=100) -> str:
    """``head + items + tail`` on one line, or one item a line when that is over ``width``."""
    line = head + ", ".join(items) + tail
    if len(line) <= width:
        return line
    return head + "".join(f"\n        {item}," for item in items) + "\n    " + tail


def generate_wrapper(graph, steps, kernels: dict, device: str) -> str:
    """``def call(args): ...`` for ``steps`` (FusedKernels and FallbackKernels in order)."""
    names = [b.name for b in graph.graph_inputs]
    lines = ["def call(args):", f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args"]
    lines += [f"    {n} = contiguous({n})" for n in names]
    flat = "flat_cpu" if device == "cpu" else "flat_cuda"
    for step in steps:
        if isinstance(step, FusedKernel):
            k = kernels[step.name]
            for name in k.stored():
                buf = graph.name_to_buffer[name]
                lines.append(f"    {name} = torch.empty({list(buf.size)}, dtype={buf.dtype}, "
                             "device=device)")  # fmt: skip
            launch = f"[{k.launch()[0]}, {k.launch()[1]}]" if device == "cuda" else ""
            lines.append(wrap(f"    {step.name}{launch}(", [f"{flat}({a})" for a in k.args], ")"))
        elif isinstance(step, ir.MultiOutput):
            lines.append(f"    {step.name} = contiguous({step.parent.name}[{step.index}])")
        elif isinstance(step, ir.FallbackKernel):
            args = ", ".join([render(a) for a in step.args] +
                             [f"{k}={render(v)}" for k, v in step.kwargs.items()])  # fmt: skip
            call = f"{step.op}({args})"
            lines.append(
                f"    {step.name} = {call if step.size is None else f'contiguous({call})'}"
            )
    outs = [render(o) if isinstance(o, ir.IRNode) else repr(o) for o in graph.graph_outputs]
    lines.append(f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    return "\n".join(lines) + "\n"

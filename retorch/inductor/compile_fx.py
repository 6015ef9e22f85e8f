"""The backend: ``torch.compile(model, backend=retorch.inductor.compile_fx)``.

Mirrors torch/_inductor/compile_fx.py: ``compile_fx`` hands the Dynamo graph to AOTAutograd
(``aot_autograd`` with our decomposition table), which traces forward and backward into aten
graphs and calls ``compile_fx_inner`` on each; that lowers the graph (graph.py), fuses
(scheduler.py), generates kernels and the wrapper (codegen/), and loads them as a module, as
torch's ``PyCodeCache.load`` does. Each compilation is kept: :func:`last_compile` returns it
for the chapter to print its IR, fusion groups, sources and fallbacks.
"""

from __future__ import annotations

import linecache
import time
from dataclasses import dataclass, field

import torch

from . import ir
from .codegen import cpp, triton, wrapper
from .debug import ir_text
from .decomposition import select_decomp_table
from .graph import GraphLowering
from .scheduler import Scheduler

_compiled: list = []


@dataclass
class CompiledGraph:
    """One compiled FX graph: call it with tensors; print what the compiler did."""

    kind: str
    device: str
    graph: GraphLowering
    scheduler: Scheduler
    kernels: dict = field(default_factory=dict)  # name -> generated source
    wrapper_source: str = ""
    compile_seconds: float = 0.0
    call: object = None

    def __call__(self, *args):
        return list(self.call(list(args)))

    @property
    def fallbacks(self) -> list[tuple[str, str]]:
        """(FX node name, aten op) of every node that runs in eager torch."""
        return list(self.graph.fallbacks)

    @property
    def fusion_groups(self) -> dict[str, list[str]]:
        return self.scheduler.fusion_groups()

    @property
    def decisions(self) -> list[str]:
        return list(self.scheduler.decisions)

    def ir(self) -> str:
        return ir_text(self.graph)

    @property
    def source(self) -> str:
        return "\n\n".join(self.kernels.values())

    def report(self) -> str:
        lines = [f"{self.kind} graph on {self.device}: {len(self.kernels)} kernel(s), "
                 f"{len(self.fallbacks)} fallback(s)"]  # fmt: skip
        lines += [f"  {k}: {', '.join(v)}" for k, v in self.fusion_groups.items()]
        lines += [f"  fallback {name}: {op}" for name, op in self.fallbacks]
        return "\n".join(lines)


def find_users(graph, scheduler) -> dict[str, set]:
    users: dict[str, set] = {}

    def add(x, user):
        while isinstance(x, ir.View):
            x = x.data
        if isinstance(x, ir.ReinterpretView):
            x = x.buffer
        if isinstance(x, ir.Buffer):
            users.setdefault(x.name, set()).add(user)

    for k in scheduler.kernels():
        for node in k.nodes:
            for name, _ in k.reads(node):
                users.setdefault(name, set()).add(node.name)
    for buf in graph.buffers:
        if isinstance(buf, ir.MultiOutput):
            add(buf.parent, buf.name)
        elif isinstance(buf, ir.FallbackKernel):
            torch.fx.node.map_aggregate((buf.args, buf.kwargs), lambda a: add(a, buf.name))
    for out in graph.graph_outputs:
        add(out, "output")
    return users


def load_module(source: str, name: str, namespace: dict) -> dict:
    """Exec generated source as a module whose lines tracebacks and ``inspect`` can show."""
    filename = f"<retorch.inductor.generated.{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace["__name__"] = f"retorch.inductor.generated.{name}"
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def compile_graph(gm, example_inputs, device: str = "cpu", kind: str = "inference",
                  name: str | None = None, record: bool = True):  # fmt: skip
    """Lower, fuse and generate code for an aten FX graph; returns a :class:`CompiledGraph`
    (kept for :func:`last_compile` when ``record``; its module is named after ``name``)."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"retorch.inductor compiles for 'cpu' or 'cuda', not {device!r}")
    t0 = time.perf_counter()
    graph = GraphLowering(gm, example_inputs)
    graph.run()
    scheduler = Scheduler(graph)
    users = find_users(graph, scheduler)
    kernel_cls, prelude = (cpp.CppKernel, cpp.PRELUDE) if device == "cpu" else (
        triton.TritonKernel, triton.PRELUDE)  # fmt: skip
    kernels = {k.name: kernel_cls(k, graph, users) for k in scheduler.kernels()}
    sources = {name: k.generate() for name, k in kernels.items()}
    wrapper_src = wrapper.generate_wrapper(graph, scheduler.steps, kernels, device)
    module = prelude + "\n\n" + "\n\n".join(sources.values()) + "\n\n" + wrapper_src
    run_device = next((t.device for t in example_inputs if isinstance(t, torch.Tensor)), "cpu")
    ns = {"torch": torch, "aten": torch.ops.aten, "prims": torch.ops.prims,
          "device": torch.device(run_device) if device == "cuda" else torch.device("cpu"),
          "contiguous": wrapper.contiguous, "flat_cpu": wrapper.flat_cpu,
          "flat_cuda": wrapper.flat_cuda}  # fmt: skip
    load_module(module, name or f"{kind}{len(_compiled)}", ns)
    compiled = CompiledGraph(kind, device, graph, scheduler, sources, wrapper_src,
                             time.perf_counter() - t0, ns["call"])  # fmt: skip
    if record:
        _compiled.append(compiled)
    return compiled


def _inner(kind, device):
    from torch._functorch.aot_autograd import make_boxed_func

    def compile_fx_inner(gm, example_inputs):
        cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs)
        target = device or ("cuda" if cuda else "cpu")
        return make_boxed_func(compile_graph(gm, example_inputs, target, kind))

    return compile_fx_inner


def compile_fx(gm: torch.fx.GraphModule, example_inputs, device: str | None = None):
    """A ``torch.compile`` backend: AOTAutograd, then our lowering for forward and backward.

    Kernels are generated for the inputs' device; ``device="cuda"`` (through
    ``functools.partial``) generates Numba-CUDA kernels for CPU tensors too, which run under
    the CUDA simulator on a machine without a GPU."""
    from torch._dynamo.backends.common import aot_autograd

    backend = aot_autograd(fw_compiler=_inner("forward", device),
                           bw_compiler=_inner("backward", device),
                           inference_compiler=_inner("inference", device),
                           decompositions=select_decomp_table())  # fmt: skip
    return backend(gm, example_inputs)


def last_compile(kind: str | None = None) -> CompiledGraph:
    """The latest compiled graph (of ``kind`` "forward", "backward" or "inference" if given)."""
    for c in reversed(_compiled):
        if kind is None or c.kind == kind:
            return c
    raise RuntimeError("nothing compiled yet" + (f" of kind {kind!r}" if kind else ""))


def compiled_graphs() -> list[CompiledGraph]:
    return list(_compiled)


def reset():
    _compiled.clear()

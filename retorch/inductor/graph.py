"""GraphLowering: run an FX graph of aten ops, building IR nodes instead of tensors.

Mirrors torch/_inductor/graph.py: ``GraphLowering`` is an ``fx.Interpreter`` whose
``placeholder`` makes an ``InputBuffer``, whose ``call_function`` looks the op up in
``lowerings`` (or makes a ``FallbackKernel``, recording it in :attr:`fallbacks`), and whose
``output`` realizes what the graph returns. A pointwise node stays unrealized (inlined into its
users) unless it is output, read by a fallback, or read by several users when its loop body is
large: torch's ``realize_hint`` with ``config.realize_opcount_threshold``.
"""

from __future__ import annotations

import torch
import torch.fx

from . import ir
from .lowering import lowerings
from .virtualized import ReadsHandler, V, set_ops_handler

#: Realize a pointwise node read by several users when its body has more ops than this
#: (``config.realize_opcount_threshold``), or, a rule of ours in place of torch's read counts
#: (``num_reads``, ``has_large_inner_fn``), any of these costly ops: computed once, then read.
REALIZE_OPCOUNT_THRESHOLD = 30
EXPENSIVE_OPS = {"exp", "tanh", "sigmoid", "log", "pow", "sqrt", "rsqrt"}


def count_ops(node: ir.IRNode) -> ReadsHandler:
    """The loads and ops of one element of ``node``'s loop body (names stand in for indices)."""
    handler = ReadsHandler()
    with set_ops_handler(handler):
        if isinstance(node, ir.Reduction):
            node.inner_fn([f"x{i}" for i in range(len(node.ranges))],
                          [f"r{i}" for i in range(len(node.reduction_ranges))])  # fmt: skip
        else:
            node.make_loader()([f"x{i}" for i in range(len(node.get_size()))])
    return handler


class GraphLowering(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule, example_inputs):
        super().__init__(gm)
        self.example_inputs = list(example_inputs)
        self.graph_inputs: list[ir.InputBuffer] = []
        self.buffers: list[ir.Buffer] = []  # ComputedBuffers and FallbackKernels, in order
        self.fallbacks: list[tuple[str, str]] = []  # (fx node name, aten op) run eagerly
        self.graph_outputs: list = []
        self.name_to_buffer: dict[str, ir.Buffer] = {}
        self.realized: dict[int, ir.Buffer] = {}  # id(node) -> its buffer, realized once
        self.keep_alive: list = []  # the nodes of `realized`, so their ids stay unique

    def run(self):
        with V.set_graph_handler(self):
            return super().run(*self.example_inputs)

    def register_buffer(self, buf: ir.Buffer) -> ir.Buffer:
        self.buffers.append(buf)
        self.name_to_buffer[buf.name] = buf
        return buf

    def realize(self, node: ir.IRNode) -> ir.Buffer:
        """Give ``node`` memory and a name (``StorageBox.realize``)."""
        if isinstance(node, ir.Buffer):
            return node
        if id(node) not in self.realized:
            data = node
            if not isinstance(node, (ir.Pointwise, ir.Reduction)):
                data = ir.Pointwise(node.get_size(), node.make_loader(), node.dtype)
            buf = ir.ComputedBuffer(f"buf{len(self.buffers)}", data.get_size(), data.dtype, data)
            self.realized[id(node)] = self.register_buffer(buf)
            self.keep_alive.append(node)
        return self.realized[id(node)]

    def placeholder(self, target, args, kwargs):
        val = self.example_inputs[len(self.graph_inputs)]
        if not isinstance(val, torch.Tensor):
            raise NotImplementedError(f"retorch.inductor takes tensor inputs only, got {val!r}")
        buf = ir.InputBuffer(target, list(val.shape), val.dtype)
        self.graph_inputs.append(buf)
        return buf

    def run_node(self, n: torch.fx.Node):
        self.current_node = n
        out = super().run_node(n)
        val = n.meta.get("val")
        if isinstance(out, (ir.Pointwise, ir.Reduction)) and isinstance(val, torch.Tensor):
            out.dtype = val.dtype
        if isinstance(out, ir.Reduction):
            out = self.realize(out)
        elif isinstance(out, ir.Pointwise) and len(n.users) > 1:
            counts = count_ops(out)
            if counts.num_ops > REALIZE_OPCOUNT_THRESHOLD or counts.names & EXPENSIVE_OPS:
                out = self.realize(out)
        return out

    def call_function(self, target, args, kwargs):
        packet = getattr(target, "overloadpacket", target)
        if packet in lowerings:
            try:
                return lowerings[packet](*args, **kwargs)
            except NotImplementedError:
                pass
        return self.fallback(target, args, kwargs)

    def extern_arg(self, x):
        """A tensor argument of a fallback: a buffer, or a view chain that ends in one."""
        base = x
        while isinstance(base, ir.View):
            base = base.data
        if isinstance(base, ir.ReinterpretView) or isinstance(base, ir.Buffer):
            return x
        return self.realize(x)

    def fallback(self, target, args, kwargs):
        """Run ``target`` in eager torch (``FallbackKernel``, torch's ``make_fallback``)."""
        n = self.current_node
        args, kwargs = torch.fx.node.map_aggregate(
            (args, kwargs), lambda a: self.extern_arg(a) if isinstance(a, ir.IRNode) else a
        )
        self.fallbacks.append((n.name, str(target)))
        val = n.meta.get("val")
        name = f"buf{len(self.buffers)}"
        if isinstance(val, torch.Tensor):
            buf = ir.FallbackKernel(name, list(val.shape), val.dtype, target, args, kwargs, n.name)
            return self.register_buffer(buf)
        if isinstance(val, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in val):
            parent = ir.FallbackKernel(name, None, None, target, args, kwargs, n.name)
            self.register_buffer(parent)
            return [self.register_buffer(ir.MultiOutput(f"{name}_{i}", list(v.shape), v.dtype,
                                                        parent=parent, index=i))
                    for i, v in enumerate(val)]  # fmt: skip
        raise NotImplementedError(f"cannot fall back on {target}: it returns {type(val).__name__}")

    def output(self, target, args, kwargs):
        outs = args[0] if isinstance(args[0], (list, tuple)) else [args[0]]
        for out in outs:
            if isinstance(out, ir.View):  # a view of a buffer is returned as a view, not copied
                out = self.extern_arg(out)
            elif isinstance(out, (ir.Pointwise, ir.Reduction)):
                out = self.realize(out)
            self.graph_outputs.append(out)
        return self.graph_outputs

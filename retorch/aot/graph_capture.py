"""Trace a function and its backward into one joint graph of aten ops (a retorch.fx Graph).

Mirrors torch/_functorch/_aot_autograd/graph_capture_wrappers.py (`create_joint`: the joint
function takes `(primals, tangents)`, runs the user's function, then `torch.autograd.grad` on
the outputs that need a gradient) and torch/_functorch/_aot_autograd/graph_capture.py (trace it
with `make_fx`, torch/fx/experimental/proxy_tensor.py) at torch v2.13.0.

The tracer here is a `TorchDispatchMode` that runs the function on real tensors and writes one
`call_function` node per aten op it sees, instead of `make_fx` on fake tensors. Why: it is the
whole idea of `make_fx` in a few dozen lines: below autograd, every op of the forward *and* of
the backward that `autograd.grad` runs reaches the mode as an aten op (composite ones already
broken up: `F.layer_norm` arrives as `native_layer_norm`), and it writes straight into a
retorch.fx Graph. A tensor is mapped to the node that made it by `id()`; the tracer keeps
every traced tensor alive so that no id is reused. What it gives up: real data is computed
(data-dependent branches are baked in, as with `make_fx` on real tensors), no symbolic shapes,
no constants (a tensor that is neither an input nor an op's result is refused).

The joint graph's placeholders are `primals_1..n` then `tangents_1..m` (one per output that
needs a gradient); its output is `(*forward_outputs, *gradients)`, one gradient per primal
(None where the primal needs none), as torch's. Nodes the forward ran carry
`meta["partitioner_tag"] = "is_forward"`, those of the backward `"is_backward"`.
"""

import operator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..fx import Graph, GraphModule
from ..fx.node import map_aggregate
from .functional_utils import check_mutation, functionalize


class JointGraphTracer(TorchDispatchMode):
    """Records every aten op that reaches it as a node of `self.graph` (make_fx's role)."""

    def __init__(self):
        super().__init__()
        self.graph = Graph()
        self.env: dict[int, object] = {}  # id(tensor) -> the node that made it
        self._alive: list = []  # traced tensors, held so that their ids stay unique
        self.tag = "is_forward"

    def bind(self, t: torch.Tensor, node) -> None:
        self.env[id(t)] = node
        self._alive.append(t)
        node.meta["val"] = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")

    def placeholder(self, name: str, t: torch.Tensor):
        node = self.graph.placeholder(name)
        self.bind(t, node)
        return node

    def node_of(self, a):
        if not isinstance(a, torch.Tensor):
            return a
        if id(a) not in self.env:
            raise RuntimeError(
                f"aot tracing met a tensor of shape {tuple(a.shape)} that is neither an input of "
                "the function nor made by a traced op (a constant captured from outside). "
                "Pass it to the function as an argument."
            )
        return self.env[id(a)]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func._schema.is_mutable:
            check_mutation(self, func, args, kwargs, out)
        name = func.overloadpacket.__name__
        if func._schema.is_mutable:
            name = name.removesuffix("_")  # named as the functional op it becomes: `add`
        node = self.graph.call_function(
            func, map_aggregate(args, self.node_of), map_aggregate(kwargs, self.node_of), name=name
        )
        node.meta["partitioner_tag"] = self.tag
        if isinstance(out, torch.Tensor):
            self.bind(out, node)  # an in-place op rebinds its self to the new node
        elif isinstance(out, (tuple, list)):
            for i, o in enumerate(out):
                if isinstance(o, torch.Tensor):
                    item = self.graph.call_function(operator.getitem, (node, i), name="getitem")
                    item.meta["partitioner_tag"] = self.tag
                    self.bind(o, item)
        else:
            raise NotImplementedError(
                f"aot tracing: {func} returned {type(out).__name__}, not a tensor; a value read "
                "out of a tensor (.item(), data-dependent shapes) cannot be traced ahead of time"
            )
        return out


class JointGraph:
    """The traced joint graph and what the partitioner and the runtime wrapper need of it."""

    def __init__(self, module, num_fwd_outputs, primals_need_grad, outputs_need_grad, single):
        self.module = module  # GraphModule: (primals..., tangents...) -> (outs..., grads...)
        self.num_fwd_outputs = num_fwd_outputs
        self.primals_need_grad = primals_need_grad
        self.outputs_need_grad = outputs_need_grad
        self.single_output = single  # fn returned a tensor, not a tuple


def trace_joint(fn, args) -> JointGraph:
    """Run `fn(*args)` and `autograd.grad` of its outputs under the tracer; functionalize."""
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise TypeError(
                f"aot_function traces tensor arguments only; argument {i} is "
                f"{type(a).__name__}: close over it in the function instead"
            )
    tracer = JointGraphTracer()
    primals = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    last_primal = None
    for i, p in enumerate(primals):
        last_primal = tracer.placeholder(f"primals_{i + 1}", p)
    with tracer:
        out = fn(*primals)
    single = isinstance(out, torch.Tensor)
    outs = (out,) if single else tuple(out)
    if not all(isinstance(o, torch.Tensor) for o in outs):
        raise TypeError("aot_function: the function must return a tensor or a tuple of tensors")
    needs = [o.requires_grad for o in outs]
    diff_outs = [o for o, n in zip(outs, needs) if n]
    tangents = [torch.ones_like(o) for o in diff_outs]  # values are never read by the graph
    for i, t in enumerate(tangents):  # placeholders first: after the primals, in order
        with tracer.graph.inserting_after(last_primal):
            last_primal = tracer.placeholder(f"tangents_{i + 1}", t)
    wrt = [p for p in primals if p.requires_grad]
    grads = [None] * len(primals)
    if diff_outs and wrt:
        tracer.tag = "is_backward"
        with tracer:
            got = torch.autograd.grad(diff_outs, wrt, tangents, allow_unused=True)
        it = iter(got)
        grads = [next(it) if p.requires_grad else None for p in primals]
    result = [tracer.node_of(o) for o in outs] + [
        None if g is None else tracer.node_of(g) for g in grads
    ]
    tracer.graph.output(tuple(result))
    functionalize(tracer.graph)
    tracer.graph.eliminate_dead_code()
    gm = GraphModule(torch.nn.Module(), tracer.graph)
    return JointGraph(gm, len(outs), [p.requires_grad for p in primals], needs, single)

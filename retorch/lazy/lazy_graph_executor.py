"""Sync: compile the pending IR of some lazy tensors into one graph, cache it, run it.

Mirrors torch/csrc/lazy/core/lazy_graph_executor.cpp at torch v2.13.0: `SyncTensorsGraph`
collects the tensors' IR values, computes the post-order and the graph's hash, looks the hash
up in the compilation cache (`UncachedCompile` on a miss, `CachedCompile` on a hit), runs the
compiled graph on the device data, and replaces each synced tensor's IR by its result, so the
next step starts from data. Lowering turns the IR into a retorch.fx GraphModule (torch's
TorchScript backend lowers it into a TorchScript graph:
torch/csrc/lazy/ts_backend/ts_lowering_context.cpp). torch hashes each node (op, shapes,
attributes, operands' hashes); the rebuild hashes the IR's text from debug.py, which names
the same things and, by its %numbers, which values are shared.
"""

import hashlib
import operator

from torch.utils._pytree import tree_map

from retorch.fx import Graph, GraphModule

from . import debug, ir
from .metrics import _counters
from .tensor import live

_cache: dict[str, GraphModule] = {}


def graph_hash(roots: list[ir.Value]) -> str:
    """The compilation cache's key: a hash of the IR's text (the data's values left out) and
    of which output each root is (a node with two outputs is marked ROOT once)."""
    number = {id(n): i for i, n in enumerate(ir.post_order(roots))}
    outputs = ", ".join(f"%{number[id(r.node)]}.{r.index}" for r in roots)
    return hashlib.sha256((debug.to_text(roots) + outputs).encode()).hexdigest()[:16]


def lower(order: list[ir.Node], roots: list[ir.Value]) -> GraphModule:
    """One FX graph: a placeholder per device-data node, a call_function per op."""
    graph, env, inputs = Graph(), {}, 0

    def fx_value(v: ir.Value):
        node = env[id(v.node)]
        return graph.call_function(operator.getitem, (node, v.index)) if v.node.multi else node

    for node in order:
        if node.op == ir.DEVICE_DATA:
            env[id(node)], inputs = graph.placeholder(f"data_{inputs}"), inputs + 1
        else:
            args, kwargs = tree_map(lambda a: fx_value(a) if isinstance(a, ir.Value) else a,
                                    (node.args, node.kwargs))  # fmt: skip
            env[id(node)] = graph.call_function(node.op, args, kwargs)
    graph.output(tuple(fx_value(r) for r in roots))
    return GraphModule({}, graph, class_name="LazyGraph")


def sync(tensors) -> list:
    """Run the pending IR of `tensors` as one graph; return their data (real tensors)."""
    pending = [t for t in tensors if t.value.node.op != ir.DEVICE_DATA]
    if pending:
        roots = [t.value for t in pending]
        order, key = ir.post_order(roots), graph_hash(roots)
        if key in _cache:
            _counters["CachedCompile"] += 1
        else:
            _counters["UncachedCompile"] += 1
            _cache[key] = lower(order, roots)
        data = [n.data for n in order if n.op == ir.DEVICE_DATA]
        for t, result in zip(pending, _cache[key](*data)):
            t.value = ir.device_data(result)
        _counters["SyncedTensorsWithIR"] += len(pending)
    return [t.value.node.data for t in tensors]


def mark_step() -> None:
    """Sync every live lazy tensor that has pending IR (torch._lazy.mark_step)."""
    _counters["MarkStep"] += 1
    pending = [t for t in list(live) if t.value.node.op != ir.DEVICE_DATA]
    sync(sorted(pending, key=lambda t: t.unique_id))

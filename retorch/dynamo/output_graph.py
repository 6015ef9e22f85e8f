"""OutputGraph: the FX graph being captured, its inputs (by source) and its guards.

Mirrors torch/_dynamo/output_graph.py at torch v2.13.0: `OutputGraph` owns the retorch.fx
Graph the tracer records into (torch: `SubgraphTracer`), turns each tensor the frame reads
into a placeholder named after its source (`L['x']` -> `L_x_`, as torch names them), collects
the guards, and `compile_subgraph` closes the graph with an output node of the live tensors
and hands the GraphModule to the backend (`compile_and_call_fx_graph`). A graph with no call
node is not compiled, as in torch (`count_calls`). `checkpoint`/`restore` take back the nodes
of an instruction that failed halfway (torch restarts the analysis from a speculation point).
"""

import re

import torch

from ..fx import Graph, GraphModule
from ..fx.proxy import GraphAppendingTracer, Proxy
from .exc import unimplemented
from .guards import TENSOR_MATCH, Guard
from .symbolic_shapes import ShapeEnv, update_automatic_dynamic
from .variables import SymNodeVariable, TensorVariable, VariableTracker


class OutputGraph:
    def __init__(self, dynamic=False, frame_state=None):
        self.dynamic, self.frame_state = dynamic, {} if frame_state is None else frame_state
        self.shape_env = ShapeEnv()
        self.graph = Graph()
        self.tracer = GraphAppendingTracer(self.graph)
        self.inputs: dict[str, TensorVariable] = {}  # source name -> its placeholder's variable
        self.input_sources: dict = {}  # placeholder node -> source
        self.guards: dict[str, Guard] = {}
        self._nodes: list = []  # nodes in creation order, for restore()

    def add_guard(self, guard: Guard) -> None:
        self.guards.setdefault(str(guard), guard)

    def create_proxy(self, kind, target, args, kwargs) -> Proxy:
        try:
            args, kwargs = self.tracer.create_arg(tuple(args)), self.tracer.create_arg(dict(kwargs))
        except NotImplementedError as e:
            unimplemented(f"{target}: argument not allowed in a graph ({e})")
        node = self.graph.create_node(kind, target, args, kwargs)
        self._nodes.append(node)
        return Proxy(node, self.tracer)

    def graph_input(self, source, value: torch.Tensor) -> TensorVariable:
        """The placeholder for the tensor at `source` (one per source), guarded by TENSOR_MATCH."""
        key = source.name()
        if key not in self.inputs:
            placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
            where = (self.graph.inserting_after(placeholders[-1]) if placeholders
                     else self.graph.inserting_before(None))  # fmt: skip
            with where:
                node = self.graph.placeholder(re.sub(r"[^a-zA-Z0-9]+", "_", key))
            self._nodes.append(node)
            example = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                          device="meta", requires_grad=value.requires_grad)  # fmt: skip
            tv = TensorVariable(Proxy(node, self.tracer), example, value.device, type(value),
                                source)  # fmt: skip
            if self.dynamic is None:  # automatic: dynamic where a size was seen to change
                dims = update_automatic_dynamic(self.frame_state, key, value.shape)
            else:
                dims = [bool(self.dynamic)] * value.dim()
            syms = [self.shape_env.create_symbol(n, source, i) if d else None
                    for i, (n, d) in enumerate(zip(value.shape, dims))]  # fmt: skip
            tv.dynamic = any(sym is not None for sym in syms)
            self.inputs[key] = tv
            self.input_sources[node] = source
            self.add_guard(TENSOR_MATCH(source, value, [sym is not None for sym in syms]))
        return self.inputs[key]

    def checkpoint(self) -> int:
        return len(self._nodes)

    def restore(self, checkpoint: int) -> None:
        while len(self._nodes) > checkpoint:
            self.remove_node(self._nodes[-1])

    def remove_node(self, node) -> None:
        self._nodes.remove(node)
        if node in self.input_sources:
            del self.inputs[self.input_sources.pop(node).name()]
        self.graph.erase_node(node)

    def count_calls(self) -> int:
        return sum(n.op.startswith("call_") for n in self.graph.nodes)

    def compile_subgraph(self, live: list[VariableTracker], backend, frame):
        """Close the graph over the live tensors; (compiled fn, input sources, in/out nodes)."""
        outs, seen, todo = [], set(), list(live)
        while todo:
            vt = todo.pop()
            if isinstance(vt, (TensorVariable, SymNodeVariable)):
                node = vt.proxy.node
                if node.op != "placeholder" and node not in seen:
                    seen.add(node)
                    outs.append(node)
            todo.extend(vt.children())
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        sources = [self.input_sources[n] for n in placeholders]
        if self.count_calls() == 0:  # nothing to compile; the inputs still rebuild the values
            return None, sources, placeholders, [], None
        self.graph.output(tuple(outs))
        gm = GraphModule({}, self.graph)
        example_inputs = [s.get(frame) for s in sources]
        compiled = backend(gm, example_inputs)
        return compiled, sources, placeholders, outs, gm

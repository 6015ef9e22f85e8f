"""Constant folding: compute once the subgraphs that depend only on attributes.

Mirrors torch/fx/experimental/const_fold.py at torch v2.13.0 (`split_const_subgraphs`,
`FoldedGraphModule`, `get_unique_attr_name_in_module`): a node is constant if it is a get_attr,
or pure and reads only constant nodes. The constant nodes that non-constant nodes read are the
outputs of a separate `const_subgraph_module`; on the first call it runs once and its results
are stored as `_FX_CONST_FOLDED_ATTRS` (a Parameter, or a ParameterList read with getitem), which
the main graph reads instead. torch carves the two graphs out with `split_module`; here the main
graph is edited in place, which gives the same nodes (see tests/test_fx_passes.py).
"""

import operator
import re

import torch

from ..graph import Graph
from ..graph_module import GraphModule
from ..symbolic_trace import symbolic_trace


class FoldedGraphModule(GraphModule):
    """A GraphModule that runs its constant subgraph once, on the first call."""

    def __init__(self, root, graph, const_subgraph=None, fx_const_folded_attrs_name=None):
        super().__init__(root, graph)
        self.const_subgraph_module = (
            None if const_subgraph is None else GraphModule(root, const_subgraph)
        )
        self.has_folding_been_run = False
        self.fx_const_folded_attrs_name = fx_const_folded_attrs_name

    def __call__(self, *args, **kwargs):
        if not self.has_folding_been_run:
            self.run_folding()
        return super().__call__(*args)

    def run_folding(self) -> None:
        if self.const_subgraph_module is None or self.fx_const_folded_attrs_name is None:
            return
        self.has_folding_been_run = True
        folded = self.const_subgraph_module()

        def _create_param(t):
            return torch.nn.Parameter(t.detach().clone(), requires_grad=t.requires_grad)

        params = (torch.nn.ParameterList([_create_param(t) for t in folded])
                  if isinstance(folded, tuple) else _create_param(folded))  # fmt: skip
        setattr(self, self.fx_const_folded_attrs_name, params)


def get_unique_attr_name_in_module(mod, name: str) -> str:
    name = re.sub("[^0-9a-zA-Z_]+", "_", name)
    while hasattr(mod, name):
        m = re.match(r"(.*)_(\d+)$", name)
        name = name + "_1" if m is None else f"{m.group(1)}_{int(m.group(2)) + 1}"
    return name


def split_const_subgraphs(module) -> FoldedGraphModule:
    """Trace `module` if needed, split off its constant part, return a FoldedGraphModule."""
    gm = module if isinstance(module, GraphModule) else symbolic_trace(module)
    graph = gm.graph
    const_nodes = set()
    for node in graph.nodes:
        if node.op in ("placeholder", "output") or node.is_impure():
            continue
        if node.op == "get_attr" or set(node.all_input_nodes) <= const_nodes:
            const_nodes.add(node)
    if all(n.op == "get_attr" for n in const_nodes):
        return FoldedGraphModule(gm, graph)
    # Folded values, in order of first read by a non-constant node (split_module's order);
    # get_attr nodes stay readable by the main graph as they are.
    outputs = {}
    for node in graph.nodes:
        if node not in const_nodes:
            for inp in node.all_input_nodes:
                if inp in const_nodes and inp.op != "get_attr":
                    outputs.setdefault(inp)
    const_graph, env = Graph(), {}
    for node in graph.nodes:
        if node in const_nodes:
            env[node] = const_graph.node_copy(node, lambda n: env[n])
    outs = [env[n] for n in outputs]
    const_graph.output(tuple(outs) if len(outs) > 1 else outs[0])

    attrs_name = get_unique_attr_name_in_module(gm, "_FX_CONST_FOLDED_ATTRS")
    multiple = len(outs) > 1
    setattr(gm, attrs_name, torch.nn.ParameterList() if multiple else torch.nn.Parameter())
    # Where split_module's call of the constant submodule lands: after the inputs and the
    # attributes the main graph still reads.
    kept = lambda n: n.op == "placeholder" or (n.op == "get_attr" and set(n.users) - const_nodes)
    with graph.inserting_before(next(n for n in graph.nodes if not kept(n))):
        folded = graph.get_attr(attrs_name)
    reads = [folded]
    if multiple:
        for i in range(len(outs)):
            with graph.inserting_after(reads[-1]):
                reads.append(graph.call_function(operator.getitem, (folded, i)))
    for node, read in zip(outputs, reads[1:] if multiple else reads):
        node.replace_all_uses_with(read)
    graph.eliminate_dead_code()
    return FoldedGraphModule(gm, graph, const_graph, attrs_name)

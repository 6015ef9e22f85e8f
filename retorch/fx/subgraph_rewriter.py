"""replace_pattern: rewrite every occurrence of a traced pattern with a traced replacement.

Mirrors torch/fx/subgraph_rewriter.py at torch v2.13.0 (`Match`, `replace_pattern`,
`_replace_pattern`): trace pattern and replacement, find the matches (passes/matcher_utils.py),
and for each one copy the replacement graph in before the first user of the match's returned
values (`graph_copy` with the pattern's placeholders mapped to the matched inputs), reroute
those users, then erase the matched nodes, last to first. Left out: filters, literal-agnostic
matching, replacement callbacks and copying a replacement module's attributes.
"""

from typing import NamedTuple

from .graph_module import GraphModule
from .node import Node
from .passes.matcher_utils import SubgraphMatcher
from .symbolic_trace import symbolic_trace


class Match(NamedTuple):
    anchor: Node  # the node from which the match was found
    nodes_map: dict  # pattern node -> graph node


def replace_pattern(gm: GraphModule, pattern, replacement) -> list:
    """Replace each non-overlapping match of `pattern` in `gm` by `replacement`; recompile."""
    graph = gm.graph
    pattern_graph = (
        pattern.graph if isinstance(pattern, GraphModule) else symbolic_trace(pattern).graph
    )
    replacement_graph = (replacement.graph if isinstance(replacement, GraphModule)
                         else symbolic_trace(replacement).graph)  # fmt: skip
    matches = SubgraphMatcher(pattern_graph).match(graph)
    replacement_placeholders = [n for n in replacement_graph.nodes if n.op == "placeholder"]
    match_changed_node = {}  # a returned node an earlier replacement already rewired
    for match in matches:
        if len(match.placeholder_nodes) != len(replacement_placeholders):
            raise ValueError(f"the pattern takes {len(match.placeholder_nodes)} inputs but the "
                             f"replacement takes {len(replacement_placeholders)}")  # fmt: skip
        val_map = {}
        for rn, gn in zip(replacement_placeholders, match.placeholder_nodes):
            val_map[rn] = match_changed_node.get(gn, gn) if isinstance(gn, Node) else gn
        user_nodes = {u for n in match.returning_nodes for u in n.users}
        first_user = next((n for n in graph.nodes if n in user_nodes), None)
        if first_user is None:  # nothing reads the result: insert after the last returned node
            last = [n for n in graph.nodes if n in match.returning_nodes][-1]
            first_user = last.next
        with graph.inserting_before(first_user):
            copied = graph.graph_copy(replacement_graph, val_map)
        copied = copied if isinstance(copied, (tuple, list)) else (copied,)
        for gn, new in zip(match.returning_nodes, copied):
            gn.replace_all_uses_with(new)
            match_changed_node[gn] = new
        for pn in reversed(pattern_graph.nodes):
            if pn.op not in ("placeholder", "output"):
                graph.erase_node(match.nodes_map[pn])
    gm.recompile()
    return [Match(anchor=m.anchors[0], nodes_map=m.nodes_map) for m in matches]

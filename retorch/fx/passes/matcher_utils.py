"""SubgraphMatcher: find every place a pattern graph occurs in a graph.

Mirrors torch/fx/passes/utils/matcher_utils.py at torch v2.13.0 (`InternalMatch`,
`SubgraphMatcher` with match_output=False, match_placeholder=False as `replace_pattern` uses it):
anchors are the pattern's returned nodes; each graph node equal to an anchor is a candidate, and
`_match_nodes` walks the pattern backwards through args, binding pattern placeholders to whatever
graph value sits there. A match must be self-contained (only its returned nodes read from
outside), must not form a cycle if fused (fuser_utils.validate_partition), and must not overlap
an earlier match.
"""

import copy
from dataclasses import dataclass, field

from ..graph import Graph
from ..node import Node


@dataclass
class InternalMatch:
    anchors: list
    nodes_map: dict = field(default_factory=dict)  # pattern node -> graph node (or value)
    placeholder_nodes: list = field(default_factory=list)
    returning_nodes: list = field(default_factory=list)

    def __copy__(self):
        return InternalMatch(self.anchors, dict(self.nodes_map), list(self.placeholder_nodes),
                             list(self.returning_nodes))  # fmt: skip


class SubgraphMatcher:
    def __init__(self, pattern: Graph):
        self.pattern = pattern
        for node in pattern.nodes:
            if node.op != "output" and not node.is_impure() and not node.users:
                raise AssertionError(
                    "SubgraphMatcher cannot be initialized with an pattern with dead code"
                )
        self.pattern_placeholder_nodes = [n for n in pattern.nodes if n.op == "placeholder"]
        output_node = pattern.output_node()
        self.pattern_returning_nodes = output_node.all_input_nodes
        self.pattern_anchors = [n for n in output_node.all_input_nodes if len(n.users) == 1]

    def _nodes_are_equal(self, pn: Node, gn: Node) -> bool:
        if pn.op == "placeholder":
            return True  # a pattern input matches any value
        return pn.op == gn.op and (pn.op == "output" or pn.target == gn.target)

    def _match_literals(self, pn, gn, match: InternalMatch) -> bool:
        if isinstance(pn, Node):  # a pattern input bound to a literal of the graph
            if pn.op != "placeholder":
                return False
            if pn in match.nodes_map:
                return match.nodes_map[pn] == gn
            match.nodes_map[pn] = gn
            return True
        return not isinstance(gn, Node) and type(gn) is type(pn) and gn == pn

    def _match_nodes(self, pn: Node, gn: Node, match: InternalMatch) -> bool:
        if pn in match.nodes_map:
            return match.nodes_map[pn] == gn
        if gn in match.nodes_map.values() or not self._nodes_are_equal(pn, gn):
            return False
        match.nodes_map[pn] = gn
        if pn.op == "placeholder":
            return True

        def _match_args(args1, args2) -> bool:
            if len(args1) != len(args2):
                return False
            for a1, a2 in zip(args1, args2):
                if isinstance(a1, Node) and isinstance(a2, Node):
                    ok = self._match_nodes(a1, a2, match)
                elif isinstance(a1, (list, tuple)) and isinstance(a2, (list, tuple)):
                    ok = _match_args(a1, a2)
                else:
                    ok = self._match_literals(a1, a2, match)
                if not ok:
                    return False
            return True

        if len(pn.args) != len(gn.args) or list(pn.kwargs) != list(gn.kwargs):
            return False
        return _match_args([*pn.args, *pn.kwargs.values()], [*gn.args, *gn.kwargs.values()])

    def _is_contained(self, nodes_map: dict) -> bool:
        lookup = {gn: pn for pn, gn in nodes_map.items() if pn.op != "placeholder"}
        return all(
            pn in self.pattern_returning_nodes or all(u in lookup for u in gn.users)
            for gn, pn in lookup.items()
        )

    def match(self, graph: Graph) -> list:
        candidates = [(a, [n for n in graph.nodes if self._nodes_are_equal(a, n)])
                      for a in self.pattern_anchors]  # fmt: skip
        matches = []

        def backtracking(anchor_index: int, match: InternalMatch) -> None:
            if anchor_index == len(candidates):
                match.placeholder_nodes = [
                    match.nodes_map[pn] for pn in self.pattern_placeholder_nodes
                ]
                match.returning_nodes = [match.nodes_map[pn] for pn in self.pattern_returning_nodes]
                matches.append(match)
                return
            anchor, nodes = candidates[anchor_index]
            for node in nodes:
                trial = copy.copy(match)
                if self._match_nodes(anchor, node, trial):
                    backtracking(anchor_index + 1, trial)

        if candidates:
            backtracking(0, InternalMatch(anchors=self.pattern_anchors))
        matches = [m for m in matches if self._is_contained(m.nodes_map)]
        matches = [m for m in matches if _validate_partition(_compute_nodes(m))]
        return _remove_overlapping_matches(matches)


def _compute_nodes(match: InternalMatch) -> list:
    return [gn for pn, gn in match.nodes_map.items() if pn.op not in ("placeholder", "output")]


def _validate_partition(partition: list) -> bool:
    """Fusing `partition` is acyclic iff no path leaves it and comes back (fuser_utils)."""
    part = set(partition)
    queue = [u for n in part for u in n.users if u not in part]
    visited = set()
    while queue:
        current = queue.pop()
        visited.add(current)
        if current in part:
            return False
        queue.extend(u for u in current.users if u not in visited)
    return True


def _remove_overlapping_matches(matches: list) -> list:
    kept, taken = [], set()
    for m in matches:
        nodes = _compute_nodes(m)
        if not any(gn in taken for gn in nodes):
            kept.append(m)
            taken.update(nodes)
    return kept

"""CSEPass: common-subexpression elimination by rebuilding the graph with one node per value.

Mirrors torch/fx/passes/dialect/common/cse_pass.py at torch v2.13.0: walk the nodes in order,
key each call by (target, args and kwargs with inputs already renamed); a node whose key was seen
reuses the earlier node. One deliberate difference: torch bans only the ATen random and in-place
ops it lists, so on a torch-level graph it merges two `torch.rand(3)` calls; here every impure
node (`Node.is_impure`: random functions, asserts) is also kept apart, and constants are
keyed with their type, so `x * 1` and `x * 1.0` (equal as Python values, not as results on an
integer tensor) stay two nodes.
"""

from ..graph import Graph
from ..graph_module import GraphModule
from ..node import map_arg


class CSEPass:
    def __init__(self, banned_ops=None):
        self.banned_ops = banned_ops or set()

    def __call__(self, graph_module: GraphModule) -> tuple:
        """Return (module, modified) as torch's PassResult holds them."""
        new_graph, env, seen = Graph(), {}, {}
        modified = False
        for n in graph_module.graph.nodes:
            keep = n.op in ("placeholder", "output", "get_attr") or n.target in self.banned_ops
            if keep or n.is_impure():
                env[n] = new_graph.node_copy(n, lambda x: env[x])
                continue
            args = _substitute(n.args, env)
            kwargs = tuple((k, _substitute(v, env)) for k, v in n.kwargs.items())
            key = (n.op, n.target, _hashable(args), _hashable(kwargs))
            if key in seen:
                env[n] = seen[key]
                modified = True
                continue
            env[n] = seen[key] = new_graph.node_copy(n, lambda x: env[x])
        if not modified:
            return graph_module, False
        return GraphModule(graph_module, new_graph), True


def _substitute(a, env):
    return map_arg(a, lambda x: env.get(x, x))


def _hashable(a):
    """Structure and values as a hashable key (lists become tagged tuples, slices too)."""
    if isinstance(a, (tuple, list)):
        return (type(a).__name__, *(_hashable(x) for x in a))
    if isinstance(a, dict):
        return ("dict", *((k, _hashable(v)) for k, v in a.items()))
    if isinstance(a, slice):
        return ("slice", _hashable(a.start), _hashable(a.stop), _hashable(a.step))
    try:
        hash(a)
    except TypeError:
        return ("id", id(a))
    return (type(a).__name__, a)

"""Split a joint graph into a forward and a backward graph: what to save, what to recompute.

Mirrors torch/_functorch/partitioners.py at torch v2.13.0:

- `_extract_graph_with_inputs_outputs`: a new graph with the given nodes as placeholders,
  every joint node computable from them copied over, the given outputs; then dead-code
  elimination.
- `_extract_fwd_bwd_modules`: the backward graph reads `saved_values + tangents`; saved values
  it does not read are dropped; the forward graph returns `outputs + saved_values`.
- `default_partition`: the forward is every node up to the last forward-tagged one; *every*
  forward tensor (primals included) is a candidate to save, and the backward keeps those it
  reads. The forward graph is then exactly the user's forward, and the saved tensors are
  those eager autograd's nodes would save.
- `recompute_partition`: the rebuild's stand-in for `min_cut_rematerialization_partition`.

How `recompute_partition` differs from torch's min-cut: torch builds a flow network over the
joint graph (a node's capacity is the bytes of its output, infinite for nodes banned from
recomputation) and saves a minimum cut between the primals and the backward's needs, with
many heuristics on top (fusible ops, chain lengths, reductions, `ban_recompute_*` flags,
a memory budget). The rebuild starts from the default partition's saved set and walks the
forward backwards, once: a *cheap* node (an arithmetic pointwise op or an alias, the
`RECOMPUTABLE_OPS` below; never a transcendental, a reduction, a matmul or a primal) stops
being saved and is recomputed in the backward from its inputs when that does not increase the
saved bytes nor the number of saved tensors. Ties are taken: a move that neither saves nor
costs (GELU's `add_1 = tanh + 1`: save `tanh` instead) opens the way for later ones that do;
taking strict gains only, GELU would save 3 (`primals_1`, `detach`, `add_1`), not 2. A second
pass, in forward order, saves again each recomputed node whose saving costs nothing more, so
that no op is recomputed for no gain (`relu` after a matmul stays saved). It is greedy (one
node at a time), so it may miss a cut that only pays after several moves; it never saves more
than the default. The allowlist matters: with `tanh` allowed, GELU would save `primals_1` alone
and recompute the whole chain; torch's min-cut (and this rule) save `primals_1` and `tanh`.
"""

import operator

import torch

from ..fx import Graph, GraphModule

aten = torch.ops.aten

#: Ops the recompute partitioner may move to the backward: cheap pointwise arithmetic and
#: aliases. torch's `get_default_op_list().recomputable_ops` also holds transcendental ops
#: (`tanh`, `exp`), reductions and more; its min-cut decides among them by size.
RECOMPUTABLE_OPS = {
    aten.add, aten.sub, aten.mul, aten.div, aten.neg, aten.relu, aten.clamp, aten.where,
    aten.detach, aten.alias, aten.view, aten.t, aten.unsqueeze, aten.squeeze, aten.expand,
}  # fmt: skip


class _InvalidNode:
    def __repr__(self):
        return "<invalid: needs a value this graph does not have>"


_INVALID = _InvalidNode()


def _is_primal(node) -> bool:
    return node.op == "placeholder" and node.target.startswith("primals")


def _is_tangent(node) -> bool:
    return node.op == "placeholder" and node.target.startswith("tangents")


def _is_tensor(node) -> bool:
    return isinstance(node.meta.get("val"), torch.Tensor)


def _is_multi_output(node) -> bool:
    return bool(node.users) and all(u.target is operator.getitem for u in node.users)


def _size_of(node) -> int:
    val = node.meta["val"]
    return val.numel() * val.element_size()


def _extract_graph_with_inputs_outputs(joint_graph, inputs, outputs) -> Graph:
    """Copy of the part of `joint_graph` that computes `outputs` from `inputs` alone."""
    new_graph, env = Graph(), {}
    for node in inputs:
        env[node] = new_graph.placeholder(node.name)
        env[node].meta = dict(node.meta)
    for node in joint_graph.nodes:
        if node in env or node.op == "output":
            continue
        if node.op == "placeholder" or any(env[a] is _INVALID for a in node.all_input_nodes):
            env[node] = _INVALID  # needs a placeholder that is not an input here
            continue
        env[node] = new_graph.node_copy(node, lambda a: env[a])
    result = []
    for out in outputs:
        if out is not None and env[out] is _INVALID:
            raise RuntimeError(f"partition: output {out.name} cannot be computed from the inputs")
        result.append(None if out is None else env[out])
    new_graph.output(tuple(result))
    new_graph.eliminate_dead_code()
    return new_graph


def _extract_fwd_bwd_modules(joint_module, saved_values, *, num_fwd_outputs):
    """The forward (primals -> outs + saved) and backward (saved + tangents -> grads) modules."""
    graph = joint_module.graph
    outputs = graph.output_node().args[0]
    fwd_outputs, bwd_outputs = list(outputs[:num_fwd_outputs]), list(outputs[num_fwd_outputs:])
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    primal_inputs = [n for n in placeholders if _is_primal(n)]
    tangent_inputs = [n for n in placeholders if _is_tangent(n)]
    bwd_graph = _extract_graph_with_inputs_outputs(
        graph, saved_values + tangent_inputs, bwd_outputs
    )
    used = {n.name for n in bwd_graph.nodes if n.op == "placeholder" and n.users}
    saved_values = [n for n in saved_values if n.name in used]  # the backward never reads the rest
    fwd_graph = _extract_graph_with_inputs_outputs(graph, primal_inputs, fwd_outputs + saved_values)
    bwd_graph = _extract_graph_with_inputs_outputs(
        graph, saved_values + tangent_inputs, bwd_outputs
    )
    root = torch.nn.Module()
    return GraphModule(root, fwd_graph), GraphModule(root, bwd_graph)


def _forward_nodes(joint_module) -> list:
    """Non-tangent nodes up to the last forward-tagged one (default_partition's first loop)."""
    nodes = list(joint_module.graph.nodes)
    last = max(i for i, n in enumerate(nodes)
               if n.meta.get("partitioner_tag") == "is_forward" or _is_primal(n))  # fmt: skip
    return [n for n in nodes[: last + 1] if not _is_tangent(n) and n.op != "output"]


def _save_candidates(forward_nodes) -> list:
    return [n for n in forward_nodes if _is_tensor(n) and not _is_multi_output(n)]


def default_partition(joint_module, _joint_inputs=None, *, num_fwd_outputs):
    """Save every forward tensor the backward reads; recompute nothing (torch's default)."""
    saved = _save_candidates(_forward_nodes(joint_module))
    return _extract_fwd_bwd_modules(joint_module, saved, num_fwd_outputs=num_fwd_outputs)


def _is_recomputable(node) -> bool:
    target = getattr(node.target, "overloadpacket", None)
    return node.op == "call_function" and target in RECOMPUTABLE_OPS


def _saved_set(forward, anchors, backward_reads) -> list:
    """Forward nodes the backward must receive if only `anchors` may be saved.

    Walk from what the backward reads towards the primals: an anchor is saved, a non-anchor
    is recomputed in the backward, so its inputs are needed in turn.
    """
    saved, seen, stack = set(), set(), list(backward_reads)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in anchors:
            saved.add(n)
        else:
            stack.extend(a for a in n.all_input_nodes if a in forward)
    return [n for n in forward if n in saved]  # in graph order


def _cost(saved) -> tuple:
    return sum(_size_of(n) for n in saved), len(saved)


def recompute_partition(joint_module, _joint_inputs=None, *, num_fwd_outputs):
    """Recompute cheap pointwise forward ops in the backward where that saves memory."""
    forward_nodes = _forward_nodes(joint_module)
    forward = dict.fromkeys(forward_nodes)
    backward_reads = {a for n in joint_module.graph.nodes if n not in forward and n.op != "output"
                      for a in n.all_input_nodes if a in forward}  # fmt: skip
    anchors = set(_save_candidates(forward_nodes))
    saved = _saved_set(forward, anchors, backward_reads)
    for node in reversed(forward_nodes):  # 1: stop saving a cheap node where that is free
        if node not in anchors or not _is_recomputable(node):
            continue
        trial = anchors - {node}
        trial_saved = _saved_set(forward, trial, backward_reads)
        if all(t <= c for t, c in zip(_cost(trial_saved), _cost(saved))):
            anchors, saved = trial, trial_saved
    for node in forward_nodes:  # 2: save again what pass 1 recomputes for no gain
        if node in anchors or not _is_tensor(node):
            continue
        trial = anchors | {node}
        trial_saved = _saved_set(forward, trial, backward_reads)
        if all(t <= c for t, c in zip(_cost(trial_saved), _cost(saved))):
            anchors, saved = trial, trial_saved
    return _extract_fwd_bwd_modules(joint_module, saved, num_fwd_outputs=num_fwd_outputs)


def saved_values(fw_module, num_fwd_outputs: int) -> list:
    """Names of the tensors a forward graph saves for the backward (its extra outputs)."""
    outs = fw_module.graph.output_node().args[0]
    return [n.name for n in outs[num_fwd_outputs:]]

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
- `recompute_partition`: a greedy approximation of `min_cut_rematerialization_partition`,
  kept as the baseline tests/test_aot.py measures. The min-cut itself, torch's flow network
  solved by `networkx.minimum_cut`, is `min_cut.py`'s `min_cut_rematerialization_partition`.

How `recompute_partition` differs from torch's min-cut (min_cut.py): torch builds a flow
network over the joint graph (a node's capacity is the bytes of its output, infinite for
nodes banned from recomputation) and saves a minimum cut between the primals and the
backward's needs. `recompute_partition` keeps torch's *bans* (`should_ban_recomputation` in
`solve_min_cut`, below as `ban_reason`) and replaces the cut by a greedy walk. The bans, in
torch's order:

- "not in recomputable allowlist": the op is not in `RECOMPUTABLE_OPS`, a subset of torch's
  `get_default_op_list().recomputable_ops` (pointwise arithmetic, aliases, and pointwise
  transcendentals: `tanh` and `exp` are recomputable in torch too). Torch's list also holds
  reductions, which it then bans as "reduction op" when the output is 4x smaller than the
  inputs; the rebuild leaves reductions out of the list instead.
- "materialized in backward" (torch's `ban_recompute_materialized_backward`, on by default):
  a node read, directly or through views, by a node the forward outputs do not need whose op
  is not fusible (`is_materialized_backwards`). Recomputing it would not be free: the
  backward would have to write it to memory anyway. In the joint graph that
  `functorch.compile.aot_function` traces without decompositions, GELU's `tanh` is read by
  `detach` (saved for `tanh_backward`), an op torch does not list as fusible: so `tanh` is
  banned and saved. With Inductor's decompositions (what `torch.compile` traces) the
  `detach` becomes `alias`, a view, whose readers are fusible: nothing bans `tanh`, and torch
  saves `primals_1` alone. The rebuild traces without decompositions and shows the first case.

The greedy walk: start from the default partition's saved set and walk the forward
backwards, once: a recomputable node that no ban holds stops being saved and is recomputed in
the backward from its inputs when that does not increase the saved bytes nor the number of
saved tensors. Ties are taken: a move that neither saves nor costs (GELU's
`add_1 = tanh + 1`: save `tanh` instead) opens the way for later ones that do; taking strict
gains only, GELU would save 3 (`primals_1`, `detach`, `add_1`), not 2. A second pass, in
forward order, saves again each recomputed node whose saving costs nothing more, so that no op
is recomputed for no gain (`relu` after a matmul stays saved). It is greedy (one node at a
time), so it may miss a cut that only pays after several moves; it never saves more than the
default. Turn the materialized-in-backward ban off (`ban_recompute_materialized_backward=False`,
torch's config of that name) and both torch and the rebuild save `primals_1` alone for GELU,
recomputing `tanh` in the backward.
"""

import operator

import torch

from ..fx import Graph, GraphModule

aten = torch.ops.aten

#: Views: torch's `get_default_op_list().view_ops` (never banned, followed through by
#: `is_materialized_backwards`).
VIEW_OPS = {aten.alias, aten.view, aten.t, aten.unsqueeze, aten.squeeze, aten.expand,
            aten.permute, aten.select, aten.slice}  # fmt: skip

#: Ops the recompute partitioner may move to the backward, each in torch's
#: `get_default_op_list().recomputable_ops`: pointwise arithmetic and transcendentals, views.
#: Torch's list also holds reductions (`sum`, `amax`, `var_mean`), which the rebuild leaves out.
RECOMPUTABLE_OPS = VIEW_OPS | {
    aten.add, aten.sub, aten.mul, aten.div, aten.neg, aten.relu, aten.clamp, aten.where,
    aten.tanh, aten.exp, aten.log, aten.sin, aten.cos, aten.sigmoid, aten.sqrt, aten.rsqrt,
    aten.reciprocal, aten.abs, aten.pow, aten.tanh_backward, aten.sigmoid_backward,
}  # fmt: skip

#: Torch's `fusible_ops` (recomputable ops plus random ones). `detach` is in neither: a
#: node that a `detach` reads in the backward is "materialized in backward".
FUSIBLE_OPS = RECOMPUTABLE_OPS

#: Ops the rebuild treats as aliases when it walks the forward (moved with the view they
#: make), though torch bans them ("Ops banned from re-materialization: aten.detach").
ALIAS_OPS = {aten.detach}


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


def _packet(node):
    return getattr(node.target, "overloadpacket", None) if node.op == "call_function" else None


def _is_recomputable(node) -> bool:
    return _packet(node) in RECOMPUTABLE_OPS | ALIAS_OPS


def _required_fw(joint_module, num_fwd_outputs: int) -> set:
    """Nodes the forward outputs need (torch's `NodeInfo.required_fw_nodes`)."""
    outputs = joint_module.graph.output_node().args[0][:num_fwd_outputs]
    needed, stack = set(), [o for o in outputs if o is not None]
    while stack:
        n = stack.pop()
        if n not in needed:
            needed.add(n)
            stack.extend(n.all_input_nodes)
    return needed


def _is_materialized_backwards(node, required_fw) -> bool:
    """A reader outside the forward's needs, reached through views, is not fusible with it."""
    if _packet(node) in VIEW_OPS:
        return False
    todo, seen = [node], set()
    while todo:
        cur = todo.pop()
        seen.add(cur)
        for user in cur.users:
            fusible = _packet(cur) in FUSIBLE_OPS and _packet(user) in FUSIBLE_OPS
            if user not in required_fw and not fusible:
                return True
            if _packet(user) in VIEW_OPS and user not in seen:
                todo.append(user)
    return False


def ban_reason(node, required_fw, *, ban_recompute_materialized_backward=True):
    """Why `node` may not be recomputed, in the words of torch's `should_ban_recomputation`."""
    if node.op != "call_function" or node.target is operator.getitem:
        return None
    if _packet(node) in VIEW_OPS:
        return None
    if not _is_recomputable(node):
        return "not in recomputable allowlist"
    if ban_recompute_materialized_backward and _is_materialized_backwards(node, required_fw):
        return "materialized in backward"
    return None


def ban_reasons(joint_module, num_fwd_outputs: int, **options) -> dict:
    """{node name: reason} for each forward node the forward outputs need that is banned."""
    required = _required_fw(joint_module, num_fwd_outputs)
    reasons = {n.name: ban_reason(n, required, **options)
               for n in joint_module.graph.nodes if n in required}  # fmt: skip
    return {name: r for name, r in reasons.items() if r is not None}


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


def recompute_partition(
    joint_module, _joint_inputs=None, *, num_fwd_outputs, ban_recompute_materialized_backward=True
):
    """Recompute cheap pointwise forward ops in the backward where that saves memory.

    A node that torch's bans hold (`ban_reason`) stays saved; the keyword is torch's config
    `torch._functorch.config.ban_recompute_materialized_backward`.
    """
    forward_nodes = _forward_nodes(joint_module)
    forward = dict.fromkeys(forward_nodes)
    backward_reads = {a for n in joint_module.graph.nodes if n not in forward and n.op != "output"
                      for a in n.all_input_nodes if a in forward}  # fmt: skip
    required = _required_fw(joint_module, num_fwd_outputs)
    anchors = set(_save_candidates(forward_nodes))
    saved = _saved_set(forward, anchors, backward_reads)
    for node in reversed(forward_nodes):  # 1: stop saving a cheap node where that is free
        if node not in anchors or not _is_recomputable(node):
            continue
        ban_materialized = ban_recompute_materialized_backward
        if node in required and ban_reason(
            node, required, ban_recompute_materialized_backward=ban_materialized
        ):
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

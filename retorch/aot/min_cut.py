"""The min-cut partitioner: save the cheapest set of forward tensors the backward can work from.

Mirrors torch/_functorch/partitioners.py at torch v2.13.0: `get_default_op_list` (`OpTypes`),
`NodeInfo` and `classify_nodes`, `MinCutOptions`, `solve_min_cut` (its
`should_ban_recomputation`, `is_materialized_backwards`, `get_node_weight`,
`ban_recomputation_if_allowed` and the two chain heuristics), `choose_saved_values_set` and
`min_cut_rematerialization_partition`; `fx_graph_cse` of torch/_functorch/compile_utils.py.

The flow network (`solve_min_cut`): each joint-graph node `x` is an edge `x_in -> x_out` whose
capacity is what saving `x` costs, the bytes of its output (`_size_of`) times
`1.1 ** dist_from_bw` (nodes nearer the backward are cheaper to keep alive), doubled when `x`
would not be written to memory anyway (`is_materialized`: all its readers fuse with it);
infinite for a non-tensor output. Data dependencies `x_out -> user_in` are infinite. The
source feeds, with infinite capacity, every node that may not be recomputed (the primals, and
the forward nodes one of torch's bans holds); every node the tangents reach is fed into the
sink (`x_in -> sink`: it must run in the backward), and a backward output the tangents do not
reach from `x_out`. A finite cut between source and sink cuts `x_in -> x_out` edges only:
those nodes are saved, everything between them and the sink is recomputed in the backward.
`networkx.minimum_cut` solves it, as in torch.

What the rebuild leaves out, as retorch's joint graphs never hold it: symbolic shapes (SymInt
nodes and their weights), RNG functionalization and random ops' seeds, activation checkpoint
tags (`must_recompute`, `MUST_SAVE`), collectives, effectful ops, backward mutations,
higher-order ops (`auto_functionalized`, user Triton kernels), the memory budget's knapsack
(`activation_memory_budget < 1`), `aggressive_recomputation`'s non-builtin-op ban, and the
cross-rank sync. The keyword options are torch's `torch._functorch.config` flags of the same
names, with torch's defaults (`MIN_CUT_CONFIG`).
"""

import heapq
import math
import operator

import networkx as nx
import torch

from ..fx import Node
from .partitioners import (
    _extract_fwd_bwd_modules,
    _is_primal,
    _is_tangent,
    default_partition,
)

aten = torch.ops.aten
prims = torch.ops.prims

#: torch._functorch.config flags the min-cut reads, with torch 2.13's defaults.
MIN_CUT_CONFIG = {
    "cse": True,
    "treat_parameters_as_free_to_save": True,
    "max_dist_from_bw": 1000,
    "ban_recompute_used_far_apart": True,
    "ban_recompute_long_fusible_chains": True,
    "ban_recompute_materialized_backward": True,
    "ban_recompute_not_in_allowlist": True,
    "ban_recompute_reductions": True,
    "recompute_views": False,
}


class OpTypes:
    """Op categories (partitioners.py `OpTypes`), by overload packet."""

    def __init__(self, fusible_ops, compute_intensive_ops, random_ops, view_ops, recomputable):
        self.fusible_ops = fusible_ops
        self.compute_intensive_ops = compute_intensive_ops
        self.random_ops = random_ops
        self.view_ops = view_ops
        self.recomputable_ops = recomputable

    def is_fusible(self, node) -> bool:
        return get_aten_target(node) in self.fusible_ops

    def is_compute_intensive(self, node) -> bool:
        return get_aten_target(node) in self.compute_intensive_ops

    def is_random(self, node) -> bool:
        return get_aten_target(node) in self.random_ops

    def is_view(self, node) -> bool:
        return get_aten_target(node) in self.view_ops

    def is_recomputable(self, node) -> bool:
        return get_aten_target(node) in self.recomputable_ops


def get_aten_target(node):
    """The node's overload packet (`aten.mul`), else its target (compile_utils.py)."""
    if hasattr(node.target, "overloadpacket"):
        return node.target.overloadpacket
    return node.target


def is_pointwise(packet) -> bool:
    """Whether an overload of the aten packet is tagged `torch.Tag.pointwise`.

    Torch's `pointwise_ops()` lists every such packet of `dir(torch.ops.aten)` up front; the
    rebuild asks of each packet it meets instead (the same answers): resolving every aten op
    before torch's first compile leaves torch's later fake-tensor tracing unable to lift a
    constant (`aten.lift_fresh` "Please convert all Tensors to FakeTensors first")."""
    if packet not in _POINTWISE:
        _POINTWISE[packet] = isinstance(packet, torch._ops.OpOverloadPacket) and any(
            torch.Tag.pointwise in getattr(packet, o).tags for o in packet.overloads()
        )
    return _POINTWISE[packet]


_POINTWISE = {}


class _PointwiseOr(dict):
    """An ordered set of ops that also holds every pointwise aten packet."""

    def __contains__(self, op) -> bool:
        return dict.__contains__(self, op) or is_pointwise(op)

    def __or__(self, other):
        return _PointwiseOr({**self, **other})


_DEFAULT_OP_LIST = None


def _prims(name):
    """A prims op that torch._inductor registers when it is imported (None before)."""
    return getattr(prims, name, None)


def get_default_op_list() -> OpTypes:
    """Torch's op lists, entry for entry (less the `magic_methods` on SymInts, which
    retorch's joint graphs never hold)."""
    global _DEFAULT_OP_LIST
    if _DEFAULT_OP_LIST is not None:
        return _DEFAULT_OP_LIST
    recomputable = [
        aten.add, aten.sub, aten.div, aten.atan2, aten.mul, aten.max, aten.min, aten.pow,
        aten.remainder, aten.fmod, aten.__and__, aten.__or__, aten.__xor__, aten.__lshift__,
        aten.__rshift__, aten.eq, aten.ne, aten.ge, aten.gt, aten.le, aten.lt, aten.abs,
        aten.bitwise_not, aten.ceil, aten.floor, aten.frac, aten.neg, aten.relu, aten.round,
        aten.silu, aten.trunc, aten.log, aten.log10, aten.log1p, aten.log2, aten.lgamma,
        aten.exp, aten.expm1, aten.erf, aten.erfc, aten.cos, aten.acos, aten.cosh, aten.sin,
        aten.asin, aten.sinh, aten.tan, aten.atan, aten.tanh, aten.atanh, aten.sqrt,
        aten.rsqrt, aten.reciprocal, aten.sigmoid, aten.softplus, aten.threshold,
        aten.threshold_backward, aten.clamp, aten.where, aten.lerp, aten.addcmul, aten.gelu,
        aten.gelu_backward, aten.sum, aten.mean, aten._grad_sum_to_size, aten.sum_to_size,
        aten.amax, aten.to, aten.type_as, operator.getitem, aten.squeeze, aten.unsqueeze,
        aten.rsub, aten._to_copy,
    ]  # fmt: skip
    view_ops = [aten.squeeze, aten.unsqueeze, aten.alias, aten.view, aten.slice, aten.t,
                prims.broadcast_in_dim, aten.expand, aten.as_strided, aten.permute,
                aten.select, aten.split]  # fmt: skip
    recomputable += [
        prims.div, prims.convert_element_type, _prims("prepare_softmax_online"), aten.clone,
        aten._to_copy, aten.full_like, prims.var, prims.sum, aten.var, aten.std,
        prims.broadcast_in_dim, aten.select, aten._unsafe_view, aten.view, aten.expand,
        aten.slice, aten.reshape, aten.broadcast_tensors, aten.scalar_tensor, aten.ones,
        aten.new_zeros, aten.lift_fresh_copy, aten.arange, aten.triu, aten.var_mean,
        aten.isinf, aten.any, aten.full, aten.as_strided, aten.zeros, aten.empty,
        aten.empty_like, aten.argmax, aten.maximum, prims.iota,
        _prims("_low_memory_max_pool_offsets_to_indices"),
    ]  # fmt: skip
    recomputable += [aten.index, aten.gather] + view_ops + [aten.zeros_like]
    recomputable = _PointwiseOr.fromkeys(recomputable)  # ... and the pointwise ops
    random_ops = dict.fromkeys([aten.native_dropout, aten.rand_like, aten.randn_like])
    compute_intensive = dict.fromkeys([
        aten.mm, aten.convolution, aten.convolution_backward, aten.bmm, aten.addmm,
        aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_efficient_attention,
        aten._flash_attention_forward, aten._efficient_attention_forward,
        aten.upsample_bilinear2d, aten._scaled_mm,
    ])  # fmt: skip
    fusible = recomputable | random_ops
    op_types = OpTypes(fusible, compute_intensive, random_ops, dict.fromkeys(view_ops),
                               recomputable)  # fmt: skip
    if None not in recomputable:  # else ask again once torch._inductor has registered its prims
        _DEFAULT_OP_LIST = op_types
    return op_types


# -- sizes --
def _size_of(node) -> int:
    """Bytes of the node's output (partitioners.py `_size_of`). A multi-output node, whose
    `val` retorch's tracer does not record, counts the tensors its `getitem`s read out."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return val.numel() * val.element_size()
    if isinstance(val, (list, tuple)):
        return sum(v.numel() * v.element_size() for v in val if isinstance(v, torch.Tensor))
    if node.users and all(u.target is operator.getitem for u in node.users):
        return sum(_size_of(u) for u in node.users)
    return 0


def _is_tensor_node(node) -> bool:
    return isinstance(node.meta.get("val"), torch.Tensor)


# -- CSE (compile_utils.py `fx_graph_cse`) --
def _hashable(a):
    if isinstance(a, (list, tuple)):
        return (type(a).__name__, *map(_hashable, a))
    if isinstance(a, dict):
        return ("dict", *((k, _hashable(v)) for k, v in a.items()))
    if isinstance(a, slice):
        return ("slice", a.start, a.stop, a.step)
    return a


def fx_graph_cse(graph) -> int:
    """Merge nodes with the same op on the same arguments, in place; returns how many.

    As torch's: placeholders, random ops and nodes that alias a graph output are left alone.
    Retorch's metadata tensors share no storage, so "alias an output" is the output's nodes
    and the views made from them (torch compares storages)."""
    op_types = get_default_op_list()
    output = graph.output_node()
    aliases_output, todo = set(), list(output.all_input_nodes)
    while todo:
        n = todo.pop()
        if n not in aliases_output:
            aliases_output.add(n)
            todo += [u for u in n.users if op_types.is_view(u)]
    seen, merged = {}, 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n in aliases_output or op_types.is_random(n):
            continue
        if get_aten_target(n) in (aten.empty,):
            continue
        key = (n.target, _hashable(n.args), _hashable(n.kwargs))
        try:
            hash(key)
        except TypeError:
            continue
        if key in seen:
            n.replace_all_uses_with(seen[key])
            graph.erase_node(n)
            merged += 1
        else:
            seen[key] = n
    if merged:  # torch's CSE copies the graph anew: each node's users come in graph order
        order = {n: i for i, n in enumerate(graph.nodes)}
        for n in graph.nodes:
            users = sorted(n.users, key=order.__getitem__)
            n.users.clear()
            n.users.update(dict.fromkeys(users))
    return merged


# -- node classes (partitioners.py `NodeInfo`, `classify_nodes`) --
class NodeInfo:
    def __init__(self, inputs, required_fw, required_bw, tangents_closure, unclaimed,
                 fw_order, static_lifetime_input_nodes):  # fmt: skip
        self.inputs = inputs
        self._required_fw_nodes = required_fw
        self.required_bw_nodes = required_bw
        self.tangents_closure = tangents_closure
        self.unclaimed_nodes = unclaimed
        self.fw_order = fw_order
        self.static_lifetime_input_nodes = static_lifetime_input_nodes

    @property
    def required_fw_nodes(self) -> list:
        return sorted(self._required_fw_nodes, key=lambda n: self.fw_order[n])

    def is_required_fw(self, n) -> bool:
        return n in self._required_fw_nodes

    def is_required_bw(self, n) -> bool:
        return n in self.required_bw_nodes

    def get_fw_order(self, n) -> int:
        return self.fw_order[n]


def _must_be_in_backward(node) -> bool:
    mutable = isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable
    tag = node.meta.get("partitioner_tag")
    return tag == "must_be_in_backward" or (tag == "is_backward" and mutable)


def classify_nodes(joint_module, static_lifetime_input_indices, num_fwd_outputs) -> NodeInfo:
    """Which nodes the forward needs, which the backward (the tangents' closure), which
    neither ("unclaimed": forward nodes only the backward reads)."""
    graph = joint_module.graph
    required_bw = {}
    for node in graph.nodes:
        if _is_tangent(node) or _must_be_in_backward(node):
            required_bw[node] = None
        if node in required_bw:
            required_bw.update(dict.fromkeys(node.users))
    primal_inputs = [n for n in graph.nodes if _is_primal(n)]
    outputs = graph.output_node().args[0]
    fwd_outputs, bwd_outputs = outputs[:num_fwd_outputs], outputs[num_fwd_outputs:]
    tangents_closure = dict(required_bw)
    required_bw.update(dict.fromkeys(o for o in bwd_outputs if o is not None))
    required_fw, todo = {}, [o for o in fwd_outputs if o is not None]  # forward-only graph
    while todo:
        n = todo.pop()
        if n not in required_fw:
            required_fw[n] = None
            todo += n.all_input_nodes
    required_fw = {n: None for n in graph.nodes if n in required_fw}
    required_fw.update(dict.fromkeys(primal_inputs))  # placeholders stay in the forward graph
    unclaimed = {n: None for n in graph.nodes if n not in required_fw and n not in required_bw}
    static = {p: None for i, p in enumerate(primal_inputs) if i in static_lifetime_input_indices}
    fw_order = {n: i for i, n in enumerate(n for n in graph.nodes if n in required_fw)}
    return NodeInfo(primal_inputs, required_fw, required_bw, tangents_closure, unclaimed,
                    fw_order, static)  # fmt: skip


class MinCutOptions:
    def __init__(
        self,
        ban_if_used_far_apart,
        ban_if_long_fusible_chains,
        ban_if_materialized_backward,
        ban_if_not_in_allowlist,
        ban_if_reduction,
    ):
        self.ban_if_used_far_apart = ban_if_used_far_apart
        self.ban_if_long_fusible_chains = ban_if_long_fusible_chains
        self.ban_if_materialized_backward = ban_if_materialized_backward
        self.ban_if_not_in_allowlist = ban_if_not_in_allowlist
        self.ban_if_reduction = ban_if_reduction


def _dist_from_bw(joint_graph, node_info) -> dict:
    """Ops from a node to the nearest one outside the forward's needs (0 for those)."""
    dist = {}
    for node in reversed(list(joint_graph.nodes)):
        if node.op == "output":
            dist[node] = int(1e9)
        elif not node_info.is_required_fw(node):
            dist[node] = 0
        else:
            dist[node] = min([int(1e9)] + [dist[u] + 1 for u in node.users])
    return dist


def solve_min_cut(joint_graph, node_info, min_cut_options, *, config=MIN_CUT_CONFIG):
    """The saved values: the `x_in -> x_out` edges of a minimum source-sink cut.

    Returns `(saved_values, banned_nodes, nx_graph)`; torch returns the first two (the flow
    network is kept here so the chapter can walk it)."""
    op_types = get_default_op_list()
    dist_from_bw = _dist_from_bw(joint_graph, node_info)

    def is_fusible(a, b) -> bool:
        if get_aten_target(b) == aten.cat:  # "memory fusion" into a cat
            return True
        return op_types.is_fusible(a) and op_types.is_fusible(b)

    def is_materialized_backwards(node) -> bool:
        if op_types.is_view(node):
            return False
        cur_nodes = {node: None}
        while cur_nodes:
            cur = cur_nodes.popitem()[0]  # torch's OrderedSet.pop: the last added
            for user in cur.users:
                if not node_info.is_required_fw(user) and not is_fusible(cur, user):
                    return True
                if op_types.is_view(user):
                    cur_nodes[user] = None
        return False  # every reader outside the forward's needs fuses with it

    def should_ban_recomputation(node):
        """The reason string if `node` may not be recomputed, None otherwise."""
        if node.op != "call_function" or node.target is operator.getitem:
            return None
        if config["recompute_views"] and op_types.is_view(node):
            return None
        if node.target in (aten.lift_fresh_copy.default, aten.lift_fresh.default):
            return None
        if min_cut_options.ban_if_not_in_allowlist:
            if not op_types.is_recomputable(node):
                return "not in recomputable allowlist"
        else:
            if op_types.is_random(node):
                return "random op"
            if op_types.is_compute_intensive(node):
                return "compute intensive op"
        if min_cut_options.ban_if_materialized_backward and is_materialized_backwards(node):
            return "materialized in backward"
        if 1000 > dist_from_bw[node] > config["max_dist_from_bw"]:
            return "too far from backward"
        if min_cut_options.ban_if_reduction:  # an output 4x smaller than the inputs
            input_tensors_size = sum(_size_of(i) for i in node.args if isinstance(i, Node))
            if _size_of(node) * 4 < input_tensors_size:
                return "reduction op"
        return None

    def is_materialized(node) -> bool:
        if node.op == "placeholder":
            return True
        return not all(is_fusible(node, user) for user in node.users)

    def get_node_weight(node, static_lifetime_input_nodes):
        """(capacity of `node_in -> node_out`, why it cannot be saved or None)."""
        if config["treat_parameters_as_free_to_save"] and node in static_lifetime_input_nodes:
            return 0, None
        mem_sz = _size_of(node)
        if config["recompute_views"] and op_types.is_view(node):
            return math.inf, "view op (recompute_views=True)"
        # bias towards nodes closer to the backward
        mem_sz = int(mem_sz * (1.1 ** max(min(dist_from_bw[node], 100), 1)))
        return (mem_sz, None) if is_materialized(node) else (mem_sz * 2, None)

    nx_graph = nx.DiGraph()
    banned_nodes = {}

    def ban_recomputation_if_allowed(node, reason="") -> bool:
        if op_types.is_view(node):
            return False
        banned_nodes[node] = None
        nx_graph.add_edge(
            "source",
            node.name + "_in",
            capacity=math.inf,
            reason=f"cannot recompute: {reason}" if reason else "cannot recompute",
        )
        return True

    for node in joint_graph.nodes:
        if node.op == "output":
            continue
        if node in node_info.required_bw_nodes:
            if node not in node_info.tangents_closure:
                nx_graph.add_edge(
                    node.name + "_out",
                    "sink",
                    capacity=math.inf,
                    reason="must be available for backward: input required for gradient",
                )
            else:
                nx_graph.add_edge(
                    node.name + "_in",
                    "sink",
                    capacity=math.inf,
                    reason="must be computed in backward: required for gradient",
                )
                continue
        if _is_primal(node):
            ban_recomputation_if_allowed(node, "primal input")
        ban_reason = should_ban_recomputation(node)
        if node_info.is_required_fw(node) and ban_reason:
            ban_recomputation_if_allowed(node, ban_reason)
        if not _is_tensor_node(node):  # a multi-output node: only its getitems can be saved
            weight, cannot_save_reason = math.inf, "non-tensor output"
        else:
            weight, cannot_save_reason = get_node_weight(
                node, node_info.static_lifetime_input_nodes
            )
        if cannot_save_reason:
            nx_graph.add_edge(
                node.name + "_in",
                node.name + "_out",
                capacity=weight,
                reason=f"cannot save: {cannot_save_reason}",
            )
        else:
            nx_graph.add_edge(node.name + "_in", node.name + "_out", capacity=weight)
        for user in node.users:
            nx_graph.add_edge(
                node.name + "_out", user.name + "_in", capacity=math.inf, reason="data dependency"
            )  # every data edge is infinite: a cut crosses `x_in -> x_out` edges only

    def find_first_unfusible(start_nodes, max_range) -> int:
        """Forward order of the first unfusible node in the chains from `start_nodes`."""
        sorted_nodes = []
        for n in start_nodes:
            heapq.heappush(sorted_nodes, (node_info.get_fw_order(n), id(n), True, n))
        while sorted_nodes:
            _, _, node_is_fusible, node = heapq.heappop(sorted_nodes)
            if not node_is_fusible:
                return node_info.get_fw_order(node)
            for user in node.users:
                if node_info.is_required_fw(user):
                    if node_info.get_fw_order(user) > max_range:
                        continue
                    val = (node_info.get_fw_order(user), id(user), is_fusible(node, user), user)
                    if val not in sorted_nodes:
                        heapq.heappush(sorted_nodes, val)
        return max_range

    if min_cut_options.ban_if_used_far_apart:  # a fusible user past an unfusible one
        for used_node in node_info.required_fw_nodes:
            fw_users = [u for u in used_node.users if node_info.is_required_fw(u)]
            orders = [node_info.get_fw_order(u) for u in fw_users]
            if orders:
                first_unfusible_use = find_first_unfusible(fw_users, max(orders))
                for user in tuple(used_node.users):
                    if (
                        node_info.is_required_fw(user)
                        and node_info.get_fw_order(user) > first_unfusible_use
                        and is_fusible(used_node, user)
                        and user not in banned_nodes
                    ):
                        ban_recomputation_if_allowed(user)

    if min_cut_options.ban_if_long_fusible_chains:  # fusible chains over 100 forward ops
        visited = set()
        for start_node in joint_graph.nodes:
            if not node_info.is_required_fw(start_node):
                continue
            start_order = node_info.get_fw_order(start_node)
            fusible = [(start_order, id(start_node), start_node)]
            while fusible:
                _, _, cur = heapq.heappop(fusible)
                if cur in visited:
                    continue
                visited.add(cur)
                if node_info.get_fw_order(cur) > start_order + 100 and not fusible:
                    ban_recomputation_if_allowed(cur)
                    break
                for user in cur.users:
                    if (
                        node_info.is_required_fw(user)
                        and is_fusible(cur, user)
                        and user not in banned_nodes
                    ):
                        heapq.heappush(fusible, (node_info.get_fw_order(user), id(user), user))

    _, (reachable, non_reachable) = nx.minimum_cut(nx_graph, "source", "sink")
    cutset = {(u, v): None for u in reachable for v in nx_graph[u] if v in non_reachable}
    cut_nodes = {}
    for node_in, node_out in cutset:
        assert node_in[:-3] == node_out[:-4], (node_in, node_out)
        cut_nodes[node_in[:-3]] = None
    name_to_node = {n.name: n for n in joint_graph.nodes}
    node_idx = {n: i for i, n in enumerate(joint_graph.nodes)}  # deterministic: graph order
    saved_values = sorted((name_to_node[n] for n in cut_nodes), key=lambda n: node_idx[n])
    return saved_values, list(banned_nodes), nx_graph


def _min_cut_options(config) -> MinCutOptions:
    return MinCutOptions(
        ban_if_used_far_apart=config["ban_recompute_used_far_apart"],
        ban_if_long_fusible_chains=config["ban_recompute_long_fusible_chains"],
        ban_if_materialized_backward=config["ban_recompute_materialized_backward"],
        ban_if_not_in_allowlist=config["ban_recompute_not_in_allowlist"],
        ban_if_reduction=config["ban_recompute_reductions"],
    )


def choose_saved_values_set(joint_graph, node_info, *, config=MIN_CUT_CONFIG) -> list:
    """The min-cut's saved values at a memory budget of 1 (torch's default)."""
    return solve_min_cut(joint_graph, node_info, _min_cut_options(config), config=config)[0]


def _prepare(joint_module, num_fwd_outputs, static_lifetime_input_indices, config):
    """Torch's first steps, in place: dead code out, common subexpressions merged; then the
    node classes. Returns `(config with torch's defaults, node_info)`."""
    unknown = set(config) - set(MIN_CUT_CONFIG)
    if unknown:
        raise TypeError(f"min_cut_rematerialization_partition: unknown option(s) {sorted(unknown)}"
                        f"; the options are {sorted(MIN_CUT_CONFIG)}")  # fmt: skip
    config = {**MIN_CUT_CONFIG, **config}
    joint_module.graph.eliminate_dead_code()
    if config["cse"]:
        fx_graph_cse(joint_module.graph)
    indices = static_lifetime_input_indices or []
    return config, classify_nodes(joint_module, indices, num_fwd_outputs)


def min_cut_rematerialization_partition(
    joint_module, _joint_inputs=None, *, num_fwd_outputs, static_lifetime_input_indices=None,
    **config,
):  # fmt: skip
    """Partition the joint graph so that the backward recomputes the cheap forward.

    `config`: any of `MIN_CUT_CONFIG`'s flags (torch's `torch._functorch.config` names)."""
    config, node_info = _prepare(joint_module, num_fwd_outputs, static_lifetime_input_indices,
                                 config)  # fmt: skip
    if not node_info.required_bw_nodes:  # nothing to partition: networkx would fail
        return default_partition(joint_module, _joint_inputs, num_fwd_outputs=num_fwd_outputs)
    saved_values = choose_saved_values_set(joint_module.graph, node_info, config=config)
    return _extract_fwd_bwd_modules(joint_module, saved_values, num_fwd_outputs=num_fwd_outputs)


min_cut_partition = min_cut_rematerialization_partition


def min_cut_network(joint_module, num_fwd_outputs, *, static_lifetime_input_indices=None,
                    **config):  # fmt: skip
    """What `min_cut_rematerialization_partition` solves, for the chapter and the tests:
    `(saved_values, banned_nodes, nx_graph, cut_value)`, on the joint graph as the partition
    leaves it (dead code out, common subexpressions merged)."""
    config, node_info = _prepare(joint_module, num_fwd_outputs, static_lifetime_input_indices,
                                 config)  # fmt: skip
    saved, banned, nx_graph = solve_min_cut(
        joint_module.graph, node_info, _min_cut_options(config), config=config
    )
    return saved, banned, nx_graph, cut_weight(nx_graph, [n.name for n in saved])


def cut_weight(nx_graph, saved_names) -> float:
    """Total capacity of the `x_in -> x_out` edges of the named nodes in the network."""
    return sum(nx_graph[f"{name}_in"][f"{name}_out"]["capacity"] for name in saved_names)

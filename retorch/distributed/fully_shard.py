"""FSDP2: ``fully_shard``, every parameter cut on dim 0, gathered per layer when it runs.

Mirrors torch/distributed/fsdp/_fully_shard/ (``_fully_shard.py``: the API;
``_fsdp_param_group.py``: one group per ``fully_shard`` call, its unshard / reshard and
post-backward; ``_fsdp_collectives.py``: ``foreach_all_gather`` and
``foreach_reduce``). Where chapter 7's ``fsdp`` flattens a module's parameters into one
FlatParameter and shards that (FSDP1's design), FSDP2 keeps each parameter whole in name and
shape: a DTensor ``Shard(0)`` of it, padded on dim 0 to a multiple of the world size so each
piece has the same size. Per group, per step:

- forward pre-hook: ``unshard``: one all-gather of the group's pieces; ``wait_for_unshard``:
  copied out into each parameter's full tensor (whose storage is allocated again, so
  autograd's saved references stay valid); the all-gather's output is kept (torch's
  ``comm_ctx.all_gather_state``) until the next layer's copy-out or the root's post-forward;
- forward post-hook: ``reshard`` (the full tensors' storage freed) when
  ``reshard_after_forward``, and a hook on the outputs that unshards again before backward
  reaches the layer, also starting the next layer's all-gather (backward prefetch: gathered
  now, copied out when backward reaches that layer);
- post-backward (all the group's gradients accumulated): reshard, then one reduce-scatter of
  the padded gradients, averaged, into each piece's ``.grad``; its input is kept (torch's
  ``comm_ctx.reduce_scatter_states``) until the next group's post-backward or backward's end.

Each phase opens the profiler range torch's opens (``FSDP::pre_forward``, ``FSDP::all_gather``,
``FSDP::post_forward``, ``FSDP::pre_backward``, ``FSDP::backward_prefetch for ...``,
``FSDP::post_backward_reduce``, named after the module as ``_with_fqn`` names them), so a
profile of a step draws its timeline (``demos.fsdp2_timeline``).

Here a sharded parameter is a ``torch.nn.Parameter`` holding this rank's piece (any optimizer
steps it) and ``module._fsdp_specs`` keeps each piece's DTensor spec; the full tensors are
plain leaf tensors swapped in while the layer runs. ``sharded_dtensors(module)`` pairs each
piece with its spec, as torch's DTensor parameters are.

A parameter that tensor parallelism already cut over ``mesh["tp"]`` (its spec in the owner's
``_dtensor_specs``) is cut again on dim 0 over ``mesh["dp"]``, its tp piece standing for the
whole; its spec then lies on the 2-D mesh (dp, tp) as ``_fsdp_param.py``'s
``_init_sharding_spec_tp`` writes it: ``(_StridedShard(0, split_factor=k), *tp_placements)``
where the tp placements cut dim 0 into k pieces (a Colwise weight or bias), else
``(Shard(0), *tp_placements)`` (a Rowwise weight ``(S(0), S(1))``, its bias ``(S(0), R)``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from retorch.profiler import record_function

from . import collectives
from .device_mesh import DeviceMesh
from .fsdp import _tensors  # the tensors in a forward's output, as chapter 7's FSDP walks them
from .tensor import debug
from .tensor._api import DTensor, DTensorSpec
from .tensor._strided_shard import _StridedShard
from .tensor.placement_types import Shard

__all__ = ["FSDPParamGroup", "fully_shard", "sharded_dtensors"]


class _Param:
    """One parameter: its full shape, its piece, and its full tensor while unsharded."""

    def __init__(self, module: nn.Module, name: str, full: torch.Tensor, n: int, rank: int):
        self.module, self.name, self.shape = module, name, tuple(full.shape)
        self.padded_rows = math.ceil(full.shape[0] / n)
        self.rows, start = Shard.local_shard_size_and_offset(full.shape[0], n, rank)
        piece = full.detach()[start : start + self.rows].clone()
        self.sharded = nn.Parameter(piece, requires_grad=full.requires_grad)
        self.unsharded = torch.empty(self.shape, dtype=full.dtype).requires_grad_(
            full.requires_grad
        )
        self.unsharded.untyped_storage().resize_(0)  # allocated when unsharded

    @property
    def padded_numel(self) -> int:  # of one rank's padded piece
        return self.padded_rows * math.prod(self.shape[1:])

    def padded_piece(self, t: torch.Tensor) -> torch.Tensor:
        pad = torch.zeros((self.padded_rows - t.shape[0], *self.shape[1:]), dtype=t.dtype)
        return torch.cat([t.detach(), pad]).reshape(-1)


class _CommContext:
    """The buffers torch's ``FSDPCommContext`` (``_fsdp_param_group.py``) keeps across the
    groups under one root, beyond one call: ``all_gather_state``, the last forward all-gather's
    output (kept on GPU so the next copy-in does not overwrite it while in flight), and
    ``reduce_scatter_states``, the reduce-scatter inputs (kept until the reduce-scatter
    stream is done with them). retorch runs on one stream, but keeps them as long."""

    def __init__(self) -> None:
        self.all_gather_state: torch.Tensor | None = None
        self.reduce_scatter_states: list[torch.Tensor] = []
        self.max_input_buffers = 1  # torch's reduce_scatter_max_input_buffers
        self.final_callback_queued = False

    def post_backward_final(self) -> None:
        """After backward (torch's ``_root_post_backward_final_callback``): the kept
        reduce-scatter inputs released."""
        with record_function("FSDP::root_post_backward_callback"):
            self.reduce_scatter_states.clear()
            self.final_callback_queued = False


class FSDPParamGroup:
    """The parameters one ``fully_shard`` call manages, and their collectives."""

    def __init__(self, module: nn.Module, mesh, reshard_after_forward: bool) -> None:
        self.module, self.mesh = module, mesh
        self.group, self.n = mesh.get_group(0), mesh.size(0)
        rank = mesh.get_local_rank(0)
        self.reshard_after_forward = reshard_after_forward
        self.params = []
        for owner in _unmanaged_modules(module):
            for name, p in list(owner.named_parameters(recurse=False)):
                param = _Param(owner, name, p, self.n, rank)
                owner._parameters[name] = param.sharded
                self.params.append(param)
        self.is_unsharded = False
        self._all_gather_output: torch.Tensor | None = None  # gathered, not yet copied out
        self.comm_ctx = _CommContext()  # shared by the groups under one root
        self.is_root = True  # until an outer ``fully_shard`` call takes it under its root
        self.prefetch: FSDPParamGroup | None = None  # the group backward reaches next
        self.forward_order: list[FSDPParamGroup] = []
        self.grads_pending = 0
        self.fqn = ""  # the module's name under the root (``_module_fqn``), set by the root

    def _with_fqn(self, label: str) -> str:
        return f"{label} ({self.fqn})" if self.fqn else label

    # ---- collectives ---------------------------------------------------------------------
    def unshard(self) -> None:
        """One all-gather of every piece (``foreach_all_gather``), its output held on the group
        (torch's ``_all_gather_result``) until ``wait_for_unshard`` copies it out."""
        if self._all_gather_output is not None:  # already called, pending wait
            return
        if self.is_unsharded or not self.params:
            return
        debug._record("c10d._allgather_base_")
        with record_function(self._with_fqn("FSDP::all_gather")):
            send = torch.cat([p.padded_piece(p.sharded) for p in self.params])
            out = torch.empty(self.n * send.numel(), dtype=send.dtype)
            collectives.all_gather(out, send, group=self.group)
        self._all_gather_output = out

    def wait_for_unshard(self, in_forward: bool) -> None:
        """Copy the all-gather's output out into each parameter's full tensor. In forward
        torch keeps the output in ``comm_ctx.all_gather_state`` after the copy-out (to
        overlap the next layer's copy-in with it on GPU) and frees the previous layer's
        there, before this copy-out; in backward the output is freed at once."""
        out = self._all_gather_output
        if out is None:
            return  # no preceding unshard
        if in_forward:
            self.comm_ctx.all_gather_state = None  # free the previous layer's output
        per_rank, offset = out.view(self.n, -1), 0
        with record_function(self._with_fqn("FSDP::all_gather_copy_out")):
            for p in self.params:
                rows = per_rank[:, offset : offset + p.padded_numel]
                full = rows.reshape(self.n * p.padded_rows, *p.shape[1:])[: p.shape[0]]
                p.unsharded.untyped_storage().resize_(p.unsharded.nbytes)
                # the same tensor refilled: autograd's saved references must not see a new
                # version (torch's FSDPParam does the same, _unsafe_preserve_version_counter)
                with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(p.unsharded):
                    p.unsharded.copy_(full)
                p.module._parameters[p.name] = p.unsharded
                offset += p.padded_numel
        self.is_unsharded = True
        if in_forward and self.n > 1:  # kept until the next layer's copy-out or forward's end
            self.comm_ctx.all_gather_state = out
        self._all_gather_output = None

    def reshard(self) -> None:
        """The full tensors' storage freed; the pieces back on the module."""
        if not self.is_unsharded:
            return
        for p in self.params:
            p.unsharded.untyped_storage().resize_(0)
            p.module._parameters[p.name] = p.sharded
        self.is_unsharded = False

    def post_backward(self) -> None:
        """One reduce-scatter of the padded gradients (``foreach_reduce``), averaged. As
        torch's: the full tensors are resharded first (their gradients taken off them), the
        previous group's reduce-scatter input is released (``comm_ctx.reduce_scatter_states``
        keeps at most ``reduce_scatter_max_input_buffers``, 1, of them), and this group's is
        kept there in its place (until the next group's post-backward or backward's end)."""
        debug._record("c10d._reduce_scatter_base_")
        grads = [p.unsharded.grad for p in self.params]
        for p in self.params:
            p.unsharded.grad = None
        self.reshard()
        states, cap = self.comm_ctx.reduce_scatter_states, self.comm_ctx.max_input_buffers
        if len(states) >= cap:
            with record_function(self._with_fqn("FSDP::post_backward_rs_wait")):
                while len(states) >= cap:
                    states.pop(0)
        pre, post = _divide_factors(self.n)
        with record_function(self._with_fqn("FSDP::post_backward_reduce")):
            chunks = []
            for r in range(self.n):  # rank-major: what rank r receives comes r-th
                for p, g in zip(self.params, grads, strict=True):
                    pieces = torch.chunk(g, self.n)
                    chunks.append(p.padded_piece(pieces[r] if r < len(pieces) else g[:0]))
            send = torch.cat(chunks).div_(pre)
            del chunks
            mine = torch.empty(send.numel() // self.n, dtype=send.dtype)
            collectives.reduce_scatter(mine, send, group=self.group)
            mine.div_(post)
            del grads
            offset = 0
            for p in self.params:
                piece = mine[offset : offset + p.padded_numel].view(p.padded_rows, *p.shape[1:])
                piece = piece[: p.rows].clone()
                p.sharded.grad = piece if p.sharded.grad is None else p.sharded.grad + piece
                offset += p.padded_numel
        states.append(send)

    # ---- hooks -----------------------------------------------------------------------------
    def pre_forward(self, module, args) -> None:
        if not self.params:  # (torch makes no parameter group, and opens no range, for these)
            return
        with record_function(self._with_fqn("FSDP::pre_forward")):
            if self not in self.forward_order:
                if self.forward_order:
                    self.prefetch = self.forward_order[-1]
                self.forward_order.append(self)
            self.unshard()
            self.wait_for_unshard(in_forward=True)

    def post_forward(self, module, args, output):
        if self.is_root:  # free the last layer's all-gather output (torch's root does so)
            self.comm_ctx.all_gather_state = None
        if not self.params:
            return output
        with record_function(self._with_fqn("FSDP::post_forward")):
            if self.reshard_after_forward:
                self.reshard()
            self.grads_pending = sum(p.unsharded.requires_grad for p in self.params)
            for t in _tensors(output):
                if t.requires_grad:
                    t.register_hook(self._pre_backward)
            return output

    def _pre_backward(self, grad):
        ctx = self.comm_ctx
        if not ctx.final_callback_queued:  # (torch's _register_root_post_backward_final_callback)
            ctx.final_callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(ctx.post_backward_final)
        with record_function(self._with_fqn("FSDP::pre_backward")):
            self.unshard()
            self.wait_for_unshard(in_forward=False)
            target = self.prefetch
            if target is not None:  # the next layer backward reaches: gather it now
                with record_function(f"FSDP::backward_prefetch for {target.fqn}"):
                    target.unshard()  # its output waits for its own pre-backward
        return grad

    def _param_ready(self, _tensor) -> None:
        self.grads_pending -= 1
        if self.grads_pending == 0:
            self.post_backward()


def _unmanaged_modules(module: nn.Module):
    """``module`` and its submodules, not descending into those an inner call manages."""
    yield module
    for child in module.children():
        if getattr(child, "_fsdp_group", None) is None:
            yield from _unmanaged_modules(child)


def _divide_factors(n: int) -> tuple[float, float]:
    """The average as two divisions, before and after the sum (``_fsdp_collectives.py``'s
    ``_get_gradient_divide_factors``, for a backend without ReduceOp.AVG such as gloo):
    dividing half before keeps a float16 sum of many ranks from overflowing."""
    factor = 1
    while n % factor == 0 and n / factor > factor:
        factor *= 2
    return factor, n / factor


def fully_shard(module: nn.Module, *, mesh, reshard_after_forward: bool = True) -> nn.Module:
    """Shard the parameters of ``module`` not already managed by an inner ``fully_shard``."""
    group = FSDPParamGroup(module, mesh, reshard_after_forward)
    module._fsdp_group = group
    module._fsdp_specs = {(p.module, p.name): _spmd_spec(p, mesh) for p in group.params}
    for p in group.params:
        if p.unsharded.requires_grad:
            p.unsharded.register_post_accumulate_grad_hook(group._param_ready)
    # the groups under this root share one record of the order forward reaches them in
    # (backward reaches them in reverse: each group prefetches the one before it)
    for name, sub in module.named_modules():
        if getattr(sub, "_fsdp_group", None) is not None:
            sub._fsdp_group.forward_order = group.forward_order
            sub._fsdp_group.comm_ctx = group.comm_ctx
            sub._fsdp_group.is_root = sub is module
            sub._fsdp_group.fqn = name
    module.register_forward_pre_hook(group.pre_forward)
    module.register_forward_hook(group.post_forward)
    return module


def _strides(shape) -> tuple[int, ...]:
    return tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))


def _spmd_spec(p: _Param, dp_mesh) -> DTensorSpec:
    """The piece's spec: ``Shard(0)`` over ``dp_mesh``; for a tensor-parallel parameter, torch's
    ``_init_sharding_spec_tp``: on the mesh (dp, tp), ``_StridedShard(0, split_factor=k)`` before
    the tp placements when they cut dim 0 into k > 1 pieces, else ``Shard(0)``."""
    tp = getattr(p.module, "_dtensor_specs", {}).get(p.name)
    if tp is None:
        return DTensorSpec(dp_mesh, (Shard(0),), p.shape, _strides(p.shape), p.sharded.dtype)
    if len(tp.placements) > 2:  # (torch's message)
        raise NotImplementedError(
            f"FSDP only supports 1D TP/EP or 2D EP+TP, not {tuple(tp.placements)}"
        )
    split_factor = math.prod(
        tp.mesh.size(i) for i, q in enumerate(tp.placements) if q.is_shard(0)
    )  # fmt: skip  (torch: ``num_shards_map[0]``)
    dp = _StridedShard(0, split_factor=split_factor) if split_factor > 1 else Shard(0)
    mesh = _concatenate(dp_mesh, tp.mesh)
    return DTensorSpec(mesh, (dp, *tp.placements), tp.shape, tp.stride, tp.dtype)


def _concatenate(dp_mesh, tp_mesh) -> DeviceMesh:
    """The mesh (dp, tp) that ``dp_mesh`` and ``tp_mesh`` are slices of, through this rank
    (torch's ``DeviceMesh._concatenate``): rank (i, j) is ``dp[i] + tp[j] - this rank``, the
    slices' groups reused."""
    me = dp_mesh.get_rank()
    ranks = dp_mesh.mesh.reshape(-1, 1) + tp_mesh.mesh.reshape(1, -1) - me
    # torch also checks the slices share one root mesh (this rebuild's meshes keep none) and
    # names every dim; the overlap check is torch's: each rank of the result once
    if ranks.unique().numel() != ranks.numel():
        raise RuntimeError(f"Cannot concatenate overlapping meshes: {[dp_mesh, tp_mesh]}")
    names = None
    if dp_mesh.mesh_dim_names and tp_mesh.mesh_dim_names:
        names = dp_mesh.mesh_dim_names + tp_mesh.mesh_dim_names
    return DeviceMesh(dp_mesh.device_type, ranks, mesh_dim_names=names,
                      _groups=dp_mesh.get_all_groups() + tp_mesh.get_all_groups(),
                      _strides=dp_mesh._strides + tp_mesh._strides)  # fmt: skip


def sharded_dtensors(module: nn.Module) -> dict[str, DTensor]:
    """Each parameter a ``fully_shard`` call under ``module`` manages, by its name under
    ``module``: this rank's piece and its spec, as torch's sharded DTensor parameters are."""
    specs = {}
    for sub in module.modules():
        group = getattr(sub, "_fsdp_group", None)
        for p in group.params if group is not None else ():
            specs[id(p.sharded)] = sub._fsdp_specs[(p.module, p.name)]
    return {name: DTensor(p, specs[id(p)]) for name, p in module.named_parameters()
            if id(p) in specs}  # fmt: skip

"""The collectives a DTensor issues, on chapter 7's ring and tree messages.

Mirrors torch/distributed/tensor/_collective_utils.py (``mesh_scatter``, ``mesh_broadcast``,
``pad_tensor``, ``unpad_tensor``, ``shard_dim_alltoall``) and the three functional
collectives of torch/distributed/_functional_collectives.py that DTensor calls
(``all_gather_single``, ``reduce_scatter_single``, ``all_reduce``; by "max" and "min" on
``reduce_ops.py``'s ring, for ``Partial("max")`` and ``Partial("min")``). ``group`` is a pair
``(mesh, mesh_dim)``: the process group of that mesh dimension. Each call is counted under
the name torch's ``CommDebugMode`` gives the same operation (``debug.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import collectives, reduce_ops
from . import debug


def _group(mesh, mesh_dim: int):
    return mesh.get_group(mesh_dim)


def pad_tensor(tensor: torch.Tensor, pad_dim: int, pad_size: int) -> torch.Tensor:
    """Zeros appended on ``pad_dim`` (collectives need equal sizes on every rank)."""
    if pad_size == 0:
        return tensor
    pad = [0, 0] * (tensor.ndim - pad_dim)
    pad[-1] = pad_size
    return F.pad(tensor, pad)


def unpad_tensor(tensor: torch.Tensor, pad_dim: int, pad_size: int) -> torch.Tensor:
    if pad_size == 0:
        return tensor
    return tensor.narrow(pad_dim, 0, tensor.size(pad_dim) - pad_size)


def all_gather_single(input: torch.Tensor, gather_dim: int, group) -> torch.Tensor:
    """Every rank's ``input`` concatenated on ``gather_dim`` (gathered on dim 0, then
    re-cut and joined on ``gather_dim``, as torch's functional collective does)."""
    debug._record("c10d_functional.all_gather_into_tensor")
    mesh, mesh_dim = group
    n = mesh.size(mesh_dim)
    input = input.contiguous()
    out = input.new_empty((n * input.size(0), *input.shape[1:]))
    collectives.all_gather(out, input, group=_group(mesh, mesh_dim))
    if gather_dim != 0:
        out = torch.cat(torch.chunk(out, n, dim=0), dim=gather_dim)
    return out


def reduce_scatter_single(input: torch.Tensor, reduce_op: str, scatter_dim: int, group):
    """The ``reduce_op`` over ranks of this rank's chunk of ``input`` on ``scatter_dim``."""
    debug._record("c10d_functional.reduce_scatter_tensor")
    mesh, mesh_dim = group
    n = mesh.size(mesh_dim)
    if scatter_dim != 0:  # bring the chunks to dim 0, as torch's functional collective does
        input = torch.cat(torch.chunk(input, n, dim=scatter_dim))
    out = input.new_empty((input.size(0) // n, *input.shape[1:]))
    if reduce_op in reduce_ops.REDUCE_OPS:  # max, min: the same ring, another function
        return reduce_ops.reduce_scatter_op(out, input.contiguous(), reduce_op,
                                            group=_group(mesh, mesh_dim))  # fmt: skip
    collectives.reduce_scatter(out, input.contiguous(), group=_group(mesh, mesh_dim))
    return _finish(out, reduce_op, n)  # shaped as one chunk on scatter_dim


def all_reduce(tensor: torch.Tensor, reduce_op: str, group) -> torch.Tensor:
    """A new tensor: the ``reduce_op`` of ``tensor`` over the group (the input is kept)."""
    debug._record("c10d_functional.all_reduce")
    mesh, mesh_dim = group
    out = tensor.contiguous().clone()
    if reduce_op in reduce_ops.REDUCE_OPS:  # max, min: the same ring, another function
        return reduce_ops.all_reduce_op(out, reduce_op, group=_group(mesh, mesh_dim))
    collectives.ring_all_reduce(out, group=_group(mesh, mesh_dim))
    return _finish(out, reduce_op, mesh.size(mesh_dim))


def _finish(summed: torch.Tensor, reduce_op: str, n: int) -> torch.Tensor:
    if reduce_op == "sum":
        return summed
    if reduce_op == "avg":
        return summed / n
    raise NotImplementedError(
        f"reduce_op {reduce_op!r}: chapter 7's ring adds ('sum', 'avg'), "
        "retorch.distributed.reduce_ops takes 'max' and 'min'; no other op is rebuilt"
    )


def mesh_scatter(output, scatter_list, mesh, mesh_dim: int = 0, *, group_src: int = 0):
    """``scatter_list`` of the mesh dimension's rank ``group_src`` scattered over it."""
    debug._record("c10d.scatter_")
    src_list = scatter_list if mesh.get_local_rank(mesh_dim) == group_src else None
    collectives.scatter(output, src_list, group_src, group=_group(mesh, mesh_dim))
    return output


def mesh_broadcast(tensor, mesh, mesh_dim: int = 0, *, group_src: int = 0):
    debug._record("c10d.broadcast_")
    collectives.tree_broadcast(tensor, group_src, group=_group(mesh, mesh_dim))
    return tensor


def shard_dim_alltoall(input, gather_dim: int, shard_dim: int, mesh, mesh_dim: int):
    """Shard(gather_dim) -> Shard(shard_dim). On a CPU mesh torch falls back to an all-gather
    and a local chunk ("CPU process group does not support alltoall yet"); so does this.
    On other devices it is a true all-to-all: each rank sends (n-1)/n of its shard, not
    receives the whole tensor."""
    from .placement_types import Shard

    n, me = mesh.size(mesh_dim), mesh.get_local_rank(mesh_dim)
    if mesh.device_type == "cpu":
        out = all_gather_single(input, gather_dim, (mesh, mesh_dim))
        return Shard._custom_chunk(out, n, shard_dim)[me].contiguous()
    debug._record("c10d_functional.all_to_all_single")
    sends = [c.contiguous() for c in torch.chunk(input, n, dim=shard_dim)]
    recvs = [torch.empty_like(sends[me]) for _ in range(n)]
    collectives.all_to_all(recvs, sends, group=_group(mesh, mesh_dim))
    return torch.cat(recvs, dim=gather_dim)

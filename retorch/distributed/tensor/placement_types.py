"""Placements: how a DTensor's values lie on one mesh dimension.

Mirrors torch/distributed/tensor/placement_types.py:

- ``Shard(dim)``: each rank holds one piece of tensor dimension ``dim``, cut as
  ``torch.chunk`` cuts it (the last pieces may be smaller, or empty). Collectives need
  equal sizes, so a piece is padded with zeros to the full chunk before a collective and
  cut back after (``_maybe_pad_tensor`` / ``_maybe_unpad_tensor``).
- ``Replicate()``: each rank holds the whole tensor.
- ``Partial(reduce_op)``: each rank holds a term; the value is their sum (or average).

Each placement knows the collective that leaves it for another, on one mesh dimension:
Shard -> Replicate all-gathers, Partial -> Replicate all-reduces, Partial -> Shard
reduce-scatters, Shard(i) -> Shard(j) all-to-alls, Replicate -> Shard takes a local chunk
(no message), Replicate -> Partial divides by n (no message).
"""

from __future__ import annotations

import torch

from ._collective_utils import (
    all_gather_single,
    all_reduce,
    mesh_broadcast,
    mesh_scatter,
    pad_tensor,
    reduce_scatter_single,
    shard_dim_alltoall,
    unpad_tensor,
)

__all__ = ["Partial", "Placement", "Replicate", "Shard"]


class Placement:
    """The base of the three placements (torch: ``torch._C._distributed.Placement``)."""

    def is_shard(self, dim: int | None = None) -> bool:
        return isinstance(self, Shard) and (dim is None or self.dim == dim)

    def is_replicate(self) -> bool:
        return isinstance(self, Replicate)

    def is_partial(self, reduce_op: str | None = None) -> bool:
        return isinstance(self, Partial) and (reduce_op is None or self.reduce_op == reduce_op)


class Shard(Placement):
    def __init__(self, dim: int) -> None:
        self.dim = dim

    def _cut(self) -> dict:
        """What besides the dim makes this cut (``_StridedShard``: its split factor), as the
        keyword arguments that rebuild it on another dim."""
        return {}

    def __eq__(self, other) -> bool:
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self) -> int:
        return hash(self.dim)

    def __repr__(self) -> str:
        return f"Shard(dim={self.dim})"

    def __str__(self) -> str:
        return f"S({self.dim})"

    # ---- cutting ---------------------------------------------------------------------------
    @staticmethod
    def _custom_chunk(tensor: torch.Tensor, num_chunks: int, dim: int) -> list[torch.Tensor]:
        """``torch.chunk``, with empty pieces appended up to ``num_chunks``: chunk(5, 4) gives
        sizes 2, 2, 1 and no fourth piece, so the fourth rank gets an empty one."""
        pieces = list(torch.chunk(tensor, num_chunks, dim=dim))
        empty = list(tensor.shape)
        empty[dim] = 0
        return pieces + [tensor.new_zeros(empty) for _ in range(num_chunks - len(pieces))]

    def _split_tensor(self, tensor, num_chunks: int, *, with_padding: bool = True,
                      contiguous: bool = True):  # fmt: skip
        """The pieces of ``tensor`` on ``self.dim`` and how much padding each got."""
        full = (tensor.size(self.dim) + num_chunks - 1) // num_chunks
        shards, pads = [], []
        for piece in self._custom_chunk(tensor, num_chunks, self.dim):
            if with_padding:
                pads.append(full - piece.size(self.dim))
                piece = pad_tensor(piece, self.dim, pads[-1])
            shards.append(piece.contiguous() if contiguous else piece)
        return shards, pads

    @staticmethod
    def local_shard_size_and_offset(size: int, num_chunks: int, rank: int) -> tuple[int, int]:
        """The length and start of ``rank``'s piece of a dimension of ``size``."""
        full = (size + num_chunks - 1) // num_chunks
        start = full * rank
        return max(0, min(size, start + full) - start), min(size, start)

    def _local_shard_size_and_offset(self, size: int, num_chunks: int, rank: int):
        """The length (and start) of ``rank``'s piece, as this placement cuts: what
        ``_redistribute`` asks each outer mesh dim for (a ``_StridedShard`` cuts otherwise)."""
        return Shard.local_shard_size_and_offset(size, num_chunks, rank)

    # ---- collectives -----------------------------------------------------------------------
    def _shard_tensor(self, tensor, mesh, mesh_dim: int, src_data_rank: int | None = 0):
        """This rank's piece, scattered from the dimension's rank ``src_data_rank``."""
        n, me = mesh.size(mesh_dim), mesh.get_local_rank(mesh_dim)
        if src_data_rank is None:  # no message: every rank cuts its own copy
            return self._custom_chunk(tensor, n, self.dim)[me].contiguous()
        shards, pads = self._split_tensor(tensor, n)
        out = torch.empty_like(shards[0])
        mesh_scatter(out, shards, mesh, mesh_dim, group_src=src_data_rank)
        return unpad_tensor(out, self.dim, pads[me]).contiguous()

    def _maybe_pad_tensor(self, local, logical_size: int, num_chunks: int):
        if logical_size % num_chunks:
            full = (logical_size + num_chunks - 1) // num_chunks
            local = pad_tensor(local, self.dim, full - local.size(self.dim))
        return local.contiguous()

    def _maybe_unpad_tensor(self, gathered, logical_size: int, num_chunks: int):
        if logical_size % num_chunks:
            full = (logical_size + num_chunks - 1) // num_chunks
            gathered = unpad_tensor(gathered, self.dim, full * num_chunks - logical_size)
        return gathered.contiguous()

    def _to_replicate_tensor(self, local, mesh, mesh_dim: int, logical_shape):
        """All-gather the pieces (each padded to the full chunk, the padding cut after)."""
        n = mesh.size(mesh_dim)
        local = self._maybe_pad_tensor(local, logical_shape[self.dim], n)
        gathered = all_gather_single(local, self.dim, (mesh, mesh_dim))
        return self._maybe_unpad_tensor(gathered, logical_shape[self.dim], n)

    def _replicate_to_shard(self, local, mesh, mesh_dim: int, shard_index: int):
        """A local chunk: no message."""
        return self._custom_chunk(local, mesh.size(mesh_dim), self.dim)[shard_index].clone()

    def _reduce_shard_tensor(self, tensor, mesh, reduce_op: str, mesh_dim: int):
        """Reduce-scatter: this rank's piece of the reduction over the dimension."""
        n, me = mesh.size(mesh_dim), mesh.get_local_rank(mesh_dim)
        padded = tensor.size(self.dim) % n != 0
        if padded:
            shards, pads = self._split_tensor(tensor, n)
            tensor = torch.cat(shards, dim=self.dim)
        out = reduce_scatter_single(tensor, reduce_op, self.dim, (mesh, mesh_dim))
        return unpad_tensor(out, self.dim, pads[me]) if padded else out

    def _to_new_shard_dim(self, local, mesh, mesh_dim: int, logical_shape, new_dim: int):
        """Shard(self.dim) -> Shard(new_dim): an all-to-all (padding both dims first)."""
        n, me = mesh.size(mesh_dim), mesh.get_local_rank(mesh_dim)
        old_size, new_size = logical_shape[self.dim], logical_shape[new_dim]
        old_full, new_full = -(-old_size // n), -(-new_size // n)
        if old_size % n:
            local = pad_tensor(local, self.dim, old_full - local.size(self.dim))
        if new_size % n:
            local = pad_tensor(local, new_dim, new_full * n - local.size(new_dim))
        out = shard_dim_alltoall(local.contiguous(), self.dim, new_dim, mesh, mesh_dim)
        if old_size % n:
            out = unpad_tensor(out, self.dim, old_full * n - old_size)
        if new_size % n:
            mine = self.local_shard_size_and_offset(new_size, n, me)[0]
            out = unpad_tensor(out, new_dim, new_full - mine)
        return out


class Replicate(Placement):
    def __eq__(self, other) -> bool:
        return isinstance(other, Replicate)

    def __hash__(self) -> int:
        return -1

    def __repr__(self) -> str:
        return "Replicate()"

    def __str__(self) -> str:
        return "R"

    def _replicate_tensor(self, tensor, mesh, mesh_dim: int, src_data_rank: int | None = 0):
        """The dimension's rank ``src_data_rank`` broadcasts its copy."""
        tensor = tensor.contiguous()
        if src_data_rank is not None:
            mesh_broadcast(tensor, mesh, mesh_dim, group_src=src_data_rank)
        return tensor


class Partial(Placement):
    def __init__(self, reduce_op: str = "sum") -> None:
        self.reduce_op = reduce_op

    def __eq__(self, other) -> bool:
        return isinstance(other, Partial) and other.reduce_op == self.reduce_op

    def __hash__(self) -> int:
        return 1 + hash(self.reduce_op)

    def __repr__(self) -> str:
        return f"Partial({self.reduce_op})"

    def __str__(self) -> str:
        return f"P({self.reduce_op})"

    def _reduce_value(self, tensor, mesh, mesh_dim: int):
        """Partial -> Replicate: an all-reduce."""
        return all_reduce(tensor, self.reduce_op, (mesh, mesh_dim))

    def _reduce_shard_value(self, tensor, mesh, mesh_dim: int, shard_spec: Shard):
        """Partial -> Shard: a reduce-scatter."""
        return shard_spec._reduce_shard_tensor(tensor, mesh, self.reduce_op, mesh_dim)

    def _partition_value(self, tensor, mesh, mesh_dim: int):
        """Replicate -> Partial: terms whose reduction is the value (v/n each for a sum)."""
        if self.reduce_op == "sum":
            return tensor / mesh.size(mesh_dim)
        if self.reduce_op in ("avg", "min", "max"):
            return tensor
        raise ValueError(f"Replicate to Partial({self.reduce_op}) conversion is not supported.")

"""``_StridedShard``: a Shard cut right to left, as FSDP2 on a tensor-parallel parameter cuts it.

Mirrors ``_StridedShard`` of torch/distributed/tensor/placement_types.py. On a 2x2 mesh
("dp", "tp"), a colwise-parallel weight is first cut on dim 0 over "tp"; ``fully_shard`` then
cuts each tp piece again on dim 0 over "dp" (torch/distributed/fsdp/_fully_shard/
_fsdp_param.py). Rank (dp=i, tp=j) holds piece j*2+i of 4, not i*2+j as
``(Shard(0), Shard(0))`` (cut left to right) would say. torch writes this layout
``(_StridedShard(0, split_factor=2), Shard(0))``: on the "dp" dim, the rows are first split
into ``split_factor`` pieces (the tp pieces to come), each of those cut into n, and a rank's
piece is its cut of every one of them, concatenated.

- ``_split_tensor``: that double cut (``Shard._custom_chunk`` twice, uneven pieces as torch's
  chunk cuts them), padded to the longest piece for a collective;
- ``_shard_tensor``: this rank's piece, scattered from ``src_data_rank`` (equal pieces only:
  torch asserts so) or cut locally (``src_data_rank=None``, any sizes);
- ``_to_replicate_tensor``: all-gather the padded pieces, then put each row back where it came
  from: the same cut replayed on the row indices (``arange``) says which gathered row is which
  (torch's "replay the replicate-to-shard process").

- ``_local_shard_size_and_offset``: how many rows a rank holds (the same replay), which
  ``_redistribute.transform_infos`` asks of an outer mesh dim to size what the inner dims cut:
  on a 2x2 mesh, 6 rows as ``(_S(0, 2), S(0))`` leave 4 rows on dp rank 0 and 2 on dp rank 1,
  not the 3 and 3 a plain Shard would.

retorch's ``fully_shard`` over ``mesh["dp"]`` of a tensor-parallel parameter gives its piece
this placement on the 2-D mesh (``fully_shard._spmd_spec``), as torch's ``_fsdp_param.py`` does.
"""

from __future__ import annotations

import torch

from ._collective_utils import all_gather_single, mesh_scatter, pad_tensor
from .placement_types import Shard

__all__ = ["_StridedShard"]


class _StridedShard(Shard):
    def __init__(self, dim: int, *, split_factor: int = 1, sf: int | None = None) -> None:
        if sf is not None:
            if split_factor != 1:
                raise TypeError("_StridedShard received both split_factor and sf")
            split_factor = sf
        super().__init__(dim)
        self.split_factor = split_factor

    def _cut(self) -> dict:
        return {"split_factor": self.split_factor}

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, _StridedShard)
            and other.dim == self.dim
            and other.split_factor == self.split_factor
        )

    def __hash__(self) -> int:
        return hash((self.dim, self.split_factor))

    def __repr__(self) -> str:
        return f"_StridedShard(dim={self.dim}, sf={self.split_factor})"

    def __str__(self) -> str:
        return f"_S({self.dim}, {self.split_factor})"

    def _split_tensor(self, tensor, num_chunks: int, *, with_padding: bool = True,
                      contiguous: bool = True):  # fmt: skip
        """Split into ``split_factor`` pieces, each into ``num_chunks``; piece i of the result
        is every piece's i-th cut, concatenated."""
        if self.dim > tensor.ndim:
            raise AssertionError(f"Sharding dim {self.dim} greater than tensor ndim {tensor.ndim}")
        first = Shard._custom_chunk(tensor, self.split_factor, self.dim)
        second = [Shard._custom_chunk(s, num_chunks, self.dim) for s in first]
        shards = []
        for i in range(num_chunks):
            shard = torch.cat([second[j][i] for j in range(self.split_factor)], dim=self.dim)
            shards.append(shard.contiguous() if contiguous else shard)
        pads = []
        if with_padding:
            longest = max(s.size(self.dim) for s in shards)
            pads = [longest - s.size(self.dim) for s in shards]
        return shards, pads

    def _local_shard_size_and_offset(self, size: int, num_chunks: int, rank: int):
        """The length of ``rank``'s piece and the first row it holds (-1 if none): the cut
        replayed on the row indices, as torch's ``local_shard_size_and_offset`` does. Rows
        9 cut 2 then 4 ways: pieces of 3, 3, 2, 1 rows where a plain Shard says 3, 3, 3, 0."""
        rows = self._split_tensor(torch.arange(size), num_chunks, with_padding=False)[0][rank]
        return rows.numel(), int(rows[0]) if rows.numel() else -1

    def _shard_tensor(self, tensor, mesh, mesh_dim: int, src_data_rank: int | None = 0):
        """This rank's piece; scattered from the dimension's rank ``src_data_rank``."""
        n, me = mesh.size(mesh_dim), mesh.get_local_rank(mesh_dim)
        if src_data_rank is None:
            return self._split_tensor(tensor, n, with_padding=False)[0][me].clone()
        shards, pads = self._split_tensor(tensor, n)
        if any(pads):  # torch's scatter asserts equal pieces (it computes pads, never pads)
            raise AssertionError(
                f"_StridedShard scatter needs equal pieces: {tensor.size(self.dim)} rows cut "
                f"{self.split_factor} then {n} ways are not (pass src_data_rank=None)"
            )
        out = torch.empty_like(shards[0])
        mesh_scatter(out, shards, mesh, mesh_dim, group_src=src_data_rank)
        return out

    def _to_replicate_tensor(self, local, mesh, mesh_dim: int, logical_shape):
        """All-gather the padded pieces; the cut replayed on the row indices tells which
        gathered row each row of the whole tensor is."""
        n, size = mesh.size(mesh_dim), logical_shape[self.dim]
        index_shards, _ = self._split_tensor(torch.arange(size), n, with_padding=False)
        longest = max(s.numel() for s in index_shards)
        local = pad_tensor(local, self.dim, longest - local.size(self.dim)).contiguous()
        gathered = all_gather_single(local, self.dim, (mesh, mesh_dim))
        positions = torch.cat([torch.arange(s.numel()) + r * longest
                               for r, s in enumerate(index_shards)])  # fmt: skip
        permutation = torch.cat(index_shards)  # gathered row k holds row permutation[k]
        inverse = torch.argsort(permutation)
        return gathered.index_select(self.dim, positions[inverse]).contiguous()

"""All-reduce and reduce-scatter by MAX and MIN, on chapter 7's ring of messages.

Chapter 7's ring (``collectives.py``) adds the chunk arriving from the left neighbour to its
own. gloo runs the same ring for every ``ReduceOp``, with the elementwise function it picks
(torch/csrc/distributed/c10d/ProcessGroupGloo.cpp, ``getFunction``: ``ReduceOp::MAX`` ->
``gloo::max``, ``ReduceOp::MIN`` -> ``gloo::min``). So does this file: the same steps, the same
chunks and messages, ``torch.maximum`` or ``torch.minimum`` in place of the addition. A
maximum is exact in any order, so the results equal torch's bit for bit (floats included);
NaN propagates as in ``torch.maximum``.

DTensor needs them for ``Partial("max")`` and ``Partial("min")``
(torch/distributed/tensor/placement_types.py): the terms of ``x.amax(0)`` on a tensor
sharded on dim 0 combine by a maximum, all-reduced to Replicate, reduce-scattered to Shard.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .collectives import _all_gather_ring, _chunks, _exchange

__all__ = ["REDUCE_OPS", "all_reduce_op", "reduce_scatter_op"]

#: the elementwise function of each reduce op this file rebuilds (``c10d.ReduceOp`` names)
REDUCE_OPS = {"max": torch.maximum, "min": torch.minimum}


def _combine(reduce_op: str):
    if reduce_op not in REDUCE_OPS:
        raise ValueError(
            f"reduce_op {reduce_op!r}: this ring combines by {sorted(REDUCE_OPS)}; "
            "sums go through retorch.distributed.collectives"
        )
    return REDUCE_OPS[reduce_op]


def _reduce_scatter_ring_op(chunks: list[torch.Tensor], reduce_op: str, group) -> None:
    """In place: afterwards ``chunks[rank]`` holds the ``reduce_op`` over ranks of that chunk
    (``collectives._reduce_scatter_ring`` with ``reduce_op`` in place of the addition)."""
    fn = _combine(reduce_op)
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    right, left = (rank + 1) % n, (rank - 1) % n
    for step in range(n - 1):
        send_i, recv_i = (rank - step - 1) % n, (rank - step - 2) % n
        incoming = torch.empty_like(chunks[recv_i])
        _exchange(chunks[send_i], right, incoming, left, group)
        fn(chunks[recv_i], incoming, out=chunks[recv_i])


def all_reduce_op(tensor: torch.Tensor, reduce_op: str, group=None) -> torch.Tensor:
    """``tensor`` reduced by ``reduce_op`` over the group, in place
    (``torch.distributed.all_reduce(tensor, ReduceOp.MAX)``): reduce-scatter then all-gather."""
    _combine(reduce_op)
    if dist.get_world_size(group) == 1:
        return tensor
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.reshape(-1).clone()
    chunks = _chunks(flat, dist.get_world_size(group))
    _reduce_scatter_ring_op(chunks, reduce_op, group)
    _all_gather_ring(chunks, group)
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def reduce_scatter_op(output: torch.Tensor, input: torch.Tensor, reduce_op: str,
                      group=None) -> torch.Tensor:  # fmt: skip
    """``output`` = the ``reduce_op`` over ranks of chunk ``rank`` of ``input`` (n equal
    chunks), as ``torch.distributed.reduce_scatter_tensor(..., op=ReduceOp.MAX)``."""
    _combine(reduce_op)
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    if input.numel() != n * output.numel():
        raise ValueError(
            f"reduce_scatter: input has {input.numel()} elements, expected world size ({n}) "
            f"x output ({output.numel()}); pad the input to a multiple of the world size"
        )
    chunks = list(input.detach().reshape(-1).clone().view(n, -1))
    _reduce_scatter_ring_op(chunks, reduce_op, group)
    output.view(-1).copy_(chunks[rank])
    return output

"""Collectives built from point-to-point messages over a gloo group.

Mirrors the collectives of torch/distributed/distributed_c10d.py (``all_reduce``,
``broadcast``, ``all_gather_into_tensor``, ``reduce_scatter_tensor``), which hand the whole
operation to the backend (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp, gloo's ring and
tree algorithms). torch 2.13 deprecates the last two names in favour of ``all_gather_single``
and ``reduce_scatter_single``, the same operations. Here each is written out with
``isend``/``irecv`` between ranks, so the messages are visible and countable:

- ``reduce_scatter``: the tensor is cut into n chunks; for n-1 steps every rank sends one
  chunk to its right neighbour and adds the chunk arriving from its left one. Chunk r travels
  the whole ring and ends, summed over all ranks, on rank r.
- ``all_gather``: n-1 steps of passing chunks round the same ring, copying instead of adding.
- ``ring_all_reduce``: reduce-scatter then all-gather. Each rank sends 2(n-1) chunks of N/n
  elements: 2(n-1)/n of the data (``ring_all_reduce_bytes``), nearly independent of n. That
  is why the ring is bandwidth-optimal.
- ``tree_broadcast``: a binomial tree from the root: in round k the ranks that already hold
  the data send it 2^k ranks further, so ceil(log2 n) rounds reach everyone.

``count_bytes()`` counts the bytes this process sends, to print beside the cost model.
Integer tensors give the same results as torch's collectives exactly; floats agree within
rounding, because the order of the additions differs (tests: ``atol=1e-5`` on N(0, 1) data).
Chunks that are empty (fewer elements than ranks) are neither sent nor received.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist

__all__ = [
    "all_gather",
    "count_bytes",
    "reduce_scatter",
    "ring_all_reduce",
    "ring_all_reduce_bytes",
    "tree_broadcast",
    "tree_broadcast_bytes",
]


class _Counter:
    """Bytes and messages sent by this process while a ``count_bytes`` block is open."""

    def __init__(self) -> None:
        self.bytes = 0
        self.messages = 0


_counters: list[_Counter] = []


@contextlib.contextmanager
def count_bytes() -> Iterator[_Counter]:
    """Count what this process sends inside the block: ``with count_bytes() as c: ...``."""
    c = _Counter()
    _counters.append(c)
    try:
        yield c
    finally:
        _counters.remove(c)


def _exchange(send: torch.Tensor, dst: int, recv: torch.Tensor, src: int, group) -> None:
    """Send ``send`` to ``dst`` while receiving ``recv`` from ``src`` (both at once: with
    blocking sends, every rank of a ring would wait on its neighbour)."""
    works = []
    if send.numel():
        for c in _counters:
            c.bytes += send.numel() * send.element_size()
            c.messages += 1
        works.append(dist.isend(send.contiguous(), _global(dst, group), group=group))
    if recv.numel():
        works.append(dist.irecv(recv, _global(src, group), group=group))
    for w in works:
        w.wait()


def _global(rank: int, group) -> int:
    return rank if group is None else dist.get_global_rank(group, rank)


def _chunks(flat: torch.Tensor, n: int) -> list[torch.Tensor]:
    # tensor_split: sizes differ by at most one, so any numel works.
    return list(torch.tensor_split(flat, n))


def _reduce_scatter_ring(chunks: list[torch.Tensor], group) -> None:
    """In place: afterwards ``chunks[rank]`` holds the sum over ranks of that chunk."""
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    right, left = (rank + 1) % n, (rank - 1) % n
    for step in range(n - 1):
        send_i, recv_i = (rank - step - 1) % n, (rank - step - 2) % n
        incoming = torch.empty_like(chunks[recv_i])
        _exchange(chunks[send_i], right, incoming, left, group)
        chunks[recv_i].add_(incoming)


def _all_gather_ring(chunks: list[torch.Tensor], group) -> None:
    """In place: ``chunks[r]`` of rank r is copied to every rank."""
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    right, left = (rank + 1) % n, (rank - 1) % n
    for step in range(n - 1):
        send_i, recv_i = (rank - step) % n, (rank - step - 1) % n
        _exchange(chunks[send_i], right, chunks[recv_i], left, group)


def ring_all_reduce(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sum ``tensor`` over all ranks, in place (``torch.distributed.all_reduce``'s SUM)."""
    if dist.get_world_size(group) == 1:
        return tensor
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.reshape(-1).clone()
    chunks = _chunks(flat, dist.get_world_size(group))
    _reduce_scatter_ring(chunks, group)
    _all_gather_ring(chunks, group)
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def reduce_scatter(output: torch.Tensor, input: torch.Tensor, group=None) -> torch.Tensor:
    """``output`` = the sum over ranks of chunk ``rank`` of ``input`` (n equal chunks), as
    ``torch.distributed.reduce_scatter_tensor``. ``input`` is left unchanged."""
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    if input.numel() != n * output.numel():
        raise ValueError(
            f"reduce_scatter: input has {input.numel()} elements, expected world size ({n}) "
            f"x output ({output.numel()}); pad the input to a multiple of the world size"
        )
    chunks = list(input.detach().reshape(-1).clone().view(n, -1))
    _reduce_scatter_ring(chunks, group)
    output.view(-1).copy_(chunks[rank])
    return output


def all_gather(output: torch.Tensor, input: torch.Tensor, group=None) -> torch.Tensor:
    """``output`` = every rank's ``input`` concatenated in rank order, as
    ``torch.distributed.all_gather_into_tensor``."""
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    if output.numel() != n * input.numel():
        raise ValueError(
            f"all_gather: output has {output.numel()} elements, expected world size ({n}) "
            f"x input ({input.numel()})"
        )
    chunks = list(output.view(n, -1))
    chunks[rank].copy_(input.reshape(-1))
    _all_gather_ring(chunks, group)
    return output


def tree_broadcast(tensor: torch.Tensor, src: int = 0, group=None) -> torch.Tensor:
    """Copy ``src``'s ``tensor`` to every rank along a binomial tree, in place."""
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    me = (rank - src) % n  # rank relative to the root
    buf = tensor if tensor.is_contiguous() else tensor.contiguous()
    mask = 1
    while mask < n:
        if me < mask and me + mask < n:  # holds the data: pass it 2^k further
            _exchange(buf, (me + mask + src) % n, buf[:0], rank, group)
        elif mask <= me < 2 * mask:  # receives it this round
            _exchange(buf[:0], rank, buf, (me - mask + src) % n, group)
        mask *= 2
    if buf.data_ptr() != tensor.data_ptr():
        tensor.copy_(buf)
    return tensor


def ring_all_reduce_bytes(nbytes: int, world_size: int) -> float:
    """The cost model: bytes each rank sends in a ring all-reduce of ``nbytes``."""
    return 2 * (world_size - 1) / world_size * nbytes


def tree_broadcast_bytes(nbytes: int, world_size: int, rank: int, src: int = 0) -> int:
    """Bytes ``rank`` sends in a binomial-tree broadcast: one copy per child."""
    me, children, mask = (rank - src) % world_size, 0, 1
    while mask < world_size:
        if me < mask and me + mask < world_size:
            children += 1
        mask *= 2
    return children * nbytes


# ---- for chapter 7b's DTensor: scatter and all-to-all from the same messages -------------


def scatter(output: torch.Tensor, scatter_list: list[torch.Tensor] | None, src: int = 0,
            group=None) -> torch.Tensor:  # fmt: skip
    """``output`` = ``scatter_list[rank]`` of group rank ``src`` (``torch.distributed.scatter``):
    the source sends one message to each other rank."""
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    if rank == src:
        if scatter_list is None or len(scatter_list) != n:
            raise ValueError(f"scatter: the source needs a list of {n} tensors, one per rank")
        for r in range(n):
            if r != src:
                _exchange(scatter_list[r], r, output[:0], rank, group)
        output.copy_(scatter_list[src])
    else:
        _exchange(output[:0], rank, output, src, group)
    return output


def all_to_all(output: list[torch.Tensor], input: list[torch.Tensor], group=None) -> list:
    """``output[r]`` = rank r's ``input[rank]`` (``torch.distributed.all_to_all``): in round k
    each rank sends to the rank k to its right and receives from the rank k to its left, so
    n-1 rounds move every chunk once (gloo's ``alltoall`` does the same pairwise exchange)."""
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    output[rank].copy_(input[rank])
    for k in range(1, n):
        dst, src = (rank + k) % n, (rank - k) % n
        _exchange(input[dst], dst, output[src], src, group)
    return output

"""The built-in DDP comm hooks, mirroring torch/distributed/algorithms/ddp_comm_hooks/
default_hooks.py: a hook gets ``(state, bucket)`` (``state``: the process group, ``None`` for
the world) and returns a future of the bucket's reduced buffer.

- ``allreduce_hook``: divide by the world size, all-reduce: DDP's default, as a hook.
- ``fp16_compress_hook``: cast the buffer to float16, divide, all-reduce the halves, cast back:
  half the bytes on the wire, the gradients rounded to float16's 11 significant bits.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["allreduce_hook", "fp16_compress_hook"]


def _allreduce_fut(group, tensor: torch.Tensor) -> torch.futures.Future:
    """Average ``tensor`` over the group, asynchronously."""
    tensor.div_(dist.get_world_size(group))
    work = dist.all_reduce(tensor, group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def allreduce_hook(process_group, bucket) -> torch.futures.Future:
    return _allreduce_fut(process_group, bucket.buffer())


def fp16_compress_hook(process_group, bucket) -> torch.futures.Future:
    buffer = bucket.buffer()
    compressed = buffer.to(torch.float16).div_(dist.get_world_size(process_group))
    work = dist.all_reduce(compressed, group=process_group, async_op=True)

    def decompress(fut):
        buffer.copy_(fut.value()[0])  # back to the bucket's dtype
        return buffer

    return work.get_future().then(decompress)

"""DDP communication hooks (torch/distributed/algorithms/ddp_comm_hooks/)."""

from .default_hooks import allreduce_hook, fp16_compress_hook

__all__ = ["allreduce_hook", "fp16_compress_hook"]

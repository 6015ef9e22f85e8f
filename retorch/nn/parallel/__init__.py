"""Chapter 7: ``torch.nn.parallel`` rebuilt. Mirrors torch/nn/parallel/__init__.py."""

from .distributed import DistributedDataParallel, compute_bucket_assignment_by_size

__all__ = ["DistributedDataParallel", "compute_bucket_assignment_by_size"]

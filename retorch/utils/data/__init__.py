"""Chapter 1's data pipeline: ``torch.utils.data`` rebuilt. Mirrors torch/utils/data/__init__.py."""

from ._utils.collate import default_collate, default_convert
from ._utils.worker import get_worker_info
from .dataloader import DataLoader
from .dataset import Dataset, TensorDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = [
    "BatchSampler",
    "DataLoader",
    "Dataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "TensorDataset",
    "default_collate",
    "default_convert",
    "get_worker_info",
]

"""Chapter 1's data pipeline: ``torch.utils.data`` rebuilt. Mirrors torch/utils/data/__init__.py.

``Dataset`` (what a sample is) → ``Sampler`` / ``BatchSampler`` (which indices, grouped how)
→ fetch in the main process or in worker processes → ``default_collate`` (samples into a
batch) → ``DataLoader`` (all of it, in order, with the same random numbers as torch's).
"""

from ._utils.collate import default_collate, default_convert
from ._utils.worker import get_worker_info
from .dataloader import DataLoader
from .dataset import Dataset, IterableDataset, TensorDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = [
    "BatchSampler",
    "DataLoader",
    "Dataset",
    "IterableDataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "TensorDataset",
    "default_collate",
    "default_convert",
    "get_worker_info",
]

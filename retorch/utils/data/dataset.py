"""``Dataset`` and ``TensorDataset``. Mirrors torch/utils/data/dataset.py.

A map-style dataset is anything with ``__getitem__(index)`` and ``__len__``.
"""

from __future__ import annotations

import torch


class Dataset:
    """A map-style dataset: ``dataset[i]`` is sample ``i``."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")


class TensorDataset(Dataset):
    """Sample ``i`` is ``tuple(t[i] for t in tensors)``; all tensors share their first dimension."""

    def __init__(self, *tensors: torch.Tensor) -> None:
        if not all(tensors[0].size(0) == t.size(0) for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].size(0)

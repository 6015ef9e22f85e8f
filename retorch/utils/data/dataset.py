"""Datasets: where samples come from. Mirrors torch/utils/data/dataset.py.

A map-style dataset answers ``dataset[i]`` (and usually ``len(dataset)``); the DataLoader's
sampler decides which ``i`` to ask for. An iterable-style dataset only answers
``iter(dataset)``: it decides the order itself, and in each worker process it is iterated
from the start, so it must use ``get_worker_info()`` to split the work between workers.

Torch's ``StackDataset``, ``ConcatDataset`` (and ``Dataset.__add__``), ``ChainDataset``,
``Subset`` and ``random_split`` are not rebuilt here.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class Dataset:
    """A map-style dataset: ``dataset[i]`` is sample ``i``. Mirrors ``torch.utils.data.Dataset``.

    A subclass may also define ``__getitems__(indices)`` returning a list of samples, which the
    DataLoader then calls once per batch instead of ``__getitem__`` once per sample.
    """

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")


class IterableDataset(Dataset, Iterable):
    """An iterable-style dataset: ``iter(dataset)`` yields the samples.

    Mirrors ``torch.utils.data.IterableDataset``. ``collections.abc.Iterable`` makes
    ``__iter__`` abstract, so a subclass without one cannot be instantiated, as in torch.
    """


class TensorDataset(Dataset):
    """Sample ``i`` is ``tuple(t[i] for t in tensors)``; all tensors share their first dimension.

    Mirrors ``torch.utils.data.TensorDataset``.
    """

    def __init__(self, *tensors: torch.Tensor) -> None:
        if not all(tensors[0].size(0) == tensor.size(0) for tensor in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(tensor[index] for tensor in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].size(0)

"""Samplers: the order in which a DataLoader visits indices. Mirrors torch/utils/data/sampler.py.

``RandomSampler`` consumes torch's random number generator exactly as torch's does: without a
``generator`` it draws one int64 from the global generator to seed a fresh one, then calls
``randperm`` (or ``randint`` in chunks of 32 with replacement). Under the same
``torch.manual_seed`` both therefore visit the same order and leave the global generator in
the same state. All sampling happens lazily, at the first ``next``, because ``__iter__`` is a
generator function.

Torch's ``SubsetRandomSampler`` and ``WeightedRandomSampler`` are not rebuilt here.
"""

from __future__ import annotations

import itertools
from typing import Iterator

import torch


class Sampler:
    """Base class: an iterable over dataset indices (or lists of indices). Mirrors ``Sampler``.

    Like torch's, it defines no ``__len__``: ``len()`` raises ``TypeError`` unless a subclass
    defines one, so ``list(sampler)`` can still fall back to plain iteration.
    """

    def __iter__(self) -> Iterator:
        raise NotImplementedError


class SequentialSampler(Sampler):
    """Indices ``0, 1, ..., len(data_source) - 1``, in that order."""

    def __init__(self, data_source) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation of the indices, or ``num_samples`` independent draws with replacement.

    Without replacement and ``num_samples > len(data_source)``, whole permutations are
    concatenated and the last one is cut short.
    """

    def __init__(
        self, data_source, replacement: bool = False, num_samples: int | None = None, generator=None
    ) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError(
                f"replacement should be a boolean value, but got replacement={self.replacement}"
            )
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(
                "num_samples should be a positive integer value, "
                f"but got num_samples={self.num_samples}"
            )

    @property
    def num_samples(self) -> int:
        # Read at every epoch: the dataset may grow or shrink between epochs.
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        if self.generator is None:
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
            generator = torch.Generator()
            generator.manual_seed(seed)
        else:
            generator = self.generator
        if self.replacement:
            for _ in range(self.num_samples // 32):
                yield from torch.randint(
                    high=n, size=(32,), dtype=torch.int64, generator=generator
                ).tolist()
            yield from torch.randint(
                high=n, size=(self.num_samples % 32,), dtype=torch.int64, generator=generator
            ).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from torch.randperm(n, generator=generator).tolist()
            yield from torch.randperm(n, generator=generator).tolist()[: self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Group another sampler's indices into lists of ``batch_size``; the last may be short.

    ``sampler`` may be any iterable of indices. With ``drop_last`` a short last batch is dropped.
    """

    def __init__(self, sampler, batch_size: int, drop_last: bool) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        sampler_iter = iter(self.sampler)
        if self.drop_last:
            # zip over batch_size references to one iterator takes batch_size items at a time
            # and stops, dropping the remainder, as soon as one of them is exhausted.
            for batch in zip(*[sampler_iter] * self.batch_size):
                yield [*batch]
        else:
            batch = [*itertools.islice(sampler_iter, self.batch_size)]
            while batch:
                yield batch
                batch = [*itertools.islice(sampler_iter, self.batch_size)]

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size

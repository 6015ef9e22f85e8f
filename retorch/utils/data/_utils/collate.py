"""Turn a list of samples into a batch. Mirrors torch/utils/data/_utils/collate.py.

``default_collate`` stacks tensors along a new first dimension, turns numbers into tensors,
and recurses into dicts, tuples, named tuples and lists, so a batch has the shape of one
sample with every leaf batched.
"""

from __future__ import annotations

import collections.abc

import torch

_ERROR = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)


def default_convert(data):
    """Numbers and arrays become tensors (used when batching is off); containers recurse."""
    if isinstance(data, torch.Tensor):
        return data
    if type(data).__module__ == "numpy" and type(data).__name__ == "ndarray":
        return torch.as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return type(data)({k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return [default_convert(d) for d in data]
    return data


def default_collate(batch):
    elem = batch[0]
    if isinstance(elem, torch.Tensor):
        return torch.stack(batch, 0)
    if type(elem).__module__ == "numpy" and type(elem).__name__ in ("ndarray", "memmap"):
        return default_collate([torch.as_tensor(b) for b in batch])
    if isinstance(elem, bool):
        return torch.tensor(batch)
    if isinstance(elem, float):
        return torch.tensor(batch, dtype=torch.float64)
    if isinstance(elem, int):
        return torch.tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return type(elem)({key: default_collate([d[key] for d in batch]) for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(samples) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(e) != len(elem) for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [default_collate(samples) for samples in transposed]
        return [default_collate(samples) for samples in transposed]
    raise TypeError(_ERROR.format(type(elem)))

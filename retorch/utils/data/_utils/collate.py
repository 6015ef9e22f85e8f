"""Turn a list of samples into a batch. Mirrors torch/utils/data/_utils/collate.py.

``default_collate`` gives a batch the shape of one sample with every leaf batched: tensors
and NumPy arrays are stacked along a new first dimension, numbers become 1-d tensors, strings
are passed through as they come (a list at the top, a tuple inside a sequence: ``zip``'s),
and mappings, named tuples and sequences are recursed into; a tuple comes back as a list.
``collate`` does the recursion and looks leaves up in a registry (``default_collate_fn_map``)
keyed by type, which is also how a user teaches ``default_collate`` a new type.

``default_convert`` is what the DataLoader uses when batching is off (``batch_size=None``):
it only turns NumPy arrays into tensors, keeping the structure (but tuples become lists).
"""

from __future__ import annotations

import collections.abc
import copy
import re
from typing import Callable

import numpy as np
import torch

from .worker import get_worker_info

# NumPy dtype codes of bytes, unicode and object arrays, which cannot become tensors.
np_str_obj_array_pattern = re.compile(r"[SaUO]")

default_collate_err_msg_format = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)


def default_convert(data):
    """Convert every NumPy array inside ``data`` into a tensor, keeping containers' types."""
    elem_type = type(data)
    if isinstance(data, torch.Tensor):
        return data
    if elem_type.__module__ == "numpy" and elem_type.__name__ not in ("str_", "string_"):
        if (
            elem_type.__name__ == "ndarray"
            and np_str_obj_array_pattern.search(data.dtype.str) is not None
        ):
            return data
        return torch.as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return _rebuild_mapping(data, {key: default_convert(data[key]) for key in data})
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return elem_type(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]  # a list, for backward compatibility
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _rebuild_sequence(data, [default_convert(d) for d in data])
    return data


def _rebuild_mapping(elem, items: dict):
    # A copy keeps the mapping's type and extra state (a defaultdict's factory, say); a type
    # that can be neither copied nor built from a dict falls back to a plain dict.
    try:
        if isinstance(elem, collections.abc.MutableMapping):
            clone = copy.copy(elem)
            clone.update(items)
            return clone
        return type(elem)(items)
    except TypeError:
        return items


def _rebuild_sequence(elem, items: list):
    try:
        if isinstance(elem, collections.abc.MutableSequence):
            clone = copy.copy(elem)
            for i, item in enumerate(items):
                clone[i] = item
            return clone
        return type(elem)(items)
    except TypeError:
        return items


def collate(batch, *, collate_fn_map: dict[type | tuple[type, ...], Callable] | None = None):
    """Collate ``batch`` (a list of samples of one structure), recursing into containers.

    A leaf whose type is a key of ``collate_fn_map`` (exactly, else the first key it is an
    instance of, in insertion order) is handled by that function.
    """
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        if elem_type in collate_fn_map:
            return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
        for collate_type in collate_fn_map:
            if isinstance(elem, collate_type):
                return collate_fn_map[collate_type](batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        return _rebuild_mapping(
            elem,
            {key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem},
        )
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return elem_type(
            *(collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch))
        )
    if isinstance(elem, collections.abc.Sequence):
        if any(len(sample) != len(elem) for sample in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        columns = [collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch)]
        if isinstance(elem, tuple):
            return columns  # a list, for backward compatibility
        return _rebuild_sequence(elem, columns)
    raise TypeError(default_collate_err_msg_format.format(elem_type))


def collate_tensor_fn(batch, *, collate_fn_map=None):
    elem = batch[0]
    out = None
    if get_worker_info() is not None:
        # In a worker, stack straight into shared memory: sending the batch to the main
        # process then passes a handle to it instead of copying the bytes once more.
        out = torch.empty((len(batch), *elem.shape), dtype=elem.dtype, device=elem.device)
        out.share_memory_()
    return torch.stack(batch, 0, out=out)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    elem = batch[0]
    if np_str_obj_array_pattern.search(elem.dtype.str) is not None:
        raise TypeError(default_collate_err_msg_format.format(elem.dtype))
    return collate([torch.as_tensor(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    return torch.as_tensor(batch)


def collate_float_fn(batch, *, collate_fn_map=None):
    return torch.tensor(batch, dtype=torch.float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    # bool is an int: a batch of bools becomes a bool tensor.
    return torch.tensor(batch)


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


default_collate_fn_map: dict[type | tuple[type, ...], Callable] = {
    torch.Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def default_collate(batch):
    """Stack a list of samples into a batch of the same structure (see the module docstring).

    >>> default_collate([{"x": 0, "y": (1.0, "a")}, {"x": 2, "y": (3.0, "b")}])
    {'x': tensor([0, 2]), 'y': [tensor([1., 3.], dtype=torch.float64), ('a', 'b')]}
    """
    return collate(batch, collate_fn_map=default_collate_fn_map)

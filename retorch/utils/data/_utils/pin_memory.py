"""A batch copied into page-locked (pinned) host memory.

Mirrors torch/utils/data/_utils/pin_memory.py.

An accelerator copies from pinned memory asynchronously (``tensor.to("cuda", non_blocking=True)``),
so a loader with ``pin_memory=True`` pins every batch before handing it out, where an
accelerator exists. ``pin_memory`` walks the batch's structure as ``default_collate`` built it
and keeps each container's type. (Torch pins in a background thread fed by the workers' result
queue; the rebuilt loader pins in the main process, batch by batch.)
"""

from __future__ import annotations

import collections.abc
import copy

import torch


def pin_memory(data, device=None):
    """``data`` with every tensor (or object with a ``pin_memory`` method) pinned."""
    if isinstance(data, torch.Tensor) or hasattr(data, "pin_memory"):
        return data.pin_memory()
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        pinned = {k: pin_memory(sample, device) for k, sample in data.items()}
        try:
            if isinstance(data, collections.abc.MutableMapping):
                # A copy keeps the mapping's own type and attributes; then replace its values.
                clone = copy.copy(data)
                clone.update(pinned)
                return clone
            return type(data)(pinned)
        except TypeError:  # a mapping type that cannot be copied, updated or built from a dict
            return pinned
    if isinstance(data, tuple):
        if hasattr(data, "_fields"):  # a namedtuple takes its fields as arguments
            return type(data)(*(pin_memory(sample, device) for sample in data))
        return type(data)(pin_memory(sample, device) for sample in data)
    if isinstance(data, collections.abc.Sequence):
        try:
            if isinstance(data, collections.abc.MutableSequence):
                clone = copy.copy(data)
                for i, item in enumerate(data):
                    clone[i] = pin_memory(item, device)
                return clone
            return type(data)([pin_memory(sample, device) for sample in data])
        except TypeError:  # e.g. range: cannot be built from a list
            return [pin_memory(sample, device) for sample in data]
    return data

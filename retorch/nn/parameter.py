"""``Parameter`` and ``Buffer``: tensors that a Module registers. Mirrors torch/nn/parameter.py.

A ``Parameter`` is an ordinary ``torch.Tensor`` subclass; the only thing that makes it special
is that ``Module.__setattr__`` recognises it and files it under ``_parameters``. Operations on a
Parameter return plain tensors (``__torch_function__`` is disabled, as in torch).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch._C import _disabled_torch_function_impl


class Parameter(torch.Tensor):
    """A tensor that is a module parameter: ``requires_grad=True`` by default."""

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = torch.empty(0)
        return torch.Tensor._make_subclass(cls, data.detach(), requires_grad)

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        result = type(self)(
            self.data.clone(memory_format=torch.preserve_format), self.requires_grad
        )
        memo[id(self)] = result
        return result

    def __repr__(self):
        # torch prints its own Parameter's contents as a plain "tensor(...)"; so do we.
        return "Parameter containing:\n" + repr(self.detach().requires_grad_(self.requires_grad))

    def __reduce_ex__(self, proto):
        return (Parameter, (self.data, self.requires_grad), None, None, OrderedDict())

    __torch_function__ = _disabled_torch_function_impl


class Buffer:
    """Marks a tensor to be registered as a buffer when assigned to a Module attribute."""

    def __init__(self, data, *, persistent: bool = True):
        self.data, self.persistent = data, persistent

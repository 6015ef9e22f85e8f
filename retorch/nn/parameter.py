"""``Parameter`` and ``Buffer``: tensors that a Module registers. Mirrors torch/nn/parameter.py.

A ``Parameter`` is an ordinary ``torch.Tensor`` subclass; the only thing that makes it special
is that ``Module.__setattr__`` recognises it and files it under ``_parameters``. Operations on a
Parameter return plain tensors (``__torch_function__`` is disabled, as in torch).

A ``Buffer`` is not a class of tensors at all: ``Buffer(t)`` returns a plain tensor marked
``_is_buffer`` (and ``persistent``), and ``isinstance(x, Buffer)`` checks that mark, as torch's.
"""

from __future__ import annotations

import torch
from torch._C import _disabled_torch_function_impl

__all__ = ["Buffer", "Parameter"]


class Parameter(torch.Tensor):
    """A tensor that is a module parameter: ``requires_grad=True`` by default.

    ``_make_subclass`` makes a new tensor object that shares ``data``'s storage, is a leaf of
    the autograd graph and has this class as its type.
    """

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = torch.empty(0)
        return torch.Tensor._make_subclass(cls, data, requires_grad)

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        result = type(self)(
            self.data.clone(memory_format=torch.preserve_format), self.requires_grad
        )
        memo[id(self)] = result
        return result

    def __repr__(self) -> str:
        # torch's tensor printer writes "tensor(" for its own Parameter and the class name for
        # other subclasses; print the contents as a plain tensor to read exactly as torch's.
        plain = self.detach().requires_grad_(self.requires_grad)
        return "Parameter containing:\n" + repr(plain)

    def __reduce_ex__(self, proto):
        return (Parameter, (self.data, self.requires_grad))

    __torch_function__ = _disabled_torch_function_impl


class _BufferMeta(type(torch.Tensor)):
    # isinstance(t, Buffer) is True for any tensor carrying the _is_buffer mark.
    def __instancecheck__(self, instance) -> bool:
        if self is Buffer:
            if isinstance(instance, torch.Tensor) and getattr(instance, "_is_buffer", False):
                return True
        return super().__instancecheck__(instance)


class Buffer(torch.Tensor, metaclass=_BufferMeta):
    """Marks a tensor to be registered as a buffer when assigned to a Module attribute."""

    def __new__(cls, data=None, *, persistent=True):
        if data is None:
            data = torch.empty(0)
        t = data.detach().requires_grad_(data.requires_grad)
        t.persistent = persistent
        t._is_buffer = True
        return t

    __torch_function__ = _disabled_torch_function_impl

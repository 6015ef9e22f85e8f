"""Inductor's loop-level IR: a buffer is a name, a size and a loop body over ``ops``.

Mirrors torch/_inductor/ir.py at a small scale. A :class:`Pointwise` or :class:`Reduction` is
*defined* by ``inner_fn``: given the index variables of one element (strings such as ``"x0"``,
``"r0"``), it calls ``ops.load``/``ops.add``/``ops.exp``... and returns the element's value.
Nothing is computed or allocated: a consumer calls the producer's loader inside its own loop
body, which is how pointwise ops inline into each other. A node that must exist in memory is
*realized* into a :class:`ComputedBuffer` with a name (``buf3``), as torch's
``StorageBox.realize``. Views (:class:`View`) only rewrite the index on the way to their base.
Index expressions are strings (torch uses sympy): ``"x0*1000 + r0"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .virtualized import ops


def contiguous_strides(size) -> list[int]:
    strides, acc = [], 1
    for s in reversed(list(size)):
        strides.append(acc)
        acc *= s
    return strides[::-1]


def index_expr(index, strides) -> str:
    """The flat offset ``sum(index[i] * strides[i])`` as a short Python expression."""
    terms = []
    for i, st in zip(index, strides):
        if i == "0" or st == 0:
            continue
        terms.append(i if st == 1 else f"{i}*{st}" if i.isidentifier() else f"({i})*{st}")
    return " + ".join(terms) or "0"


class IRNode:
    dtype: torch.dtype

    def get_size(self) -> list[int]:
        raise NotImplementedError

    def make_loader(self) -> Callable:
        raise NotImplementedError

    def numel(self) -> int:
        n = 1
        for s in self.get_size():
            n *= s
        return n


@dataclass
class Pointwise(IRNode):
    """One value per output element: ``inner_fn(index) -> ops value`` over ``ranges``."""

    ranges: list[int]
    inner_fn: Callable
    dtype: torch.dtype = torch.float32

    def get_size(self):
        return list(self.ranges)

    def make_loader(self):
        return self.inner_fn


@dataclass
class Reduction(IRNode):
    """``reduction_type`` ("sum", "max") of ``inner_fn(index, rindex)`` over
    ``reduction_ranges``, for each index in ``ranges`` (torch's ``ir.Reduction``)."""

    ranges: list[int]
    reduction_ranges: list[int]
    reduction_type: str
    inner_fn: Callable
    dtype: torch.dtype = torch.float32

    def get_size(self):
        return list(self.ranges)

    def make_loader(self):
        raise RuntimeError("a Reduction is read only after it is realized into a buffer")


@dataclass
class Buffer(IRNode):
    """A named, contiguous tensor in memory (torch's ``ir.Buffer`` with a ``FixedLayout``)."""

    name: str
    size: list[int]
    dtype: torch.dtype = torch.float32

    def get_size(self):
        return list(self.size)

    def make_loader(self):
        strides = contiguous_strides(self.size)
        return lambda index: ops.load(self.name, index_expr(index, strides))


@dataclass
class InputBuffer(Buffer):
    """A graph input (torch's ``ir.InputBuffer``): ``arg0_1``..."""


@dataclass
class ComputedBuffer(Buffer):
    """A buffer whose value is a :class:`Pointwise` or :class:`Reduction` loop body."""

    data: IRNode = None
    users: set = field(default_factory=set)

    def is_reduction(self) -> bool:
        return isinstance(self.data, Reduction)

    def ranges(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(outer ranges, reduction ranges): the loops a kernel for this buffer runs."""
        if self.is_reduction():
            return tuple(self.data.ranges), tuple(self.data.reduction_ranges)
        return tuple(self.data.ranges), ()


@dataclass
class FallbackKernel(Buffer):
    """A buffer that eager torch computes (torch's ``ir.FallbackKernel``): ``op(*args)``, where
    each tensor argument is a realized :class:`Buffer` or a :class:`View` of one."""

    op: object = None
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    node_name: str = ""


@dataclass
class MultiOutput(Buffer):
    """Output ``index`` of a fallback that returns several tensors (torch's ``MultiOutput``)."""

    parent: FallbackKernel = None
    index: int = 0


@dataclass
class View(IRNode):
    """A view of ``data`` with ``size``: element ``index`` is ``data``'s ``reindex(index)``
    (torch's ``ir.View``/``ExpandView``/``PermuteView``). ``replay`` is the aten call that
    makes the same view of a real tensor, for fallback kernels that take the view itself."""

    data: IRNode
    size: list[int]
    reindex: Callable
    replay: tuple = ()

    @property
    def dtype(self):
        return self.data.dtype

    def get_size(self):
        return list(self.size)

    def make_loader(self):
        inner = self.data.make_loader()
        return lambda index: inner(self.reindex(list(index)))


@dataclass
class ReinterpretView(IRNode):
    """``buffer``'s memory read with another contiguous ``size`` (torch's ``ReinterpretView``):
    how ``aten.view`` of a realized buffer costs nothing."""

    buffer: Buffer
    size: list[int]
    replay: tuple = ()

    @property
    def dtype(self):
        return self.buffer.dtype

    def get_size(self):
        return list(self.size)

    def make_loader(self):
        strides = contiguous_strides(self.size)
        return lambda index: ops.load(self.buffer.name, index_expr(index, strides))

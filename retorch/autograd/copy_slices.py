"""In-place ops on views: ``CopySlices`` and the regenerated ``grad_fn`` of a view.

Mirrors torch/csrc/autograd/functions/tensor.cpp (``CopySlices``) and, in
torch/csrc/autograd/variable.cpp, ``rebase_history`` and ``VariableHooks::grad_fn``.

A view shares its base's data, so an in-place op on the view changes the base too: the base's
history must change. ``rebase_history`` makes the base's ``grad_fn`` a ``CopySlices`` node that
wraps the in-place op's node ``fn``. In backward, ``CopySlices`` copies the base's gradient,
runs ``fn`` on the slice the view covers, and writes the result back into that slice; its other
edges are ``fn``'s (the other inputs of the op). Every view of that base is then out of date:
its ``grad_fn`` is regenerated, when next read, as an ``AsStridedBackward0`` pointing at the
base's new history (``regenerate_view_grad_fn``); a view notices by its version counter, shared
with the base, having moved past the version its ``grad_fn`` was made at.

The gradients of these two nodes are computed on raw data: they are not differentiable again
(``create_graph`` through an in-place op on a view is not rebuilt).
"""

from __future__ import annotations

import itertools

from . import _ops
from .graph import NO_EDGE, Node


class CopySlices(Node):
    """The base's node after an in-place op on one of its views."""

    def __init__(self, base, view_geometry: tuple, fn: Node) -> None:
        edge = base._gradient_edge() if base.requires_grad else None
        # fn's edges, except the first, which goes to the base's old history, not the view's.
        super().__init__((edge or NO_EDGE,) + tuple(fn.next_functions[1:]))
        self.base_geometry = _ops.geometry(base.data)
        self.view_geometry, self.fn = view_geometry, fn
        self.input_metadata = (tuple(base.shape),)

    def name(self) -> str:
        return "torch::autograd::CopySlices"

    def apply(self, grads: list) -> tuple:
        from .tensor import Tensor

        grad = grads[0]
        if grad is None:
            return (None,) * len(self.next_functions)
        result = _ops.empty_strided(self.base_geometry, grad.data)
        _ops.copy_(result, grad.data)
        grad_slice = _ops.as_strided(result, self.view_geometry, self.base_geometry[2])
        res = self.fn.apply([Tensor(_ops.clone(grad_slice))])
        if res[0] is None:  # the op's input gets no gradient from the slice
            _ops.zero_(grad_slice)
        else:
            _ops.copy_(grad_slice, res[0].data)
        return (Tensor(result), *res[1:])

    def release_variables(self) -> None:
        self.fn.release_variables()


class AsStridedBackward0(Node):
    """The regenerated node of a view: its gradient lands in a zero base-shaped gradient."""

    def __init__(self, base, view_geometry: tuple) -> None:
        super().__init__((base._gradient_edge(),))
        self.self_geometry, self.view_geometry = _ops.geometry(base.data), view_geometry
        self.input_metadata = (tuple(view_geometry[0]),)

    def apply(self, grads: list) -> tuple:
        from .tensor import Tensor

        grad = grads[0]
        if grad is None:
            return (None,)
        if _overlaps(*self.view_geometry[:2]):
            return (Tensor(self._accumulate_overlapping(grad.data)),)
        out = _ops.zero_(_ops.empty_strided(self.self_geometry, grad.data))
        _ops.copy_(_ops.as_strided(out, self.view_geometry, self.self_geometry[2]), grad.data)
        return (Tensor(out),)

    def _accumulate_overlapping(self, grad):
        """The view reads some elements more than once (an ``expand``: stride 0), so their
        gradients add up: index_add every element's gradient at its storage position, as
        ``as_strided_backward`` (torch/csrc/autograd/FunctionsManual.cpp) does for an
        output geometry with overlap. A copy would keep only the last one, and is refused."""
        sizes, strides, offset = self.view_geometry
        base_sizes, base_strides, base_offset = self.self_geometry
        positions = [
            offset - base_offset + sum(i * s for i, s in zip(index, strides))
            for index in itertools.product(*(range(n) for n in sizes))
        ]
        span = (
            1 + sum((n - 1) * s for n, s in zip(base_sizes, base_strides)) if all(base_sizes) else 0
        )
        flat = _ops.index_add_zeros(
            (span,), grad, 0, _ops.as_array(positions), _ops.reshape(_ops.contiguous(grad), (-1,))
        )
        return _ops.contiguous(_ops.as_strided(flat, self.self_geometry, base_offset))


def _overlaps(sizes, strides) -> bool:
    """Whether two elements of a geometry may share a storage position (conservative:
    ``has_internal_overlap``'s sufficient test for no overlap, on dims sorted by stride)."""
    reach = 0
    for s, n in sorted((abs(s), n) for n, s in zip(sizes, strides) if n > 1):
        if s <= reach:
            return True
        reach += (n - 1) * s
    return False


def rebase_history(view, fn: Node) -> None:
    """After ``fn`` (an in-place op's node) changed ``view`` in place: give its base a
    ``CopySlices`` history, and the view an ``AsStridedBackward0`` on top of it."""
    base = view._base
    geometry = _ops.geometry(view.data)
    base._grad_fn, base._output_nr = CopySlices(base, geometry, fn), 0
    base.requires_grad = True
    regenerate_view_grad_fn(view)


def regenerate_view_grad_fn(view) -> None:
    """``VariableHooks::grad_fn``: a view whose base changed history gets an AsStrided node."""
    base = view._base
    if base.requires_grad:
        view._grad_fn = AsStridedBackward0(base, _ops.geometry(view.data))
        view._output_nr, view.requires_grad = 0, True
    view._attr_version = view._version_counter.value

"""Activation checkpointing: trade compute for memory. Mirrors torch/utils/checkpoint.py.

``checkpoint(fn, *args, use_reentrant=...)`` keeps none of the tensors that ``fn``'s ops save
for backward, and recomputes them when backward needs them. Both of torch's variants:

* ``use_reentrant=False`` (what torch recommends): run ``fn`` as usual, graph and all, under
  ``saved_tensors_hooks`` whose pack hook keeps a ticket instead of each saved tensor. The
  first unpack in backward reruns ``fn`` with grad on and collects the tensors it saves, in the
  same order; each ticket then gives back its recomputed tensor.
* ``use_reentrant=True``: ``CheckpointFunction`` runs ``fn`` under ``no_grad`` (no graph,
  nothing saved) and records one node; its backward reruns ``fn`` with grad on and calls
  ``backward`` on that fresh graph from inside the running backward (re-entering the engine).
"""

from __future__ import annotations

import warnings

import torch

from retorch._torch_version import torch_has
from retorch.autograd import Function, Tensor, backward, enable_grad, is_grad_enabled
from retorch.autograd.graph import SavedVariable, saved_tensors_hooks


def detach_variable(inputs: tuple) -> tuple:
    """Tensors cut from the graph, each still requiring grad if it did."""
    return tuple(
        x.detach().requires_grad_(x.requires_grad) if isinstance(x, Tensor) else x for x in inputs
    )


class CheckpointFunction(Function):
    """The reentrant checkpoint: one node whose backward reruns the function."""

    @staticmethod
    def forward(ctx, run_function, *args):
        ctx.run_function = run_function
        # Non-tensor arguments are kept as they are; tensors are saved (their versions checked).
        ctx.inputs = [None if isinstance(a, Tensor) else a for a in args]
        ctx.tensor_indices = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.save_for_backward(*(a for a in args if isinstance(a, Tensor)))
        return run_function(*args)  # grad mode is off inside forward: no graph, nothing saved

    @staticmethod
    def backward(ctx, *grad_outputs):
        inputs = list(ctx.inputs)
        for i, t in zip(ctx.tensor_indices, ctx.saved_tensors):
            inputs[i] = t
        detached_inputs = detach_variable(tuple(inputs))
        with enable_grad():
            outputs = ctx.run_function(*detached_inputs)  # recompute, this time with a graph
        if isinstance(outputs, Tensor):
            outputs = (outputs,)
        pairs = [
            (out, g)
            for out, g in zip(outputs, grad_outputs)
            if isinstance(out, Tensor) and out.requires_grad
        ]
        if not pairs:
            raise RuntimeError(
                "none of output has requires_grad=True, this checkpoint() is not necessary"
            )
        backward([out for out, _ in pairs], [g for _, g in pairs])
        return (None,) + tuple(x.grad if isinstance(x, Tensor) else None for x in detached_inputs)


def _checkpoint_without_reentrant(function, *args, **kwargs):
    if not is_grad_enabled():
        return function(*args, **kwargs)
    # The inputs are saved like any tensor saved for backward (so an in-place change to one is
    # caught); the recomputation runs on what they unpack to.
    saved_args = []
    if not torch_has("checkpoint_saves_inputs_directly"):
        # torch < 2.12 saved them through ``_NoopSaveInputs.apply(dummy, kwargs, *args)``, whose
        # save_for_backward packs an empty (0,) dummy first (retorch._torch_version)
        saved_args.append(SavedVariable(Tensor(torch.empty((0,)), requires_grad=True)))
    saved_args += [SavedVariable(a) if isinstance(a, Tensor) else a for a in args]
    num_saved = 0
    recomputed: dict = {}  # ticket -> tensor, filled by a recomputation, emptied by unpacking

    def pack(tensor) -> int:
        nonlocal num_saved
        num_saved += 1
        return num_saved - 1  # a ticket, kept in the graph instead of the tensor

    def unpack(ticket: int):
        if ticket not in recomputed:  # the first unpack of this backward: rerun the function
            inputs = [a.unpack() if isinstance(a, SavedVariable) else a for a in saved_args]
            inputs = inputs[len(inputs) - len(args) :]  # without the old dummy, if any
            recomputation: list = []
            with enable_grad(), saved_tensors_hooks(recomputation.append, lambda _: None):
                function(*inputs, **kwargs)
            if len(recomputation) != num_saved:
                raise RuntimeError(
                    "torch.utils.checkpoint: A different number of tensors was saved during "
                    "the original forward and recomputation."
                )
            recomputed.update(enumerate(recomputation))
        return recomputed.pop(ticket)  # handed over: the checkpoint keeps no reference

    with saved_tensors_hooks(pack, unpack):
        return function(*args, **kwargs)


def checkpoint(function, *args, use_reentrant: bool | None = None, **kwargs):
    """``function(*args)``, with the tensors it saves for backward recomputed instead of kept."""
    if use_reentrant is None:
        warnings.warn(
            "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. "
            "Starting in PyTorch 2.9, calling checkpoint without use_reentrant will raise an "
            "exception. use_reentrant=False is recommended, but if you need to preserve the "
            "current default behavior, you can pass use_reentrant=True. Refer to docs for more "
            "details on the differences between the two variants.",
            stacklevel=2,
        )
        use_reentrant = True
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        return CheckpointFunction.apply(function, *args)
    return _checkpoint_without_reentrant(function, *args, **kwargs)

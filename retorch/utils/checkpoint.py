"""Activation checkpointing: trade compute for memory. Mirrors torch/utils/checkpoint.py.

``checkpoint(fn, *args)`` runs ``fn`` without recording a graph (so none of its intermediate
results are saved), and records a single node whose backward runs ``fn`` again with grad on
and backpropagates through that fresh graph. This is torch's reentrant variant
(``use_reentrant=True``); torch's default non-reentrant variant reaches the same result with
saved-tensor hooks.
"""

from __future__ import annotations

from retorch.autograd import Function, Tensor, enable_grad, grad


class CheckpointFunction(Function):
    @staticmethod
    def forward(ctx, run_function, *args):
        ctx.run_function = run_function
        ctx.inputs = args  # inputs are kept; the activations inside run_function are not
        return run_function(*args)

    @staticmethod
    def backward(ctx, *grad_outputs):
        inputs = [
            a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a
            for a in ctx.inputs
        ]
        with enable_grad():
            outputs = ctx.run_function(*inputs)  # recompute, this time recording a graph
        wrt = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
        grads = iter(grad(outputs, wrt, grad_outputs, allow_unused=True))
        return (None,) + tuple(
            next(grads) if isinstance(x, Tensor) and x.requires_grad else None for x in inputs
        )


def checkpoint(function, *args, use_reentrant: bool | None = None):
    """``function(*args)``, recomputed during backward instead of keeping its activations."""
    return CheckpointFunction.apply(function, *args)

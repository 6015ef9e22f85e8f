"""Autograd functions that modules use internally. Mirrors torch/nn/modules/_functions.py.

Only ``BackwardHookFunction`` is rebuilt: the identity that full backward hooks put around a
module's inputs and outputs, so that the autograd graph gains one node on each side of the
module whose hooks see exactly the module's gradients.
"""

from __future__ import annotations

import torch


class BackwardHookFunction(torch.autograd.Function):
    """Identity on its tensor arguments; its backward node (``BackwardHookFunctionBackward``)
    is where ``BackwardHook`` registers the hooks that read and replace gradients."""

    @staticmethod
    def forward(ctx, *args):
        # Tensors that need no gradient stay out of the graph, as they were.
        ctx.mark_non_differentiable(*[arg for arg in args if not arg.requires_grad])
        return args

    @staticmethod
    def backward(ctx, *args):
        return args

"""Custom autograd functions: ``Function``, ``ctx``. Mirrors torch/autograd/function.py.

``MyOp.apply(*args)`` runs ``forward(ctx, *args)`` with grad mode off, then (if any tensor
argument requires grad) records one node, ``MyOpBackward``, whose backward calls
``MyOp.backward(ctx, *grads)``.
"""

from __future__ import annotations

from . import grad_mode
from .graph import NO_EDGE, Node, SavedVariable


class FunctionCtx:
    """What ``forward`` and ``backward`` share: saved tensors and anything set as an attribute."""

    def save_for_backward(self, *tensors) -> None:
        self._saved = tuple(None if t is None else SavedVariable(t) for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        return tuple(None if s is None else s.unpack() for s in getattr(self, "_saved", ()))

    def mark_dirty(self, *tensors) -> None:
        self._dirty = tensors


class BackwardCFunction(Node):
    """The node recorded for a custom Function."""

    def __init__(self, fn_cls, ctx, next_functions) -> None:
        super().__init__(next_functions)
        self._fn_cls, self._ctx = fn_cls, ctx

    def name(self) -> str:
        return f"{self._fn_cls.__name__}Backward"

    def apply(self, grads: list) -> tuple:
        result = self._fn_cls.backward(self._ctx, *grads)
        return result if isinstance(result, tuple) else (result,)

    def release_variables(self) -> None:
        for saved in getattr(self._ctx, "_saved", ()):
            if saved is not None:
                saved.release()


class Function:
    """Subclass with static ``forward(ctx, ...)`` and ``backward(ctx, *grads)``; call ``apply``."""

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError(
            "You must implement the forward function for custom autograd.Function."
        )

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError(
            "You must implement the backward function for custom autograd.Function."
        )

    @classmethod
    def apply(cls, *args):
        from .tensor import Tensor

        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with grad_mode.no_grad():
            out = cls.forward(ctx, *args)
        if grad_mode.is_grad_enabled() and any(ctx.needs_input_grad):
            edges = tuple(
                (a._gradient_edge() if isinstance(a, Tensor) else None) or NO_EDGE for a in args
            )
            node = BackwardCFunction(cls, ctx, edges)
            node.input_metadata = [tuple(out.shape)]
            out = Tensor(out.data, grad_fn=node)
        return out

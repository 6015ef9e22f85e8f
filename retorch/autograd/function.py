"""Custom autograd functions: ``Function`` and its ``ctx``. Mirrors torch/autograd/function.py.

Subclassing ``Function`` makes its node class, ``<Name>Backward`` (torch's ``FunctionMeta``
does this), and ``MyOp.apply(*args)`` works as torch's ``THPFunction_apply``
(python_function.cpp): it creates that node, which is also the ``ctx`` that ``forward`` and
``backward`` share; runs ``forward(ctx, *args)`` with grad mode off; then, if grad mode is on
and a tensor argument requires grad, links the node into the graph (one edge per *tensor*
argument) and makes it the ``grad_fn`` of the outputs. In backward the node calls
``MyOp.backward(ctx, *grads)``, which returns one gradient per forward argument.
"""

from __future__ import annotations

from . import _ops, grad_mode
from .graph import NO_EDGE, Node, SavedVariable
from .tensor import Tensor


class FunctionCtx:
    """What ``forward`` and ``backward`` share: saved tensors and anything set as an attribute."""

    def save_for_backward(self, *tensors) -> None:
        self.to_save = tensors

    def mark_dirty(self, *tensors) -> None:
        """Declare the inputs that ``forward`` changed in place (and returns)."""
        self.dirty_tensors = tensors

    def set_materialize_grads(self, value: bool) -> None:
        """Whether ``backward`` gets zeros (the default) or None for outputs that got no gradient."""
        self.materialize_grads = value


class BackwardCFunction(Node, FunctionCtx):
    """The node of a custom Function; each Function subclass gets its own subclass of this."""

    _forward_cls: type = None
    _saved_variables: tuple = ()
    materialize_grads = True

    @property
    def saved_tensors(self) -> tuple:
        return tuple(None if s is None else s.unpack(self) for s in self._saved_variables)

    def apply(self, grads: list) -> tuple:
        like = next((g for g in grads if g is not None), None)
        if like is None:  # no gradient reached this node: none goes on
            return (None,) * len(self.next_functions)
        if self.materialize_grads:
            grads = [
                g if g is not None else Tensor(_ops.zeros(shape, like.data))
                for g, shape in zip(grads, self.input_metadata)
            ]
        result = self._forward_cls.backward(self, *grads)
        result = result if isinstance(result, tuple) else (result,)
        num_inputs = len(self._is_tensor_input)
        if len(result) > num_inputs and all(g is None for g in result[num_inputs:]):
            result = result[:num_inputs]  # extra Nones are allowed
        if len(result) != num_inputs:
            raise RuntimeError(
                f"function {self.name()} returned an incorrect number of gradients (expected "
                f"{num_inputs}, got {len(result)})"
            )
        out = []
        for i, (g, is_tensor) in enumerate(zip(result, self._is_tensor_input)):
            if is_tensor:
                out.append(g)
            elif g is not None:
                raise RuntimeError(
                    f"function {self.name()} returned a gradient different than None at position "
                    f"{i + 1}, but the corresponding forward input was not a Variable"
                )
        return tuple(out)

    def release_variables(self) -> None:
        for saved in self._saved_variables:
            if saved is not None:
                saved.release()


class Function:
    """Subclass with static ``forward(ctx, ...)`` and ``backward(ctx, *grads)``; call ``apply``."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls._backward_cls = type(
            f"{cls.__name__}Backward", (BackwardCFunction,), {"_forward_cls": cls}
        )

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError(
            "You must implement the forward function for custom autograd.Function."
        )

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError(
            "You must implement either the backward or the vjp method for your custom "
            "autograd.Function to use it with backward mode AD."
        )

    @classmethod
    def apply(cls, *args):
        ctx = cls._backward_cls()  # takes its sequence number now, before forward runs
        is_tensor = tuple(isinstance(a, Tensor) for a in args)
        ctx.needs_input_grad = tuple(t and a.requires_grad for t, a in zip(is_tensor, args))
        is_executable = grad_mode._enabled and any(ctx.needs_input_grad)
        with grad_mode.no_grad():
            outputs = cls.forward(ctx, *args)
        if not is_executable:
            return outputs
        ctx._is_tensor_input = is_tensor
        ctx.next_functions = tuple(
            a._gradient_edge() or NO_EDGE for a in args if isinstance(a, Tensor)
        )
        is_tuple = isinstance(outputs, tuple)
        outputs = _wrap_outputs(ctx, args, outputs if is_tuple else (outputs,))
        ctx._saved_variables = tuple(
            None if t is None else SavedVariable(t, is_output=t.grad_fn is ctx)
            for t in getattr(ctx, "to_save", ())
        )
        return outputs if is_tuple else outputs[0]


def _wrap_outputs(ctx: BackwardCFunction, args: tuple, outputs: tuple) -> tuple:
    """Make ``ctx`` the grad_fn of each output (python_function.cpp: _wrap_outputs)."""
    inputs = {id(a) for a in args if isinstance(a, Tensor)}
    dirty = {id(t) for t in getattr(ctx, "dirty_tensors", ())}
    if not dirty <= {id(o) for o in outputs}:
        raise RuntimeError(
            "Some elements marked as dirty during the forward method were not returned as output. "
            "The inputs that are modified inplace must all be outputs of the Function."
        )
    wrapped, metadata = [], []
    for output_nr, out in enumerate(outputs):
        if not isinstance(out, Tensor):
            wrapped.append(out)
            metadata.append(())
            continue
        if id(out) in dirty:  # changed in place: its history now goes through this node
            if out.is_leaf and out.requires_grad:
                raise RuntimeError(
                    "a leaf Variable that requires grad has been used in an in-place operation."
                )
            out._version_counter.value += 1
        elif id(out) in inputs:  # an input returned as is: the output is a new view of it
            out = out._view_of(Tensor(out.data))
        out.grad_fn, out._output_nr, out.requires_grad = ctx, output_nr, True
        wrapped.append(out)
        metadata.append(tuple(out.shape))
    ctx.input_metadata = tuple(metadata)
    return tuple(wrapped)

"""The graph: ``Node``, ``Edge``, ``AccumulateGrad`` and saved tensors.

Mirrors torch/csrc/autograd/function.h (Node), edge.h (Edge), functions/accumulate_grad.h
(AccumulateGrad) and saved_variable.h (SavedVariable). A node is one backward function; its
``next_functions`` are edges ``(node, input_nr)`` to the nodes of its forward inputs. Leaves
that require grad end in an ``AccumulateGrad`` node, which adds into ``.grad``.
"""

from __future__ import annotations

import itertools
import re
import traceback
from typing import Any, Callable, NamedTuple

from . import _ops, anomaly_mode

_sequence_nr = itertools.count()


class Edge(NamedTuple):
    """Where a gradient goes next: input ``input_nr`` of ``function``."""

    function: Any
    input_nr: int


#: The edge of an input that needs no gradient: torch shows it as ``(None, 0)`` too.
NO_EDGE = Edge(None, 0)


class Node:
    """A backward function in the graph (``grad_fn``)."""

    __slots__ = (
        "next_functions",
        "_sequence_nr",
        "_pre_hooks",
        "_post_hooks",
        "_tensor_pre_hooks",
        "_retains_grad_hooks",
        "input_metadata",
        "_trace",
        "__dict__",
    )

    _EMPTY: dict = {}

    def __init__(self, next_functions: tuple = (), sequence_nr: int | None = None) -> None:
        self.next_functions = next_functions
        self._sequence_nr = next(_sequence_nr) if sequence_nr is None else sequence_nr
        # Hook containers are shared empty ones until a hook is registered: most nodes have none.
        self._pre_hooks = self._post_hooks = ()
        self._tensor_pre_hooks = self._retains_grad_hooks = Node._EMPTY
        self.input_metadata: list[tuple] = []  # the shapes of the gradients this node receives
        self._trace = traceback.format_stack()[:-3] if anomaly_mode._enabled else None

    def name(self) -> str:
        return type(self).__name__

    def apply(self, grads: list) -> tuple:
        raise NotImplementedError

    @property
    def metadata(self) -> dict:
        return self.__dict__.setdefault("_metadata", {})

    def register_hook(self, fn: Callable) -> Callable:
        """``fn(grad_inputs, grad_outputs)`` runs after this node; may return new grad_inputs."""
        self._post_hooks = (*self._post_hooks, fn)
        return fn

    def register_prehook(self, fn: Callable) -> Callable:
        """``fn(grad_outputs)`` runs before this node; may return new grad_outputs."""
        self._pre_hooks = (*self._pre_hooks, fn)
        return fn

    def _add_tensor_pre_hook(self, output_nr: int, fn: Callable) -> None:
        if self._tensor_pre_hooks is Node._EMPTY:
            self._tensor_pre_hooks = {}
        self._tensor_pre_hooks.setdefault(output_nr, []).append(fn)

    def _set_retains_grad_hook(self, output_nr: int, fn: Callable) -> None:
        if self._retains_grad_hooks is Node._EMPTY:
            self._retains_grad_hooks = {}
        self._retains_grad_hooks[output_nr] = fn

    def release_variables(self) -> None:
        for value in self.__dict__.values():
            if isinstance(value, SavedVariable):
                value.release()

    def __repr__(self) -> str:
        return f"<{self.name()}>"


class AccumulateGrad(Node):
    """The node of a leaf: adds the incoming gradient into ``variable.grad``."""

    __slots__ = ()

    def __init__(self, variable) -> None:
        # torch gives AccumulateGrad the largest sequence number: ready leaves run first.
        super().__init__((), sequence_nr=2**63 - 1)
        self.variable = variable
        self.input_metadata = [tuple(variable.shape)]

    def apply(self, grads: list) -> tuple:
        from .grad_mode import is_grad_enabled

        grad, variable = grads[0], self.variable
        for hook in variable._hooks:
            result = hook(grad)
            if result is not None:
                grad = result
        if variable.grad is None:
            variable.grad = grad if is_grad_enabled() else grad.detach()
        elif is_grad_enabled():
            variable.grad = variable.grad + grad
        else:
            variable.grad.data.add_(grad.data)
        return ()


_SUFFIX = re.compile(r"Backward\d*$")


class SavedVariable:
    """A tensor saved for backward, with the version it had, so in-place changes are caught."""

    __slots__ = ("tensor", "version", "released", "is_output", "grad_fn_name", "output_nr")

    def __init__(self, tensor, is_output: bool = False) -> None:
        self.tensor, self.version, self.released = tensor, tensor._version, False
        self.is_output, self.output_nr = is_output, tensor._output_nr
        self.grad_fn_name = None if tensor.grad_fn is None else tensor.grad_fn.name()

    def unpack(self):
        if self.released:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved tensors after "
                "they have already been freed). Saved intermediate values of the graph are freed when you call "
                ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
                "graph a second time or if you need to access saved tensors after calling backward."
            )
        if self.tensor._version != self.version:
            t = self.tensor
            what = f"[{_ops.type_name(t.data)} [{', '.join(map(str, t.shape))}]]"
            if t.grad_fn is not None:
                what += f", which is output {t._output_nr} of {_SUFFIX.sub('', t.grad_fn.name())},"
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace "
                f"operation: {what} is at version {t._version}; expected version {self.version} instead. "
                "Hint: enable anomaly detection to find the operation that failed to compute its gradient, "
                "with torch.autograd.set_detect_anomaly(True, check_nan=False)."
            )
        return self.tensor

    def release(self) -> None:
        self.tensor, self.released = None, True

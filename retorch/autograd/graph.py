"""The graph: ``Node``, ``Edge``, ``AccumulateGrad``, saved tensors and their hooks.

Mirrors torch/csrc/autograd/function.h (Node), edge.h (Edge), functions/accumulate_grad.h
(AccumulateGrad), saved_variable.cpp (SavedVariable) and, for the Python API,
torch/autograd/graph.py (``saved_tensors_hooks``). A node is one backward function; its
``next_functions`` are edges ``(node, input_nr)`` to the nodes of its forward inputs. Leaves
that require grad end in an ``AccumulateGrad`` node, which adds into ``.grad``.

Nothing here points back up the graph: a tensor owns its ``grad_fn``, a node owns its edges
and saved tensors, and a saved *output* keeps only its data (not the tensor whose ``grad_fn``
is the node saving it), so a graph is freed by reference counting as soon as its output goes.
"""

from __future__ import annotations

import itertools
import re
import traceback
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, NamedTuple

from torch.utils.hooks import RemovableHandle

from retorch._torch_version import torch_has

from . import _ops, anomaly_mode, grad_mode

#: torch's ``at::sequence_number``: every new node takes the next one, so a later node has a
#: higher number. The engine runs the ready node with the highest number first.
_sequence_nr = itertools.count()

_PACKAGE_DIR = str(Path(__file__).parent)


class Edge(NamedTuple):
    """Where a gradient goes next: input ``input_nr`` of ``function``."""

    function: Any
    input_nr: int


#: The edge of an input that needs no gradient: torch shows it as ``(None, 0)`` too.
NO_EDGE = Edge(None, 0)


class Node:
    """A backward function in the graph (``grad_fn``)."""

    # Hook containers are made on first registration; until then all nodes share these.
    _pre_hooks: dict = {}
    _post_hooks: dict = {}
    _tensor_pre_hooks: dict = {}  # output_nr -> {id: hook} of the tensor hooks on that output
    _retains_grad_hooks: dict = {}  # output_nr -> the retain_grad hook of that output

    def __init__(self, next_functions: tuple = (), sequence_nr: int | None = None) -> None:
        self.next_functions = next_functions
        self.sequence_nr = next(_sequence_nr) if sequence_nr is None else sequence_nr
        self.input_metadata: tuple = ()  # the shape of the gradient each output receives
        if anomaly_mode._enabled:
            self.metadata["traceback_"] = _forward_stack()

    def name(self) -> str:
        return type(self).__name__

    def _sequence_nr(self) -> int:
        return self.sequence_nr

    def apply(self, grads: list) -> tuple:
        """One gradient per output in, one per ``next_functions`` edge out."""
        raise NotImplementedError(f"{self.name()} does not implement apply")

    @property
    def metadata(self) -> dict:
        return self.__dict__.setdefault("_metadata", {})

    def register_hook(self, fn: Callable) -> RemovableHandle:
        """``fn(grad_inputs, grad_outputs)`` runs after this node; may return new grad_inputs."""
        if "_post_hooks" not in self.__dict__:
            self._post_hooks = OrderedDict()  # OrderedDict: a handle keeps a weak reference
        handle = RemovableHandle(self._post_hooks)
        self._post_hooks[handle.id] = fn
        return handle

    def register_prehook(self, fn: Callable) -> RemovableHandle:
        """``fn(grad_outputs)`` runs before this node; may return new grad_outputs."""
        if "_pre_hooks" not in self.__dict__:
            self._pre_hooks = OrderedDict()
        handle = RemovableHandle(self._pre_hooks)
        self._pre_hooks[handle.id] = fn
        return handle

    def _add_tensor_pre_hook(self, output_nr: int, fn: Callable) -> RemovableHandle:
        if "_tensor_pre_hooks" not in self.__dict__:
            self._tensor_pre_hooks = {}
        hooks = self._tensor_pre_hooks.setdefault(output_nr, OrderedDict())
        handle = RemovableHandle(hooks)
        hooks[handle.id] = fn
        return handle

    def _set_retains_grad_hook(self, output_nr: int, fn: Callable) -> None:
        if "_retains_grad_hooks" not in self.__dict__:
            self._retains_grad_hooks = {}
        self._retains_grad_hooks[output_nr] = fn

    def release_variables(self) -> None:
        """Free the saved tensors (the engine calls this after the node ran, unless retain_graph)."""
        for value in self.__dict__.values():
            if type(value) is SavedVariable:
                value.release()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} object at {id(self):#x}>"


def _forward_stack() -> list[str]:
    """The Python stack of the forward call that creates a node, without retorch's own frames."""
    frames = [f for f in traceback.extract_stack() if not f.filename.startswith(_PACKAGE_DIR)]
    return traceback.format_list(frames)


class AccumulateGrad(Node):
    """The node of a leaf: adds the incoming gradient into ``variable.grad``."""

    def __init__(self, variable) -> None:
        # torch gives AccumulateGrad the largest sequence number: ready leaves run first.
        super().__init__((), sequence_nr=2**64 - 1)
        self.variable = variable
        self.input_metadata = (tuple(variable.shape),)

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"

    @property
    def _tensor_pre_hooks(self) -> dict:
        # A leaf's hooks live on the tensor; the engine runs them as this node's tensor pre-hooks.
        hooks = self.variable._hooks
        return {0: hooks} if hooks else {}

    def apply(self, grads: list) -> tuple:
        grad, variable = grads[0], self.variable
        if grad is None:
            return ()
        if variable.grad is None:
            # A copy, so that .grad never aliases a gradient that also flows elsewhere. torch
            # skips it when nothing else holds the gradient (an optimisation), and under
            # create_graph its copy shows as CopyBackwards where ours is CloneBackward0.
            variable.grad = _clone_obey_contract(grad, variable)
        elif grad_mode._enabled:  # create_graph: .grad stays differentiable
            variable.grad = variable.grad + grad
        else:
            variable.grad.add_(grad)
        return ()


def _clone_obey_contract(grad, variable):
    """``utils::clone_obey_contract`` (``torch/csrc/autograd/functions/utils.h``), the
    "gradient layout contract" of ``AccumulateGrad``: a leaf's ``.grad`` is laid out as the
    leaf is when the leaf is non-overlapping and dense (a Linear weight's gradient arrives
    transposed from ``mm``'s formula and is stored with the weight's strides), else
    row-major. Under create_graph the copy is a differentiable ``clone`` (preserving the
    gradient's layout)."""
    g, v = grad.data, variable.data
    if grad_mode._enabled or _ops.strides(g) == _ops.strides(v):
        return grad.clone()
    if _ops.is_non_overlapping_and_dense(v):
        out = _ops.empty_strided(_ops.geometry(v), like=g)
    else:
        out = _ops.empty_strided((tuple(v.shape), _contiguous_strides(v.shape)), like=g)
    _ops.copy_(out, g)
    return type(grad)(out)


def _contiguous_strides(sizes) -> tuple:
    strides, z = [0] * len(sizes), 1
    for d in range(len(sizes) - 1, -1, -1):
        strides[d] = z
        z *= max(sizes[d], 1)
    return tuple(strides)


_NAME_SUFFIX = re.compile(r"Backward(\d*)$")


def _forward_name(node_name: str) -> str:
    """How torch's messages name the op of a node: ExpBackward0 -> Exp, PowBackward1 -> Pow1."""
    return _NAME_SUFFIX.sub(lambda m: "" if m.group(1) == "0" else m.group(1), node_name)


ERR_BACKWARD_TWICE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
    "graph a second time or if you need to access saved tensors after calling backward."
)

#: The (pack, unpack) pairs of the enclosing ``saved_tensors_hooks`` blocks, innermost last.
_saved_tensors_hooks_stack: list[tuple[Callable, Callable]] = []


class saved_tensors_hooks:
    """Within this block, every tensor saved for backward is stored as ``pack_hook(tensor)`` and
    given back as ``unpack_hook(packed)`` when backward needs it (torch.autograd.graph)."""

    def __init__(self, pack_hook: Callable, unpack_hook: Callable) -> None:
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self) -> None:
        _saved_tensors_hooks_stack.append((self.pack_hook, self.unpack_hook))

    def __exit__(self, *exc) -> None:
        _saved_tensors_hooks_stack.pop()


class SavedVariable:
    """A tensor saved for backward, with the version it had, so in-place changes are caught.

    An input is kept as the tensor itself. An output is kept as its data and version counter:
    the output's ``grad_fn`` is the very node that saves it, so keeping the tensor would make
    a reference cycle; ``unpack(node)`` rebuilds it. Under ``saved_tensors_hooks`` only what
    the pack hook returned is kept.
    """

    __slots__ = (
        "tensor",
        "data",
        "version_counter",
        "saved_version",
        "output_nr",
        "grad_fn",
        "is_leaf",
        "grad_accumulator",
        "unpack_hook",
    )

    def __init__(self, tensor, is_output: bool = False) -> None:
        if tensor._version_counter is grad_mode.INFERENCE_VERSION:
            raise RuntimeError(grad_mode.ERR_INFERENCE_SAVED)
        self.saved_version, self.output_nr = tensor._version, tensor._output_nr
        self.tensor = self.data = self.version_counter = self.grad_fn = None
        self.grad_accumulator = self.unpack_hook = None
        self.is_leaf = tensor.grad_fn is None
        if _saved_tensors_hooks_stack and not tensor._is_wrapped_number:
            pack, self.unpack_hook = _saved_tensors_hooks_stack[-1]
            with grad_mode.no_grad():
                self.data = pack(tensor.detach())
            if self.is_leaf and tensor.requires_grad:
                self.grad_accumulator = tensor._grad_accumulator()
            elif not is_output:
                self.grad_fn = tensor.grad_fn
        elif not is_output or tensor.grad_fn is None:
            self.tensor = tensor
        else:
            self.data, self.version_counter = tensor.data, tensor._version_counter

    def unpack(self, saved_for: Node | None = None):
        """The saved tensor; ``saved_for`` is the node that saved it (the grad_fn of an output)."""
        if self.tensor is None and self.data is None and self.unpack_hook is None:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        if self.unpack_hook is not None:  # versions cannot be checked through the hooks
            from .tensor import Tensor

            data = self.unpack_hook(self.data).data
            if self.is_leaf:  # a stand-in for the leaf: its gradient still goes to the leaf's .grad
                out = Tensor(data, requires_grad=self.grad_accumulator is not None)
                if self.grad_accumulator is not None:
                    out._accumulator = weakref.ref(self.grad_accumulator)
                return out
            out = Tensor(data, grad_fn=self.grad_fn or saved_for)
            out._output_nr = self.output_nr
            return out
        if self.tensor is not None:
            tensor = self.tensor
            if tensor._version != self.saved_version:
                # (a view changed through its base names its regenerated AsStridedBackward0)
                name = None if tensor.grad_fn is None else tensor.grad_fn.name()
                self._check_version(tensor._version, tensor.data, name)
            return tensor
        self._check_version(self.version_counter.value, self.data, saved_for.name())
        from .tensor import Tensor

        out = Tensor(self.data, grad_fn=saved_for)
        out._output_nr, out._version_counter = self.output_nr, self.version_counter
        return out

    def _check_version(self, version: int, data, grad_fn_name: str | None) -> None:
        if version == self.saved_version:
            return
        what = f"[{_ops.type_name(data)} [{', '.join(map(str, data.shape))}]]"
        if grad_fn_name is not None:  # torch < 2.13 names the node itself (retorch._torch_version)
            op = (
                _forward_name(grad_fn_name)
                if torch_has("inplace_error_names_forward_op")
                else grad_fn_name
            )
            what += f", which is output {self.output_nr} of {op},"
        hint = (
            "Hint: the backtrace further above shows the operation that failed to compute its "
            "gradient. The variable in question was changed in there or anywhere later. Good luck!"
            if anomaly_mode._enabled
            else "Hint: enable anomaly detection to find the operation that failed to compute its "
            "gradient, with torch.autograd.set_detect_anomaly("
            + ("True, check_nan=False)." if torch_has("anomaly_hint_check_nan") else "True).")
        )
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an inplace "
            f"operation: {what} is at version {version}; expected version {self.saved_version} "
            f"instead. {hint}"
        )

    def release(self) -> None:
        self.tensor = self.data = self.version_counter = self.grad_fn = None
        self.grad_accumulator = self.unpack_hook = None


class save_on_cpu(saved_tensors_hooks):
    """Within this block, every tensor saved for backward is copied to the CPU, and copied back
    to the device it came from when backward needs it (``torch/autograd/graph.py``'s
    ``save_on_cpu``): device memory traded for two copies per saved tensor. A tensor already
    on the CPU is kept as it is (``.cpu()`` returns it), as in torch. Pinned host memory is not
    rebuilt: ``pin_memory=True`` copies synchronously, as torch does where pinning is not
    available."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        def pack_to_cpu(tensor):
            return (tensor.device, tensor.data.cpu())

        def unpack_from_cpu(packed):
            from .tensor import Tensor

            device, data = packed
            return Tensor(data.to(device))

        super().__init__(pack_to_cpu, unpack_from_cpu)

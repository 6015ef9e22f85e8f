"""`trace`: run a function once on example inputs and record the ops that ran.

Mirrors torch/jit/_trace.py at torch v2.13.0 (`trace`, `TracerWarning`) and the recording
done by torch/csrc/jit/frontend/tracer.cpp. torch's tracer sits in the dispatcher and records
aten ops into a TorchScript graph; this one is a `TorchFunctionMode` that records each torch
call (a function or a Tensor method) into a retorch.fx Graph, so the result prints as Python.
What a tracer cannot see it bakes in, as torch's does: a branch on a tensor is decided by the
examples, and a tensor turned into a Python value (`bool`, `float`, `.item()`, `len`) becomes
a constant, with torch's `TracerWarning`. A module's parameters and buffers, like any tensor
from outside the inputs, are stored on the result as constants (torch keeps them as the
traced module's attributes). Left out: `check_trace` (torch runs the trace a second time and
compares), and sizes traced as values (torch records `x.shape[0]` as
`aten::size`; here it is a constant).
"""

import inspect
import operator
import warnings

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from retorch.fx import Graph, GraphModule


class TracerWarning(Warning):
    """A trace that may not generalise to other inputs (torch.jit.TracerWarning)."""


# tracer.cpp's WARN_PYTHON_DATAFLOW, after "Converting a tensor to a Python <kind>".
_DATAFLOW = (" might cause the trace to be incorrect. We can't record the data flow of Python "
             "values, so this value will be treated as a constant in the future. This means "
             "that the trace might not generalize to other inputs!")  # fmt: skip
_TO_PYTHON = {"__bool__": "boolean", "item": "number", "__float__": "float",
              "__int__": "integer", "__index__": "index", "tolist": "list"}  # fmt: skip
_LEN = ("Using len to get tensor shape might cause the trace to be incorrect. Recommended usage "
        "would be tensor.shape[0]. Passing a tensor of different shape might lead to errors or "
        "silently give incorrect results.")  # fmt: skip
_TENSOR = ("torch.tensor results are registered as constants in the trace. You can safely "
           "ignore this warning if you use this function to create tensors out of constant "
           "variables that would be the same every time you call this function. In any other "
           "case, this might cause the trace to be incorrect.")  # fmt: skip


class _Recorder(TorchFunctionMode):
    """Runs every torch call for real and appends it to the graph if it touched a traced value."""

    def __init__(self, graph: Graph):
        super().__init__()
        self.graph, self.values, self.constants = graph, {}, {}

    def node_of(self, t: torch.Tensor):
        """The node that computed `t`; a tensor from outside the trace becomes a constant."""
        if id(t) not in self.values:
            name = f"_tensor_constant{len(self.constants)}"
            self.constants[name] = t
            self.bind(t, self.graph.get_attr(name))
        return self.values[id(t)][1]

    def bind(self, t: torch.Tensor, node) -> None:
        self.values[id(t)] = (t, node)  # keeps t alive, so its id() is not reused

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _TO_PYTHON:
            warnings.warn(f"Converting a tensor to a Python {_TO_PYTHON[name]}{_DATAFLOW}",
                          TracerWarning, stacklevel=2)  # fmt: skip
        elif name == "__len__":
            warnings.warn(_LEN, TracerWarning, stacklevel=2)
        elif func is torch.tensor:
            warnings.warn(_TENSOR, TracerWarning, stacklevel=2)
        out = func(*args, **kwargs)  # the mode is off inside its own handler: no re-entry
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outputs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        if not outputs or not any(id(a) in self.values for a in inputs):
            return out  # a Python value, or a tensor made from nothing traced: a constant
        a, kw = tree_map(lambda v: self.node_of(v) if isinstance(v, torch.Tensor) else v,
                         (args, kwargs))  # fmt: skip
        if func is torch.Tensor.__getitem__:
            node = self.graph.call_function(operator.getitem, a, kw)  # x[0]
        elif getattr(torch.Tensor, name, None) is func:
            node = self.graph.call_method(name, a, kw)  # x.sum(): a Tensor method
        else:
            node = self.graph.call_function(func, a, kw)  # torch.relu(x)
        if isinstance(out, torch.Tensor):
            self.bind(out, node)
        elif isinstance(out, (tuple, list)):
            for i, o in enumerate(out):
                if isinstance(o, torch.Tensor):
                    self.bind(o, self.graph.call_function(operator.getitem, (node, i)))
        return out


def trace(func, example_inputs) -> GraphModule:
    """Run `func(*example_inputs)` once, recording its torch calls; return the replayable graph.

    As torch.jit.trace: the result runs the recorded ops on new inputs of the same shapes;
    control flow and Python values are those of the examples.
    """
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    graph = Graph()
    recorder = _Recorder(graph)
    forward = func.forward if isinstance(func, torch.nn.Module) else func
    params = list(inspect.signature(forward).parameters)  # a module's tensors: constants
    for p, x in zip(params, example_inputs):
        recorder.bind(x, graph.placeholder(p))
    with recorder:
        out = func(*example_inputs)
    graph.output(tree_map(lambda v: recorder.node_of(v) if isinstance(v, torch.Tensor) else v,
                          out))  # fmt: skip
    graph.eliminate_dead_code()  # the ops that fed only a branch or a Python value
    return GraphModule(recorder.constants, graph,
                       class_name=getattr(func, "__name__", type(func).__name__))  # fmt: skip

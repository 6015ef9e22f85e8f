"""Chapter 3: reverse-mode autograd rebuilt. Mirrors torch/csrc/autograd and torch/autograd.

``tensor`` makes leaves; operations on them record a graph of ``Node``s (graph.py) whose
backward formulas are one table (derivatives.py); ``backward`` and ``grad`` run the engine
(engine.py). In-place ops on views rewrite their base's history (copy_slices.py); forward-mode
AD propagates tangents op by op with a second formula table (forward_ad.py). All arithmetic
goes through the op interface in ``_ops.py``; ``set_array_backend("retorch")`` (backend.py)
swaps torch's arrays underneath for chapter 4's ``retorch.tensor``.
"""

from . import _ops, forward_ad, graph
from .anomaly_mode import detect_anomaly, is_anomaly_enabled, set_detect_anomaly
from .backend import array_backend, count_aten_calls, get_array_backend, set_array_backend
from .engine import backward, grad
from .function import Function, FunctionCtx
from .grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from .gradcheck import gradcheck
from .graph import AccumulateGrad, Edge, Node, SavedVariable, saved_tensors_hooks
from .graphviz import backward_order, graph_names, make_dot
from .tensor import Tensor, cross_entropy, tensor, where

__all__ = [
    "AccumulateGrad",
    "Edge",
    "Function",
    "FunctionCtx",
    "Node",
    "SavedVariable",
    "Tensor",
    "_ops",
    "array_backend",
    "backward",
    "backward_order",
    "count_aten_calls",
    "cross_entropy",
    "detect_anomaly",
    "enable_grad",
    "forward_ad",
    "get_array_backend",
    "grad",
    "gradcheck",
    "inference_mode",
    "graph",
    "graph_names",
    "is_anomaly_enabled",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "make_dot",
    "no_grad",
    "saved_tensors_hooks",
    "set_array_backend",
    "set_detect_anomaly",
    "set_grad_enabled",
    "tensor",
    "where",
]

"""Tensor parallelism: a Linear layer's weight cut into column or row pieces.

Mirrors torch/distributed/tensor/parallel/style.py (``ColwiseParallel``, ``RowwiseParallel``)
and api.py (``parallelize_module``). For ``y = x @ W.t() + b`` with W of shape (out, in):

- ``ColwiseParallel``: W and b in Shard(0) pieces (rows of W are columns of W.t()), the input
  whole (Replicate): each rank computes its own columns of y, Shard(-1), with no message.
- ``RowwiseParallel``: W in Shard(1) pieces, b whole, the input in Shard(-1) pieces: each rank
  computes a term of y (Partial); the output layout Replicate sums them (one all-reduce).

Paired, Colwise then Rowwise, an MLP block costs one all-reduce forward: Megatron-LM's
layout. torch turns each parameter into a DTensor parameter; here the parameter stays a
``torch.nn.Parameter`` holding this rank's piece (so any optimizer steps it), and the module
keeps the piece's spec in ``_dtensor_specs``; its forward runs chapter 7b's DTensor ops
(inputs of 2 dims: a batch of rows).
"""

from __future__ import annotations

import types

import torch
from torch import nn

from ._api import DTensor, distribute_tensor
from ._ops import linear
from .placement_types import Replicate, Shard

__all__ = ["ColwiseParallel", "ParallelStyle", "RowwiseParallel", "parallelize_module"]


class ParallelStyle:
    weight_layout: Shard
    bias_layout: Shard | Replicate
    desired_input_layout: Shard | Replicate

    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        self.input_layouts = (input_layouts or self.default_input,)
        self.output_layouts = (output_layouts or self.default_output,)
        self.use_local_output = use_local_output

    def _apply(self, module: nn.Module, mesh) -> nn.Module:
        if not isinstance(module, nn.Linear):
            raise NotImplementedError(
                f"{type(self).__name__} rebuilds nn.Linear only, got {type(module).__name__}"
            )
        module._dtensor_specs = {}
        for name, layout in (("weight", self.weight_layout), ("bias", self.bias_layout)):
            param = getattr(module, name)
            if param is None:
                continue
            d = distribute_tensor(param.detach(), mesh, [layout])
            setattr(module, name, nn.Parameter(d.to_local().clone()))
            module._dtensor_specs[name] = d._spec
        module._tp_style, module._tp_mesh = self, mesh
        module.forward = types.MethodType(_parallel_linear_forward, module)
        return module


def _parallel_linear_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    style, mesh = self._tp_style, self._tp_mesh
    if not isinstance(x, DTensor):  # the input as this style expects it to lie
        x = DTensor.from_local(x, mesh, style.input_layouts)
    x = x.redistribute(placements=[style.desired_input_layout])
    w = DTensor(self.weight, self._dtensor_specs["weight"])
    b = DTensor(self.bias, self._dtensor_specs["bias"]) if self.bias is not None else None
    y = linear(x, w, b).redistribute(placements=style.output_layouts)  # Partial -> R: all-reduce
    return y.to_local() if style.use_local_output else y


class ColwiseParallel(ParallelStyle):
    default_input, default_output = Replicate(), Shard(-1)
    weight_layout, bias_layout, desired_input_layout = Shard(0), Shard(0), Replicate()


class RowwiseParallel(ParallelStyle):
    default_input, default_output = Shard(-1), Replicate()
    weight_layout, bias_layout, desired_input_layout = Shard(1), Replicate(), Shard(-1)


def parallelize_module(module: nn.Module, device_mesh, parallelize_plan: dict) -> nn.Module:
    """Apply each style of the plan to the submodule it names."""
    for name, style in parallelize_plan.items():
        style._apply(module.get_submodule(name), device_mesh)
    return module

"""``Optimizer``: param groups, per-parameter state, and torch's state_dict format.

Mirrors torch/optim/optimizer.py. An optimizer holds ``param_groups`` (lists of parameters,
each group with its own options, falling back to ``defaults``) and ``state`` (a dict from
parameter to that parameter's buffers, such as Adam's moments). ``state_dict`` replaces the
parameters by their position, so a checkpoint is independent of tensor identities and loads
into any optimizer with the same group sizes, torch's or ours.
"""

from __future__ import annotations

import functools
import warnings
from collections import defaultdict
from copy import deepcopy
from itertools import chain
from typing import Any

import torch

from retorch.autograd import grad_mode as _autograd_grad_mode


class _RequiredParameter:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


def _use_grad_for_differentiable(func):
    """Run ``step`` with autograd off, unless the optimizer is ``differentiable``."""

    @functools.wraps(func)
    def _use_grad(self, *args, **kwargs):
        prev_grad = torch.is_grad_enabled()
        # retorch.autograd's grad mode too: parameters recorded by chapter 3's engine
        with _autograd_grad_mode.set_grad_enabled(self.defaults["differentiable"]):
            try:
                torch.set_grad_enabled(self.defaults["differentiable"])
                return func(self, *args, **kwargs)
            finally:
                torch.set_grad_enabled(prev_grad)

    return _use_grad


def _default_to_foreach(params: list[torch.Tensor], differentiable: bool) -> bool:
    """torch's default for ``foreach=None``: batched kernels pay off on GPUs only."""
    return not differentiable and all(p.device.type == "cuda" for p in params)


def _group_tensors_by_device_and_dtype(tensorlistlist, with_indices: bool = False):
    """Split parallel lists of tensors by the (device, dtype) of the first list's tensors.

    Mirrors torch.utils._foreach_utils._group_tensors_by_device_and_dtype (C++ in
    aten/src/ATen/native/ForeachUtils.h): foreach and fused kernels need one device and one
    dtype per launch. Order within a group is kept; an empty list stays empty; ``with_indices``
    is accepted for torch's signature (the indices are always returned).
    """
    groups: dict = {}
    for i, first in enumerate(tensorlistlist[0]):
        lists, indices = groups.setdefault(
            (first.device, first.dtype), ([[] for _ in tensorlistlist], [])
        )
        for group_list, tensors in zip(lists, tensorlistlist):
            if tensors:
                group_list.append(tensors[i])
        indices.append(i)
    return groups


def _get_scalar_dtype(is_fused: bool | None = None) -> torch.dtype:
    """The dtype of ``state["step"]``: float32, or float64 when that is the default dtype."""
    if is_fused:
        return torch.float32
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


def _device_dtype_check_for_fused(p: torch.Tensor) -> None:
    if not (p.device.type in ("cpu", "cuda") and p.dtype == torch.float32 and p.is_contiguous()):
        raise RuntimeError(
            "`fused=True` in retorch requires all the params to be contiguous float32 Tensors "
            f"on cpu or cuda, but got {p.dtype} on {p.device.type}"
            f"{'' if p.is_contiguous() else ' (not contiguous)'}; use foreach=True instead"
        )


class Optimizer:
    """Base class of all optimizers. Subclasses implement ``step`` from ``param_groups`` and
    ``state``; this class owns the bookkeeping: building groups, zeroing gradients, and
    packing everything into torch's ``state_dict`` format and back."""

    def __init__(self, params, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        if isinstance(params, torch.Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or dicts, "
                f"but got {torch.typename(params)}"
            )
        self.state: defaultdict[torch.Tensor, Any] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for param_group in param_groups:
            self.add_param_group(param_group)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters with its own options (missing options come from ``defaults``)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, torch.Tensor):
            param_group["params"] = [params]
        elif isinstance(params, set):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, but the ordering "
                "of tensors in sets will change between runs. Please use a list instead."
            )
        else:
            param_group["params"] = list(params)
        # named_parameters() gives (name, tensor) pairs: keep the names next to the tensors.
        names = [p[0] for p in param_group["params"] if isinstance(p, tuple)]
        param_group["params"] = [p[1] if isinstance(p, tuple) else p for p in param_group["params"]]
        if names:
            if len(names) != len(param_group["params"]):
                raise ValueError(
                    "all optimizer params should be with/without names. Some param names are missing"
                )
            param_group["param_names"] = names
        for param in param_group["params"]:
            # a tensor-like (torch.overrides.is_tensor_like: defines __torch_function__) too:
            # chapter 5's retorch.Tensor steps through its own dispatcher
            if not torch.overrides.is_tensor_like(param):
                raise TypeError(
                    f"optimizer can only optimize Tensors, but one of the params is {torch.typename(param)}"
                )
            if not self.defaults.get("differentiable", None) and not (
                param.is_leaf or param.retains_grad
            ):
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(
                    f"parameter group didn't specify a value of required optimization parameter {name}"
                )
            param_group.setdefault(name, default)
        if len(param_group["params"]) != len(set(param_group["params"])):
            warnings.warn(
                "optimizer contains a parameter group with duplicate parameters; in future, this will "
                "cause an error; see github.com/pytorch/pytorch/issues/40967 for more information",
                stacklevel=3,
            )
        for group in self.param_groups:
            if ("param_names" in param_group) != ("param_names" in group):
                current_group_txt = (
                    "with names" if "param_names" in param_group else "without names"
                )
                raise ValueError(
                    "all optimizer param groups should be with/without names. "
                    f"cannot add param group {current_group_txt} to the optimizer"
                )
        seen = set(chain.from_iterable(group["params"] for group in self.param_groups))
        if not seen.isdisjoint(param_group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every ``.grad`` (``set_to_none``), or fill it with zeros in place.

        The two differ: a parameter whose grad is None is skipped by ``step``, while a zero
        gradient still moves it through momentum and weight decay.
        """
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        if p.grad.grad_fn is not None:
                            p.grad.detach_()
                        else:
                            p.grad.requires_grad_(False)
                        p.grad.zero_()

    def step(self, closure=None):
        """Update the parameters once; ``closure`` (re)computes and returns the loss."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: buffers}, "param_groups": [options + "params": [indices]]}``."""
        param_mappings: dict[int, int] = {}
        start_index = 0

        def pack_group(group):
            nonlocal start_index
            packed = {k: v for k, v in group.items() if k != "params"}
            param_mappings.update(
                {
                    id(p): i
                    for i, p in enumerate(group["params"], start_index)
                    if id(p) not in param_mappings
                }
            )
            packed["params"] = [param_mappings[id(p)] for p in group["params"]]
            start_index += len(packed["params"])
            return packed

        param_groups = [pack_group(g) for g in self.param_groups]
        packed_state = {
            (param_mappings[id(k)] if isinstance(k, torch.Tensor) else k): v
            for k, v in self.state.items()
        }
        return {"state": packed_state, "param_groups": param_groups}

    @staticmethod
    def _process_value_according_to_param_policy(param, value, param_id, param_groups, key=None):
        """Move a loaded state tensor next to its parameter; ``step`` stays a CPU scalar
        unless the group is fused, whose kernels read it on the parameter's device."""
        fused = next(
            (g.get("fused", False) for g in param_groups if param_id in g["params"]), False
        )
        if key == "step":
            return value.to(dtype=torch.float32, device=param.device) if fused else value
        if param.is_floating_point():
            return value.to(dtype=param.dtype, device=param.device)
        return value.to(device=param.device)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state_dict saved by this optimizer, or by torch's optimizer of the same kind."""
        state_dict = state_dict.copy()
        groups = self.param_groups
        saved_groups = deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError(
                "loaded state dict contains a parameter group that doesn't match the size of "
                "optimizer's group"
            )
        # Saved ids and our parameters pair up by position, with no further check.
        id_map = dict(
            zip(
                chain.from_iterable(g["params"] for g in saved_groups),
                chain.from_iterable(g["params"] for g in groups),
            )
        )
        state: defaultdict[torch.Tensor, Any] = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                param = id_map[k]
                state[param] = {
                    key: self._process_value_according_to_param_policy(
                        param, value, k, state_dict["param_groups"], key
                    )
                    if isinstance(value, torch.Tensor)
                    else value
                    for key, value in v.items()
                }
            else:
                state[k] = v
        for group, new_group in zip(groups, saved_groups):
            new_group["params"] = group["params"]
            if "param_names" in group and "param_names" not in new_group:
                new_group["param_names"] = group["param_names"]
        self.state, self.param_groups = state, saved_groups

    def __repr__(self) -> str:
        format_string = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            format_string += "\n"
            format_string += f"Parameter Group {i}\n"
            for key in sorted(group.keys()):
                if key != "params":
                    format_string += f"    {key}: {group[key]}\n"
        format_string += ")"
        return format_string

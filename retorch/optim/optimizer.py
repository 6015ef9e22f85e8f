"""``Optimizer``: param groups, per-parameter state, and torch's state_dict format.

Mirrors torch/optim/optimizer.py. An optimizer holds ``param_groups`` (lists of parameters,
each group with its own options, falling back to ``defaults``) and ``state`` (a dict from
parameter to that parameter's buffers, such as Adam's moments). ``state_dict`` replaces the
parameters by their position, so a checkpoint is independent of tensor identities and loads
into any optimizer with the same group sizes, torch's or ours.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from copy import deepcopy
from itertools import chain
from typing import Any

import torch


class _RequiredParameter:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


class Optimizer:
    """Base class: subclasses implement ``step`` from ``param_groups`` and ``state``."""

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
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
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
        for param in param_group["params"]:
            if not isinstance(param, torch.Tensor):
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
        seen = set(chain.from_iterable(group["params"] for group in self.param_groups))
        if not seen.isdisjoint(param_group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
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
        raise NotImplementedError

    def _closure_loss(self, closure):
        if closure is None:
            return None
        with torch.enable_grad():
            return closure()

    # ------------------------------------------------------------ state_dict
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
    def _cast_state(param: torch.Tensor, value: Any, key: str | None = None) -> Any:
        """Move loaded state next to its parameter; ``step`` stays as saved (a CPU scalar)."""
        if isinstance(value, torch.Tensor):
            if key == "step":
                return value
            if param.is_floating_point():
                return value.to(dtype=param.dtype, device=param.device)
            return value.to(device=param.device)
        if isinstance(value, dict):
            return {k: Optimizer._cast_state(param, v, key=k) for k, v in value.items()}
        return value

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state_dict saved by this optimizer, or by torch's optimizer of the same kind."""
        state_dict = state_dict.copy()
        groups = self.param_groups
        saved_groups = deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError(
                "loaded state dict contains a parameter group that doesn't match the size of optimizer's group"
            )
        id_map = dict(
            zip(
                chain.from_iterable(g["params"] for g in saved_groups),
                chain.from_iterable(g["params"] for g in groups),
            )
        )
        state: defaultdict[torch.Tensor, Any] = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                state[id_map[k]] = self._cast_state(id_map[k], v)
            else:
                state[k] = v
        for group, new_group in zip(groups, saved_groups):
            new_group["params"] = group["params"]
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

"""Parameter initialisation. Mirrors torch/nn/init.py.

The functions draw from torch's global generator in the same order and with the same calls as
torch's, so under the same ``torch.manual_seed`` a rebuilt layer holds the same values.
"""

from __future__ import annotations

import math

import torch


def calculate_gain(nonlinearity: str, param=None) -> float:
    linear_fns = [
        "linear",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
    ]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: torch.Tensor) -> tuple[int, int]:
    if tensor.dim() < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
        )
    receptive_field_size = 1
    for s in tensor.shape[2:]:
        receptive_field_size *= s
    return tensor.size(1) * receptive_field_size, tensor.size(0) * receptive_field_size


def _calculate_correct_fan(tensor: torch.Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: torch.Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> torch.Tensor:
    with torch.no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(
    tensor: torch.Tensor, mean: float = 0.0, std: float = 1.0, generator=None
) -> torch.Tensor:
    with torch.no_grad():
        return tensor.normal_(mean, std, generator=generator)


def zeros_(tensor: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return tensor.zero_()


def ones_(tensor: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return tensor.fill_(1)


def xavier_uniform_(tensor: torch.Tensor, gain: float = 1.0, generator=None) -> torch.Tensor:
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a, generator)


def kaiming_uniform_(
    tensor: torch.Tensor,
    a: float = 0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator=None,
) -> torch.Tensor:
    """U(-bound, bound) with bound = gain * sqrt(3 / fan): He et al. (2015)."""
    if 0 in tensor.shape:
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    bound = math.sqrt(3.0) * gain / math.sqrt(fan)
    with torch.no_grad():
        return tensor.uniform_(-bound, bound, generator=generator)

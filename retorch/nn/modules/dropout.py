"""``Dropout``. Mirrors torch/nn/modules/dropout.py.

The mask comes from ``F.dropout``, which draws from torch's generator exactly as torch's
``nn.Dropout`` does, so under the same seed both zero the same elements.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from .module import Module

__all__ = ["Dropout"]


class _DropoutNd(Module):
    p: float
    inplace: bool

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """In training, zero each element with probability ``p`` and scale the rest by 1/(1-p);
    in eval mode, pass the input through."""

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout(input, self.p, self.training, self.inplace)

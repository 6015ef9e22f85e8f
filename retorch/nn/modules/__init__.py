"""The rebuilt modules. Mirrors torch/nn/modules/__init__.py."""

from .activation import GELU, ReLU
from .container import ModuleDict, ModuleList, Sequential
from .dropout import Dropout
from .linear import Linear
from .module import Module
from .normalization import LayerNorm
from .sparse import Embedding

__all__ = [
    "GELU",
    "Dropout",
    "Embedding",
    "LayerNorm",
    "Linear",
    "Module",
    "ModuleDict",
    "ModuleList",
    "ReLU",
    "Sequential",
]

"""Chapter 1: ``torch.nn`` rebuilt. Mirrors torch/nn/__init__.py.

Replacing ``torch.nn`` with ``retorch.nn`` in a model definition is the whole change: the
names and signatures are torch's, the tensors are real torch tensors, and only the Module
machinery (registration, iteration, hooks, state_dict, repr) is rebuilt.
"""

from . import init, utils
from .modules import (
    GELU,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    Module,
    ModuleDict,
    ModuleList,
    ReLU,
    Sequential,
)
from .parameter import Buffer, Parameter

__all__ = [
    "GELU",
    "Buffer",
    "Dropout",
    "Embedding",
    "LayerNorm",
    "Linear",
    "Module",
    "ModuleDict",
    "ModuleList",
    "Parameter",
    "ReLU",
    "Sequential",
    "init",
    "utils",
]

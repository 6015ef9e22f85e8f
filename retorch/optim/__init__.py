"""Chapter 2: ``torch.optim`` rebuilt. Mirrors torch/optim/__init__.py.

The optimizers work on the parameters of real torch models (or of ``retorch.nn`` models, which
hold real torch tensors) and take the same steps as torch's.
"""

from . import lr_scheduler
from .adam import Adam
from .adamw import AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "lr_scheduler"]

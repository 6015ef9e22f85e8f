"""Chapter 8: ``torch.amp`` rebuilt. Mirrors torch/amp/__init__.py.

- ``autocast``: chapter 5's autocast dispatch key (``retorch.dispatch.autocast_mode``), re-exported
  where torch exports its own;
- ``GradScaler``: dynamic loss scaling (torch/amp/grad_scaler.py), in ``grad_scaler.py``, with
  the two ATen kernels it calls rebuilt next to it.
"""

from retorch.dispatch.autocast_mode import autocast, get_autocast_dtype, is_autocast_enabled

from .grad_scaler import GradScaler, OptState

__all__ = ["GradScaler", "OptState", "autocast", "get_autocast_dtype", "is_autocast_enabled"]

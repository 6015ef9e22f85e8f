"""Inference mode in the dispatcher: ``c10::InferenceMode`` and ``torch.inference_mode``.

Mirrors ``c10/core/InferenceMode.h`` (the guard), ``torch/autograd/grad_mode.py``
(``inference_mode``, the Python context manager over it) and the part of
``c10/core/TensorImpl.cpp`` that gives a tensor made inside the mode no autograd keys.
Entering the mode sets the thread's autograd state (grad mode off, inference mode on:
chapter 3's ``retorch.autograd.grad_mode`` flags, as ``AutogradState::set_tls_state``) and
forces its dispatch key sets:

- ``ADInplaceOrView`` leaves the *included* set, so a tensor without that key skips the
  ADInplaceOrView kernels (no version bump, no view bookkeeping);
- the autograd keys join the *excluded* set, so no call in the block runs an autograd kernel.

A tensor made inside the mode (``Tensor.__init__``, as ``TensorImpl``'s constructor) drops
the autograd and ADInplaceOrView keys and has no version counter: an *inference tensor*, and
``is_inference()`` reads exactly that from its keys (``TensorImpl::is_inference``). A normal
tensor keeps its keys inside the mode, so its in-place ops still bump its version and its
views are still views (``Note [Expected TLS state in InferenceMode]``). ``InferenceMode(False)``
undoes both sets inside an enclosing mode.
"""

from __future__ import annotations

import functools

from retorch.autograd import grad_mode

from .dispatch_key import DispatchKey
from .dispatch_key_set import autograd_dispatch_keyset
from .local_dispatch_key_set import ForceDispatchKeyGuard, tls_local_dispatch_key_set


class InferenceMode:
    """``with InferenceMode():`` (or ``InferenceMode(False)``), as ``c10::InferenceMode``; also
    a decorator, as ``torch.inference_mode``."""

    def __init__(self, mode: bool = True) -> None:
        self.mode = bool(mode)

    def __enter__(self) -> None:
        self._prev_state = grad_mode._enabled, grad_mode._inference_enabled
        grad_mode._enabled, grad_mode._inference_enabled = not self.mode, self.mode
        included, excluded = tls_local_dispatch_key_set()
        if self.mode:
            included = included.remove(DispatchKey.ADInplaceOrView)
            excluded = excluded | autograd_dispatch_keyset
        else:
            included = included.add(DispatchKey.ADInplaceOrView)
            excluded = excluded - autograd_dispatch_keyset
        self._keys = ForceDispatchKeyGuard(included, excluded)
        self._keys.__enter__()

    def __exit__(self, *exc) -> None:
        self._keys.__exit__(*exc)
        grad_mode._enabled, grad_mode._inference_enabled = self._prev_state

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with InferenceMode(self.mode):
                return fn(*args, **kwargs)

        return wrapper


inference_mode = InferenceMode


def is_inference_mode_enabled() -> bool:
    """``torch.is_inference_mode_enabled()`` (``InferenceMode::is_enabled``)."""
    return grad_mode._inference_enabled

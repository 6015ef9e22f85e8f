"""``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``. Mirrors
torch/autograd/grad_mode.py (and, for inference mode, c10/core/InferenceMode.h).

Grad mode is one flag (thread-local in torch; a module global here): when it is off, ops
record no graph. Inference mode goes further: grad mode is off inside, and what ops make there
are *inference tensors*, which have no version counter (``INFERENCE_VERSION`` stands in for
it), cannot be saved for backward, and cannot change in place outside inference mode. (torch
also takes the autograd dispatch keys out of the way; retorch has no dispatcher under autograd.)
"""

from __future__ import annotations

import functools

_enabled = True
_inference_enabled = False


class _InferenceVersion:
    """The version counter of every inference tensor: there is none, so it never moves."""

    __slots__ = ()
    value = 0


INFERENCE_VERSION = _InferenceVersion()

ERR_INFERENCE_VERSION = "Inference tensors do not track version counter."
ERR_INFERENCE_INPLACE = (
    "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a "
    "clone to get a normal tensor before doing inplace update.See "
    "https://github.com/pytorch/rfcs/pull/17 for more details."
)
ERR_INFERENCE_SAVED = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in "
    "inference mode in computation tracked by autograd. To work around this, you can make a "
    "clone to get a normal tensor and use it in autograd, or use `torch.no_grad()` instead of "
    "`torch.inference_mode()`."
)
ERR_INFERENCE_REQUIRES_GRAD = (
    "Setting requires_grad=True on inference tensor outside InferenceMode is not allowed."
)


def is_inference_mode_enabled() -> bool:
    return _inference_enabled


class inference_mode:
    """Grad mode off, and results are inference tensors (context manager or decorator)."""

    def __init__(self, mode: bool = True) -> None:
        self.mode = mode

    def __enter__(self) -> None:
        global _enabled, _inference_enabled
        self.prev = _enabled, _inference_enabled
        if self.mode:
            _enabled = False
        _inference_enabled = self.mode

    def __exit__(self, *exc) -> None:
        global _enabled, _inference_enabled
        _enabled, _inference_enabled = self.prev

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(self.mode):
                return fn(*args, **kwargs)

        return wrapper


def is_grad_enabled() -> bool:
    return _enabled


class set_grad_enabled:
    """Set grad mode on or off; usable as a call, a context manager, or a decorator."""

    def __init__(self, mode: bool) -> None:
        global _enabled
        self.prev, self.mode = _enabled, mode
        _enabled = mode

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc) -> None:
        global _enabled
        _enabled = self.prev

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(self.mode):
                return fn(*args, **kwargs)

        return wrapper


class _GradModeContext:
    mode = True

    def __enter__(self) -> None:
        global _enabled
        self.prev = _enabled
        _enabled = self.mode

    def __exit__(self, *exc) -> None:
        global _enabled
        _enabled = self.prev

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradModeContext):
    """Ops inside record no graph (context manager or decorator)."""

    mode = False


class enable_grad(_GradModeContext):
    mode = True

"""``no_grad``, ``enable_grad``, ``set_grad_enabled``. Mirrors torch/autograd/grad_mode.py.

Grad mode is one flag (thread-local in torch; a module global here): when it is off, ops
record no graph.
"""

from __future__ import annotations

import functools

_enabled = True


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

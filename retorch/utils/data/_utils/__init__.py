"""What the DataLoader's helpers share. Mirrors torch/utils/data/_utils/__init__.py.

The helpers that worker processes run live in module scope (``collate``, ``fetch``,
``worker``), so a worker started with "spawn" can import them by name. This file holds what
they share: the status-check interval, the interpreter-exit flag, and ``ExceptionWrapper``,
which carries an exception and its traceback from a worker to the main process (torch keeps
it in torch/_utils.py and re-exports it here).
"""

from __future__ import annotations

import atexit
import sys
import traceback

MP_STATUS_CHECK_INTERVAL = 5.0
"""Seconds a blocking queue read waits before checking that the other side is still alive.

The main process checks its workers, and each worker checks the main process, this often, so
neither waits forever on a process that has died."""

python_exit_status = False
"""Set when Python starts exiting: the workers are then already being terminated by
multiprocessing's own exit handler, and shutting them down again could hang or fail."""


def _set_python_exit_flag() -> None:
    global python_exit_status
    python_exit_status = True


atexit.register(_set_python_exit_flag)


class KeyErrorMessage(str):
    """A ``str`` whose ``repr`` is itself: ``str(KeyError(msg))`` is ``repr(msg)``, which would
    print a multi-line traceback as one quoted line full of ``\\n``. Mirrors torch/_utils.py."""

    __slots__ = ()

    def __repr__(self):
        return self


class ExceptionWrapper:
    """The exception being handled and its formatted traceback, picklable across processes.

    Mirrors torch/_utils.py's ``ExceptionWrapper``. A traceback object cannot be pickled, so
    the worker sends its text; ``reraise`` raises an exception of the same type in the main
    process whose message starts with where it happened and contains that traceback.
    """

    def __init__(self, exc_info=None, where: str = "in background") -> None:
        # Keep only type and text: holding the traceback would keep every frame alive.
        if exc_info is None:
            exc_info = sys.exc_info()
        self.exc_type = exc_info[0]
        self.exc_msg = "".join(traceback.format_exception(*exc_info))
        self.where = where

    def reraise(self):
        # Raised straight from the call: an `exception` local in this frame would form a
        # cycle (exception -> traceback -> frame -> exception) that keeps the DataLoader
        # iterator alive until the cyclic garbage collector runs, and when it does, it closes
        # the queues before the iterator's __del__ can tell the workers to exit.
        raise self._exception()

    def _exception(self) -> BaseException:
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:
            msg = KeyErrorMessage(msg)
        try:
            return self.exc_type(msg)
        except Exception:
            # An exception type whose constructor needs other arguments cannot be rebuilt
            # from a message; the message still tells what happened.
            return RuntimeError(msg)

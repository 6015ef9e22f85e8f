"""``detect_anomaly`` and ``set_detect_anomaly``. Mirrors torch/autograd/anomaly_mode.py.

With anomaly detection on, every node remembers the stack of the forward call that created
it (in ``node.metadata["traceback_"]``); when a backward function fails, the engine warns with
that stack, and, with ``check_nan``, it raises when a backward function returns NaN.
"""

from __future__ import annotations

import warnings

_enabled = False
_check_nan = True


def is_anomaly_enabled() -> bool:
    return _enabled


def is_anomaly_check_nan_enabled() -> bool:
    return _check_nan


def _set_anomaly_enabled(enabled: bool, check_nan: bool) -> None:
    global _enabled, _check_nan
    _enabled, _check_nan = enabled, check_nan


class detect_anomaly:
    """Context manager: anomaly detection on inside the block."""

    def __init__(self, check_nan: bool = True) -> None:
        self.prev, self.prev_check_nan = _enabled, _check_nan
        self.check_nan = check_nan
        warnings.warn(
            "Anomaly Detection has been enabled. This mode will increase the runtime and should "
            "only be enabled for debugging.",
            stacklevel=2,
        )

    def __enter__(self) -> None:
        _set_anomaly_enabled(True, self.check_nan)

    def __exit__(self, *exc) -> None:
        _set_anomaly_enabled(self.prev, self.prev_check_nan)


class set_detect_anomaly:
    """Turn anomaly detection on or off: as a call, or as a context manager."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self.prev, self.prev_check_nan = _enabled, _check_nan
        _set_anomaly_enabled(mode, check_nan)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc) -> None:
        _set_anomaly_enabled(self.prev, self.prev_check_nan)

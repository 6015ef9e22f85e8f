"""``detect_anomaly``. Mirrors torch/autograd/anomaly_mode.py.

With anomaly detection on, every node remembers the stack of the forward call that created
it, and the engine checks each backward output for NaN; on one it warns with that stack and
raises naming the node.
"""

from __future__ import annotations

import warnings

_enabled = False


def is_anomaly_enabled() -> bool:
    return _enabled


class detect_anomaly:
    def __init__(self, check_nan: bool = True) -> None:
        self.check_nan = check_nan

    def __enter__(self) -> None:
        global _enabled
        self.prev = _enabled
        _enabled = self.check_nan
        warnings.warn(
            "Anomaly Detection has been enabled. This mode will increase the runtime and should only be "
            "enabled for debugging.",
            stacklevel=2,
        )

    def __exit__(self, *exc) -> None:
        global _enabled
        _enabled = self.prev

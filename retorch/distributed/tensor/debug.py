"""``CommDebugMode``: count the collectives a block issues, under torch's names.

Mirrors torch/distributed/tensor/debug/_comm_mode.py, whose ``get_comm_counts()`` keys are
the c10d ops (printed as ``c10d_functional.all_gather_into_tensor``, ``c10d.scatter_``...).
retorch's DTensor records each collective it issues here (``_collective_utils.py``).
"""

from __future__ import annotations

from collections import Counter

__all__ = ["CommDebugMode"]

_active: list[CommDebugMode] = []


def _record(name: str) -> None:
    for mode in _active:
        mode.comm_counts[name] += 1


class CommDebugMode:
    """``with CommDebugMode() as m: ...; m.get_comm_counts()`` -> ``{name: count}``."""

    def __init__(self) -> None:
        self.comm_counts: Counter[str] = Counter()

    def __enter__(self) -> CommDebugMode:
        self.comm_counts.clear()
        _active.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _active.remove(self)

    def get_comm_counts(self) -> dict[str, int]:
        return dict(self.comm_counts)

    def get_total_counts(self) -> int:
        return sum(self.comm_counts.values())

"""Counters of the lazy runtime, by torch's names (torch/_lazy/metrics.py, counter_value).

`UncachedCompile` and `CachedCompile` count compiles and cache hits, `MarkStep` the steps,
`SyncedTensorsWithIR` the tensors whose pending IR a sync executed.
"""

import collections

_counters: collections.Counter = collections.Counter()


def counter_value(name: str):
    """The counter's value, None if it never counted (as torch's)."""
    return _counters.get(name)


def counter_names() -> list[str]:
    return sorted(_counters)


def reset() -> None:
    _counters.clear()

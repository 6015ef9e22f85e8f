"""``retorch.profiler.profile``: a context manager that records every op, as torch's.

Mirrors ``torch/profiler/profiler.py`` (``profile``, ``ProfilerActivity``) over the legacy
front end ``torch/autograd/profiler.py`` (``profile.__enter__`` starts recording,
``__exit__`` stops it and builds the ``EventList``; ``key_averages``, ``events``,
``export_chrome_trace``). Recording itself is ``record_function.py``'s.
"""

from __future__ import annotations

import enum

from . import record_function as _rf
from .profiler_util import EventList


class ProfilerActivity(enum.Enum):
    """``torch._C._profiler.ProfilerActivity``: what to record."""

    CPU = 0
    CUDA = 2


def _simulated() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)


class profile:
    """Record the ops run inside the block: names, input shapes, CPU time, memory, GPU time."""

    def __init__(self, *, activities=None, record_shapes: bool = False,
                 profile_memory: bool = False, **unsupported) -> None:  # fmt: skip
        if unsupported:
            raise TypeError(
                f"profile() got unexpected keyword arguments {sorted(unsupported)}: retorch's "
                f"profiler supports activities, record_shapes and profile_memory"
            )
        self.activities = set(activities or (ProfilerActivity.CPU,))
        bad = [a for a in self.activities if not isinstance(a, ProfilerActivity)]
        if bad:
            raise ValueError(f"activities must be ProfilerActivity members, got {bad}")
        self.record_shapes, self.profile_memory = record_shapes, profile_memory
        self.use_device = "cuda" if ProfilerActivity.CUDA in self.activities else None
        # under the simulator kernels run on the host, one after the other: no device time
        self.device_note = None
        if self.use_device and _simulated():
            self.device_note = (
                "Self CUDA time total: not measured (CUDA simulator: kernels run on the host)"
            )
        self._events: EventList | None = None
        self._memory: list = []

    def __enter__(self) -> profile:
        use_cuda = self.use_device is not None and self.device_note is None
        _rf.start(self.record_shapes, self.profile_memory, use_cuda)
        return self

    def __exit__(self, *exc) -> None:
        state = _rf.stop()
        for evt in state.events:
            evt.use_device = self.use_device
        self._events = EventList(state.events, use_device=self.use_device,
                                 profile_memory=self.profile_memory, device_note=self.device_note)  # fmt: skip
        self._memory = state.memory

    def _check(self) -> EventList:
        if self._events is None:
            raise RuntimeError("Profiler didn't finish running")
        return self._events

    def events(self) -> EventList:
        """Every range recorded, in the order they started."""
        return self._check()

    def key_averages(self, group_by_input_shape: bool = False) -> EventList:
        return self._check().key_averages(group_by_input_shape)

    def export_chrome_trace(self, path: str) -> None:
        """A trace for Perfetto (ui.perfetto.dev) or chrome://tracing."""
        self._check().export_chrome_trace(path, self._memory)

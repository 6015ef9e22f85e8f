"""The profiler's results: events, their averages per key, the table and the Chrome trace.

Mirrors ``torch/autograd/profiler_util.py``: ``FunctionEvent`` (one recorded range: name, start
and end in µs, input shapes, CPU children, memory), ``FunctionEventAvg`` (the events of one key
summed, what ``key_averages`` returns), ``EventList`` (``key_averages``, ``table``,
``export_chrome_trace``) and ``_build_table``, whose columns, widths and number formats are
torch's (``_format_time``, ``_format_memory``, ``_format_time_share``). Self times and self
memory are an event's totals minus its direct children's, as torch's ``self_cpu_time_total``
and ``self_cpu_memory_usage`` properties compute them.

The Chrome trace has the shape of the Kineto trace ``torch.profiler.profile.export_chrome_trace``
writes: ``{"traceEvents": [...]}``, one ``"ph": "X"`` event per range (``cat``, ``name``,
``pid``, ``tid``, ``ts`` and ``dur`` in µs, ``args`` with ``Input Dims``), and one instant
``"ph": "i"`` ``[memory]`` event per allocation or free (``args.Bytes``).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict


def _format_time(time_us):
    """torch's ``_format_time``: µs, ms or s with three decimals."""
    if time_us >= 1e6:
        return f"{time_us / 1e6:.3f}s"
    if time_us >= 1e3:
        return f"{time_us / 1e3:.3f}ms"
    return f"{time_us:.3f}us"


def _format_time_share(time_us, total_time_us):
    if total_time_us == 0:
        return "NaN"
    return f"{time_us * 100.0 / total_time_us:.2f}%"


def _format_memory(nbytes):
    """torch's ``_format_memory``: bytes, then KB, MB, GB (powers of 1024) with 2 decimals."""
    for unit, size in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if abs(nbytes) >= size:
            return f"{nbytes * 1.0 / size:.2f} {unit}"
    return str(nbytes) + " B"


class FunctionEvent:
    """One recorded range (an op, an autograd node, a ``record_function`` label)."""

    def __init__(self, id, name, thread, start_us, input_shapes=None, use_device=None):
        self.id, self.name, self.thread = id, name, thread
        self.start_us, self.end_us = start_us, start_us
        self.input_shapes = input_shapes if input_shapes is not None else []
        self.use_device = use_device
        self.cpu_children: list[FunctionEvent] = []
        self.cpu_parent: FunctionEvent | None = None
        self.self_cpu_memory_usage = 0  # bytes allocated minus freed while it was innermost
        self.device_time_total = 0.0  # µs, from CUDA events, on a GPU only
        self.count = 1

    @property
    def key(self) -> str:
        return self.name

    @property
    def cpu_time_total(self) -> float:
        return self.end_us - self.start_us

    @property
    def self_cpu_time_total(self) -> float:
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children)

    @property
    def cpu_memory_usage(self) -> int:
        return self.self_cpu_memory_usage + sum(c.cpu_memory_usage for c in self.cpu_children)

    @property
    def self_device_time_total(self) -> float:
        return max(
            self.device_time_total - sum(c.device_time_total for c in self.cpu_children), 0.0
        )

    def __repr__(self) -> str:
        return (
            f"<FunctionEvent id={self.id} name={self.name} input_shapes={self.input_shapes} "
            f"cpu_children={[c.id for c in self.cpu_children]}>"
        )


class FunctionEventAvg:
    """The events of one key, summed (``FunctionEventAvg.add``); averages per call."""

    def __init__(self) -> None:
        self.key, self.count, self.input_shapes, self.cpu_parent = None, 0, None, None
        self.use_device = None
        self.cpu_time_total = self.self_cpu_time_total = 0.0
        self.device_time_total = self.self_device_time_total = 0.0
        self.cpu_memory_usage = self.self_cpu_memory_usage = 0

    def add(self, other):
        if self.key is None:
            self.key, self.input_shapes = other.key, other.input_shapes
            self.cpu_parent, self.use_device = other.cpu_parent, other.use_device
        if other.key != self.key:
            raise AssertionError(f"Expected keys to match, but got {other.key} vs {self.key}")
        for field in ("cpu_time_total", "self_cpu_time_total", "device_time_total",
                      "self_device_time_total", "cpu_memory_usage", "self_cpu_memory_usage",
                      "count"):  # fmt: skip
            setattr(self, field, getattr(self, field) + getattr(other, field))
        return self

    @property
    def cpu_time(self) -> float:  # "CPU time avg"
        return self.cpu_time_total / max(self.count, 1)

    @property
    def device_time(self) -> float:
        return self.device_time_total / max(self.count, 1)

    def __repr__(self) -> str:
        return f"<FunctionEventAvg key={self.key} count={self.count}>"


class EventList(list):
    """The events of a profile (``torch.autograd.profiler_util.EventList``)."""

    def __init__(self, *args, use_device=None, profile_memory=False, device_note=None):
        super().__init__(*args)
        self._use_device, self._profile_memory, self._device_note = (
            use_device, profile_memory, device_note,
        )  # fmt: skip

    def key_averages(self, group_by_input_shape: bool = False) -> EventList:
        """One ``FunctionEventAvg`` per name (per name and input shapes when asked), in the
        order each key was first seen, as torch's ``defaultdict`` keeps them."""
        stats: dict = defaultdict(FunctionEventAvg)
        for evt in self:
            key = (evt.key, str(evt.input_shapes)) if group_by_input_shape else evt.key
            stats[key].add(evt)
        out = EventList(stats.values(), use_device=self._use_device,
                        profile_memory=self._profile_memory, device_note=self._device_note)  # fmt: skip
        if not group_by_input_shape:
            for avg in out:
                avg.input_shapes = ""
        return out

    @property
    def self_cpu_time_total(self) -> float:
        return sum(e.self_cpu_time_total for e in self)

    def table(self, sort_by=None, row_limit=100, max_name_column_width=55,
              max_shapes_column_width=80, header=None, top_level_events_only=False) -> str:  # fmt: skip
        return _build_table(self, sort_by, header, row_limit, max_name_column_width,
                            max_shapes_column_width, self._profile_memory,
                            top_level_events_only, self._device_note)  # fmt: skip

    def export_chrome_trace(self, path: str, memory_events=()) -> None:
        """Write the Kineto-shaped trace: ``X`` events for ranges, ``i`` for memory."""
        pid = os.getpid()
        trace = []
        for e in self:
            if e.name == "[memory]":  # drawn as the instant events below, as Kineto does
                continue
            trace.append({
                "ph": "X", "cat": "cpu_op", "name": e.name, "pid": pid, "tid": e.thread,
                "ts": e.start_us, "dur": e.cpu_time_total,
                "args": {"External id": e.id, "Input Dims": e.input_shapes},
            })  # fmt: skip
        for ts, nbytes, total, thread in memory_events:
            trace.append({
                "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                "pid": pid, "tid": thread, "ts": ts,
                "args": {"Device Type": 0, "Device Id": -1, "Bytes": nbytes,
                         "Total Allocated": total},
            })  # fmt: skip
        with open(path, "w") as f:
            json.dump({"schemaVersion": 1, "traceEvents": trace, "displayTimeUnit": "ms"}, f)


def _build_table(events, sort_by=None, header=None, row_limit=100, max_name_column_width=55,
                 max_shapes_column_width=80, profile_memory=False, top_level_events_only=False,
                 device_note=None) -> str:  # fmt: skip
    """torch's ``_build_table`` for CPU (and CUDA) columns, memory, input shapes."""
    if len(events) == 0:
        return ""
    use_device = events[0].use_device
    has_device_time = any(e.self_device_time_total > 0 for e in events)
    has_input_shapes = any(e.input_shapes is not None and len(e.input_shapes) > 0 for e in events)
    if sort_by is not None:
        attr = sort_by.replace("cuda", "device")
        events = sorted(events, key=lambda e: getattr(e, attr), reverse=True)
    name_w = min(max(len(e.key) for e in events) + 4, max_name_column_width)
    shapes_w = min(max(len(str(e.input_shapes)) for e in events) + 4, max_shapes_column_width)
    headers = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    dev = use_device.upper() if use_device else "None"
    if has_device_time:
        headers += [f"Self {dev}", f"Self {dev} %", f"{dev} total", f"{dev} time avg"]
    if profile_memory:
        headers += ["CPU Mem", "Self CPU Mem"]
    headers.append("# of Calls")
    widths = [name_w] + [12] * (len(headers) - 1)
    if has_input_shapes:
        headers.append("Input Shapes")
        widths.append(shapes_w)
    row_format = "".join("{: >" + str(w) + "}  " for w in widths)
    header_sep = "".join("-" * w + "  " for w in widths)
    total_cpu = sum(e.self_cpu_time_total for e in events)
    total_dev = sum(e.self_device_time_total for e in events)
    lines = []
    if header is not None:
        lines += ["=" * (sum(widths) + 2 * len(widths) - 2), header]
    lines += [header_sep, row_format.format(*headers), header_sep]
    shown = 0
    for e in events:
        if shown == row_limit:
            break
        if top_level_events_only and e.cpu_parent is not None:
            continue
        shown += 1
        name = e.key
        if len(name) >= max_name_column_width - 3:
            name = name[: max_name_column_width - 3] + "..."
        row = [name, _format_time_share(e.self_cpu_time_total, total_cpu),
               _format_time(e.self_cpu_time_total),
               _format_time_share(e.cpu_time_total, total_cpu), _format_time(e.cpu_time_total),
               _format_time(e.cpu_time_total / max(e.count, 1))]  # fmt: skip
        if has_device_time:
            row += [_format_time(e.self_device_time_total),
                    _format_time_share(e.self_device_time_total, total_dev),
                    _format_time(e.device_time_total),
                    _format_time(e.device_time_total / max(e.count, 1))]  # fmt: skip
        if profile_memory:
            row += [_format_memory(e.cpu_memory_usage), _format_memory(e.self_cpu_memory_usage)]
        row.append(e.count)
        if has_input_shapes:
            row.append(str(e.input_shapes)[:shapes_w])
        lines.append(row_format.format(*row))
    lines += [header_sep, f"Self CPU time total: {_format_time(total_cpu)}"]
    if has_device_time:
        lines.append(f"Self {dev} time total: {_format_time(total_dev)}")
    elif device_note:
        lines.append(device_note)
    return "\n".join(lines) + "\n"

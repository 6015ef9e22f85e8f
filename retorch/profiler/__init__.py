"""``retorch.profiler``: torch.profiler rebuilt on the dispatcher's RecordFunction hook.

Mirrors ``torch/profiler/profiler.py`` (``profile``, ``ProfilerActivity``),
``torch/autograd/profiler_util.py`` (``EventList``, ``FunctionEvent``, ``FunctionEventAvg``, the
table) and ``aten/src/ATen/record_function.h`` (``record_function.py``).
"""

from .profiler import ProfilerActivity, profile
from .profiler_util import EventList, FunctionEvent, FunctionEventAvg
from .record_function import record_function

__all__ = [
    "EventList",
    "FunctionEvent",
    "FunctionEventAvg",
    "ProfilerActivity",
    "profile",
    "record_function",
]

"""Chapter 0: tools for looking inside real torch, layer by layer.

Nothing here is rebuilt yet; these helpers make what torch itself exposes (dispatch key sets,
dispatch tables, aten op logs, the profiler) print small and deterministic, so the overview
chapter can follow one ``torch.add`` and one training step through the layers:

    Python front end -> bindings -> dispatcher -> ATen -> c10 -> kernels

and map which chapter of the course rebuilds which layer.
"""

from .introspect import (
    OpLog,
    dispatch_keys,
    dispatch_table,
    profile,
    profile_summary,
    python_entry,
)
from .kernels import add_cpu, add_kernel, launch_add
from .layers import COURSE_MAP, LAYERS, layers_diagram

__all__ = [
    "COURSE_MAP",
    "LAYERS",
    "OpLog",
    "add_cpu",
    "add_kernel",
    "dispatch_keys",
    "dispatch_table",
    "launch_add",
    "layers_diagram",
    "profile",
    "profile_summary",
    "python_entry",
]

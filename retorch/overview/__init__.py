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
    dispatch_keys_order,
    dispatch_path,
    dispatch_table,
    excluded_keys,
    included_keys,
    profile,
    profile_summary,
    python_entry,
)
from .kernels import (
    BLOCKS_PER_SM,
    THREADS,
    TIE,
    add_cpu,
    add_kernel,
    fma32,
    launch_add,
    launch_geometry,
    sm_count,
)
from .layers import COURSE_MAP, LAYERS, SOURCES, cited_paths, layers_diagram

__all__ = [
    "BLOCKS_PER_SM",
    "COURSE_MAP",
    "LAYERS",
    "SOURCES",
    "THREADS",
    "TIE",
    "OpLog",
    "add_cpu",
    "add_kernel",
    "cited_paths",
    "dispatch_keys",
    "dispatch_keys_order",
    "dispatch_path",
    "dispatch_table",
    "excluded_keys",
    "fma32",
    "included_keys",
    "launch_add",
    "launch_geometry",
    "layers_diagram",
    "profile",
    "profile_summary",
    "python_entry",
    "sm_count",
]

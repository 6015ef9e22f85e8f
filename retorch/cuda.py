"""One way to write a Numba-CUDA kernel in this course, so every kernel is checked twice.

Every kernel in ``retorch/``, the chapter notebooks and the lab solutions is declared with
:func:`kernel` (or :func:`device_function`) and an explicit Numba signature instead of a
bare ``numba.cuda.jit``. The decorator returns an ordinary lazily compiled ``cuda.jit``
dispatcher and records ``(python function, signature)`` in :data:`KERNELS`, so that

* the tests and notebooks launch it under the CUDA simulator on a machine without a GPU
  (``NUMBA_ENABLE_CUDASIM=1``, chosen automatically when no GPU is present), or on the real
  GPU when there is one, and
* ``tools/check_ptx.py`` compiles the very same Python function to PTX for sm_75, sm_80 and
  sm_90 with ``numba.cuda.compile_ptx`` in a process where the simulator is off, which catches
  code that only the simulator accepts (Python objects, unsupported calls, bad types).

The simulator must be chosen before ``numba.cuda`` is first imported, which is why
``retorch/__init__.py`` decides it when retorch is imported: ``NUMBA_ENABLE_CUDASIM`` is set
to ``1`` only when the variable is unset and no NVIDIA driver is visible. An explicit
``NUMBA_ENABLE_CUDASIM=0`` (what ``tools/check_ptx.py`` sets) is respected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from numba import config as _numba_config
from numba import cuda

#: The PTX targets every kernel is compiled for by ``tools/check_ptx.py``.
PTX_TARGETS = ((7, 5), (8, 0), (9, 0))


@dataclass
class KernelSpec:
    """A kernel as written in Python, with the signatures it is compiled for."""

    pyfunc: Callable
    signatures: tuple[str, ...]
    device: bool = False
    dispatcher: object = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"{self.pyfunc.__module__}.{self.pyfunc.__qualname__}"


#: Every kernel and device function declared through this module, in declaration order.
KERNELS: list[KernelSpec] = []


def simulator_enabled() -> bool:
    """True when Numba-CUDA runs kernels on the CPU simulator rather than a GPU."""
    return bool(_numba_config.ENABLE_CUDASIM)


def target() -> str:
    """Where ``numba.cuda`` kernels run in this process, in words."""
    if simulator_enabled():
        return "CUDA simulator (no GPU: kernels run on the CPU, a thread per CUDA thread)"
    if not cuda.is_available():
        return "no GPU and the simulator is off: kernels can be compiled to PTX but not launched"
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    return (
        f"GPU: {name} (compute capability {dev.compute_capability[0]}.{dev.compute_capability[1]})"
    )


def _declare(signatures, device, options):
    if not signatures or not all(isinstance(s, str) for s in signatures):
        raise TypeError(
            "retorch.cuda.kernel needs at least one Numba signature string, e.g. "
            "@kernel('void(float32[:], float32[:])'); the signature is what tools/check_ptx.py "
            "compiles to PTX"
        )

    def decorate(fn):
        dispatcher = cuda.jit(device=device, **options)(fn)
        KERNELS.append(KernelSpec(fn, tuple(signatures), device, dispatcher))
        return dispatcher

    return decorate


def kernel(*signatures: str, **options):
    """Declare a CUDA kernel: ``@kernel("void(float32[:], float32[:], float32[:])")``.

    Mirrors ``numba.cuda.jit`` (the returned object is its dispatcher, launched as
    ``k[blocks, threads](...)``) and registers the Python function for the PTX check.
    """
    return _declare(signatures, False, options)


def device_function(*signatures: str, **options):
    """Declare a CUDA device function (callable from kernels): ``@device_function("float32(float32)")``."""
    return _declare(signatures, True, options)


def compile_ptx(spec: KernelSpec, cc: tuple[int, int]) -> str:
    """Compile one registered kernel to PTX for compute capability ``cc`` (simulator must be off)."""
    if simulator_enabled():
        raise RuntimeError(
            "PTX compilation needs the real Numba-CUDA compiler: run with NUMBA_ENABLE_CUDASIM=0 "
            "(tools/check_ptx.py does this in a subprocess)"
        )
    import types

    from numba.cuda import dispatcher as _dispatcher

    # A kernel that calls a device function makes Numba compile that function for "the current
    # device"; with no GPU there is none, so stand in a device of the target capability.
    real = _dispatcher.get_current_device
    _dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)
    try:
        ptx = ""
        for sig in spec.signatures:
            text, _ = cuda.compile_ptx(spec.pyfunc, sig, device=spec.device, cc=cc)
            ptx += text
    finally:
        _dispatcher.get_current_device = real
    return ptx


# -- streams, events and CUDA graphs (retorch/cuda_streams.py, retorch/cuda_graphs.py) --------
# Imported last: they import this module (simulator_enabled) and retorch.tensor.
from .cuda_streams import (  # noqa: E402
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    record_stream,
    set_stream,
    stream,
    synchronize,
)

#: torch.cuda's names for streams and events, re-exported here.
STREAM_API = (Event, Stream, StreamContext, current_stream, default_stream, record_stream,
              set_stream, stream, synchronize)  # fmt: skip


def __getattr__(name):  # CUDAGraph, graph: imported on first use (they import retorch.tensor)
    if name in ("CUDAGraph", "graph", "is_current_stream_capturing"):
        from . import cuda_graphs

        return getattr(cuda_graphs, name)
    raise AttributeError(f"module 'retorch.cuda' has no attribute {name!r}")

"""The arena device inside real torch: torch's PrivateUse1 key, set up from Python.

Mirrors ``torch/utils/backend_registration.py``: ``_setup_privateuseone_for_python_backend``
renames the PrivateUse1 backend (``rename_privateuse1_backend``: once per process), generates
the ``Tensor.<name>()`` methods, and registers a backend module, a hooks object and a device
guard, which is what a C++ backend would give torch. Then, as retorch's :class:`ArenaBackend`,
the backend is only kernels registered with ``torch.library.Library("aten", "IMPL",
"PrivateUse1")`` (``torch/library.py``) and memory of its own:

- a tensor on the device is a plain ``torch.Tensor`` made by
  ``torch._C._acc.create_empty_tensor`` (sizes, dtype and the PrivateUse1 keys, no data);
  its values are a NumPy array in the arena, found by the tensor's storage;
- the kernels compute with the arena's NumPy kernels (``backend_registration.NUMPY_KERNELS``),
  so the same functions run under both dispatchers; every call is recorded in ``calls``;
- torch's own autograd (the AutogradPrivateUse1 rows) differentiates through them: only the
  backward's ops (``ones_like``, ``expand``, ``threshold_backward``...) need kernels too.
"""

from __future__ import annotations

import atexit
import ctypes

import numpy as np
import torch

from .backend_registration import NUMPY_KERNELS, ArenaAllocator


def setup_torch_backend(name: str = "retorch") -> None:
    """Set torch's PrivateUse1 up as the Python backend ``name`` (again: a no-op). Call it
    before torch's first backward in the process: the autograd engine sizes its per-device
    ready queues then, and a backward on a device set up later fails an internal assert.
    It also registers :func:`wait_for_device_thread` to run at exit."""
    current = torch._C._get_privateuse1_backend_name()
    if current == name:
        return
    if current != "privateuseone":
        raise RuntimeError(
            f"torch's PrivateUse1 backend is already named {current!r} in this process; it "
            f"can be renamed once only (run in a fresh process to name it {name!r})"
        )
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(name)
    atexit.register(wait_for_device_thread)


class _OnTheDevice(torch.autograd.Function):
    """A node on the device (its output is a device tensor) with a backward that returns no
    gradient, so it needs no kernels."""

    @staticmethod
    def forward(ctx, w):
        return torch._C._acc.create_empty_tensor((1,), torch.float32)

    @staticmethod
    def backward(ctx, grad):
        return None


def wait_for_device_thread() -> None:
    """Let the autograd engine's thread for the device finish its last task; called at exit.

    A backward on the device runs on the engine's worker thread for that device index
    (``Engine::thread_main`` in ``torch/csrc/autograd/engine.cpp``), and that thread may drop
    its references to the finished ``GraphTask`` after ``backward()`` has returned. Dropping a
    Python object (the ``contextvars`` context that ``_engine_run_backward`` in
    ``torch/autograd/graph.py`` stashes in the thread-local state the task copies, or a
    tensor's Python object) takes the GIL. If the interpreter is exiting by then, taking the
    GIL ends the thread with ``pthread_exit`` (seen on CPython 3.11), whose unwinding meets a
    ``noexcept`` destructor: the process aborts with "terminate called without an active
    exception" (pytorch#38228).

    The worker runs one task at a time: it pops the next only after the loop iteration that
    dropped its references to the last one has ended. So one more backward through it, run
    while this thread waits without the GIL, returns only after the last one is let go. This
    one leaves nothing for the worker to drop that needs the GIL: it goes to the engine
    directly (no context stashed); its backward returns no gradient, so the CPU leaf's
    ``AccumulateGrad`` is queued on this thread and usually ends the task here (if the worker
    ends it instead, the task holds nothing that needs the GIL); and its node is kept alive
    for good."""
    w = torch.zeros(1, requires_grad=True)
    out = _OnTheDevice.apply(w)
    grad = torch._C._acc.create_empty_tensor((1,), torch.float32)
    torch.autograd.Variable._execution_engine.run_backward(
        (out,), (grad,), False, False, (), False, True
    )
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(out))  # its node outlives the device thread


#: The values of every tensor on the device, by its storage (``StorageImpl``): a saved
#: tensor that autograd unpacks is a new Python object over the same storage.
_RAW: dict[int, np.ndarray] = {}


def device_tensor(raw: np.ndarray) -> torch.Tensor:
    """A plain ``torch.Tensor`` on the device whose values are ``raw``."""
    dtype = torch.from_numpy(np.empty(0, raw.dtype)).dtype
    out = torch._C._acc.create_empty_tensor(raw.shape, dtype)
    _RAW[out.untyped_storage()._cdata] = raw
    return out


def raw_of(t) -> np.ndarray:
    """The NumPy values of a tensor on the device (numbers pass through)."""
    if not isinstance(t, torch.Tensor):
        return t
    return _RAW[t.untyped_storage()._cdata]


class TorchArenaBackend:
    """Kernels for torch's aten ops on the PrivateUse1 device, in a NumPy arena."""

    def __init__(self, name: str = "retorch", nbytes: int = 1 << 20) -> None:
        setup_torch_backend(name)
        self.name, self.allocator, self.calls = name, ArenaAllocator(nbytes), []
        self.library = torch.library.Library("aten", "IMPL", "PrivateUse1")
        for op, fn in self._kernels().items():
            self.library.impl(op, self._traced(op, fn))

    def _traced(self, op: str, fn):
        def kernel(*args, **kwargs):
            self.calls.append(op)
            return fn(*args, **kwargs)

        return kernel

    def _on_device(self, t) -> bool:
        return isinstance(t, torch.Tensor) and t.device.type == self.name

    def _new(self, values) -> torch.Tensor:
        values = np.asarray(values)
        out = self.allocator.allocate(values.shape, values.dtype)
        out[...] = values
        return device_tensor(out)

    def _empty(self, size, dtype=None, **_) -> torch.Tensor:
        np_dtype = torch.empty(0, dtype=dtype or torch.float32).numpy().dtype
        return device_tensor(self.allocator.allocate(tuple(size), np_dtype))

    def _copy_from(self, src, dst, non_blocking=False):
        """Between devices: ``.to(name)`` copies in, ``.cpu()`` copies out."""
        values = raw_of(src) if self._on_device(src) else src.numpy()
        if self._on_device(dst):
            raw_of(dst)[...] = values
        else:
            dst.copy_(torch.from_numpy(np.array(values)))  # a copy, row-major, 0-d kept
        return dst

    def _kernels(self) -> dict:
        n, new = raw_of, self._new

        def compute(f):
            return lambda *args, **kwargs: new(f(*map(n, args), **kwargs))

        return {
            **{op: compute(f) for op, f in NUMPY_KERNELS.items()},
            "empty.memory_format": self._empty,
            "empty_strided": lambda size, stride, **kw: self._empty(size, **kw),
            "_copy_from": self._copy_from,
            "detach": lambda a: device_tensor(n(a)),
            "t": lambda a: device_tensor(n(a).T),  # a view: no allocation
            "ones_like": lambda a, **kw: new(np.ones_like(n(a))),
            "expand": lambda a, size, implicit=False: new(np.broadcast_to(n(a), size)),
            "threshold_backward": lambda g, a, threshold: new(np.where(n(a) > threshold,
                                                                       n(g), 0)),
        }  # fmt: skip

    def destroy(self) -> None:
        """Deregister the kernels (the rename stays: torch cannot undo it)."""
        self.library._destroy()

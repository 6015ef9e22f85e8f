"""A new device from outside the core, through the public registration API only (PrivateUse1).

Mirrors ``torch/utils/backend_registration.py`` (``rename_privateuse1_backend``) and the way an
out-of-tree backend plugs in: it names its device, gives it an allocator, and registers its
kernels with ``Library("aten", "IMPL", "PrivateUse1")``. Nothing in ``native_functions.py``
changes: the dispatcher finds the new kernels in the PrivateUse1 rows, and autograd comes for
free from the AutogradPrivateUse1 rows (the ``Autograd`` alias covers them).

The example backend, ``"arena"``, keeps every tensor's bytes in one bump-allocated buffer of
its own (``ArenaAllocator``: ``allocated``, ``peak``, ``allocations``, like a device's memory
stats) and computes with NumPy over views of that buffer. Ops it does not implement fail with
the dispatcher's "Could not run ... 'PrivateUse1' backend" error, as torch's do.
"""

from __future__ import annotations

import numpy as np

import retorch.tensor as rt

from ._tensor import Tensor, register_backend_device
from .dispatch_key import DispatchKey
from .library import Library

_PRIVATEUSE1_NAME = ["privateuseone"]

#: The arena's compute, on NumPy arrays. The same functions serve retorch's dispatcher
#: (:class:`ArenaBackend`) and torch's (``torch_privateuse1.TorchArenaBackend``).
NUMPY_KERNELS = {
    "add.Tensor": lambda a, b, alpha=1: a + alpha * b,
    "mul.Tensor": lambda a, b: a * b,
    "mm": lambda a, b: a @ b,
    "relu": lambda a: np.maximum(a, 0),
    "sum": lambda a, dtype=None: np.asarray(a.sum()),
}


def rename_privateuse1_backend(name: str) -> None:
    """Call tensors on device ``name`` PrivateUse1 tensors (once per process, as torch's)."""
    if _PRIVATEUSE1_NAME[0] != "privateuseone" and _PRIVATEUSE1_NAME[0] != name:
        raise RuntimeError(
            f"torch.register_privateuse1_backend() has already been set! Current backend: "
            f"{_PRIVATEUSE1_NAME[0]}"
        )
    _PRIVATEUSE1_NAME[0] = name
    register_backend_device(name, DispatchKey.PrivateUse1)


class ArenaAllocator:
    """A bump allocator over one buffer: 64-byte aligned blocks, never freed (a teaching
    allocator: compare the caching allocator of chapter 4's ``allocator.py``)."""

    ALIGNMENT = 64

    def __init__(self, nbytes: int = 1 << 22) -> None:
        self.buffer = np.zeros(nbytes, dtype=np.uint8)
        self.allocated = self.peak = self.allocations = 0

    def allocate(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = -(-count * dtype.itemsize // self.ALIGNMENT) * self.ALIGNMENT
        if self.allocated + nbytes > self.buffer.nbytes:
            raise RuntimeError(
                f"arena out of memory: tried to allocate {nbytes} bytes with "
                f"{self.buffer.nbytes - self.allocated} free of {self.buffer.nbytes}"
            )
        start = self.allocated
        self.allocated += nbytes
        self.peak, self.allocations = max(self.peak, self.allocated), self.allocations + 1
        return self.buffer[start : start + count * dtype.itemsize].view(dtype).reshape(shape)

    def owns(self, array: np.ndarray) -> bool:
        return np.shares_memory(array, self.buffer)


class ArenaBackend:
    """The ``arena`` device: its allocator, its kernels, and the libraries that register them."""

    def __init__(self, name: str = "arena", nbytes: int = 1 << 22) -> None:
        rename_privateuse1_backend(name)
        self.name, self.allocator = name, ArenaAllocator(nbytes)
        self.library = Library("aten", "IMPL", "PrivateUse1")
        for op, fn in self._kernels().items():
            self.library.impl(op, fn)

    # tensors in and out of the arena
    def tensor(self, values, requires_grad: bool = False) -> Tensor:
        values = np.asarray(values)
        out = self.allocator.allocate(values.shape, values.dtype)
        out[...] = values
        return self._wrap(out, requires_grad)

    def _wrap(self, array: np.ndarray, requires_grad: bool = False) -> Tensor:
        return Tensor(rt.from_numpy(array), requires_grad=requires_grad, device=self.name)

    def _new(self, values: np.ndarray) -> Tensor:
        out = self.allocator.allocate(values.shape, values.dtype)
        out[...] = values
        return self._wrap(out)

    @staticmethod
    def _np(x):
        return x.data.numpy() if isinstance(x, Tensor) else x

    def _kernels(self) -> dict:
        n, new = self._np, self._new

        def compute(f):
            return lambda *args, **kwargs: new(f(*map(n, args), **kwargs))

        return {
            **{op: compute(f) for op, f in NUMPY_KERNELS.items()},
            "t": lambda a: self._wrap(n(a).T),  # a view: no allocation
            "detach": lambda a: self._wrap(n(a)),
            "_to_copy": lambda a, dtype=None, **kw: (
                new(n(a).astype(dtype.np)) if dtype is not None else new(n(a).copy())
            ),
        }

    def destroy(self) -> None:
        """Deregister the kernels (the Library's destructor)."""
        self.library._destroy()

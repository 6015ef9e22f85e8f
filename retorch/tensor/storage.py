"""Storage: the raw bytes under a tensor. Mirrors ``c10/core/StorageImpl.h``.

In torch a ``StorageImpl`` owns a ``DataPtr`` (a pointer plus the device it lives on), its
size in bytes (``nbytes_``), the allocator that made it and a ``resizable_`` flag; a tensor
(``TensorImpl``) only looks into it through sizes, strides and a storage offset, so many
tensors (views) share one storage. Here the bytes are a 1-D ``numpy.uint8`` array on
``"cpu"`` and a Numba device array of ``uint8`` on ``"cuda"``.

Alignment: c10's CPU allocator returns memory aligned to ``c10::gAlignment`` = 64 bytes
(``c10/core/alignment.h``: the width of an AVX-512 register, so vector loads never straddle
a cache line). :func:`_aligned_empty` over-allocates by 63 bytes and slices at the first
64-byte boundary; :class:`Storage` checks the result. Memory a storage *borrows* (from
:func:`retorch.tensor.from_numpy`) keeps whatever alignment NumPy gave it, as in torch.
"""

from __future__ import annotations

import ctypes

import numpy as np

#: ``c10::gAlignment``: every CPU allocation starts on a 64-byte boundary.
ALIGNMENT = 64
#: ``cudaMalloc`` returns 256-byte aligned memory (the CUDA Programming Guide's guarantee); the
#: CUDA simulator's arrays are host memory without it, so it is checked only on a real GPU.
CUDA_ALIGNMENT = 256

#: Where CUDA storages get their bytes: ``fn(nbytes) -> device array of uint8``. ``None`` is the
#: default, the caching allocator (``retorch.tensor.allocator.cuda_caching_allocator``), as every
#: CUDA tensor of torch allocates through ``c10::cuda::CUDACachingAllocator``.
_cuda_allocator = None


def set_cuda_allocator(fn):
    """Route every new CUDA storage through ``fn(nbytes)``; ``None`` restores the default (the
    caching allocator). Returns the previous one."""
    global _cuda_allocator
    previous, _cuda_allocator = _cuda_allocator, fn
    return previous


def _aligned_empty(nbytes: int) -> tuple[np.ndarray, int]:
    """``nbytes`` bytes from the first 64-byte boundary of a slightly larger array, and the
    address they start at (through ctypes: a third of ``__array_interface__``'s cost)."""
    raw = np.empty(nbytes + ALIGNMENT - 1, dtype=np.uint8)
    base = ctypes.addressof(ctypes.c_char.from_buffer(raw))
    start = -base % ALIGNMENT
    return raw[start : start + nbytes], base + start


def _cuda_empty(nbytes: int):
    if _cuda_allocator is not None:
        return _cuda_allocator(nbytes)
    from numba.cuda.cudadrv.error import CudaSupportError

    from .allocator import cuda_storage_bytes

    try:
        return cuda_storage_bytes(max(nbytes, 0))
    except CudaSupportError as e:
        # torch (a CUDA build on a machine without a driver) raises RuntimeError here too
        raise RuntimeError(
            "Found no NVIDIA driver on your system: a CUDA tensor needs a GPU. Without one, "
            "run with NUMBA_ENABLE_CUDASIM=1 (retorch chooses it when it finds no driver) to "
            f"run CUDA tensors on Numba's CUDA simulator. ({type(e).__name__})"
        ) from None


def _simulated() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def _device_ptr(arr) -> int:
    iface = getattr(arr, "__cuda_array_interface__", None)
    if iface is not None:
        return iface["data"][0]
    return arr._ary.ctypes.data  # the CUDA simulator keeps a host array underneath


class Storage:
    """``c10::StorageImpl``: ``nbytes`` raw bytes on ``device``, shared by every view of them.

    Make one with :meth:`allocate` (fresh, 64-byte aligned, resizable) or :meth:`from_buffer`
    (borrowed NumPy memory, not resizable, as ``torch.from_numpy``'s storage).
    """

    __slots__ = ("_data", "device", "resizable", "_owner", "_typed", "_meta_nbytes", "__weakref__")

    def __init__(self, data, device: str, resizable: bool, owner=None, meta_nbytes: int = 0):
        self._data = data
        self._meta_nbytes = meta_nbytes  # the size of a meta storage, which has no data
        self.device = device
        self.resizable = resizable
        self._owner = owner  # keeps borrowed memory alive, as DataPtr's deleter context does
        self._typed = {}

    @classmethod
    def allocate(cls, nbytes: int, device: str = "cpu") -> Storage:
        if device == "cpu":
            data, ptr = _aligned_empty(nbytes)
            if nbytes and ptr % ALIGNMENT:
                raise AssertionError(f"storage at {ptr:#x} is not {ALIGNMENT}-byte aligned")
            return cls(data, device, resizable=True)
        elif device == "cuda":
            data = _cuda_empty(nbytes)
        elif device == "meta":
            return cls(None, "meta", resizable=True, meta_nbytes=nbytes)
        else:
            raise RuntimeError(
                f"Expected one of cpu, cuda, meta device type at start of device string: {device}"
            )
        s = cls(data, device, resizable=True)
        ptr = s.data_ptr()
        if nbytes and ptr % CUDA_ALIGNMENT and not _simulated():
            raise AssertionError(f"storage at {ptr:#x} is not {CUDA_ALIGNMENT}-byte aligned")
        return s

    @classmethod
    def from_buffer(cls, arr: np.ndarray, start: int, nbytes: int) -> Storage:
        """The ``nbytes`` bytes of ``arr``'s memory from address ``start``, borrowed."""
        buf = (ctypes.c_uint8 * nbytes).from_address(start) if nbytes else bytearray()
        data = np.frombuffer(buf, dtype=np.uint8)
        return cls(data, "cpu", resizable=False, owner=arr)

    def nbytes(self) -> int:
        if self._data is None:
            return self._meta_nbytes
        return int(self._data.shape[0])

    def data_ptr(self) -> int:
        """The address of byte 0 (``StorageImpl::data()``); 0 on meta (a null pointer)."""
        if self._data is None:
            return 0
        if self.device == "cpu":
            return self._data.__array_interface__["data"][0]
        return int(_device_ptr(self._data)) if self.nbytes() else 0

    def typed(self, np_dtype):
        """The bytes seen as a 1-D array of ``np_dtype`` (cached): what kernels index into."""
        if self._data is None:
            raise NotImplementedError("Cannot copy out of meta tensor; no data!")
        arr = self._typed.get(np_dtype)
        if arr is None:
            key, data = np.dtype(np_dtype), self._data
            tail = data.shape[0] % key.itemsize  # bytes past the last whole element
            arr = (data[: data.shape[0] - tail] if tail else data).view(key)
            self._typed[np_dtype] = self._typed[key] = arr
        return arr

    def resize_(self, nbytes: int) -> Storage:
        """Grow or shrink in place, keeping the first bytes (``StorageImpl::set_nbytes``)."""
        if not self.resizable:
            raise RuntimeError("Trying to resize storage that is not resizable")
        if self._data is None:  # meta: only the size changes
            self._meta_nbytes = nbytes
            return self
        old = self._data
        new = Storage.allocate(nbytes, self.device)._data
        keep = min(nbytes, self.nbytes())
        if self.device == "cpu":
            new[:keep] = old[:keep]
        elif keep:
            new[:keep].copy_to_device(old[:keep])
        self._data, self._typed = new, {}
        return self

    def __repr__(self):
        return f"Storage(nbytes={self.nbytes()}, device={self.device!r})"

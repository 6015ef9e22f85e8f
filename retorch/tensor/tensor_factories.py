"""Making tensors: mirrors ``aten/src/ATen/native/TensorFactories.cpp`` (``empty``,
``empty_strided``, ``zeros``, ``ones``, ``full``, ``arange``, ``*_like``),
``torch/csrc/utils/tensor_new.cpp`` (``torch.tensor``: dtype inference from Python data) and
``torch/csrc/utils/tensor_numpy.cpp`` (``torch.from_numpy``: shares the array's memory).
"""

from __future__ import annotations

import math

import numpy as np

from . import dtype as dtypes
from .dtype import as_dtype
from .storage import Storage
from .tensor import Tensor, normalize_device
from .tensor_impl import (
    TensorImpl,
    channels_last_strides_2d,
    contiguous_strides,
    storage_nbytes,
)


def _to_storage(values, d):
    """Values in ``d``'s storage representation (float16/bfloat16 rounded by retorch's own
    conversion, ``half.py``; others by NumPy's cast)."""
    if not dtypes.is_half(d):
        return np.asarray(values).astype(d.np)
    from .half import to_storage

    return to_storage(values, d)


def _size_arg(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    size = tuple(int(s) for s in size)
    for s in size:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(size)}")
    return size


def empty_generic(size: tuple, dtype, device: str, stride=None) -> Tensor:
    """``at::detail::empty_generic`` (``aten/src/ATen/EmptyTensor.cpp``): the allocation
    behind the factories, for callers inside ATen (an op making its output) that already hold
    the sizes as ints, a retorch dtype and a device name, so nothing is parsed again.
    Row-major unless ``stride`` is given."""
    if stride is None:  # row-major: the bytes are numel * itemsize, the flags need no check
        storage = Storage.allocate(math.prod(size) * dtype.itemsize, device)
    else:
        storage = Storage.allocate(storage_nbytes(size, stride, dtype.itemsize), device)
    return Tensor(TensorImpl(storage, dtype, size, stride, 0))


def empty_strided(size, stride, dtype=None, device="cpu") -> Tensor:
    """Uninitialised memory just big enough for ``size``/``stride`` (``at::empty_strided``)."""
    d = dtypes.default_dtype if dtype is None else as_dtype(dtype)
    return empty_generic(tuple(size), d, normalize_device(device), tuple(stride))


def empty(*size, dtype=None, device="cpu", memory_format="contiguous_format") -> Tensor:
    size = _size_arg(size)
    fmt = memory_format if type(memory_format) is str else str(memory_format).replace("torch.", "")
    strides = channels_last_strides_2d(size) if fmt == "channels_last" else contiguous_strides(size)
    return empty_strided(size, strides, dtype, device)


def _filled(size, value, dtype, device) -> Tensor:
    t = empty(*size, dtype=dtype, device=device)
    host = _to_storage(np.full(t.numel(), value), t.dtype)
    if t.device == "cpu":
        t._impl.storage.typed(t.dtype.np)[: t.numel()] = host
    elif t.device == "cuda" and t.numel():  # (a meta tensor has no values to fill)
        t._impl.storage._data[: host.nbytes].copy_to_device(host.view(np.uint8))
    return t


def zeros(*size, dtype=None, device="cpu") -> Tensor:
    if any(
        s < 0 for s in (size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size)
    ):
        raise RuntimeError("zeros: Dimension size must be non-negative.")
    return _filled(_size_arg(size), 0, dtype, device)


def ones(*size, dtype=None, device="cpu") -> Tensor:
    return _filled(_size_arg(size), 1, dtype, device)


def full(size, fill_value, dtype=None, device="cpu") -> Tensor:
    if dtype is None:
        dtype = _python_scalar_dtype(fill_value)
    return _filled(_size_arg((size,)), fill_value, dtype, device)


def empty_like(t: Tensor, dtype=None, device=None, memory_format="preserve_format") -> Tensor:
    """``preserve_format``: a dense input's strides are kept, anything else becomes row-major."""
    d = t.dtype if dtype is None else as_dtype(dtype)
    dev = t.device if device is None else normalize_device(device)
    fmt = str(memory_format).replace("torch.", "")
    if fmt == "preserve_format" and t._impl.is_non_overlapping_and_dense():
        return empty_strided(t.shape, t.stride(), d, dev)
    if fmt == "preserve_format":
        fmt = "contiguous_format"
    return empty(t.shape, dtype=d, device=dev, memory_format=fmt)


def zeros_like(t: Tensor, dtype=None, device=None) -> Tensor:
    return zeros(t.shape, dtype=dtype or t.dtype, device=device or t.device)


def ones_like(t: Tensor, dtype=None, device=None) -> Tensor:
    return ones(t.shape, dtype=dtype or t.dtype, device=device or t.device)


def arange(start, end=None, step=1, dtype=None, device="cpu") -> Tensor:
    """``torch.arange``: ``ceil((end - start) / step)`` values; float if any bound is."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (step > 0 and start > end) or (step < 0 and start < end):
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    if dtype is None:
        floating = any(isinstance(v, float) for v in (start, end, step))
        dtype = dtypes.default_dtype if floating else dtypes.int64
    d = as_dtype(dtype)
    n = int(math.ceil((float(end) - float(start)) / float(step)))
    # ATen computes start + i * step in the accumulate type (double for floats), then casts
    values = start + np.arange(n, dtype=np.float64 if d.is_floating_point else np.int64) * step
    out = empty(n, dtype=d)
    out.numpy()[:] = _to_storage(values, d)
    return out.to(device)


def _python_scalar_dtype(v):
    if isinstance(v, (bool, np.bool_)):
        return dtypes.bool_
    if isinstance(v, np.generic):
        return dtypes.from_numpy_dtype(v.dtype)
    if isinstance(v, int):
        return dtypes.int64
    if isinstance(v, float):
        return dtypes.default_dtype
    raise TypeError(f"new(): invalid data type '{type(v).__name__}'")


def _infer(data, dim=0, sizes=None):
    """(scalar dtype, sizes) of nested Python data, as ``internal_new_from_data`` infers them."""
    from .type_promotion import promote_types

    if isinstance(data, Tensor):
        return data.dtype, data.shape
    if isinstance(data, np.ndarray):
        return dtypes.from_numpy_dtype(data.dtype), data.shape
    if isinstance(data, (list, tuple)):
        if not data:
            return None, (0,)
        result, inner = None, None
        for item in data:
            d, s = _infer(item, dim + 1)
            if inner is None:
                inner = s
            elif s != inner:
                got = s[0] if s else 0
                raise ValueError(
                    f"expected sequence of length {inner[0] if inner else 0} at dim {dim + 1} "
                    f"(got {got})"
                )
            if d is not None:
                result = d if result is None else promote_types(result, d)
        return result, (len(data),) + inner
    return _python_scalar_dtype(data), ()


def tensor(data, dtype=None, device="cpu") -> Tensor:
    """``torch.tensor``: copy ``data`` into a new tensor, inferring the dtype as torch does."""
    if isinstance(data, Tensor):
        data = data.numpy() if data.device == "cpu" else data.cpu().numpy()
    inferred, _ = _infer(data)
    d = as_dtype(dtype) if dtype is not None else (inferred or dtypes.default_dtype)
    values = _to_storage(np.array(data), d) if dtypes.is_half(d) else np.array(data, dtype=d.np)
    out = empty(values.shape, dtype=d, device="cpu")
    out.numpy()[...] = values
    return out.to(device)


def from_numpy(arr: np.ndarray) -> Tensor:
    """A tensor over ``arr``'s own memory (writes show through both ways), as torch's."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(arr).__name__})")
    d = dtypes.from_numpy_dtype(arr.dtype)
    if any(s < 0 for s in arr.strides):
        raise ValueError(
            "At least one stride in the given numpy array is negative, and tensors with "
            "negative strides are not currently supported. (You can probably work around this "
            "by making a copy of your array  with array.copy().) "
        )
    if any(s % d.itemsize for s in arr.strides):
        raise ValueError(
            "given numpy array strides not a multiple of the element byte size. Copy the numpy "
            "array to reallocate the memory."
        )
    strides = tuple(s // d.itemsize for s in arr.strides)
    nbytes = storage_nbytes(arr.shape, strides, d.itemsize)
    storage = Storage.from_buffer(arr, arr.ctypes.data, nbytes)
    return Tensor(TensorImpl(storage, d, arr.shape, strides, 0))


def scalar_tensor(value, dtype=None, device="cpu", wrapped=False) -> Tensor:
    """A 0-dim tensor; ``wrapped=True`` marks a Python number (``wrapped_scalar_tensor``)."""
    d = _python_scalar_dtype(value) if dtype is None else as_dtype(dtype)
    if wrapped and dtype is None and isinstance(value, float) and not isinstance(value, np.generic):
        d = dtypes.float64  # a wrapped Python float is a double; promotion treats it as a category
    t = empty_generic((), d, "cpu")  # (sizes and dtype known: nothing to parse)
    t._impl.storage.typed(d.np)[0] = _to_storage(value, d)
    t._impl.is_wrapped_number = wrapped
    return t if device == "cpu" or wrapped else t.to(device)

"""The dtypes a retorch tensor can hold: a small slice of ``c10/core/ScalarType.h``.

torch names each element type by a ``ScalarType`` enum and describes it (item size, name,
whether it is floating) with macros in ``c10/core/ScalarType.h``; ``torch.float32`` and
friends are the Python objects of ``torch/csrc/Dtype.cpp``. retorch keeps seven of them, with
the names torch prints and the short names its error messages use (``'Float'``, ``'Long'``).

float16 (``Half``) and bfloat16 (``BFloat16``) are stored 16 bits an element: float16 as
NumPy's float16, bfloat16 (which NumPy and Numba lack) as ``uint16``, the top half of a
float32. Their conversions and kernels are retorch's own (``half.py``).
"""

from __future__ import annotations

import numpy as np


class dtype:  # noqa: N801  (torch.dtype is lower case)
    """One element type: mirrors ``torch.dtype`` (``torch/csrc/Dtype.cpp``)."""

    __slots__ = ("name", "scalar_name", "itemsize", "np", "is_floating_point", "is_signed")

    def __init__(self, name, scalar_name, np_dtype, is_floating_point, is_signed):
        self.name = name
        self.scalar_name = scalar_name  # c10::toString(ScalarType), used in error messages
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.is_floating_point = is_floating_point
        self.is_signed = is_signed

    def __repr__(self):
        return f"retorch.{self.name}"

    def __reduce__(self):
        return self.name


bool_ = dtype("bool", "Bool", np.bool_, False, False)
int32 = dtype("int32", "Int", np.int32, False, True)
int64 = dtype("int64", "Long", np.int64, False, True)
float32 = dtype("float32", "Float", np.float32, True, True)
float64 = dtype("float64", "Double", np.float64, True, True)
float16 = dtype("float16", "Half", np.float16, True, True)
bfloat16 = dtype("bfloat16", "BFloat16", np.uint16, True, True)
half = float16

#: Every dtype retorch knows (c10's ScalarType enum order has Half before Float, Bool and
#: BFloat16 last; the promotion table in type_promotion.py is c10's, restricted to these).
ALL = (bool_, int32, int64, float16, bfloat16, float32, float64)
_BY_NP = {d.np: d for d in ALL if d is not bfloat16}  # a uint16 array is not bfloat16
_BY_NAME = {d.name: d for d in ALL} | {"half": float16}


def is_half(d) -> bool:
    """float16 or bfloat16: 16-bit floats whose kernels compute in float32 (``half.py``)."""
    return d is float16 or d is bfloat16


#: ``torch.get_default_dtype()``: the type of Python floats in new tensors.
default_dtype = float32


def from_numpy_dtype(np_dtype) -> dtype:
    """The retorch dtype of a NumPy dtype, or TypeError as ``torch.from_numpy`` raises."""
    d = _BY_NP.get(np.dtype(np_dtype))
    if d is None:
        raise TypeError(
            f"can't convert np.ndarray of type numpy.{np.dtype(np_dtype).name}. retorch.tensor "
            "supports only float64, float32, float16, int64, int32 and bool."
        )
    return d


def as_dtype(d) -> dtype:
    """Accept a retorch dtype, a NumPy dtype, a torch dtype or a name such as ``"float32"``."""
    if isinstance(d, dtype):
        return d
    name = getattr(d, "name", None) if not isinstance(d, str) else d
    if isinstance(d, str) or name is None:
        name = str(d).replace("torch.", "")
    if name in _BY_NAME:
        return _BY_NAME[name]
    try:
        return from_numpy_dtype(d)
    except TypeError:
        pass
    raise TypeError(f"retorch.tensor has no dtype {d!r}; it knows {[x.name for x in ALL]}")

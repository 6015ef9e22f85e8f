"""Tensor: the user-facing handle on a :class:`TensorImpl`. Mirrors ``at::Tensor``
(``aten/src/ATen/templates/TensorBody.h``: a pointer to a ``TensorImpl`` plus methods) and the
Python ``torch.Tensor`` methods of ``torch/_tensor.py`` that this chapter needs.

Methods only forward: layout questions to the impl, views to ``tensor_shape``, computation to
``ops`` (which picks the CPU or CUDA kernel by device), so a later dispatcher can route the
same functions without going through this class.
"""

from __future__ import annotations

import numpy as np

from . import tensor_shape as _shape
from .tensor_impl import TensorImpl

_TYPE_NAMES = {
    "float16": "Half",
    "bfloat16": "BFloat16",
    "bool": "Bool",
    "int32": "Int",
    "int64": "Long",
    "float32": "Float",
    "float64": "Double",
}


def normalize_device(device) -> str:
    """``"cpu"``, ``"cuda"``, ``"cuda:0"``, ``"meta"`` or a torch.device, as ``"cpu"``,
    ``"cuda"`` or ``"meta"``."""
    if type(device) is str and device in ("cpu", "cuda", "meta"):
        return device
    name = str(device).split(":")[0]
    if name not in ("cpu", "cuda", "meta"):
        raise RuntimeError(
            f"Expected one of cpu, cuda, meta device type at start of device string: {device}"
        )
    return name


class Tensor:
    """A strided view of a storage, with a dtype and a device (``at::Tensor``)."""

    __slots__ = ("_impl", "_base", "__weakref__")
    __hash__ = object.__hash__  # __eq__ is elementwise, as torch's

    def __init__(self, impl: TensorImpl, base: Tensor | None = None):
        self._impl = impl
        # Views remember the tensor they were made from, as torch's ``_base`` (the root one)
        self._base = None if base is None else (base._base if base._base is not None else base)

    # ---- metadata (TensorImpl) -------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._impl.sizes

    @property
    def dtype(self):
        return self._impl.dtype

    @property
    def device(self) -> str:
        return self._impl.storage.device

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def is_meta(self) -> bool:
        """Sizes, strides and dtype only: no data (``meta.py``)."""
        return self.device == "meta"

    @property
    def ndim(self) -> int:
        return len(self._impl.sizes)

    @property
    def T(self):  # noqa: N802
        return self.permute(*reversed(range(self.dim())))

    def dim(self) -> int:
        return len(self._impl.sizes)

    def size(self, dim=None):
        if dim is None:
            return self._impl.sizes
        from .wrap_dim_utils import maybe_wrap_dim

        return self._impl.sizes[maybe_wrap_dim(dim, self.dim(), wrap_scalar=False)]

    def stride(self, dim=None):
        if dim is None:
            return self._impl.strides
        from .wrap_dim_utils import maybe_wrap_dim

        return self._impl.strides[maybe_wrap_dim(dim, self.dim(), wrap_scalar=False)]

    def storage_offset(self) -> int:
        return self._impl.storage_offset

    def numel(self) -> int:
        return self._impl.numel()

    def element_size(self) -> int:
        return self._impl.dtype.itemsize

    def untyped_storage(self):
        return self._impl.storage

    def data_ptr(self) -> int:
        """Address of element 0: the storage's address plus the offset in bytes."""
        return self._impl.storage.data_ptr() + self._impl.storage_offset * self.element_size()

    def is_contiguous(self, memory_format="contiguous_format") -> bool:
        return _shape.is_contiguous(self, memory_format)

    def type(self) -> str:
        """The legacy type name torch's messages print, e.g. ``torch.FloatTensor``."""
        prefix = {"cuda": "torch.cuda.", "meta": "torch.meta."}.get(self.device, "torch.")
        return prefix + _TYPE_NAMES[self.dtype.name] + "Tensor"

    # ---- views (TensorShape.cpp) -------------------------------------------------------
    view = _shape.view
    reshape = _shape.reshape
    transpose = _shape.transpose
    permute = _shape.permute
    t = _shape.t
    expand = _shape.expand
    expand_as = _shape.expand_as
    squeeze = _shape.squeeze
    unsqueeze = _shape.unsqueeze
    narrow = _shape.narrow
    select = _shape.select
    unfold = _shape.unfold
    as_strided = _shape.as_strided
    flatten = _shape.flatten
    contiguous = _shape.contiguous
    __getitem__ = _shape.getitem

    def __setitem__(self, key, value):
        """``x[key] = value``: copy ``value`` (broadcast) into the view ``x[key]``."""
        from . import ops

        ops.copy_(_shape.getitem(self, key), value)

    # ---- data in and out ---------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values as a NumPy array in logical order, sharing memory (CPU only)."""
        if self.device != "cpu":
            device = "cuda:0" if self.device == "cuda" else self.device
            raise TypeError(
                f"can't convert {device} device type tensor to numpy. Use Tensor.cpu() to copy "
                "the tensor to host memory first."
            )
        impl, item = self._impl, self.element_size()
        typed = impl.storage.typed(impl.dtype.np)
        if self.numel() == 0:
            return np.empty(impl.sizes, dtype=impl.dtype.np)
        return np.ndarray(
            impl.sizes,
            impl.dtype.np,
            buffer=typed,
            offset=impl.storage_offset * item,
            strides=tuple(s * item for s in impl.strides),
        )

    def item(self):
        n = self.numel()
        if n != 1:
            raise RuntimeError(f"a Tensor with {n} elements cannot be converted to Scalar")
        if self.device == "meta":
            raise RuntimeError("Tensor.item() cannot be called on meta tensors")
        return self._host_values().reshape(()).item()

    def tolist(self):
        return self._host_values().tolist()

    def _host_values(self) -> np.ndarray:
        """The values on the host; bfloat16's uint16 bits (numpy() shows them) widened to
        float32 (half.py), as torch's item() and repr show values."""
        values = self.cpu().numpy()
        if self.dtype.name == "bfloat16":
            from .half import bf16_to_fp32

            values = bf16_to_fp32(values)
        return values

    def to(self, device=None, dtype=None):
        from . import ops
        from .dtype import as_dtype
        from .dtype import dtype as _dtype

        if isinstance(device, _dtype) or (
            device is not None and hasattr(device, "is_floating_point")
        ):
            device, dtype = None, device
        return ops.to(
            self,
            None if device is None else normalize_device(device),
            None if dtype is None else as_dtype(dtype),
        )

    def cpu(self):
        return self.to("cpu")

    def cuda(self):
        return self.to("cuda")

    def __repr__(self):
        if self.device == "meta":  # torch's repr of a meta tensor: no values to show
            extra = "" if self.dtype.name == "float32" else f", dtype=retorch.{self.dtype.name}"
            return f"tensor(..., device='meta', size={tuple(self.shape)}{extra})"
        body = np.array2string(self._host_values(), separator=", ", precision=4, prefix="tensor(")
        extra = "" if self.device == "cpu" else ", device='cuda:0'"
        if self.dtype.name not in ("float32", "int64", "bool"):
            extra += f", dtype=retorch.{self.dtype.name}"
        return f"tensor({body}{extra})"

    def __len__(self):
        if self.dim() == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._impl.sizes[0]

    def __iter__(self):
        if self.dim() == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._impl.sizes[0]))

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(
                "Boolean value of Tensor with more than one value is ambiguous"
                if self.numel() > 1
                else "Boolean value of Tensor with no values is ambiguous"
            )
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())


def _install_ops():
    """Arithmetic and reductions as methods and operators, forwarding to ``ops``."""
    from . import ops

    def method(name):
        fn = getattr(ops, name)
        return lambda self, *a, **k: fn(self, *a, **k)

    for name in (
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "maximum",
        "neg",
        "exp",
        "log",
        "tanh",
        "sigmoid",
        "relu",
        "reciprocal",
        "gt",
        "lt",
        "ge",
        "le",
        "eq",
        "ne",
        "sum",
        "mean",
        "amax",
        "max",
        "softmax",
        "log_softmax",
        "matmul",
        "mm",
        "mv",
        "dot",
        "bmm",
        "index_select",
        "gather",
        "clone",
        "copy_",
        "add_",
        "mul_",
        "zero_",
        "scatter",
        "scatter_",
        "index_add_",
        "isnan",
        "any",
        "fill_",
        "logical_and",
        "bitwise_and",
    ):
        setattr(Tensor, name, method(name))
    pairs = {
        "add": "add",
        "sub": "sub",
        "mul": "mul",
        "truediv": "div",
        "pow": "pow",
        "matmul": "matmul",
    }
    for dunder, name in pairs.items():
        fn = getattr(ops, name)
        setattr(Tensor, f"__{dunder}__", lambda self, other, fn=fn: fn(self, other))
        setattr(Tensor, f"__r{dunder}__", lambda self, other, fn=fn: fn(_wrap(other, self), self))
    for dunder, name in (
        ("gt", "gt"),
        ("lt", "lt"),
        ("ge", "ge"),
        ("le", "le"),
        ("eq", "eq"),
        ("ne", "ne"),
    ):
        fn = getattr(ops, name)
        setattr(Tensor, f"__{dunder}__", lambda self, other, fn=fn: fn(self, other))
    Tensor.__and__ = lambda self, other: ops.bitwise_and(self, other)
    Tensor.__rand__ = lambda self, other: ops.bitwise_and(other, self)
    Tensor.__neg__ = lambda self: ops.neg(self)
    Tensor.__iadd__ = lambda self, other: ops.add_(self, other)
    Tensor.__imul__ = lambda self, other: ops.mul_(self, other)


def _wrap(value, like):
    from .tensor_factories import scalar_tensor

    if isinstance(value, Tensor):
        return value
    return scalar_tensor(value, wrapped=True)


def _record_stream(self, stream) -> None:
    """``Tensor.record_stream(stream)``: this tensor's memory is in use on ``stream`` too; the
    caching allocator reuses its block only after ``stream``'s work up to now has completed
    (``retorch.cuda_streams.record_stream``, ``CUDACachingAllocator::recordStream``)."""
    from retorch.cuda_streams import record_stream

    record_stream(self, stream)


Tensor.record_stream = _record_stream

"""retorch.tensor: the physical tensor rebuilt (chapter 4).

A :class:`Tensor` is a view (sizes, strides in elements, a storage offset) of a
:class:`Storage` of raw bytes on ``"cpu"`` or ``"cuda"``, as ``c10::TensorImpl`` over
``c10::StorageImpl``. Views share storage (``tensor_shape``); elementwise ops run through a
``TensorIterator`` (broadcast, promote, reorder, coalesce) into Numba CPU loops or Numba-CUDA
kernels, chosen per device by a ``DispatchStub`` table (``dispatch_stub.STUBS``).

Layering: imports numpy, numba and retorch.cuda only (never torch, autograd or nn).

=========================  ===================================================
module                     mirrors
=========================  ===================================================
``dtype``                  ``c10/core/ScalarType.h``
``storage``                ``c10/core/StorageImpl.h``
``tensor_impl``            ``c10/core/TensorImpl.h``, ``c10/core/Contiguity.h``
``tensor``                 ``aten/src/ATen/templates/TensorBody.h``
``tensor_factories``       ``aten/src/ATen/native/TensorFactories.cpp``
``tensor_shape``           ``aten/src/ATen/native/TensorShape.cpp``
``tensor_utils``           ``aten/src/ATen/TensorUtils.cpp`` (computeStride)
``wrap_dim_utils``         ``c10/core/WrapDimMinimal.h``
``expand_utils``           ``aten/src/ATen/ExpandUtils.cpp``
``type_promotion``         ``c10/core/ScalarType.h``, ``native/TypeProperties.cpp``
``tensor_iterator``        ``aten/src/ATen/TensorIterator.cpp``
``dispatch_stub``          ``aten/src/ATen/native/DispatchStub.h``
``cpu_kernels``            ``aten/src/ATen/native/cpu/Loops.h`` and kernels
``cuda_kernels``           ``aten/src/ATen/native/cuda/Loops.cuh`` and kernels
``ops``                    ``aten/src/ATen/native/*.cpp`` (the op front ends)
=========================  ===================================================
"""

from . import dtype as _dtype_mod
from . import ops
from .dtype import bfloat16, dtype, float16, float32, float64, int32, int64
from .expand_utils import infer_size
from .meta import public_broadcast_shapes as broadcast_shapes
from .ops import *  # noqa: F403
from .storage import ALIGNMENT, Storage
from .tensor import Tensor, _install_ops
from .tensor_factories import (
    arange,
    empty,
    empty_like,
    empty_strided,
    from_numpy,
    full,
    ones,
    ones_like,
    scalar_tensor,
    tensor,
    zeros,
    zeros_like,
)
from .tensor_shape import (
    as_strided,
    expand,
    flatten,
    narrow,
    permute,
    reshape,
    select,
    squeeze,
    t,
    transpose,
    unfold,
    unsqueeze,
    view,
)
from .type_promotion import promote_types, result_type

_install_ops()
# float16/bfloat16 conversions and their opmath kernels, wrapped around the CPU stubs (torch.half
# is a dtype; retorch.tensor.half is this module: the dtype is retorch.tensor.float16)
from . import half  # noqa: E402, F401

bool = _dtype_mod.bool_  # noqa: A001  (retorch.tensor.bool, as torch.bool)
#: torch.contiguous_format, torch.channels_last, torch.preserve_format: retorch names a memory
#: format by a string (and accepts torch's objects too).
contiguous_format, channels_last, preserve_format = (
    "contiguous_format",
    "channels_last",
    "preserve_format",
)

__all__ = [
    "ALIGNMENT",
    "Storage",
    "Tensor",
    "dtype",
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int32",
    "int64",
    "bool",
    "contiguous_format",
    "channels_last",
    "preserve_format",
    "tensor",
    "from_numpy",
    "empty",
    "empty_like",
    "empty_strided",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "arange",
    "scalar_tensor",
    "broadcast_shapes",
    "infer_size",
    "promote_types",
    "result_type",
    "ops",
    "view",
    "reshape",
    "transpose",
    "permute",
    "t",
    "expand",
    "squeeze",
    "unsqueeze",
    "narrow",
    "select",
    "unfold",
    "as_strided",
    "flatten",
]

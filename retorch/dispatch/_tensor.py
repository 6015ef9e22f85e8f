"""``retorch.Tensor``: chapter 4's strided tensor plus chapter 3's autograd metadata, whose
operations go through the dispatcher.

Mirrors ``torch/_tensor.py`` (the Python methods) over ``c10/core/TensorImpl.h``'s ``key_set_``:
a tensor carries the keys of its device (``tensor_key_set_for``: ``{CPU, ADInplaceOrView,
AutogradCPU, AutocastCPU}`` for a CPU tensor, as torch's), and every method is a call to an
``aten`` operator (``native_functions.py``) that the dispatcher routes by those keys: the
autograd kernels (``variable_type.py``) record the graph, then redispatch to the CPU, CUDA or
Meta kernels that compute with ``retorch.tensor``.

The class is a subclass of ``retorch.autograd.Tensor``: ``grad_fn``, ``requires_grad``,
``_version``, hooks and ``backward()`` are chapter 3's, unchanged; ``data`` is the raw
``retorch.tensor.Tensor``. Chapter 3's engine runs the backward pass; its formulas compute
through ``retorch.autograd._ops``, which ``backward()`` points at ``retorch.tensor`` for the
duration (``array_backend("retorch")``), so no torch kernel runs in either direction.
"""

from __future__ import annotations

import retorch.tensor as rt
from retorch.autograd import grad_mode
from retorch.autograd.backend import array_backend
from retorch.autograd.tensor import Tensor as AutogradTensor

from .dispatch_key import DispatchKey
from .dispatch_key_set import (
    DispatchKeySet,
    autograd_dispatch_keyset,
    autograd_dispatch_keyset_with_ADInplaceOrView,
    inplace_or_view_ks,
    tensor_key_set_for,
)

_DENSE = {"cpu": DispatchKey.CPU, "cuda": DispatchKey.CUDA, "meta": DispatchKey.Meta}
_KEY_SETS: dict[str, DispatchKeySet] = {}


def key_set_for_device(device: str) -> DispatchKeySet:
    """The keys of a tensor on ``device`` (``"cpu"``, ``"cuda"``, ``"meta"``, or a backend
    registered with :func:`register_backend_device`)."""
    ks = _KEY_SETS.get(device)
    if ks is None:
        base = device.split(":")[0]
        if base not in _DENSE:
            raise RuntimeError(
                f"retorch.Tensor has no dispatch keys for device {device!r}: expected cpu, "
                f"cuda, meta or a device registered with register_backend_device"
            )
        ks = _KEY_SETS[device] = tensor_key_set_for(_DENSE[base])
    return ks


def register_backend_device(name: str, dense_key: DispatchKey) -> None:
    """Give tensors on ``name`` the keys of ``dense_key`` (``PrivateUse1`` for a new backend,
    as ``torch.utils.rename_privateuse1_backend``)."""
    _DENSE[name] = dense_key
    _KEY_SETS.pop(name, None)


_ATEN = []


def _aten():
    if not _ATEN:
        from . import native_functions  # registers the aten library on first use

        _ATEN.append(native_functions.aten)
    return _ATEN[0]


class _Device(str):
    """A device name that also answers ``.type``, as ``torch.device`` does."""

    @property
    def type(self) -> str:
        return self.split(":")[0]


class Tensor(AutogradTensor):
    """A ``retorch.tensor.Tensor`` in ``data``, autograd metadata, and dispatch keys."""

    __slots__ = ("_key_set", "_device")

    def __init__(self, data, requires_grad: bool = False, grad_fn=None, *, device=None) -> None:
        if not isinstance(data, rt.Tensor):
            raise TypeError(
                f"retorch.Tensor wraps a retorch.tensor.Tensor, got {type(data).__name__}: "
                f"use retorch.dispatch.tensor(...) to make one from values"
            )
        super().__init__(data, requires_grad, grad_fn)
        # a backend outside retorch.tensor (backend_registration.py) names its own device
        self._device = dev = data._impl.storage.device if device is None else device
        ks = _KEY_SETS.get(dev)  # (key_set_for_device's cache, read without a call)
        if ks is None:
            ks = key_set_for_device(dev)
        if grad_mode._inference_enabled:  # TensorImpl's constructor in InferenceMode
            ks = ks - autograd_dispatch_keyset_with_ADInplaceOrView
            self._version_counter = grad_mode.INFERENCE_VERSION  # an inference tensor has none
        self._key_set = ks

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """torch's functions on retorch tensors run retorch's operators (overrides.py)."""
        from .overrides import torch_function

        return torch_function(func, types, args, kwargs)

    @property
    def device(self) -> _Device:
        return _Device(self._device)

    @property
    def key_set(self) -> DispatchKeySet:
        """The tensor's dispatch keys (``torch._C._dispatch_keys(t)``)."""
        return self._key_set

    def is_inference(self) -> bool:
        """Made in inference mode: neither ADInplaceOrView nor an autograd key among its keys
        (``TensorImpl::is_inference``)."""
        ks = self._key_set
        return not ks.has_any(inplace_or_view_ks) and not ks.has_any(autograd_dispatch_keyset)

    # .grad is chapter 3's slot; a gradient the engine stores is made a retorch.Tensor here,
    # so that optimizers step with dispatched ops on both sides.
    @property
    def grad(self):
        return AutogradTensor.grad.__get__(self)

    @grad.setter
    def grad(self, value) -> None:
        if value is not None and not isinstance(value, Tensor):
            value = Tensor(value.data)
        AutogradTensor.grad.__set__(self, value)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        from retorch.autograd.engine import backward

        with array_backend("retorch"):
            backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    def __repr__(self) -> str:
        return "retorch." + super().__repr__().removeprefix("retorch.")

    def detach(self) -> Tensor:
        return _aten().detach(self)

    def detach_(self) -> Tensor:
        """Cut this tensor from its graph in place: a leaf with no grad (``Tensor.detach_``)."""
        if self._base is not None:
            raise RuntimeError(
                "Can't detach views in-place. Use detach() instead. If you are using "
                "DistributedDataParallel (DDP) for training, and gradient_as_bucket_view is set "
                "as True, gradients are views of DDP buckets, and hence detach_() cannot be "
                "called on these gradients. To fix this error, please refer to the "
                "Optimizer.zero_grad() function in torch/optim/optimizer.py as the solution."
            )
        self._grad_fn, self.requires_grad = None, False
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        super().requires_grad_(requires_grad)
        return self

    @staticmethod
    def from_numpy(array) -> Tensor:
        """A tensor sharing a NumPy array's memory (``torch.from_numpy``)."""
        return Tensor(rt.from_numpy(array))

    def to_torch(self):
        """A CPU torch tensor with the same values (a copy; for comparisons only)."""
        import torch

        return torch.from_numpy(self.data.cpu().numpy().copy())

    def to(self, *args, **kwargs):
        """``t.to("cuda")``, ``t.to(dtype)``, ``t.to(device, dtype)``, ``t.to(other)``:
        ``aten::to.dtype_layout``,
        as ``Tensor.to`` in ``python_variable_methods.cpp`` calls it; ``self`` when nothing
        changes, else a copy through ``_to_copy`` that autograd records (``ToCopyBackward0``
        moves the gradient back)."""
        device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
        flags = []  # non_blocking, copy: the positional bools after the device or dtype
        for arg in args:
            if isinstance(arg, bool):
                flags.append(arg)
            elif isinstance(arg, AutogradTensor):  # to(other): other's device and dtype
                device, dtype = arg.device, arg.data.dtype
            elif isinstance(arg, rt.dtype) or type(arg).__name__ == "dtype":
                dtype = arg
            elif arg is not None:
                device = arg
        kwargs.update(zip(("non_blocking", "copy"), flags))
        return _aten().to.dtype_layout(self, dtype=dtype, device=device, **kwargs)

    def cuda(self, device=None):
        return self.to("cuda" if device is None else device)

    def cpu(self):
        return self.to("cpu")

    def is_floating_point(self) -> bool:
        return self.data.dtype.is_floating_point

    # ------------------------------------------------------------------ operators
    def _scalar(self, value):
        """A Python number as torch's python_arg_parser passes it to a ``Tensor`` argument: a
        0-dim CPU tensor of the number's own type, marked a wrapped number, so that type
        promotion counts only its category (``int_tensor * 1.5`` is a float tensor)."""
        if isinstance(value, AutogradTensor):
            return value
        return Tensor(rt.scalar_tensor(value, wrapped=True))

    def __add__(self, other):
        return (_ATEN[0] if _ATEN else _aten()).add.Tensor(
            self, other if isinstance(other, AutogradTensor) else self._scalar(other)
        )

    __radd__ = __add__

    def __sub__(self, other):
        return (_ATEN[0] if _ATEN else _aten()).sub.Tensor(
            self, other if isinstance(other, AutogradTensor) else self._scalar(other)
        )

    def __rsub__(self, other):
        return _aten().sub.Tensor(self._scalar(other), self)

    def __mul__(self, other):
        return (_ATEN[0] if _ATEN else _aten()).mul.Tensor(
            self, other if isinstance(other, AutogradTensor) else self._scalar(other)
        )

    __rmul__ = __mul__

    def __truediv__(self, other):
        return (_ATEN[0] if _ATEN else _aten()).div.Tensor(
            self, other if isinstance(other, AutogradTensor) else self._scalar(other)
        )

    def __neg__(self):
        return _aten().neg(self)

    def __pow__(self, exponent):
        return _aten().pow.Tensor_Scalar(self, exponent)

    def __matmul__(self, other):
        return _aten().matmul(self, other)

    def add(self, other, alpha=1):
        return _aten().add.Tensor(self, self._scalar(other), alpha=alpha)

    def sub(self, other, alpha=1):
        return _aten().sub.Tensor(self, self._scalar(other), alpha=alpha)

    def mul(self, other):
        return self * other

    def div(self, other):
        return self / other

    def neg(self):
        return -self

    def pow(self, exponent):
        return self**exponent

    def sqrt(self):
        return _aten().sqrt(self)

    def add_(self, other, alpha=1):
        return _aten().add_.Tensor(self, self._scalar(other), alpha=alpha)

    def mul_(self, other):
        return (_ATEN[0] if _ATEN else _aten()).mul_.Tensor(
            self, other if isinstance(other, AutogradTensor) else self._scalar(other)
        )

    def div_(self, other):
        return (_ATEN[0] if _ATEN else _aten()).div_.Tensor(
            self, other if isinstance(other, AutogradTensor) else self._scalar(other)
        )

    def addcmul_(self, tensor1, tensor2, value=1):
        return _aten().addcmul_(self, tensor1, tensor2, value=value)

    def addcdiv_(self, tensor1, tensor2, value=1):
        return _aten().addcdiv_(self, tensor1, tensor2, value=value)

    def lerp_(self, end, weight):
        return _aten().lerp_.Scalar(self, end, weight)

    is_sparse = False  # strided only (torch's layout check in optimizers)

    def __iadd__(self, other):
        return self.add_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def new_zeros(self, size, dtype=None):
        """Zeros on this tensor's device; ``dtype`` a retorch dtype or a torch dtype (by name)."""
        if dtype is None:
            dtype = self.data.dtype
        elif not isinstance(dtype, rt.dtype):
            dtype = getattr(rt, str(dtype).removeprefix("torch."))
        return Tensor(rt.zeros(tuple(size), dtype=dtype, device=self.data.device))

    def new_empty(self, size, dtype=None):
        """Uninitialized memory on this tensor's device (``Tensor.new_empty``): on meta, a
        shape and a dtype only, what a fake kernel returns."""
        dtype = self.data.dtype if dtype is None else dtype
        return Tensor(rt.empty(*tuple(size), dtype=dtype, device=self.data.device))

    def item(self):
        return self.data.item()

    def zero_(self):
        return _aten().zero_(self)

    def copy_(self, src):
        return _aten().copy_(self, src)

    def relu(self):
        return _aten().relu(self)

    def exp(self):
        return _aten().exp(self)

    def log(self):
        return _aten().log(self)

    def clone(self):
        return _aten().clone(self)

    def sum(self, dim=None, keepdim=False):
        if dim is None:
            return _aten().sum(self)
        return _aten().sum.dim_IntList(self, [dim] if isinstance(dim, int) else list(dim), keepdim)

    def mean(self, dim=None, keepdim=False):
        if dim is None:
            return _aten().mean(self)
        return _aten().mean.dim(self, [dim] if isinstance(dim, int) else list(dim), keepdim)

    def mm(self, mat2):
        return _aten().mm(self, mat2)

    def matmul(self, other):
        return _aten().matmul(self, other)

    def t(self):
        return _aten().t(self)

    @property
    def T(self):  # noqa: N802  (torch's name)
        return self.t()

    def view(self, *shape):
        return _aten().view(self, list(_shape(shape)))

    def reshape(self, *shape):
        return _aten().reshape(self, list(_shape(shape)))

    def softmax(self, dim):
        return _aten().softmax.int(self, dim)

    def log_softmax(self, dim):
        return _aten().log_softmax.int(self, dim)

    def is_contiguous(self) -> bool:
        return self.data.is_contiguous()

    def numpy(self):
        return self.data.numpy()


def _shape(shape) -> tuple:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape


def tensor(data, dtype=None, device: str = "cpu", requires_grad: bool = False) -> Tensor:
    """``retorch.dispatch.tensor([[1.0, 2.0]], requires_grad=True)``: a leaf on ``device``."""
    raw = rt.tensor(data, dtype=dtype)
    if device != "cpu":
        raw = raw.to(device=device)
    return Tensor(raw, requires_grad=requires_grad)


def from_torch(t, requires_grad: bool | None = None, device: str = "cpu") -> Tensor:
    """A retorch.Tensor on ``device`` with a torch tensor's values (a copy, through NumPy)."""
    raw = rt.tensor(t.detach().cpu().numpy())
    if device != "cpu":
        raw = raw.to(device=device)
    rg = t.requires_grad if requires_grad is None else requires_grad
    return Tensor(raw, requires_grad=rg)


def to_retorch(module, device: str = "cpu"):
    """Give every parameter and buffer of ``module`` (a chapter-1 ``retorch.nn.Module``, or a
    ``torch.nn.Module``) a ``retorch.Tensor`` on ``device`` with the same values, in place, as
    ``_apply`` swaps a module's tensors for converted ones. ``Linear.forward`` then runs
    unchanged: its ``F.linear`` call reaches retorch's dispatcher through
    ``__torch_function__``. A module already on retorch moves with ``module.to(device)``."""
    for sub in module.modules():
        for key, p in sub._parameters.items():
            if p is not None and not isinstance(p, Tensor):
                sub._parameters[key] = from_torch(p, requires_grad=p.requires_grad, device=device)
        for key, b in sub._buffers.items():
            if b is not None and not isinstance(b, Tensor):
                sub._buffers[key] = from_torch(b, requires_grad=False, device=device)
    return module


def collate(samples):
    """A ``collate_fn`` for DataLoader: stack samples of retorch tensors into a batch (on the
    host, through NumPy; ``default_collate`` would call torch.stack)."""
    import numpy as np

    first = samples[0]
    if isinstance(first, (tuple, list)):
        return type(first)(collate([s[i] for s in samples]) for i in range(len(first)))
    return Tensor(rt.from_numpy(np.stack([s.data.numpy() for s in samples])))

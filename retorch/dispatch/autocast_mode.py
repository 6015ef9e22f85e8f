"""Autocast as a dispatch key: ``with autocast("cpu"):`` casts the inputs of listed ops.

Mirrors ``aten/src/ATen/autocast_mode.cpp`` (the kernels and the ``KERNEL_CPU`` policy lists)
and ``torch/amp/autocast_mode.py`` (the context manager). Every CPU tensor carries
``AutocastCPU``, and the thread-local excluded set hides it by default; entering ``autocast``
un-hides it. Ops with an AutocastCPU kernel then run it first: it casts the eligible tensor
arguments (``lower_precision_fp``: down to the autocast dtype; ``fp32``: up to full precision),
excludes AutocastCPU (``ExcludeDispatchKeyGuard``) and calls the op again, which now goes on
to the Autograd key: the casts are recorded, so gradients flow back in the parameters' dtype.
Every other op falls through (the fallthrough fallback of ``dispatcher.py``).

retorch.tensor has no float16 or bfloat16, so the policy runs one precision up: the lower
precision is float32 and the eligible inputs are float64 (torch lowers float32, never float64,
to bfloat16 or float16). Which ops cast, and in which direction, are torch's CPU lists
restricted to retorch's aten operators; tests compare the classification with torch.autocast.
"""

from __future__ import annotations

import threading

import retorch.tensor as rt
from retorch.autograd.graph import NO_EDGE, Node
from retorch.autograd.tensor import Tensor as AutogradTensor

from .dispatch_key import DispatchKey
from .dispatch_key_set import DispatchKeySet
from .dispatcher import get_dispatcher
from .library import Library
from .local_dispatch_key_set import ExcludeDispatchKeyGuard, _tls

#: ``KERNEL_CPU(op, lower_precision_fp)``: cast down (torch: conv, bmm, mm, addmm, linear,
#: matmul...; these are the ones retorch defines).
LOWER_PRECISION_FP = ("mm", "matmul", "linear")
#: ``KERNEL_CPU(op, fp32)``: cast up to full precision (torch: nll_loss, mse_loss, ...).
FP32 = ("nll_loss",)
#: The dtype that plays float32's part in torch's lists (full precision) and the default
#: lower precision (bfloat16's part on torch's CPU).
FULL, LOWER = rt.float64, rt.float32

_KEYS = {"cpu": DispatchKey.AutocastCPU, "cuda": DispatchKey.AutocastCUDA}


class _AutocastState(threading.local):
    def __init__(self) -> None:
        self.dtype = {"cpu": LOWER, "cuda": LOWER}


_state = _AutocastState()


def is_autocast_enabled(device_type: str = "cpu") -> bool:
    return not _tls.excluded.has(_KEYS[device_type])


def get_autocast_dtype(device_type: str = "cpu"):
    return _state.dtype[device_type]


class autocast:  # noqa: N801  (torch's name)
    """``with autocast("cpu", dtype=retorch.tensor.float32):`` (``torch.autocast``)."""

    def __init__(self, device_type: str = "cpu", dtype=None, enabled: bool = True) -> None:
        if device_type not in _KEYS:
            raise RuntimeError(
                f"User specified an unsupported autocast device_type '{device_type}': retorch "
                f"has autocast for {', '.join(_KEYS)}"
            )
        if dtype is not None and dtype is not LOWER:
            raise RuntimeError(
                f"retorch's autocast lowers float64 to float32 only (retorch.tensor has no "
                f"float16 or bfloat16), got dtype={dtype}"
            )
        self.device_type, self.enabled = device_type, enabled
        self.dtype = LOWER if dtype is None else dtype

    def __enter__(self):
        key = _KEYS[self.device_type]
        self._saved = (_tls.excluded, _state.dtype[self.device_type])
        excluded = _tls.excluded.remove(key)
        _tls.excluded = excluded if self.enabled else excluded.add(key)
        _state.dtype[self.device_type] = self.dtype
        return self

    def __exit__(self, *exc) -> None:
        _tls.excluded, _state.dtype[self.device_type] = self._saved


class ToCopyBackward0(Node):
    """The gradient of a cast or a move (``_to_copy_backward`` in ``FunctionsManual.cpp``): the
    incoming gradient cast back to the input's dtype and moved back to its device."""

    def apply(self, grads: list) -> tuple:
        g = grads[0]
        if g is None:
            return (None,)
        return (AutogradTensor(g.data.to(device=self.self_device, dtype=self.self_dtype)),)


def _to_copy_autograd(ks, self, **kwargs):
    from .variable_type import _below, _needs_grad

    out = _below(get_dispatcher().find_schema_or_throw("aten::_to_copy"), ks, (self,), kwargs)
    if _needs_grad([self]):
        node = ToCopyBackward0((self._gradient_edge() if self.requires_grad else NO_EDGE,))
        node.self_dtype, node.self_device = self.data.dtype, self.data.device
        node.input_metadata = (tuple(out.shape),)
        out._grad_fn, out._output_nr, out.requires_grad = node, 0, True
    return out


def _cast(value, dtype, eligible):
    """``cached_cast``: an eligible floating tensor in another dtype, through ``_to_copy``."""
    if isinstance(value, AutogradTensor) and value.data.dtype is eligible:
        from .native_functions import aten

        return aten._to_copy(value, dtype=dtype)
    return value


def _autocast_kernel(name: str, policy: str):
    def kernel(ks, *args, **kwargs):
        device = next(a.data.device for a in args if isinstance(a, AutogradTensor))
        key = _KEYS[device.split(":")[0]]
        if policy == "lower_precision_fp":
            dtype, eligible = get_autocast_dtype(device.split(":")[0]), FULL
        else:
            dtype, eligible = FULL, LOWER
        args = tuple(_cast(a, dtype, eligible) for a in args)
        kwargs = {k: _cast(v, dtype, eligible) for k, v in kwargs.items()}
        with ExcludeDispatchKeyGuard(DispatchKeySet(key)):
            return get_dispatcher().find_schema_or_throw(f"aten::{name}")(*args, **kwargs)

    return kernel


def register() -> list:
    libs = []
    for key in ("AutocastCPU", "AutocastCUDA"):
        lib = Library("aten", "IMPL", key)
        for name in LOWER_PRECISION_FP:
            lib.impl(name, _autocast_kernel(name, "lower_precision_fp"), with_keyset=True)
        for name in FP32:
            lib.impl(name, _autocast_kernel(name, "fp32"), with_keyset=True)
        libs.append(lib)
    grad = Library("aten", "IMPL", "Autograd")
    grad.impl("_to_copy", _to_copy_autograd, with_keyset=True)
    return libs + [grad]

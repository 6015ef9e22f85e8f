"""Autocast as a dispatch key: ``with autocast("cpu"):`` casts the inputs of listed ops.

Mirrors ``aten/src/ATen/autocast_mode.cpp`` (each key's policy lists: ``KERNEL_CPU``,
``KERNEL_CUDA``), ``aten/src/ATen/autocast_mode.h`` (``cached_cast``, the ``WrapFunction_``
kernels per policy) and ``torch/amp/autocast_mode.py`` (the context manager). Every CPU tensor carries
``AutocastCPU``, and the thread-local excluded set hides it by default; entering ``autocast``
un-hides it. Ops with an AutocastCPU kernel then run it first: it casts the eligible tensor
arguments (``lower_precision_fp``: down to the autocast dtype; ``fp32``: up to full precision),
excludes AutocastCPU (``ExcludeDispatchKeyGuard``) and calls the op again, which now goes on
to the Autograd key: the casts are recorded, so gradients flow back in the parameters' dtype.
Every other op falls through (the fallthrough fallback of ``dispatcher.py``).

As torch's, autocast lowers float32 to bfloat16 on the CPU and to float16 on CUDA (the
defaults of ``torch.get_autocast_dtype``), with retorch.tensor's own half types. Which
tensors are cast is ``cached_cast``'s rule: a floating tensor of another dtype than the
target, never a float64 (``is_eligible``). Which ops cast, and in which direction, are torch's
lists restricted to retorch's aten operators, each key its own (``POLICIES``: the CUDA key
also keeps ``exp``, ``log``, ``pow``, ``softmax`` and ``sum`` in float32; the CPU key does
not); tests compare the kernels registered per key with torch's dispatcher, op by op, and
output dtypes with ``torch.autocast`` (CUDA's on fake CUDA tensors).

Chapters written before retorch.tensor had half types ran autocast "one precision up"
(float64 lowered to float32, float32 raised to float64); ``autocast("cpu", dtype=float32)``
still selects that mode, so their stored outputs stay reproducible.
"""

from __future__ import annotations

import threading
import warnings

import retorch.tensor as rt
from retorch.autograd.graph import NO_EDGE, Node
from retorch.autograd.tensor import Tensor as AutogradTensor

from .dispatch_key import DispatchKey
from .dispatch_key_set import DispatchKeySet
from .dispatcher import get_dispatcher
from .library import Library
from .local_dispatch_key_set import ExcludeDispatchKeyGuard, _tls

#: Each key's own lists, as ``TORCH_LIBRARY_IMPL(aten, AutocastCPU, m)`` and
#: ``TORCH_LIBRARY_IMPL(aten, Autocast, m)`` (the CUDA key) in ``autocast_mode.cpp`` register
#: them, restricted to the aten operators retorch defines (name or ``name.overload``).
#: ``lower_precision_fp``: cast down; ``fp32``: cast up; ``fp32_set_opt_dtype``: pass
#: ``dtype=float32`` to an op that takes an optional dtype (softmax, sum), casting nothing.
#: The CPU lists keep elementwise math and reductions out: ``exp``, ``sum`` and ``softmax``
#: run in the input's dtype under CPU autocast and in float32 under CUDA autocast
#: (``AT_FORALL_FP32`` and ``AT_FORALL_FP32_SET_OPT_DTYPE`` in ``autocast_mode.h``).
POLICIES = {
    "cpu": {
        "lower_precision_fp": ("mm", "addmm", "matmul", "linear"),
        "fp32": ("nll_loss", "cross_entropy_loss"),
        "fp32_set_opt_dtype": (),
    },
    "cuda": {
        "lower_precision_fp": ("mm", "addmm", "matmul", "linear"),
        "fp32": ("exp", "log", "pow.Tensor_Scalar", "nll_loss"),
        "fp32_set_opt_dtype": ("softmax.int", "log_softmax.int", "sum", "sum.dim_IntList"),
    },
}
#: The CPU key's lists under their old names (chapter 5 prints them).
LOWER_PRECISION_FP = POLICIES["cpu"]["lower_precision_fp"]
FP32 = POLICIES["cpu"]["fp32"]
#: ``get_autocast_dtype``'s defaults: bfloat16 on the CPU, float16 on CUDA.
DEFAULT_DTYPE = {"cpu": rt.bfloat16, "cuda": rt.float16}
#: The old "one precision up" mode (lower precision float32, full precision float64).
LEGACY_FULL, LEGACY_LOWER = rt.float64, rt.float32

_KEYS = {"cpu": DispatchKey.AutocastCPU, "cuda": DispatchKey.AutocastCUDA}


class _AutocastState(threading.local):
    def __init__(self) -> None:
        self.dtype = dict(DEFAULT_DTYPE)


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
        if dtype is not None and dtype not in (rt.bfloat16, rt.float16, LEGACY_LOWER):
            # torch warns and disables (torch/amp/autocast_mode.py), it does not raise
            warnings.warn(
                f"In {device_type.upper()} autocast, but the target dtype is not supported. "
                f"Disabling autocast.\nretorch's autocast supports bfloat16 and float16 (and "
                f"float32: the float64 -> float32 mode of earlier chapters), got {dtype}",
                stacklevel=2,
            )
            enabled, dtype = False, None
        self.device_type, self.enabled = device_type, enabled
        self.dtype = DEFAULT_DTYPE[device_type] if dtype is None else dtype

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


def _cast(value, dtype, legacy):
    """``cached_cast``: an eligible tensor (floating, not float64; in the legacy mode only
    float64 and float32 take part) in another dtype than ``dtype``, through ``_to_copy``."""
    if not isinstance(value, AutogradTensor):
        return value
    have = value.data.dtype
    if legacy:
        eligible = have in (LEGACY_FULL, LEGACY_LOWER)
    else:
        eligible = have.is_floating_point and have is not rt.float64
    if eligible and have is not dtype:
        from .native_functions import aten

        return aten._to_copy(value, dtype=dtype)
    return value


def _autocast_kernel(name: str, policy: str, device_type: str):
    """``WrapFunction_<policy, device_type, ...>::call`` (``autocast_mode.h``): the device
    type is the key's, fixed at registration, as torch's template argument is."""
    key = _KEYS[device_type]
    at = None  # fp32_set_opt_dtype: where the op's ``dtype`` argument sits, if positional
    if policy == "fp32_set_opt_dtype":
        schema = get_dispatcher().find_schema_or_throw(f"aten::{name}").schema
        at = next(i for i, a in enumerate(schema.arguments) if a.name == "dtype")

    def kernel(ks, *args, **kwargs):
        lower = get_autocast_dtype(device_type)
        legacy = lower is LEGACY_LOWER
        if policy == "fp32_set_opt_dtype":
            # set_opt_dtype: an unset optional dtype becomes float32 when the first argument
            # is eligible; nothing is cast (an explicit dtype, by keyword or position, stays)
            first = args[0].data.dtype
            eligible = (first in (LEGACY_FULL, LEGACY_LOWER) if legacy
                        else first.is_floating_point and first is not rt.float64)  # fmt: skip
            given = kwargs.get("dtype") if len(args) <= at else args[at]
            if eligible and given is None:
                args = args[:at]  # (a positional None is dropped, the keyword set)
                kwargs = {**kwargs, "dtype": LEGACY_FULL if legacy else rt.float32}
        else:
            if policy == "lower_precision_fp":
                dtype = lower
            else:
                dtype = LEGACY_FULL if legacy else rt.float32
            args = tuple(_cast(a, dtype, legacy) for a in args)
            kwargs = {k: _cast(v, dtype, legacy) for k, v in kwargs.items()}
        with ExcludeDispatchKeyGuard(DispatchKeySet(key)):
            return get_dispatcher().find_schema_or_throw(f"aten::{name}")(*args, **kwargs)

    kernel.policy = policy
    return kernel


def register() -> list:
    libs = []
    for device_type, lists in POLICIES.items():
        lib = Library("aten", "IMPL", _KEYS[device_type].name)
        for policy, names in lists.items():
            for name in names:
                lib.impl(name, _autocast_kernel(name, policy, device_type), with_keyset=True)
        libs.append(lib)
    grad = Library("aten", "IMPL", "Autograd")
    grad.impl("_to_copy", _to_copy_autograd, with_keyset=True)
    return libs + [grad]


def registered_policy(name: str, device_type: str) -> str | None:
    """The policy of ``name``'s kernel for ``device_type``'s autocast key, or None."""
    for policy, names in POLICIES[device_type].items():
        if name in names or name.split("::")[-1] in names:
            return policy
    return None

"""The global switches: determinism, the CPU thread count, the default dtype and device.

Mirrors ``torch/__init__.py`` (``use_deterministic_algorithms``,
``are_deterministic_algorithms_enabled``, ``set_default_dtype``, ``get_default_dtype``) over the
process-wide ``at::Context`` (``aten/src/ATen/Context.h`` / ``Context.cpp``: the
``deterministic_algorithms`` flag and ``alertNotDeterministic``), and ``torch.set_num_threads``
(``aten/src/ATen/ParallelCommon.cpp``... reached through ``torch/csrc/Module.cpp``), with
torch's exception types and messages for misuse.

- Determinism: torch's kernels without a deterministic implementation call
  ``alertNotDeterministic("<kernel>")``, which raises ``RuntimeError`` (or warns, with
  ``warn_only=True``) while the flag is on. retorch's one such kernel is ``index_add_`` on CUDA
  (``retorch/tensor/cuda_kernels.py``'s ``scatter_kernel`` adds with ``cuda.atomic.add``, so
  the order of a repeated index's float additions varies from run to run); while the flag is on
  its launch is wrapped with the alert, so the flag costs nothing while it is off.
- Threads: ``set_num_threads`` drives Numba's (``numba.set_num_threads``), capped at the pool
  Numba started with (``NUMBA_NUM_THREADS``), where torch's OpenMP pool takes any count.
- Default dtype: ``retorch.tensor.dtype.default_dtype``, which the factories (``tensor``,
  ``zeros``, ``arange``...) and the type promotion of Python floats read.
- Default device: ``set_default_device``, ``get_default_device`` and ``with
  retorch.device(...)``, mirroring ``torch/__init__.py`` (``set_default_device``,
  ``get_default_device``, ``_GLOBAL_DEVICE_CONTEXT``) and ``torch/utils/_device.py``
  (``DeviceContext``, a ``TorchFunctionMode`` that gives the factories of
  ``_device_constructors()`` a ``device=`` when the call has none; ``torch.device``'s
  ``__enter__`` in ``torch/csrc/Device.cpp`` enters one). retorch has no mode stack: while a
  ``DeviceContext`` is entered, the same factories of ``retorch.tensor`` (and
  ``retorch.dispatch.tensor``) are wrapped in the module (as the determinism flag wraps its
  launch), so the default costs nothing while it is unset; ``*_like`` follow their input and
  ``from_numpy`` shares its array's memory, in neither library following the default. Code
  that imported a factory by name before (``from retorch.tensor import zeros``) keeps the
  unwrapped one, as torch's C++ callers never meet the mode.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import inspect
import sys
import warnings

_deterministic = False
_warn_only = False
_unwrapped = None  # retorch.tensor.ops._scatter_launch while the alert wraps it


def _alert_message(caller: str, warn_only: bool) -> str:
    """``Context::alertNotDeterministic``'s text (Context.cpp), with retorch's name."""
    if warn_only:
        return (
            f"{caller} does not have a deterministic implementation, but you set "
            f"'retorch.use_deterministic_algorithms(True, warn_only=True)'. You can file an "
            f"issue at https://github.com/pytorch/pytorch/issues to help us prioritize adding "
            f"deterministic support for this operation."
        )
    return (
        f"{caller} does not have a deterministic implementation, but you set "
        f"'retorch.use_deterministic_algorithms(True)'. You can turn off determinism just for "
        f"this operation, or you can use the 'warn_only=True' option, if that's acceptable for "
        f"your application. You can also file an issue at "
        f"https://github.com/pytorch/pytorch/issues to help us prioritize adding deterministic "
        f"support for this operation."
    )


def alert_not_deterministic(caller: str) -> None:
    """``at::globalContext().alertNotDeterministic(caller)``: raise, warn, or nothing."""
    if not _deterministic:
        return
    if _warn_only:
        warnings.warn(_alert_message(caller, True), UserWarning, stacklevel=3)
    else:
        raise RuntimeError(_alert_message(caller, False))


def _checked_scatter_launch(out, dim, index, src, add):
    if add and out.device == "cuda":  # index_add_'s atomics: float sums in a varying order
        alert_not_deterministic("index_add_cuda_")
    return _unwrapped(out, dim, index, src, add)


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Ops without a deterministic implementation raise (or warn) while ``mode`` is on."""
    global _deterministic, _warn_only, _unwrapped
    for name, value in (("mode", mode), ("warn_only", warn_only)):
        if not isinstance(value, bool):
            position = " (position 1)" if name == "mode" else ""
            raise TypeError(
                f"_set_deterministic_algorithms(): argument '{name}'{position} must be bool, "
                f"not {type(value).__name__}"
            )
    from retorch.tensor import ops

    _deterministic, _warn_only = mode, warn_only
    if mode and _unwrapped is None:
        _unwrapped, ops._scatter_launch = ops._scatter_launch, _checked_scatter_launch
    elif not mode and _unwrapped is not None:
        ops._scatter_launch, _unwrapped = _unwrapped, None


def are_deterministic_algorithms_enabled() -> bool:
    return _deterministic


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _warn_only


def set_num_threads(n: int) -> None:
    """The threads Numba's parallel CPU loops use (``torch.set_num_threads`` for torch's)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise RuntimeError(f"set_num_threads expects an int, but got {type(n).__name__}")
    if n <= 0:
        raise RuntimeError("set_num_threads expects a positive integer")
    import numba

    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


def get_num_threads() -> int:
    import numba

    return numba.get_num_threads()


def set_default_dtype(d) -> None:
    """The dtype of Python floats in new tensors: a floating dtype, retorch's or torch's."""
    dtypes = importlib.import_module("retorch.tensor.dtype")  # retorch.tensor.dtype: a class
    from retorch.tensor import tensor_iterator, type_promotion

    try:
        if isinstance(d, str):  # torch takes dtype objects only
            raise TypeError(d)
        new = dtypes.as_dtype(d)
    except Exception:
        raise TypeError(
            "invalid dtype object: only floating-point types are supported as the default type"
        ) from None
    if not new.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    # the factories read dtypes.default_dtype at each call; type promotion and the iterator
    # imported the name, so their copies are set too
    for module in (dtypes, type_promotion, tensor_iterator):
        module.default_dtype = new


def get_default_dtype():
    return importlib.import_module("retorch.tensor.dtype").default_dtype


# ---- the default device -----------------------------------------------------------------------
#: The factories that take the default device: torch's ``_device_constructors()`` that retorch
#: has, as (module, name).
DEVICE_CONSTRUCTORS = tuple(
    [("retorch.tensor", n) for n in ("empty", "empty_strided", "zeros", "ones", "full",
                                     "arange", "tensor", "scalar_tensor")]
    + [("retorch.dispatch", "tensor")]
)  # fmt: skip

_device_contexts: list = []  # the entered DeviceContexts, innermost last (torch's mode stack)
_global_device_context = None  # set_default_device's (torch's _GLOBAL_DEVICE_CONTEXT)
_unwrapped_constructors: dict = {}  # (module, name) -> the factory, while any context is in


class device:
    """``torch.device``: a type (``"cpu"``, ``"cuda"``, ``"meta"``) and an index; as a context
    manager it makes the factories inside the block default to it."""

    def __init__(self, type, index=None):
        if isinstance(type, device) or builtins.type(type).__name__ == "device":  # or torch's
            type, index = type.type, type.index if index is None else index
        if not isinstance(type, str):
            raise TypeError(
                f"device() received an invalid combination of arguments - got "
                f"({builtins.type(type).__name__}), but expected one of: (torch.device device), "
                f"(str type, int index = -1)"
            )
        from retorch.tensor.tensor import normalize_device

        self.type = normalize_device(type)  # RuntimeError for a device type it does not know
        if ":" in type:
            index = int(type.split(":", 1)[1])
        self.index = index
        self._entered: list = []

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{index})"

    def __eq__(self, other) -> bool:
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    __hash__ = object.__hash__

    def __enter__(self) -> device:
        ctx = DeviceContext(self)
        ctx.__enter__()
        self._entered.append(ctx)
        return self

    def __exit__(self, *exc) -> None:
        self._entered.pop().__exit__(*exc)


class DeviceContext:
    """``torch.utils._device.DeviceContext``: while entered, the factories of
    ``DEVICE_CONSTRUCTORS`` called without a device (or with ``device=None``) get this one."""

    def __init__(self, dev) -> None:
        self.device = dev if isinstance(dev, device) else device(str(dev))

    def __enter__(self) -> DeviceContext:
        if not _device_contexts:
            _wrap_constructors()
        _device_contexts.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _device_contexts.remove(self)
        if not _device_contexts:
            _unwrap_constructors()


def _current_device():
    if _device_contexts:
        return _device_contexts[-1].device
    return None


#: retorch's packages that stand for torch's C++ (ATen's kernels and wrapped numbers, the
#: dispatcher, the autograd engine and formulas): their calls to a factory never meet the
#: default device, as torch's C++ never meets its ``DeviceContext`` mode (a Python number in
#: ``cpu_tensor + 2`` stays a CPU tensor). Python code such as ``retorch.nn`` follows it, as
#: ``torch.nn`` does.
INTERNAL_CALLERS = ("retorch.tensor", "retorch.dispatch", "retorch.autograd")


def _with_default_device(factory):
    signature = inspect.signature(factory)

    @functools.wraps(factory)
    def with_default_device(*args, **kwargs):
        dev = _current_device()
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if dev is not None and not caller.startswith(INTERNAL_CALLERS):
            bound = signature.bind_partial(*args, **kwargs)
            if bound.arguments.get("device") is None:  # torch: kwargs.get("device") is None
                bound.arguments["device"] = dev.type
                return factory(*bound.args, **bound.kwargs)
        return factory(*args, **kwargs)

    return with_default_device


def _wrap_constructors() -> None:
    for module_name, name in DEVICE_CONSTRUCTORS:
        module = importlib.import_module(module_name)
        factory = getattr(module, name)
        _unwrapped_constructors[module_name, name] = factory
        setattr(module, name, _with_default_device(factory))


def _unwrap_constructors() -> None:
    for (module_name, name), factory in _unwrapped_constructors.items():
        setattr(importlib.import_module(module_name), name, factory)
    _unwrapped_constructors.clear()


def set_default_device(dev) -> None:
    """Factories called without a device allocate on ``dev`` (``None``: back to the CPU)."""
    global _global_device_context
    if _global_device_context is not None:  # torch exits the old default first: a bad device
        _device_contexts.remove(_global_device_context)  # below leaves none (the CPU)
        _global_device_context = None
        if not _device_contexts:
            _unwrap_constructors()
    new = None if dev is None else DeviceContext(device(dev))
    _global_device_context = new
    if new is not None:
        if not _device_contexts:
            _wrap_constructors()
        _device_contexts.insert(0, new)  # at the bottom, under any ``with`` block's


def get_default_device() -> device:
    """The device a factory called without one allocates on: the innermost ``with device``
    block's, else ``set_default_device``'s, else the CPU (``cuda`` with index 0, retorch's one
    GPU, as torch's adds the current device's index)."""
    dev = _current_device()
    if dev is None:
        return device("cpu")
    if dev.type == "cuda" and dev.index is None:
        return device("cuda", 0)
    return dev

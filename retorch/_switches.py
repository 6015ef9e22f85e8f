"""The global switches: determinism, the CPU thread count, the default dtype.

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
"""

from __future__ import annotations

import importlib
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

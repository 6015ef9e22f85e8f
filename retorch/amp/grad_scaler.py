"""``GradScaler``: dynamic loss scaling for mixed precision. Mirrors torch/amp/grad_scaler.py.

A float16 gradient underflows to zero below 6e-8. The scaler multiplies the loss by a large
``scale`` before ``backward`` (``scale``), so the gradients come out multiplied by it too, then
divides them by it again before the optimizer sees them (``unscale_``). If any gradient is inf
or NaN the scale was too large: ``step`` skips the optimizer's step and ``update`` multiplies
the scale by ``backoff_factor``; after ``growth_interval`` steps in a row without one,
``update`` multiplies it by ``growth_factor``.

The two ATen kernels the scaler calls are rebuilt here as functions of the same names (NumPy
over the tensors' memory, as torch's CPU versions in
aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp compute them, element by element):

* ``_amp_foreach_non_finite_check_and_unscale_``: set ``found_inf`` to 1.0 if any gradient
  holds an inf or NaN, and multiply every gradient by ``inv_scale`` in place;
* ``_amp_update_scale_``: the growth tracker, growth and backoff rule.

Parameters and gradients may be torch tensors or chapter 5's ``retorch.Tensor`` (both share
their memory with NumPy through ``.numpy()``), on the CPU. The scale, growth tracker and
``found_inf`` are 0-d torch tensors, as torch's are, so ``state_dict`` is torch's.
"""

from __future__ import annotations

import inspect
import warnings
from collections import defaultdict
from enum import Enum
from typing import Any

import numpy as np
import torch

from retorch.tensor import half


class OptState(Enum):
    """Where an optimizer is in an iteration: READY, then UNSCALED (``unscale_`` ran), then
    STEPPED (``step`` ran); ``update`` brings every optimizer back to READY."""

    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _refresh_per_optimizer_state() -> dict[str, Any]:
    return {"stage": OptState.READY, "found_inf_per_device": {}}


def _array(t) -> np.ndarray:
    """The memory of a torch tensor or a ``retorch.Tensor`` as a NumPy array (no copy)."""
    if str(t.device) != "cpu":
        raise RuntimeError(
            f"retorch's GradScaler kernels run on the CPU, not on {t.device}: use "
            "torch.amp.GradScaler for tensors on other devices"
        )
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return t.numpy()


def _amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale) -> None:
    """For each gradient: if it holds an inf or NaN, set ``found_inf`` to 1.0; then multiply it
    by ``inv_scale`` in place, in the gradient's opmath type (float32 for float32 and 16-bit
    gradients, float64 for float64), skipped when ``inv_scale`` is exactly 1.

    ATen's CPU kernel does the same element by element (``if (!std::isfinite(val))
    *found_inf_ptr = 1.f; ... val * inv_scale_val``); the product is computed for every
    gradient, infs included, so a skipped step still leaves the gradients unscaled.
    """
    inv = np.float32(_array(inv_scale))
    flag = _array(found_inf)
    for g in grads:
        if isinstance(g, torch.Tensor) and g.dtype == torch.bfloat16:  # NumPy has no bfloat16
            bits = g.view(torch.int16).numpy().view(np.uint16)
            values = half.bf16_to_fp32(bits)  # opmath: float32, rounded once on store
            if not np.isfinite(values).all():
                flag[...] = np.float32(1.0)
            if inv != np.float32(1.0):
                bits[...] = half.round_to_nearest_even(values * inv)
            continue
        a = _array(g)
        if not np.isfinite(a).all():
            flag[...] = np.float32(1.0)
        if inv != np.float32(1.0):
            opmath = np.float64 if a.dtype == np.float64 else np.float32
            a[...] = (a.astype(opmath, copy=False) * opmath(inv)).astype(a.dtype, copy=False)


def _amp_update_scale_(
    scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval
) -> None:
    """Update ``scale`` (float32) and ``growth_tracker`` (int32) in place, as ATen's
    ``amp_update_scale_cpu_kernel`` does:

    * inf found: scale *= backoff_factor, tracker = 0;
    * else tracker + 1 reaching ``growth_interval``: scale *= growth_factor (kept only if the
      product is finite), tracker = 0;
    * else tracker += 1.

    The factors are doubles in ATen: the product is taken in float64 and rounded to float32.
    """
    s, tracker = _array(scale), _array(growth_tracker)
    if _array(found_inf) != 0:
        s[...] = np.float32(np.float64(s) * backoff_factor)
        tracker[...] = 0
    else:
        successful = int(tracker) + 1
        if successful == growth_interval:
            with np.errstate(over="ignore"):  # an overflow to inf is tested just below
                new_scale = np.float32(np.float64(s) * growth_factor)
            if np.isfinite(new_scale):
                s[...] = new_scale
            tracker[...] = 0
        else:
            tracker[...] = successful


class GradScaler:
    """Scale the loss, unscale and check the gradients, skip steps on inf/NaN, adapt the scale.

    Same arguments and defaults as ``torch.amp.GradScaler`` (``device`` defaults to "cuda"
    there too; retorch's kernels run on the CPU: pass ``"cpu"``).
    """

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        self._device = device
        self._enabled = enabled
        if self._device == "cuda" and enabled and not torch.cuda.is_available():
            warnings.warn(
                "torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                stacklevel=2,
            )
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
            self._init_scale = init_scale
            self._scale: torch.Tensor | None = None  # created by the first scale()
            self._growth_factor = growth_factor
            self._backoff_factor = backoff_factor
            self._growth_interval = growth_interval
            self._init_growth_tracker = 0
            self._growth_tracker: torch.Tensor | None = None
            self._per_optimizer_states: dict[int, dict[str, Any]] = defaultdict(
                _refresh_per_optimizer_state
            )

    def _check_scale_growth_tracker(self, funcname: str):
        fix = (
            "This may indicate your script did not use scaler.scale(loss or outputs) earlier "
            "in the iteration."
        )
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  " + fix)
        if self._growth_tracker is None:
            raise AssertionError(f"Attempted {funcname} but _growth_tracker is None.  " + fix)
        return self._scale, self._growth_tracker

    def _lazy_init_scale_growth_tracker(self) -> None:
        self._scale = torch.full((), self._init_scale, dtype=torch.float32)
        self._growth_tracker = torch.full((), self._init_growth_tracker, dtype=torch.int32)

    def _times_scale(self, val):
        if self._scale is None:
            self._lazy_init_scale_growth_tracker()
        if isinstance(val, torch.Tensor):
            return val * self._scale
        return val * float(self._scale)  # a retorch.Tensor: its dispatcher's mul by a scalar

    def scale(self, outputs):
        """``outputs`` (a tensor, or nested lists/tuples/iterables of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(v) for v in outputs)
        if hasattr(outputs, "backward"):  # a tensor, torch's or retorch's
            return self._times_scale(outputs)
        if isinstance(outputs, (set, dict)) or not hasattr(outputs, "__iter__"):
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")
        return map(self.scale, outputs)

    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16: bool) -> dict:
        """Check and unscale the optimizer's gradients, one kernel call per (device, dtype);
        returns ``{device: found_inf}``."""
        per_device_and_dtype: dict = defaultdict(lambda: defaultdict(list))
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                if not allow_fp16 and param.grad.dtype == torch.float16:
                    raise ValueError("Attempting to unscale FP16 gradients.")
                device = torch.device(str(param.grad.device))
                per_device_and_dtype[device][param.grad.dtype].append(param.grad)
        per_device_found_inf = {}
        for device, per_dtype in per_device_and_dtype.items():
            per_device_found_inf[device] = found_inf
            for grads in per_dtype.values():
                _amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        return per_device_found_inf

    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale (once per iteration), recording
        whether any is inf or NaN."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.UNSCALED:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        if optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        # 1/scale computed in float64 and rounded to float32, as torch's
        # self._scale.double().reciprocal().float()
        inv_scale = torch.tensor(np.float32(1.0 / np.float64(self._scale)), dtype=torch.float32)
        found_inf = torch.full((), 0.0, dtype=torch.float32)
        optimizer_state["found_inf_per_device"] = self._unscale_grads_(
            optimizer, inv_scale, found_inf, False
        )
        optimizer_state["stage"] = OptState.UNSCALED

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        retval = None
        if not sum(v.item() for v in optimizer_state["found_inf_per_device"].values()):
            retval = optimizer.step(*args, **kwargs)
        return retval

    def step(self, optimizer, *args, **kwargs):
        """Unscale (unless ``unscale_`` ran) and call ``optimizer.step`` unless a gradient was
        inf or NaN. An optimizer with ``_step_supports_amp_scaling`` (the fused Adam/AdamW)
        gets ``grad_scale`` and ``found_inf`` instead and unscales in its own kernel."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            if "grad_scaler" in inspect.signature(optimizer.step).parameters:
                raise NotImplementedError(
                    "retorch's GradScaler hands fused optimizers grad_scale and found_inf, not "
                    "itself (torch's deprecated grad_scaler= keyword)"
                )
            if optimizer_state["stage"] is OptState.READY:
                # inf/NaN check only (inv_scale 1): the optimizer's kernel unscales
                self._check_inf_per_device(optimizer)
            found_inf = sum(optimizer_state["found_inf_per_device"].values())
            if not isinstance(found_inf, torch.Tensor):  # no gradients at all
                found_inf = torch.zeros((), dtype=torch.float32)
            optimizer.grad_scale = (
                getattr(optimizer, "grad_scale", None)
                if optimizer_state["stage"] == OptState.UNSCALED
                else self._scale * getattr(optimizer, "grad_scale", 1)
            )
            optimizer.found_inf = found_inf
            retval = optimizer.step(*args, **kwargs)
            optimizer_state["stage"] = OptState.STEPPED
            del optimizer.grad_scale
            del optimizer.found_inf
            return retval
        if optimizer_state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if len(optimizer_state["found_inf_per_device"]) == 0:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        retval = self._maybe_opt_step(optimizer, optimizer_state, *args, **kwargs)
        optimizer_state["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """Back off if any optimizer found an inf/NaN this iteration, else count towards
        growth (``_amp_update_scale_``); or set ``new_scale``. Every optimizer is READY again."""
        if not self._enabled:
            return
        _scale, _growth_tracker = self._check_scale_growth_tracker("update")
        if new_scale is not None:
            if isinstance(new_scale, float):
                self._scale.fill_(new_scale)
            else:
                reason = (
                    "new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
                    "torch.FloatTensor with requires_grad=False."
                )
                if new_scale.device.type != self._device:
                    raise AssertionError(reason)
                if new_scale.numel() != 1:
                    raise AssertionError(reason)
                if new_scale.requires_grad is True:
                    raise AssertionError(reason)
                self._scale.copy_(new_scale)
        else:
            found_infs = [
                found_inf
                for state in self._per_optimizer_states.values()
                for found_inf in state["found_inf_per_device"].values()
            ]
            if len(found_infs) == 0:
                raise AssertionError("No inf checks were recorded prior to update.")
            found_inf_combined = found_infs[0]
            for other in found_infs[1:]:
                found_inf_combined += other  # in place, as torch's (a shared tensor adds up)
            _amp_update_scale_(
                _scale,
                _growth_tracker,
                found_inf_combined,
                self._growth_factor,
                self._backoff_factor,
                self._growth_interval,
            )
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def get_scale(self) -> float:
        """The current scale as a Python float (1.0 when disabled)."""
        if self._enabled:
            return self._init_scale if self._scale is None else float(self._scale.item())
        return 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = new_interval

    def _get_growth_tracker(self) -> int:
        if self._enabled:
            if self._growth_tracker is None:
                return self._init_growth_tracker
            return int(self._growth_tracker.item())
        return 0

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict[str, Any]:
        """torch's five entries (scale, factors, interval, growth tracker); {} when disabled."""
        if self._enabled:
            return {
                "scale": self.get_scale(),
                "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker(),
            }
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state saved by this scaler or by torch's; a no-op when disabled."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved "
                "from a disabled instance of GradScaler."
            )
        self._init_scale = state_dict["scale"]
        if self._scale is not None:
            self._scale.fill_(state_dict["scale"])
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._init_growth_tracker = state_dict["_growth_tracker"]
        if self._growth_tracker is not None:
            self._growth_tracker.fill_(state_dict["_growth_tracker"])

    def _check_inf_per_device(self, optimizer) -> dict:
        self._check_scale_growth_tracker("_check_inf_per_device")
        dummy_inv_scale = torch.full((), 1.0, dtype=torch.float32)
        found_inf = torch.full((), 0.0, dtype=torch.float32)
        self._per_optimizer_states[id(optimizer)]["found_inf_per_device"] = self._unscale_grads_(
            optimizer, dummy_inv_scale, found_inf, True
        )
        return self._per_optimizer_states[id(optimizer)]["found_inf_per_device"]

    def _found_inf_per_device(self, optimizer) -> dict:
        return self._per_optimizer_states[id(optimizer)]["found_inf_per_device"]

"""``clip_grad_norm_``: rescale gradients so that their total norm is at most ``max_norm``.

Mirrors torch/nn/utils/clip_grad.py. The total norm is the norm of the per-tensor norms (one
``torch._foreach_norm`` call for the whole list, as torch does on CPU and GPU); every gradient
is then multiplied by ``min(1, max_norm / (total_norm + 1e-6))``. The coefficient stays a
tensor, so clipping never reads the norm back to Python (no GPU sync).
"""

from __future__ import annotations

import types
import warnings

import torch


@torch.no_grad()
def _get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False) -> torch.Tensor:
    tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    norm_type = float(norm_type)
    if len(tensors) == 0:
        return torch.tensor(0.0)
    norms = torch._foreach_norm(tensors, norm_type)
    total_norm = torch.linalg.vector_norm(torch.stack(norms), norm_type)
    if error_if_nonfinite and torch.logical_or(total_norm.isnan(), total_norm.isinf()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, "
            "so it cannot be clipped. To disable this error and scale the gradients by the "
            "non-finite norm anyway, set `error_if_nonfinite=False`"
        )
    return total_norm


@torch.no_grad()
def _clip_grads_with_norm_(parameters, max_norm, total_norm) -> None:
    grads = [p.grad for p in parameters if p.grad is not None]
    if len(grads) == 0:
        return
    clip_coef = float(max_norm) / (total_norm + 1e-6)
    torch._foreach_mul_(grads, torch.clamp(clip_coef, max=1.0))


@torch.no_grad()
def clip_grad_norm_(
    parameters,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> torch.Tensor:
    """Scale the gradients of ``parameters`` in place; return their total norm (before clipping).

    ``foreach`` is accepted for torch's signature; the batched ``_foreach`` kernels are always
    used, as torch does by default on CPU and CUDA tensors.
    """
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    else:
        is_generator = isinstance(parameters, types.GeneratorType)
        parameters = list(parameters)
        if is_generator and len(parameters) == 0:
            warnings.warn(
                "`parameters` is an empty generator, no gradient clipping will occur.",
                stacklevel=3,
            )
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = _get_total_norm(grads, norm_type, error_if_nonfinite)
    _clip_grads_with_norm_(parameters, max_norm, total_norm)
    return total_norm

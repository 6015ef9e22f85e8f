"""``clip_grad_norm_``. Mirrors torch/nn/utils/clip_grad.py.

The total norm is the norm of the per-parameter norms (computed with ``torch._foreach_norm``,
as torch does); every gradient is then scaled by ``min(1, max_norm / (total + 1e-6))``.
"""

from __future__ import annotations

import torch


def clip_grad_norm_(
    parameters,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> torch.Tensor:
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    max_norm, norm_type = float(max_norm), float(norm_type)
    if len(grads) == 0:
        return torch.tensor(0.0)
    norms = torch._foreach_norm(grads, norm_type)
    total_norm = torch.linalg.vector_norm(torch.stack(norms), norm_type)
    if error_if_nonfinite and torch.logical_or(total_norm.isnan(), total_norm.isinf()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it cannot "
            "be clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
            "`error_if_nonfinite=False`"
        )
    clip_coef = max_norm / (total_norm + 1e-6)
    clip_coef_clamped = torch.clamp(clip_coef, max=1.0)
    torch._foreach_mul_(grads, clip_coef_clamped)
    return total_norm

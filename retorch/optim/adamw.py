"""``AdamW``: Adam with decoupled weight decay. Mirrors torch/optim/adamw.py.

In torch 2.13, as here, AdamW is Adam with ``decoupled_weight_decay=True``: the decay scales the
parameter directly (``p *= 1 - lr * weight_decay``) instead of being added to the gradient,
where Adam's normalisation would shrink it.
"""

from __future__ import annotations

from .adam import Adam


class AdamW(Adam):
    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            foreach=foreach,
            maximize=maximize,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=True,
        )

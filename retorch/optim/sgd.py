"""``SGD`` with momentum, dampening, Nesterov, weight decay and maximize. Mirrors torch/optim/sgd.py.

Two implementations of the same arithmetic, as in torch: ``_single_tensor_sgd`` loops over
parameters; ``_multi_tensor_sgd`` ("foreach") issues one ``torch._foreach_*`` call per step of
the formula for the whole list. They produce the same bits.
"""

from __future__ import annotations

import torch

from .optimizer import Optimizer, _default_to_foreach, _use_grad_for_differentiable


class SGD(Optimizer):
    """Stochastic gradient descent, optionally with (Nesterov) momentum and weight decay."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        if fused:
            raise NotImplementedError(
                "retorch rebuilds fused kernels for Adam and AdamW only; use SGD(..., foreach=True)"
            )
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
            foreach=foreach,
            differentiable=differentiable,
            fused=fused,
        )
        super().__init__(params, defaults)

    @_use_grad_for_differentiable
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            grads = [p.grad for p in params]
            bufs = (
                [self.state[p].get("momentum_buffer") for p in params]
                if group["momentum"] != 0
                else []
            )
            foreach = group["foreach"]
            if foreach is None:
                foreach = _default_to_foreach(params, group["differentiable"])
            impl = _multi_tensor_sgd if foreach else _single_tensor_sgd
            impl(
                params,
                grads,
                bufs,
                weight_decay=group["weight_decay"],
                momentum=group["momentum"],
                lr=group["lr"],
                dampening=group["dampening"],
                nesterov=group["nesterov"],
                maximize=group["maximize"],
            )
            if group["momentum"] != 0:
                for p, buf in zip(params, bufs):
                    self.state[p]["momentum_buffer"] = buf
        return loss


def _single_tensor_sgd(
    params,
    grads,
    momentum_buffer_list,
    *,
    weight_decay,
    momentum,
    lr,
    dampening,
    nesterov,
    maximize,
):
    for i, param in enumerate(params):
        grad = grads[i] if not maximize else -grads[i]
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        if momentum != 0:
            buf = momentum_buffer_list[i]
            if buf is None:
                buf = grad.detach().clone()
                momentum_buffer_list[i] = buf
            else:
                buf.mul_(momentum).add_(grad, alpha=1 - dampening)
            grad = grad.add(buf, alpha=momentum) if nesterov else buf
        param.add_(grad, alpha=-lr)


def _multi_tensor_sgd(
    params,
    grads,
    momentum_buffer_list,
    *,
    weight_decay,
    momentum,
    lr,
    dampening,
    nesterov,
    maximize,
):
    if not params:
        return
    if maximize:
        grads = torch._foreach_neg(grads)
    if weight_decay != 0:
        if maximize:
            torch._foreach_add_(grads, params, alpha=weight_decay)
        else:
            grads = torch._foreach_add(grads, params, alpha=weight_decay)
    if momentum != 0:
        if all(b is not None for b in momentum_buffer_list):
            bufs = list(momentum_buffer_list)
            torch._foreach_mul_(bufs, momentum)
            torch._foreach_add_(bufs, grads, alpha=1 - dampening)
        else:
            bufs = []
            for i, buf in enumerate(momentum_buffer_list):
                if buf is None:
                    buf = momentum_buffer_list[i] = grads[i].detach().clone()
                else:
                    buf.mul_(momentum).add_(grads[i], alpha=1 - dampening)
                bufs.append(buf)
        if nesterov:
            torch._foreach_add_(grads, bufs, alpha=momentum)
        else:
            grads = bufs
    torch._foreach_add_(params, grads, alpha=-lr)

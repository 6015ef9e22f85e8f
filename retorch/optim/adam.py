"""``Adam`` (and, with ``decoupled_weight_decay=True``, AdamW). Mirrors torch/optim/adam.py.

Three implementations of one update, selected as torch selects them:

* ``_single_tensor_adam``: a Python loop over parameters, one tensor op per formula step;
* ``_multi_tensor_adam`` ("foreach"): the same steps, each as one ``torch._foreach_*`` call over
  the whole list; bit-identical to the loop;
* ``_fused_adam`` (``fused=True``): the whole update in one Numba kernel (``_fused.py``); it
  rounds differently, so it agrees with the others to about 1e-7 relative, as torch's does.
"""

from __future__ import annotations

import torch

from . import _fused
from .optimizer import Optimizer


class Adam(Optimizer):
    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool = False,
    ) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if fused and foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
        if capturable or differentiable:
            raise ValueError("retorch's Adam supports neither capturable nor differentiable")
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        super().__init__(params, defaults)

    def _init_group(
        self, group, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps
    ):
        for p in group["params"]:
            if p.grad is None:
                continue
            params.append(p)
            grads.append(p.grad)
            state = self.state[p]
            if len(state) == 0:  # lazy state initialisation, at the first step that sees a gradient
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if group["amsgrad"]:
                    state["max_exp_avg_sq"] = torch.zeros_like(
                        p, memory_format=torch.preserve_format
                    )
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            if group["amsgrad"]:
                max_exp_avg_sqs.append(state["max_exp_avg_sq"])
            state_steps.append(state["step"])

    @torch.no_grad()
    def step(self, closure=None):
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps = (
                [],
                [],
                [],
                [],
                [],
                [],
            )
            self._init_group(
                group, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps
            )
            if group["fused"]:
                impl = _fused_adam
            elif group["foreach"]:
                impl = _multi_tensor_adam
            else:
                impl = _single_tensor_adam
            beta1, beta2 = group["betas"]
            impl(
                params,
                grads,
                exp_avgs,
                exp_avg_sqs,
                max_exp_avg_sqs,
                state_steps,
                amsgrad=group["amsgrad"],
                beta1=beta1,
                beta2=beta2,
                lr=group["lr"],
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=group["maximize"],
                decoupled_weight_decay=group["decoupled_weight_decay"],
            )
        return loss


def _single_tensor_adam(
    params,
    grads,
    exp_avgs,
    exp_avg_sqs,
    max_exp_avg_sqs,
    state_steps,
    *,
    amsgrad,
    beta1,
    beta2,
    lr,
    weight_decay,
    eps,
    maximize,
    decoupled_weight_decay,
):
    for i, param in enumerate(params):
        grad = grads[i] if not maximize else -grads[i]
        exp_avg, exp_avg_sq, step_t = exp_avgs[i], exp_avg_sqs[i], state_steps[i]
        step_t += 1
        if weight_decay != 0:
            if decoupled_weight_decay:
                param.mul_(1 - lr * weight_decay)
            else:
                grad = grad.add(param, alpha=weight_decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = step_t.item()
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2**0.5
        if amsgrad:
            torch.maximum(max_exp_avg_sqs[i], exp_avg_sq, out=max_exp_avg_sqs[i])
            denom = (max_exp_avg_sqs[i].sqrt() / bias_correction2_sqrt).add_(eps)
        else:
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        param.addcdiv_(exp_avg, denom, value=-step_size)


def _multi_tensor_adam(
    params,
    grads,
    exp_avgs,
    exp_avg_sqs,
    max_exp_avg_sqs,
    state_steps,
    *,
    amsgrad,
    beta1,
    beta2,
    lr,
    weight_decay,
    eps,
    maximize,
    decoupled_weight_decay,
):
    if not params:
        return
    if maximize:
        grads = torch._foreach_neg(grads)
    torch._foreach_add_(state_steps, 1)
    if weight_decay != 0:
        if decoupled_weight_decay:
            torch._foreach_mul_(params, 1 - lr * weight_decay)
        elif maximize:
            torch._foreach_add_(grads, params, alpha=weight_decay)
        else:
            grads = torch._foreach_add(grads, params, alpha=weight_decay)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
    bias_correction1 = [1 - beta1 ** step.item() for step in state_steps]
    bias_correction2 = [1 - beta2 ** step.item() for step in state_steps]
    step_size = [(lr / bc) * -1 for bc in bias_correction1]
    bias_correction2_sqrt = [bc**0.5 for bc in bias_correction2]
    if amsgrad:
        torch._foreach_maximum_(max_exp_avg_sqs, exp_avg_sqs)
        exp_avg_sq_sqrt = torch._foreach_sqrt(max_exp_avg_sqs)
    else:
        exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(exp_avg_sq_sqrt, bias_correction2_sqrt)
    torch._foreach_add_(exp_avg_sq_sqrt, eps)
    torch._foreach_addcdiv_(params, exp_avgs, exp_avg_sq_sqrt, step_size)


def _fused_adam(
    params,
    grads,
    exp_avgs,
    exp_avg_sqs,
    max_exp_avg_sqs,
    state_steps,
    *,
    amsgrad,
    beta1,
    beta2,
    lr,
    weight_decay,
    eps,
    maximize,
    decoupled_weight_decay,
):
    if not params:
        return
    if any(p.dtype != torch.float32 or not p.is_contiguous() for p in params):
        raise RuntimeError("retorch's fused Adam supports contiguous float32 parameters only")
    torch._foreach_add_(state_steps, 1)
    options = dict(
        step=state_steps[0].item(),
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        eps=eps,
        weight_decay=weight_decay,
        amsgrad=amsgrad,
        maximize=maximize,
        adamw=decoupled_weight_decay,
    )
    if params[0].is_cuda:
        # The CUDA kernel takes flat buffers: gather, update in one launch, scatter back.
        # (Numba reads CUDA tensors through __cuda_array_interface__, without copies.)
        groups = [params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs if amsgrad else exp_avgs]
        flat = [torch.cat([t.reshape(-1) for t in ts]) for ts in groups]
        _fused.adam_step_cuda(*flat, **options)
        sizes = [t.numel() for t in params]
        for ts, buffer in list(zip(groups, flat))[: 5 if amsgrad else 4]:
            if ts is not grads:
                torch._foreach_copy_(ts, list(buffer.split(sizes)))
        return
    arrays = [
        [t.view(-1).numpy() for t in ts]
        for ts in (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs)
    ]
    _fused.adam_step_cpu(*arrays, **options)

"""``Adam`` (and, with ``decoupled_weight_decay=True``, AdamW). Mirrors torch/optim/adam.py.

Three implementations of one update, selected as torch selects them:

* ``_single_tensor_adam``: a Python loop over parameters, one tensor op per formula step;
* ``_multi_tensor_adam`` ("foreach"): the same steps, each as one ``torch._foreach_*`` call over
  the whole list; bit-identical to the loop;
* ``_fused_adam`` (``fused=True``): the whole update in one Numba kernel (``_fused.py``); it
  rounds differently, so it agrees with the others to about 1e-7 relative, as torch's does.
"""

from __future__ import annotations

import functools

import torch

from .optimizer import (
    Optimizer,
    _default_to_foreach,
    _device_dtype_check_for_fused,
    _get_scalar_dtype,
    _group_tensors_by_device_and_dtype,
    _use_grad_for_differentiable,
)


def _fused_module():
    from . import _fused  # Numba takes about a second to load: only fused steps pay for it

    return _fused


class Adam(Optimizer):
    """Adam: per-parameter steps scaled by running averages of the gradient and its square."""

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
        if capturable or differentiable:
            raise NotImplementedError(
                "retorch's Adam has neither a capturable (CUDA graph) nor a differentiable step; "
                "use torch.optim.Adam for those"
            )
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
        if fused and foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
        if fused:
            # GradScaler.step then hands this optimizer grad_scale and found_inf instead of
            # unscaling the gradients itself (torch/amp/grad_scaler.py).
            self._step_supports_amp_scaling = True
        # The fused step's CUDA path: per (group index, device), the flat buffers that the
        # group's parameters, gradients and state view (_fused.FlatAdamBuffers).
        self._flat: dict = {}

    def _flat_by_device(self, group):
        return {dev: b for (key, dev), b in self._flat.items() if key == id(group["params"])}

    def _flat_buffers(self, group, p):
        """The flat buffers of ``p``'s group on ``p``'s device, made at its first fused step."""
        from . import _fused

        key = (id(group["params"]), p.device)
        buffers = self._flat.get(key)
        if buffers is None:
            on_device = [q for q in group["params"] if q.device == p.device]
            for q in on_device:
                _device_dtype_check_for_fused(q)
            buffers = self._flat[key] = _fused.FlatAdamBuffers(on_device, group["amsgrad"])
        return buffers

    def _init_group(
        self, group, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps
    ):
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError(
                    "Adam does not support sparse gradients, please consider SparseAdam instead"
                )
            params.append(p)
            state = self.state[p]
            if len(state) == 0:  # lazy state initialisation, at the first step that sees a gradient
                if group["fused"]:
                    _device_dtype_check_for_fused(p)
                # The loop reads step with .item(), so it lives on the CPU; fused kernels read
                # it on the parameter's device.
                state["step"] = (
                    torch.zeros((), dtype=_get_scalar_dtype(is_fused=True), device=p.device)
                    if group["fused"]
                    else torch.tensor(0.0, dtype=_get_scalar_dtype())
                    if isinstance(p, torch.Tensor)
                    # a tensor-like (chapter 5's retorch.Tensor) makes its own counter
                    else p.new_zeros((), dtype=_get_scalar_dtype())
                )
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if group["amsgrad"]:
                    state["max_exp_avg_sq"] = torch.zeros_like(
                        p, memory_format=torch.preserve_format
                    )
            if group["fused"] and _fused_module().on_cuda_path(p):
                self._flat_buffers(group, p).adopt(p, state)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            if group["amsgrad"]:
                max_exp_avg_sqs.append(state["max_exp_avg_sq"])
            state_steps.append(state["step"])
            grads.append(p.grad)
        if group["fused"]:
            for buffers in self._flat_by_device(group).values():
                buffers.gather_grads()  # one foreach copy of the gradients that moved

    @_use_grad_for_differentiable
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, exp_avgs, exp_avg_sqs = [], [], [], []
            max_exp_avg_sqs, state_steps = [], []
            self._init_group(
                group, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps
            )
            foreach = group["foreach"]
            if foreach is None and not group["fused"]:
                foreach = _default_to_foreach(params, group["differentiable"])
            if group["fused"]:
                impl = functools.partial(
                    _fused_adam,
                    flat=self._flat_by_device(group),
                    grad_scale=getattr(self, "grad_scale", None),  # set by GradScaler.step
                    found_inf=getattr(self, "found_inf", None),
                )
            elif foreach:
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
    # One tensor 1.0 for the whole list, as torch does: a Python 1 would be wrapped into a new
    # tensor for each CPU step tensor.
    if isinstance(state_steps[0], torch.Tensor):
        torch._foreach_add_(state_steps, torch.tensor(1.0), alpha=1.0)
    else:  # a tensor-like's own counters (chapter 5's retorch.Tensor): no torch tensor
        torch._foreach_add_(state_steps, 1.0)
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
    flat=None,
    grad_scale=None,
    found_inf=None,
):
    if not params:
        return
    _fused = _fused_module()
    # The step counts, on the parameters' devices (a foreach add: one launch on a GPU).
    torch._foreach_add_(state_steps, 1)
    options = dict(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay,
                   amsgrad=amsgrad, maximize=maximize, adamw=decoupled_weight_decay)  # fmt: skip
    # One kernel launch per (device, dtype), as torch's _fused_adam groups its lists.
    grouped = _group_tensors_by_device_and_dtype(
        [params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps]
    )
    for (device, _), ((d_params, d_grads, d_avgs, d_sqs, d_maxs, d_steps), _) in grouped.items():
        # GradScaler's inputs: ATen's kernels skip the update when found_inf is set, and divide
        # each gradient by grad_scale as they read it, writing the unscaled gradient back. Here
        # both happen around the kernel (a host read of found_inf, one foreach division).
        if found_inf is not None and found_inf.item():
            torch._foreach_sub_(d_steps, 1)  # the step did not happen
            continue
        cuda_path = _fused.on_cuda_path(d_params[0])
        if cuda_path:
            buffers = flat[device]
            d_grads = [buffers.view(buffers.grad, p) for p in d_params]
        if grad_scale is not None:
            torch._foreach_div_(d_grads, grad_scale.to(device))
        if cuda_path:
            _fused.adam_step_cuda(buffers, [buffers.index[id(p)] for p in d_params], **options)
        else:
            steps = torch.stack(d_steps).tolist()  # CPU tensors: no device to synchronise
            grads_c = [g.contiguous() for g in d_grads]
            _fused.adam_step_cpu(d_params, grads_c, d_avgs, d_sqs, d_maxs, steps=steps, **options)

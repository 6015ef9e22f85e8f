"""Wrong answers a student could plausibly write for lab 2; each must fail its graded check.

Used by ``tools/check_wrong_answers.py 02_optim_lab``. Each entry replaces the BEGIN/END
SOLUTION region(s) of the exercise's solution cell (exercise 5's cell has two: pack, unpack).
"""

_SGD = """\
grad = grad.add(p, alpha=weight_decay) if weight_decay else grad
if buf is None:
    buf = grad.clone()
else:
    buf.mul_(momentum).add_(grad, alpha=1 - dampening)
direction = grad.add(buf, alpha=momentum) if nesterov else buf
p.add_(direction, alpha=-lr)
return buf
"""

_ADAM = """\
m.mul_(beta1).add_(grad, alpha=1 - beta1)
v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
m_hat = m / (1 - beta1**t)
v_hat = v / (1 - beta2**t)
p.sub_(lr * m_hat / (v_hat.sqrt() + eps))
"""

_PACK = """\
index, groups, start = {}, [], 0
for group in param_groups:
    packed = {k: v for k, v in group.items() if k != "params"}
    packed["params"] = list(range(start, start + len(group["params"])))
    index.update({id(p): i for i, p in zip(packed["params"], group["params"])})
    start += len(group["params"])
    groups.append(packed)
return {"state": {index[id(p)]: s for p, s in state.items()}, "param_groups": groups}
"""

_CHECK_GROUPS = """\
saved_groups = state_dict["param_groups"]
if len(saved_groups) != len(param_groups):
    raise ValueError("loaded state dict has a different number of parameter groups")
if any(len(g["params"]) != len(s["params"]) for g, s in zip(param_groups, saved_groups)):
    raise ValueError("loaded state dict contains a parameter group that doesn't match the "
                     "size of optimizer's group")
"""

_UNPACK = _CHECK_GROUPS + """\
params = [p for group in param_groups for p in group["params"]]
state = {}
for i, saved in state_dict["state"].items():
    p = params[i]
    state[p] = {k: v if k == "step" else v.to(dtype=p.dtype, device=p.device)
                for k, v in saved.items()}
groups = [dict(saved_group, params=group["params"])
          for group, saved_group in zip(param_groups, state_dict["param_groups"])]
return state, groups
"""

WRONG = {
    "ex1_sgd_step": [
        (
            "the first momentum buffer is the gradient itself (an alias, not a copy)",
            _SGD.replace("buf = grad.clone()", "buf = grad"),
        ),
        (
            "weight decay added to the gradient in place (changes the caller's .grad)",
            _SGD.replace(
                "grad = grad.add(p, alpha=weight_decay) if weight_decay else grad",
                "if weight_decay:\n    grad.add_(p, alpha=weight_decay)",
            ),
        ),
        (
            "dampening applied at the first step too",
            _SGD.replace("buf = grad.clone()", "buf = grad.clone().mul_(1 - dampening)"),
        ),
        (
            "Nesterov steps along grad + buf, without the momentum factor",
            _SGD.replace("grad.add(buf, alpha=momentum)", "grad.add(buf)"),
        ),
        (
            "weight decay applied to the parameter after the step, not to the gradient",
            _SGD.replace(
                "grad = grad.add(p, alpha=weight_decay) if weight_decay else grad\n", ""
            ).replace(
                "p.add_(direction, alpha=-lr)",
                "p.add_(direction, alpha=-lr)\np.mul_(1 - lr * weight_decay)",
            ),
        ),
    ],
    "ex2_adam_step": [
        (
            "bias correction off by one step (t counted from 0)",
            _ADAM.replace("beta1**t", "beta1 ** (t + 1)").replace("beta2**t", "beta2 ** (t + 1)"),
        ),
        (
            "no bias correction",
            _ADAM.replace("/ (1 - beta1**t)", "").replace("/ (1 - beta2**t)", ""),
        ),
        (
            "eps inside the square root",
            _ADAM.replace("(v_hat.sqrt() + eps)", "(v_hat + eps).sqrt()"),
        ),
        (
            "moments rebound to new tensors instead of updated in place",
            _ADAM.replace(
                "m.mul_(beta1).add_(grad, alpha=1 - beta1)", "m = beta1 * m + (1 - beta1) * grad"
            ).replace(
                "v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)",
                "v = beta2 * v + (1 - beta2) * grad * grad",
            ),
        ),
        (
            "second moment of the gradient, not of its square",
            _ADAM.replace("addcmul_(grad, grad, value=1 - beta2)", "add_(grad, alpha=1 - beta2)"),
        ),
    ],
    "ex5_state_dict": [
        (
            "positions restart at 0 in every group",
            [
                _PACK.replace(
                    'list(range(start, start + len(group["params"])))',
                    'list(range(len(group["params"])))',
                ),
                None,
            ],
        ),
        (
            "positions given only to parameters that have state",
            [
                "index = {id(p): i for i, p in enumerate(state)}\n"
                "groups = [{**{k: v for k, v in g.items() if k != 'params'},\n"
                "           'params': [index.get(id(p), -1) for p in g['params']]}\n"
                "          for g in param_groups]\n"
                "return {'state': {index[id(p)]: s for p, s in state.items()},"
                " 'param_groups': groups}",
                None,
            ],
        ),
        (
            "the state tensors cloned into the state_dict instead of shared",
            [
                _PACK.replace(
                    "{index[id(p)]: s for p, s in state.items()}",
                    "{index[id(p)]: {k: v.clone() for k, v in s.items()} for p, s in state.items()}",
                ),
                None,
            ],
        ),
        (
            "the optimizer's own group dicts rewritten with positions",
            [
                "index, start = {}, 0\n"
                "for group in param_groups:\n"
                "    index.update({id(p): start + i for i, p in enumerate(group['params'])})\n"
                "    group['params'] = [index[id(p)] for p in group['params']]\n"
                "    start += len(group['params'])\n"
                "return {'state': {index[id(p)]: s for p, s in state.items()},\n"
                "        'param_groups': param_groups}",
                None,
            ],
        ),
        (
            "unpack maps the saved states, in order, onto the parameters (skips none)",
            [
                None,
                _UNPACK.replace(
                    'for i, saved in state_dict["state"].items():',
                    'for i, saved in enumerate(state_dict["state"].values()):',
                ),
            ],
        ),
        (
            "unpack deep-copies the state (torch shares tensors that need no move)",
            [
                None,
                "import copy\n"
                + _UNPACK.replace(
                    'for i, saved in state_dict["state"].items():',
                    'for i, saved in copy.deepcopy(state_dict["state"]).items():',
                ),
            ],
        ),
        (
            "unpack keeps the current groups' options instead of the saved ones",
            [
                None,
                _UNPACK.replace('dict(saved_group, params=group["params"])', "dict(group)"),
            ],
        ),
    ],
    "ex6_cosine_lr": [
        (
            "cosine over T_max + 1 epochs",
            "return eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * epoch / (T_max + 1))) / 2",
        ),
        (
            "eta_min left out of the offset",
            "return base_lr * (1 + math.cos(math.pi * epoch / T_max)) / 2",
        ),
        (
            "a full cosine instead of half (no 1 + ... / 2)",
            "return eta_min + (base_lr - eta_min) * math.cos(math.pi * epoch / T_max)",
        ),
        (
            "the recursive form with a wrong factor (cos of the next epoch only)",
            "return eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * (epoch + 1) / T_max)) / 2",
        ),
    ],
}

# New wrong answers (second review): mistakes a newcomer makes with each concept.
WRONG["ex1_sgd_step"] += [
    (
        "lr folded into the momentum buffer (b = mu b + lr g, p -= b): same steps, wrong buffer",
        _SGD.replace("buf = grad.clone()", "buf = grad.mul(lr)")
        .replace("add_(grad, alpha=1 - dampening)", "add_(grad, alpha=lr * (1 - dampening))")
        .replace("grad.add(buf, alpha=momentum)", "grad.mul(lr).add(buf, alpha=momentum)")
        .replace("p.add_(direction, alpha=-lr)", "p.sub_(direction)"),
    ),
    (
        "Nesterov looks ahead with the previous buffer (before it was updated)",
        _SGD.replace(
            "if buf is None:",
            "prev = torch.zeros_like(grad) if buf is None else buf.clone()\nif buf is None:",
        ).replace("grad.add(buf, alpha=momentum)", "grad.add(prev, alpha=momentum)"),
    ),
    (
        "the buffer kept on the function between calls (a fresh run reuses the old one)",
        _SGD.replace(
            "if buf is None:\n    buf = grad.clone()",
            "buf = getattr(sgd_step, 'buf', None)\nif buf is None:\n    buf = grad.clone()",
        ).replace("return buf", "sgd_step.buf = buf\nreturn buf"),
    ),
    (
        "dampening used as the gradient's weight (alpha=dampening, not 1 - dampening)",
        _SGD.replace("alpha=1 - dampening", "alpha=dampening"),
    ),
]

WRONG["ex2_adam_step"] += [
    (
        "the caller's gradient scaled in place to save a temporary",
        _ADAM.replace(
            "m.mul_(beta1).add_(grad, alpha=1 - beta1)\n"
            "v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)",
            "v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)\n"
            "m.mul_(beta1).add_(grad.mul_(1 - beta1))",
        ),
    ),
    (
        "own step counter kept on the function instead of the t given",
        "adam_step.t = getattr(adam_step, 't', 0) + 1\nt = adam_step.t\n" + _ADAM,
    ),
    (
        "eps added before the second bias correction (eps scaled by 1/sqrt(1 - beta2**t))",
        _ADAM.replace(
            "(v_hat.sqrt() + eps)", "((v.sqrt() + eps) / math.sqrt(1 - beta2**t))"
        ),
    ),
    (
        "operator precedence: eps added to the quotient, not to the denominator",
        _ADAM.replace("lr * m_hat / (v_hat.sqrt() + eps)", "lr * m_hat / v_hat.sqrt() + eps"),
    ),
]

WRONG["ex5_state_dict"] += [
    (
        "unpack converts 'step' to the parameter's dtype too",
        [
            None,
            _UNPACK.replace(
                'v if k == "step" else v.to(dtype=p.dtype, device=p.device)',
                "v.to(dtype=p.dtype, device=p.device)",
            ),
        ],
    ),
    (
        "unpack keeps the saved state as it is (no .to to the parameter's dtype and device)",
        [
            None,
            _UNPACK.replace(
                "state[p] = {k: v if k == \"step\" else v.to(dtype=p.dtype, device=p.device)\n"
                "                for k, v in saved.items()}",
                "state[p] = saved",
            ),
        ],
    ),
    (
        "pack finds a parameter's position with list.index (tensor ==, not identity)",
        [
            "params = [p for g in param_groups for p in g['params']]\n"
            "groups = [{**{k: v for k, v in g.items() if k != 'params'},\n"
            "           'params': [params.index(p) for p in g['params']]} for g in param_groups]\n"
            "return {'state': {params.index(p): s for p, s in state.items()},"
            " 'param_groups': groups}",
            None,
        ],
    ),
    (
        "pack gives each group's positions as a tuple",
        [
            _PACK.replace(
                'list(range(start, start + len(group["params"])))',
                'tuple(range(start, start + len(group["params"])))',
            ),
            None,
        ],
    ),
]

WRONG["ex6_cosine_lr"] += [
    (
        "eta_min and base_lr swapped (the schedule climbs)",
        "return base_lr + (eta_min - base_lr) * (1 + math.cos(math.pi * epoch / T_max)) / 2",
    ),
    (
        "cos in degrees-style units (180 instead of pi)",
        "return eta_min + (base_lr - eta_min) * (1 + math.cos(180 * epoch / T_max)) / 2",
    ),
    (
        "off by one: T_max - 1 in the period",
        "return eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * epoch / (T_max - 1))) / 2",
    ),
    (
        "a linear decay instead of the cosine",
        "return base_lr - (base_lr - eta_min) * epoch / T_max",
    ),
]

# Third review (issue 27): the kinds an outside trial found slipping through checks that compared
# values only on one visible example: wrong dtype or device, the version counter bypassed, a step
# skipped on an all-zero gradient, non-contiguous parameters, constants copied from the check.
WRONG["ex1_sgd_step"] += [
    (
        "momentum hard-coded as 0.9, the value of the visible example",
        _SGD.replace("buf.mul_(momentum)", "buf.mul_(0.9)").replace("alpha=momentum", "alpha=0.9"),
    ),
    (
        "the buffer made with torch.zeros(grad.shape): float32 on the CPU, whatever the parameter",
        _SGD.replace("buf = grad.clone()", "buf = torch.zeros(grad.shape).add_(grad)"),
    ),
    (
        "p changed through p.data, which the version counter does not see",
        _SGD.replace("p.add_(direction, alpha=-lr)", "p.data.add_(direction, alpha=-lr)"),
    ),
    (
        "nothing done at a step whose gradient is all zeros (momentum and decay still move p)",
        "if not grad.any():\n    return buf\n" + _SGD,
    ),
    (
        "lr hard-coded as 0.1, the value of the visible example",
        _SGD.replace("p.add_(direction, alpha=-lr)", "p.add_(direction, alpha=-0.1)"),
    ),
]

WRONG["ex2_adam_step"] += [
    (
        "p changed through p.data, which the version counter does not see",
        _ADAM.replace("p.sub_(", "p.data.sub_("),
    ),
    (
        "nothing done at a step whose gradient is all zeros (the moments still decay, p moves)",
        "if not grad.any():\n    return\n" + _ADAM,
    ),
    (
        "t made a float32 tensor, as torch's state['step']: the bias corrections lose precision",
        "t = torch.tensor(float(t))\n" + _ADAM,
    ),
    (
        "works on flattened views (p.view(-1)), which a transposed parameter does not allow",
        "p, grad, m, v = p.view(-1), grad.view(-1), m.view(-1), v.view(-1)\n" + _ADAM,
    ),
]

WRONG["ex5_state_dict"] += [
    (
        "unpack converts the dtype only: state stays on the CPU for a parameter elsewhere",
        [
            None,
            _UNPACK.replace("v.to(dtype=p.dtype, device=p.device)", "v.to(dtype=p.dtype)"),
        ],
    ),
    (
        "unpack moves 'step' to the parameter's device too (torch keeps it where it was saved)",
        [
            None,
            _UNPACK.replace(
                'v if k == "step" else', 'v.to(device=p.device) if k == "step" else'
            ),
        ],
    ),
    (
        "unpack writes the current parameters into the saved groups (changes the state_dict)",
        [
            None,
            _UNPACK.replace(
                'groups = [dict(saved_group, params=group["params"])\n'
                '          for group, saved_group in zip(param_groups, state_dict["param_groups"])]',
                'groups = state_dict["param_groups"]\n'
                "for group, saved_group in zip(param_groups, groups):\n"
                '    saved_group["params"] = group["params"]',
            ),
        ],
    ),
    (
        "pack gives positions as 0-dim tensors (list(torch.arange(...))), not ints",
        [
            _PACK.replace(
                'list(range(start, start + len(group["params"])))',
                'list(torch.arange(start, start + len(group["params"])))',
            ),
            None,
        ],
    ),
]

WRONG["ex6_cosine_lr"] += [
    (
        "T_max hard-coded as 20, the value of the visible example",
        "return eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * epoch / 20)) / 2",
    ),
    (
        "eta_min hard-coded as 0.01, the value of the visible example",
        "return 0.01 + (base_lr - 0.01) * (1 + math.cos(math.pi * epoch / T_max)) / 2",
    ),
    (
        "returns a 0-dim float64 tensor, not a float",
        "c = torch.cos(torch.tensor(math.pi * epoch / T_max, dtype=torch.float64))\n"
        "return eta_min + (base_lr - eta_min) * (1 + c) / 2",
    ),
]

# Exercise 4 is foreach Adamax (it was foreach Adam, whose foreach code chapter 2 prints).
_ADAMAX = """\
if not params:
    return
torch._foreach_mul_(ms, beta1)
torch._foreach_add_(ms, grads, alpha=1 - beta1)
torch._foreach_mul_(us, beta2)
norms = torch._foreach_abs(grads)
torch._foreach_add_(norms, eps)
torch._foreach_maximum_(us, norms)
step_sizes = [-lr / (1 - beta1**t) for t in steps]
torch._foreach_addcdiv_(params, ms, us, step_sizes)
"""

WRONG["ex4_adamax_foreach"] = [
    (
        "a Python loop over the tensors (right values, one op per tensor per line)",
        "for p, g, m, u, t in zip(params, grads, ms, us, steps):\n"
        "    m.mul_(beta1).add_(g, alpha=1 - beta1)\n"
        "    torch.maximum(u.mul_(beta2), g.abs().add_(eps), out=u)\n"
        "    p.addcdiv_(m, u, value=-lr / (1 - beta1**t))",
    ),
    (
        "one step count for the whole list (steps[0])",
        _ADAMAX.replace("for t in steps]", "for t in [steps[0]] * len(steps)]"),
    ),
    (
        "the state computed out of place (ms and us are never updated)",
        _ADAMAX.replace(
            "torch._foreach_mul_(ms, beta1)", "ms = torch._foreach_mul(ms, beta1)"
        ).replace("torch._foreach_mul_(us, beta2)", "us = torch._foreach_mul(us, beta2)"),
    ),
    (
        "|g| taken in place on the caller's gradients (_foreach_abs_)",
        _ADAMAX.replace(
            "norms = torch._foreach_abs(grads)", "torch._foreach_abs_(grads)\nnorms = grads"
        ),
    ),
    (
        "eps added to the denominator after the maximum, as in Adam",
        _ADAMAX.replace("torch._foreach_add_(norms, eps)\n", "").replace(
            "torch._foreach_addcdiv_(params, ms, us, step_sizes)",
            "torch._foreach_addcdiv_(params, ms, torch._foreach_add(us, eps), step_sizes)",
        ),
    ),
    (
        "beta2 applied after the maximum (u = beta2 * max(u, |g| + eps))",
        _ADAMAX.replace("torch._foreach_mul_(us, beta2)\n", "").replace(
            "torch._foreach_maximum_(us, norms)\n",
            "torch._foreach_maximum_(us, norms)\ntorch._foreach_mul_(us, beta2)\n",
        ),
    ),
    (
        "the gradient's sign kept (max(beta2 * u, g + eps), no absolute value)",
        _ADAMAX.replace("norms = torch._foreach_abs(grads)", "norms = torch._foreach_add(grads, 0)"),
    ),
    (
        "u bias-corrected too, as Adam's v (divided by 1 - beta2**t)",
        _ADAMAX.replace(
            "torch._foreach_addcdiv_(params, ms, us, step_sizes)",
            "denom = torch._foreach_div(us, [1 - beta2**t for t in steps])\n"
            "torch._foreach_addcdiv_(params, ms, denom, step_sizes)",
        ),
    ),
    (
        "betas hard-coded as the defaults (0.9, 0.999), the values of the first case",
        _ADAMAX.replace("beta1", "0.9").replace("beta2", "0.999"),
    ),
    (
        "the parameters updated through .data, which their version counters do not see",
        _ADAMAX.replace(
            "torch._foreach_addcdiv_(params,", "torch._foreach_addcdiv_([p.data for p in params],"
        ),
    ),
    (
        "step sizes passed as a float32 tensor, rounded for float64 parameters",
        _ADAMAX.replace(
            "step_sizes = [-lr / (1 - beta1**t) for t in steps]",
            "step_sizes = torch.tensor([-lr / (1 - beta1**t) for t in steps])",
        ),
    ),
    (
        "works on flattened views (p.view(-1)), which a transposed parameter does not allow",
        "params, grads = [p.view(-1) for p in params], [g.view(-1) for g in grads]\n"
        "ms, us = [m.view(-1) for m in ms], [u.view(-1) for u in us]\n" + _ADAMAX,
    ),
    (
        "no guard for a step where no parameter has a gradient (empty lists)",
        _ADAMAX.replace("if not params:\n    return\n", ""),
    ),
]

# Exercise 5's unpack refuses groups that do not match, with torch's ValueError.
WRONG["ex5_state_dict"] += [
    (
        "unpack checks nothing: zip stops at the shorter list of groups",
        [None, _UNPACK.replace(_CHECK_GROUPS, "")],
    ),
    (
        "unpack compares the number of groups only",
        [None, _UNPACK.replace(_CHECK_GROUPS, _CHECK_GROUPS.split("if any(")[0])],
    ),
    (
        "unpack compares the total number of parameters, not each group's",
        [
            None,
            _UNPACK.replace(
                'if any(len(g["params"]) != len(s["params"]) for g, s in zip(param_groups, '
                "saved_groups)):",
                'if sum(len(g["params"]) for g in param_groups) != '
                'sum(len(s["params"]) for s in saved_groups):',
            ),
        ],
    ),
    (
        "unpack raises RuntimeError, not torch's ValueError",
        [None, _UNPACK.replace("raise ValueError(", "raise RuntimeError(")],
    ),
]

# Exercise 3 is RAdam with AdamW's decoupled decay (it was AdamW, whose one line chapter 2 prints).
_RADAMW = """\
p.mul_(1 - lr * weight_decay)
m.mul_(beta1).add_(grad, alpha=1 - beta1)
v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
m_hat = m / (1 - beta1**t)
rho_inf = 2 / (1 - beta2) - 1
rho = rho_inf - 2 * t * beta2**t / (1 - beta2**t)
if rho > 5:
    r = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
    p.sub_(lr * r * m_hat * math.sqrt(1 - beta2**t) / (v.sqrt() + eps))
else:
    p.sub_(lr * m_hat)
"""
_DECAY = "p.mul_(1 - lr * weight_decay)\n"

WRONG["ex3_radamw_step"] = [
    (
        "weight decay the Adam way: added to the gradient",
        _RADAMW.replace(_DECAY, "grad = grad + weight_decay * p\n"),
    ),
    (
        "decay applied after the update instead of before",
        _RADAMW.replace(_DECAY, "") + _DECAY,
    ),
    ("decay not scaled by the learning rate", _RADAMW.replace("1 - lr * weight_decay", "1 - weight_decay")),
    (
        "decay skipped while RAdam steps like SGD (rho <= 5)",
        _RADAMW.replace(_DECAY, "").replace("if rho > 5:\n", "if rho > 5:\n    " + _DECAY),
    ),
    (
        "decay factor made a float32 tensor (torch.tensor), rounded for float64 parameters",
        _RADAMW.replace("p.mul_(1 - lr * weight_decay)", "p.mul_(torch.tensor(1 - lr * weight_decay))"),
    ),
    (
        "eps added to the bias-corrected sqrt(v), as Adam does",
        _RADAMW.replace(
            "math.sqrt(1 - beta2**t) / (v.sqrt() + eps)", "1 / ((v / (1 - beta2**t)).sqrt() + eps)"
        ),
    ),
    ("rectification from rho >= 4 instead of rho > 5", _RADAMW.replace("if rho > 5:", "if rho > 4:")),
    (
        "no SGD phase: the rectified step from the first step (r of a small rho is nan)",
        _RADAMW.replace("if rho > 5:", "if True:"),
    ),
    (
        "the SGD phase steps along m, without its bias correction",
        _RADAMW.replace("    p.sub_(lr * m_hat)\n", "    p.sub_(lr * m)\n"),
    ),
    (
        "rho_t without the factor t (2 * beta2**t / (1 - beta2**t))",
        _RADAMW.replace("2 * t * beta2**t", "2 * beta2**t"),
    ),
    (
        "r_t without the square root",
        _RADAMW.replace("r = math.sqrt(", "r = (").replace("* rho))", "* rho))"),
    ),
    (
        "betas hard-coded as the defaults (0.9, 0.999), the values of the first case",
        _RADAMW.replace("beta1", "0.9").replace("beta2", "0.999"),
    ),
]

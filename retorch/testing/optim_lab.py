"""Graders for lab 2 (solutions/02_optim_lab.md): the student's update rules against torch.optim.

Each ``check_*`` takes the comparisons object that :func:`retorch.testing.grading.check` passes
and the student's functions, runs them and ``torch.optim`` from the same start on the same
gradients, and compares the results with torch's: values, dtype, device, the version counter.
The inputs are chosen so that the usual mistakes show: one ``.grad`` tensor reused from step to
step, a step whose gradient is all zeros, a float64 parameter stored transposed, settings that
differ from the first case shown, and (exercises 1 and 5) a parameter on the meta device, which
has a dtype, a device and a shape but no values.
"""

from __future__ import annotations

import copy

import torch

from retorch.overview import OpLog

# Tolerances (rtol, atol): float32 as the formulas' rounding allows; float64 tight enough that a
# constant rounded to float32 on the way (a torch.tensor(...) of the default dtype) shows.
F64 = (1e-11, 1e-14)

HINT_GRAD = (
    "never write into grad (no grad.add_ or grad.mul_): it is the caller's .grad; compute out "
    "of place (grad.add(...)) and start a state tensor as a copy (clone), not as grad itself"
)
HINT_VERSION = (
    "update p with its own in-place ops (p.add_, p.mul_, p.addcdiv_): an op on p.data changes "
    "the values behind autograd's back, without bumping the version counter that tells autograd "
    "a tensor saved for backward has changed"
)
HINT_META = (
    "a parameter on the meta device has no values: make new tensors from grad or p "
    "(grad.clone(), torch.zeros_like(p)), never with torch.zeros(shape) (float32, on the CPU), "
    "and never test values in Python (if grad.any(): ...)"
)


def start(dtype=torch.float32, transposed=False, seed=0):
    """A parameter and seven gradients for it; the fourth gradient is all zeros."""
    g = torch.Generator().manual_seed(seed)
    p0 = torch.randn(50, generator=g).to(dtype)
    grads = [(torch.randn(50, generator=g) * 0.1 ** (k % 3)).to(dtype) for k in range(6)]
    grads.insert(3, torch.zeros(50, dtype=dtype))  # momentum and decay still move p
    if transposed:  # a (10, 5) parameter stored as the transpose of a (5, 10) one
        p0, grads = p0.view(5, 10).t(), [x.view(5, 10).t() for x in grads]
    return p0, grads


def describe(t: torch.Tensor) -> str:
    layout = "" if t.is_contiguous() else f" strides {t.stride()}"
    return f"{str(t.dtype).replace('torch.', '')} {tuple(t.shape)}{layout}"


def torch_run(make_opt, p0, grads):
    """Parameters and state after each step of a torch optimizer fed the given gradients."""
    p = p0.clone().requires_grad_()
    opt = make_opt([p])
    out = []
    for g in grads:
        p.grad = g.clone()
        opt.step()
        out.append((p.detach().clone(), copy.deepcopy(opt.state[p])))
    return out


def changed_in_place(cmp, p, version, what):
    cmp.equal(
        p._version > version, True, f"{what} changed in place (its version went up)", HINT_VERSION
    )


SGD_CASES = [
    (
        dict(lr=0.1, momentum=0.9, dampening=0.3, nesterov=False, weight_decay=0.0),
        torch.float32,
        False,
    ),
    (
        dict(lr=0.05, momentum=0.5, dampening=0.0, nesterov=True, weight_decay=0.05),
        torch.float64,
        True,
    ),
]


def check_sgd_step(cmp, sgd_step):
    hint_p = (
        "the first buffer is a copy of the decayed gradient; dampening applies from step 2; "
        "nesterov steps along g + momentum * buf; use the lr and momentum you are given; a "
        "step with an all-zero gradient still moves p (momentum, weight decay)"
    )
    hint_buf = (
        "return b_t of the formula, torch's momentum_buffer, with the gradient's dtype and "
        "device: lr scales the step (p -= lr * direction), it is never in the buffer"
    )
    for kw, dtype, transposed in SGD_CASES:
        p0, grads = start(dtype, transposed)
        want = torch_run(lambda ps: torch.optim.SGD(ps, **kw), p0, grads)
        p, grad, buf = p0.clone().requires_grad_(), torch.empty_like(p0), None
        tol = (1e-6, 1e-7) if dtype == torch.float32 else F64
        case = f"a {describe(p0)} parameter, {kw}"
        for step, g in enumerate(grads, 1):
            grad.copy_(g)  # what backward does to an existing .grad
            version = p._version
            with torch.no_grad():  # as inside optimizer.step()
                buf = cmp.call(
                    lambda: sgd_step(p, grad, buf, **kw),
                    f"sgd_step ({case})",
                    "sgd_step must run on tensors and return the buffer",
                )
            cmp.tensor_like(
                grad, g, f"the gradient after step {step} (it must not change)", HINT_GRAD
            )
            cmp.tensor_like(
                buf,
                want[step - 1][1]["momentum_buffer"],
                f"momentum buffer returned after step {step} ({case})",
                hint_buf,
                *tol,
            )
            cmp.tensor_like(
                p.detach(),
                want[step - 1][0],
                f"parameters after step {step} ({case})",
                hint_p,
                *tol,
            )
            changed_in_place(cmp, p, version, f"p at step {step} ({case})")
    kw = SGD_CASES[1][0]
    p0 = torch.empty(5, 10, dtype=torch.float64, device="meta").t()
    want = torch_run(lambda ps: torch.optim.SGD(ps, **kw), p0, [torch.empty_like(p0)] * 2)
    p, grad, buf = p0.clone().requires_grad_(), torch.empty_like(p0), None
    for step in (1, 2):
        with torch.no_grad():
            buf = cmp.call(
                lambda: sgd_step(p, grad, buf, **kw),
                f"sgd_step on a parameter on the meta device, step {step}",
                HINT_META,
            )
        cmp.tensor_like(
            buf,
            want[step - 1][1]["momentum_buffer"],
            f"momentum buffer after step {step} on the meta device",
            HINT_META,
        )


ADAM_CASES = [
    (dict(lr=0.01, beta1=0.8, beta2=0.99, eps=1e-3), torch.float32, False),  # eps that matters
    (dict(lr=0.05, beta1=0.9, beta2=0.999, eps=1e-8), torch.float64, True),
]


def adam_options(kw):
    out = dict(lr=kw["lr"], betas=(kw["beta1"], kw["beta2"]), eps=kw["eps"])
    return out if "weight_decay" not in kw else dict(out, weight_decay=kw["weight_decay"])


def run_adam_like(cmp, step_fn, name, make_opt, kw, dtype, transposed, hint_p, hint_m):
    """Step ``step_fn(p, grad, m, v, t, **kw)`` against ``make_opt``; yields (step, p, version)
    after each step so the caller can add its own comparisons."""
    p0, grads = start(dtype, transposed)
    want = torch_run(make_opt, p0, grads)
    p, grad = p0.clone().requires_grad_(), torch.empty_like(p0)
    m, v = torch.zeros_like(p0), torch.zeros_like(p0)
    tols = [(1e-6, 1e-7), (1e-6, 1e-9), (1e-5, 1e-6)] if dtype == torch.float32 else [F64] * 3
    case = f"a {describe(p0)} parameter, {kw}"
    for t, g in enumerate(grads, 1):
        grad.copy_(g)  # one .grad tensor, overwritten by each backward
        version = p._version
        with torch.no_grad():
            cmp.call(lambda: step_fn(p, grad, m, v, t, **kw), f"{name} ({case})", "use tensor ops")
        cmp.tensor_like(grad, g, f"the gradient after step {t} (it must not change)", HINT_GRAD)
        state = want[t - 1][1]
        cmp.tensor_like(m, state["exp_avg"], f"m after step {t} ({case})", hint_m, *tols[0])
        cmp.tensor_like(
            v,
            state["exp_avg_sq"],
            f"v after step {t} ({case})",
            "update v in place, with the square of the gradient",
            *tols[1],
        )
        cmp.tensor_like(
            p.detach(), want[t - 1][0], f"parameters after step {t} ({case})", hint_p, *tols[2]
        )
        yield t, p, version, m, v


def check_adam_step(cmp, adam_step):
    hint_p = (
        "bias corrections use the step number t you are given (1 at the first step of each "
        "optimizer, no count of your own) as a Python number; eps is added after the square "
        "root of the bias-corrected v; a step with an all-zero gradient still moves p"
    )
    hint_m = "update m in place (m.mul_(...).add_(...)): the caller keeps it"
    for kw, dtype, transposed in ADAM_CASES:
        make = lambda ps: torch.optim.Adam(ps, **adam_options(kw))  # noqa: E731
        for t, p, version, _, _ in run_adam_like(
            cmp, adam_step, "adam_step", make, kw, dtype, transposed, hint_p, hint_m
        ):
            changed_in_place(cmp, p, version, f"p at step {t}")


RADAMW_CASES = [
    (dict(lr=0.05, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.5), torch.float32, False),
    (dict(lr=0.01, beta1=0.8, beta2=0.99, eps=1e-3, weight_decay=0.1), torch.float64, True),
]


def check_radamw_step(cmp, radamw_step):
    hint_p = (
        "shrink p in place by (1 - lr * weight_decay), a Python float, before the update; while "
        "rho_t <= 5 step along lr * m_hat alone, then lr * r_t * m_hat * sqrt(1 - beta2**t) / "
        "(sqrt(v) + eps): eps is added to sqrt(v) itself, not to the bias-corrected one"
    )
    hint_m = "update m and v as Adam does, in place; the decay never enters them"
    for kw, dtype, transposed in RADAMW_CASES:
        make = lambda ps: torch.optim.RAdam(  # noqa: E731
            ps, decoupled_weight_decay=True, **adam_options(kw)
        )
        for t, p, version, _, _ in run_adam_like(
            cmp, radamw_step, "radamw_step", make, kw, dtype, transposed, hint_p, hint_m
        ):
            changed_in_place(cmp, p, version, f"p at step {t}")


def check_adamax_foreach(cmp, adamax_foreach):
    hint_p = (
        "each tensor has its own t (steps[i]); use the lr, betas and eps you are given, as "
        "Python numbers (a torch.tensor of step sizes is float32); keep ms and us updated "
        "in place (the _foreach_*_ ops); u = max(beta2 * u, |g| + eps), elementwise, and only "
        "m is bias-corrected"
    )
    for case, kw in enumerate(
        [dict(lr=0.01, betas=(0.9, 0.999), eps=1e-3), dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6)]
    ):
        torch.manual_seed(1 + case)
        start_ = [torch.randn(5), torch.randn(8, 5, dtype=torch.float64).t(), torch.randn(7)]
        theirs = [p.clone().requires_grad_() for p in start_]
        opt = torch.optim.Adamax(theirs, foreach=True, **kw)
        ours = [p.clone().requires_grad_() for p in start_]
        ms, us = [torch.zeros_like(p) for p in start_], [torch.zeros_like(p) for p in start_]
        steps = [0, 0, 0]
        for step in range(4):
            live = [i for i in range(3) if not (i == 1 and step in (1, 2))]  # 1 misses two
            grads = [torch.randn_like(p) * 0.1**step for p in start_]  # some |g| below u
            for i, p in enumerate(theirs):
                p.grad = grads[i].clone() if i in live else None
            opt.step()
            for i in live:
                steps[i] += 1
            pick = lambda ts: [ts[i] for i in live]  # noqa: E731
            kept, versions = [g.clone() for g in grads], [p._version for p in ours]
            with torch.no_grad():
                cmp.call(
                    lambda: adamax_foreach(
                        pick(ours),
                        pick(grads),
                        pick(ms),
                        pick(us),
                        pick(steps),
                        kw["lr"],
                        *kw["betas"],
                        kw["eps"],
                    ),
                    f"adamax_foreach ({kw})",
                    "use torch._foreach_* ops on the lists",
                )
            for i in live:
                cmp.equal(
                    grads[i],
                    kept[i],
                    f"gradient {i} after step {step + 1} (it must not change)",
                    "never write into grads (no _foreach_abs_(grads)): take |g| out of place "
                    "(torch._foreach_abs) and write only into params, ms and us",
                )
            for i in range(3):
                tol = (1e-5, 1e-6) if ours[i].dtype == torch.float32 else F64
                state = opt.state[theirs[i]]
                what = f"{describe(start_[i])}) after step {step + 1} ({kw})"
                cmp.tensor_like(us[i], state["exp_inf"], f"u {i} ({what}", hint_p, *tol)
                cmp.tensor_like(
                    ours[i].detach(), theirs[i].detach(), f"parameter {i} ({what}", hint_p, *tol
                )
            for i in live:
                changed_in_place(cmp, ours[i], versions[i], f"parameter {i} at step {step + 1}")
    cmp.call(
        lambda: adamax_foreach([], [], [], [], [], 0.01, 0.9, 0.999, 1e-3),
        "adamax_foreach with empty lists (a step where no parameter has a gradient)",
        "the _foreach_* ops refuse empty lists: return at once when params is empty",
    )

    def count(n):
        ts = [[torch.ones(3) for _ in range(n)] for _ in range(4)]
        with OpLog() as log:
            adamax_foreach(*ts, [1] * n, 0.01, 0.9, 0.999, 1e-8)
        return len([op for op in log.names() if not op.startswith("profiler.")])

    cmp.equal(
        count(6),
        count(3),
        "ATen ops issued for 6 tensors (against 3 tensors)",
        "apply each line to the whole list with one torch._foreach_* call, no Python loop",
    )


def trained_adam(seed, lr):
    """An Adam with two groups after two steps; parameter 1 never got a gradient (no state)."""
    torch.manual_seed(seed)
    ps = [torch.randn(n, requires_grad=True) for n in (3, 4, 5, 6)]
    opt = torch.optim.Adam([{"params": ps[:2]}, {"params": ps[2:], "lr": lr}], lr=0.1)
    for _ in range(2):
        for i, p in enumerate(ps):
            p.grad = None if i == 1 else torch.randn_like(p)
        opt.step()
    return opt


def positions(groups):
    """Each group's "params" as written: ints as they are, anything else by its type's name."""
    return [[i if type(i) is int else f"a {type(i).__name__}" for i in g["params"]] for g in groups]


def check_pack(cmp, pack_state_dict, opt):
    want = opt.state_dict()
    got = cmp.call(
        lambda: pack_state_dict(opt.param_groups, opt.state),
        "pack ran",
        "build new dicts; positions count on across groups",
    )
    cmp.equal(
        positions(got["param_groups"]),
        positions(want["param_groups"]),
        "packed param_groups' positions (Python ints, counting across the groups)",
        "positions count across all groups, as Python ints (what pickle and JSON keep)",
    )
    cmp.equal(
        got["param_groups"],
        want["param_groups"],
        "packed param_groups",
        "options of each group, params as positions counting across all groups",
    )
    cmp.equal(
        sorted(map(repr, got["state"])),
        sorted(map(repr, want["state"])),
        "positions with state (the keys of the packed state)",
        "a parameter's position counts every parameter, with state or not; keys are ints",
    )
    shared = all(got["state"][i][k] is v for i, s in want["state"].items() for k, v in s.items())
    cmp.equal(
        shared,
        True,
        "packed state tensors are the optimizer's own tensors",
        "state_dict shares the state tensors; it does not clone them",
    )
    cmp.equal(
        all(isinstance(p, torch.Tensor) for g in opt.param_groups for p in g["params"]),
        True,
        "the optimizer's groups still hold tensors after packing",
        "pack copies of the group dicts; do not change the optimizer's groups",
    )
    return want


def check_state_dict(cmp, pack_state_dict, unpack_state_dict):
    opt = trained_adam(0, lr=0.01)
    want = check_pack(cmp, pack_state_dict, opt)
    # The new optimizer's parameters: float32, float32 | float64, and float32 on the meta device.
    kinds = [
        (torch.float32, "cpu"),
        (torch.float32, "cpu"),
        (torch.float64, "cpu"),
        (torch.float32, "meta"),
    ]
    flat = [p for g in opt.param_groups for p in g["params"]]
    copies = [
        p.detach().clone().to(dtype=d, device=dev).requires_grad_()
        for p, (d, dev) in zip(flat, kinds)
    ]
    fresh = torch.optim.Adam([{"params": copies[:2]}, {"params": copies[2:]}], lr=0.5)
    saved_groups = positions(want["param_groups"])
    state, groups = cmp.call(
        lambda: unpack_state_dict(want, fresh.param_groups), "unpack ran", "return (state, groups)"
    )
    cmp.equal(
        positions(want["param_groups"]),
        saved_groups,
        "the state_dict's param_groups after unpack (they must not change)",
        "build new group dicts (dict(saved_group, params=...)): the same state_dict may be "
        "loaded again, into another optimizer",
    )
    fresh.load_state_dict(want)
    hint = (
        "map positions in order; move each state tensor but 'step' with "
        ".to(dtype=p.dtype, device=p.device); keep 'step' as it was saved"
    )
    for i, p in enumerate(copies):
        cmp.equal(
            p in state,
            p in fresh.state,
            f"parameter {i} has state",
            "position i is the i-th parameter of all the current groups, in order",
        )
        for k, v in fresh.state.get(p, {}).items():
            what = f"state[{k!r}] of parameter {i} ({p.dtype}, on {p.device})"
            cmp.tensor_like(state[p][k], v, what, hint)
            saved = want["state"][i][k]
            cmp.equal(
                state[p][k] is saved,
                v is saved,
                what + " is the saved tensor",
                "torch does not copy a state tensor that already has the parameter's "
                "device and dtype (.to returns it as it is), and converts the others",
            )
    cmp.equal(
        [g["lr"] for g in groups],
        [g["lr"] for g in fresh.param_groups],
        "groups' lr",
        "options come from the saved groups",
    )
    cmp.equal(
        [[id(p) for p in g["params"]] for g in groups],
        [[id(p) for p in g["params"]] for g in fresh.param_groups],
        "groups' parameters",
        "keep the current optimizer's parameter tensors",
    )
    hint = (
        "before anything else, compare the saved groups with the current ones: their number, "
        "then each group's number of parameters; raise ValueError with torch's message"
    )
    ps = [torch.randn(n, requires_grad=True) for n in (3, 4, 5, 6)]
    for layout in ([ps], [ps[:1], ps[1:]]):
        other = torch.optim.Adam([{"params": g} for g in layout])
        what = f"unpack into groups of {[len(g) for g in layout]} parameters (saved: [2, 2])"
        try:
            other.load_state_dict(want)
        except ValueError as e:
            message = str(e)
        cmp.raises(lambda: unpack_state_dict(want, other.param_groups), ValueError, what, hint)
        try:
            unpack_state_dict(want, other.param_groups)
        except ValueError as e:
            cmp.equal(str(e), message, what + ": torch's message", hint)


def check_cosine_lr(cmp, cosine_lr):
    hint = (
        "half a cosine from base_lr (epoch 0) to eta_min (epoch T_max), with the arguments "
        "you are given; return a Python float (as get_last_lr does), not a tensor"
    )
    for base_lr, eta_min, T_max in [(0.5, 0.01, 20), (0.03, 0.0, 7), (2.0, 0.5, 3)]:
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=base_lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=T_max, eta_min=eta_min)
        want = [sched.get_last_lr()[0]]
        for _ in range(T_max):
            opt.step()
            sched.step()
            want.append(sched.get_last_lr()[0])
        case = f"base_lr={base_lr}, eta_min={eta_min}, T_max={T_max}"
        got = [
            cmp.call(lambda: cosine_lr(base_lr, eta_min, T_max, epoch), f"cosine_lr({case})", hint)
            for epoch in range(T_max + 1)
        ]
        cmp.equal(
            [type(x).__name__ for x in got if not isinstance(x, float)],
            [],
            f"types of the learning rates that are not floats ({case})",
            hint,
        )
        cmp.close(
            torch.tensor(got, dtype=torch.float64),
            torch.tensor(want, dtype=torch.float64),
            f"learning rates for epochs 0..{T_max} ({case})",
            hint,
            rtol=1e-9,
            atol=1e-12,
        )

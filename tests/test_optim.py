"""retorch.optim against torch.optim: same steps, same state_dicts, same errors."""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import retorch.optim as ro
from retorch.nn.utils import clip_grad_norm_
from retorch.optim import _fused


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))


def _train(make_opt, model, steps, frozen=()):
    opt = make_opt(model)
    torch.manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 5)
        opt.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        for i in frozen:  # parameters that got no gradient this step
            list(model.parameters())[i].grad = None
        opt.step()
        losses.append(loss.item())
    return opt, losses


def _assert_same_params(a, b, exact=True, atol=0.0):
    for x, y in zip(a.parameters(), b.parameters()):
        if exact:
            assert torch.equal(x, y)
        else:
            torch.testing.assert_close(x, y, rtol=0, atol=atol)


sgd_options = st.fixed_dictionaries(
    {
        "lr": st.sampled_from([0.01, 0.1]),
        "momentum": st.sampled_from([0.0, 0.5, 0.9]),
        "dampening": st.sampled_from([0.0, 0.3]),
        "weight_decay": st.sampled_from([0.0, 0.05]),
        "nesterov": st.booleans(),
        "maximize": st.booleans(),
        "foreach": st.sampled_from([False, True]),
    }
).filter(lambda o: not o["nesterov"] or (o["momentum"] > 0 and o["dampening"] == 0))

adam_options = st.fixed_dictionaries(
    {
        "lr": st.sampled_from([1e-3, 1e-2]),
        "betas": st.sampled_from([(0.9, 0.999), (0.8, 0.99)]),
        "weight_decay": st.sampled_from([0.0, 0.1]),
        "amsgrad": st.booleans(),
        "maximize": st.booleans(),
        "foreach": st.sampled_from([False, True]),
    }
)


@given(sgd_options)
def test_sgd_matches_torch_bit_for_bit(options):
    ours, theirs = _model(), _model()
    _train(lambda m: ro.SGD(m.parameters(), **options), ours, 12)
    _train(lambda m: torch.optim.SGD(m.parameters(), **options), theirs, 12)
    _assert_same_params(ours, theirs)


@given(adam_options, st.sampled_from(["Adam", "AdamW"]))
def test_adam_and_adamw_match_torch_bit_for_bit(options, name):
    ours, theirs = _model(), _model()
    _train(lambda m: getattr(ro, name)(m.parameters(), **options), ours, 12)
    _train(lambda m: getattr(torch.optim, name)(m.parameters(), **options), theirs, 12)
    _assert_same_params(ours, theirs)


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_fused_numba_step_within_tolerance_of_torch_fused(name, amsgrad):
    ours, fused, loop = _model(), _model(), _model()
    kw = dict(lr=1e-2, weight_decay=0.1, amsgrad=amsgrad)
    _train(lambda m: getattr(ro, name)(m.parameters(), fused=True, **kw), ours, 50)
    _train(lambda m: getattr(torch.optim, name)(m.parameters(), fused=True, **kw), fused, 50)
    _train(lambda m: getattr(torch.optim, name)(m.parameters(), **kw), loop, 50)
    _assert_same_params(ours, fused, exact=False, atol=1e-6)
    _assert_same_params(ours, loop, exact=False, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("adamw", [False, True])
def test_cuda_kernel_under_the_simulator_matches_torch_adam(amsgrad, adamw):
    torch.manual_seed(0)
    p = torch.randn(700)
    grads = [torch.randn(700) for _ in range(3)]
    ref = p.clone().requires_grad_()
    opt = (torch.optim.AdamW if adamw else torch.optim.Adam)(
        [ref], lr=0.01, weight_decay=0.1, amsgrad=amsgrad
    )
    m, v, vmax = np.zeros(700, np.float32), np.zeros(700, np.float32), np.zeros(700, np.float32)
    ours = p.numpy().copy()
    for step, g in enumerate(grads, 1):
        ref.grad = g.clone()
        opt.step()
        _fused.adam_step_cuda(
            ours,
            g.numpy(),
            m,
            v,
            vmax,
            step=step,
            lr=0.01,
            beta1=0.9,
            beta2=0.999,
            eps=1e-8,
            weight_decay=0.1,
            amsgrad=amsgrad,
            maximize=False,
            adamw=adamw,
        )
    torch.testing.assert_close(torch.from_numpy(ours), ref.detach(), rtol=0, atol=1e-6)


def test_param_groups_frozen_params_and_closure():
    def groups(m):
        return [
            {"params": m[0].parameters(), "lr": 0.05},
            {"params": m[2].parameters(), "momentum": 0.9},
        ]

    ours, theirs = _model(), _model()
    _train(lambda m: ro.SGD(groups(m), lr=0.01), ours, 8, frozen=(1,))
    _train(lambda m: torch.optim.SGD(groups(m), lr=0.01), theirs, 8, frozen=(1,))
    _assert_same_params(ours, theirs)
    for lib in (ro, torch.optim):
        m = _model()
        opt = lib.Adam(m.parameters())
        calls = []

        def closure():
            calls.append(torch.is_grad_enabled())
            opt.zero_grad()
            loss = m(torch.ones(1, 5)).sum()
            loss.backward()
            return loss

        with torch.no_grad():
            before = m(torch.ones(1, 5)).sum()
        assert torch.equal(opt.step(closure), before)  # step returns the closure's loss
        assert calls == [True]


@pytest.mark.parametrize(
    "name,kw",
    [
        ("SGD", dict(lr=0.1, momentum=0.9)),
        ("Adam", dict(lr=0.01, amsgrad=True)),
        ("AdamW", dict(lr=0.01)),
    ],
)
def test_state_dict_carries_across_libraries_mid_training(name, kw):
    reference = _model()
    ref_opt, _ = _train(lambda m: getattr(torch.optim, name)(m.parameters(), **kw), reference, 10)
    ours = copy.deepcopy(reference)
    our_opt = getattr(ro, name)(ours.parameters(), **kw)
    our_opt.load_state_dict(copy.deepcopy(ref_opt.state_dict()))
    assert str(our_opt.state_dict()["param_groups"]) == str(ref_opt.state_dict()["param_groups"])
    torch.manual_seed(5)
    for _ in range(5):  # the same continuation on both sides
        x = torch.randn(4, 5)
        for m, o in ((reference, ref_opt), (ours, our_opt)):
            o.zero_grad()
            m(x).pow(2).sum().backward()
            o.step()
    _assert_same_params(ours, reference)
    back = getattr(torch.optim, name)(reference.parameters(), **kw)
    back.load_state_dict(copy.deepcopy(our_opt.state_dict()))
    for k, v in back.state_dict()["state"].items():
        for key, t in v.items():
            assert torch.equal(t, our_opt.state_dict()["state"][k][key])


def test_repr_and_signatures_match_torch():
    for name in ["SGD", "Adam", "AdamW"]:
        ours = [
            (p.name, p.default) for p in inspect.signature(getattr(ro, name)).parameters.values()
        ]
        theirs = [
            (p.name, p.default)
            for p in inspect.signature(getattr(torch.optim, name)).parameters.values()
        ]
        assert ours == theirs, name
    m = _model()
    assert repr(ro.SGD(m.parameters(), lr=0.1, momentum=0.9)) == repr(
        torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    )


@pytest.mark.parametrize(
    "name,kw",
    [
        ("SGD", dict(lr=-1.0)),
        ("SGD", dict(momentum=-0.5)),
        ("SGD", dict(weight_decay=-1)),
        ("SGD", dict(nesterov=True)),
        ("Adam", dict(lr=-0.1)),
        ("Adam", dict(betas=(1.0, 0.999))),
        ("Adam", dict(betas=(0.9, -0.1))),
        ("Adam", dict(eps=-1e-8)),
        ("AdamW", dict(weight_decay=-0.1)),
    ],
)
def test_invalid_arguments_raise_torchs_value_errors(name, kw):
    with pytest.raises(ValueError) as theirs:
        getattr(torch.optim, name)(_model().parameters(), **kw)
    with pytest.raises(ValueError) as ours:
        getattr(ro, name)(_model().parameters(), **kw)
    assert str(ours.value) == str(theirs.value)


def test_misuse_errors():
    m = _model()
    for lib in (ro, torch.optim):
        with pytest.raises(ValueError, match="empty parameter list"):
            lib.SGD([], lr=0.1)
        with pytest.raises(TypeError):
            lib.SGD(next(m.parameters()), lr=0.1)
        with pytest.raises(ValueError, match="more than one parameter group"):
            lib.SGD([{"params": m.parameters()}, {"params": m[0].parameters()}], lr=0.1)
        with pytest.raises(ValueError, match="non-leaf"):
            lib.SGD([torch.ones(1, requires_grad=True) * 2], lr=0.1)


def _schedules(lib, make, steps=40):
    torch.manual_seed(0)
    opt = lib.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.5)
    sched = make(lib.lr_scheduler, opt)
    lrs = []
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    return lrs


SCHEDULERS = {
    "StepLR": lambda s, o: s.StepLR(o, step_size=7, gamma=0.5),
    "MultiStepLR": lambda s, o: s.MultiStepLR(o, milestones=[5, 12, 12, 30], gamma=0.3),
    "LambdaLR": lambda s, o: s.LambdaLR(o, lambda e: 1 / (1 + e)),
    "LinearLR": lambda s, o: s.LinearLR(o, start_factor=0.1, total_iters=9),
    "CosineAnnealingLR": lambda s, o: s.CosineAnnealingLR(o, T_max=13, eta_min=0.01),
    "SequentialLR": lambda s, o: s.SequentialLR(
        o,
        [s.LinearLR(o, start_factor=0.2, total_iters=5), s.CosineAnnealingLR(o, T_max=20)],
        milestones=[5],
    ),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_schedulers_match_torch(name):
    ours = _schedules(ro, SCHEDULERS[name])
    theirs = _schedules(torch.optim, SCHEDULERS[name])
    assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-15)


def test_scheduler_errors_match():
    for lib in (ro, torch.optim):
        opt = lib.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.5)
        with pytest.raises(ValueError, match="Starting multiplicative factor"):
            lib.lr_scheduler.LinearLR(opt, start_factor=0)
        with pytest.raises(ValueError, match="one more than the number of milestone"):
            lib.lr_scheduler.SequentialLR(opt, [lib.lr_scheduler.StepLR(opt, 2)], milestones=[3])


@given(max_norm=st.floats(0.01, 10), norm_type=st.sampled_from([1.0, 2.0, 3.0, float("inf")]))
def test_clip_grad_norm_matches_torch(max_norm, norm_type):
    a, b = _model(), _model()
    for m in (a, b):
        torch.manual_seed(3)
        m(torch.randn(3, 5)).sum().backward()
    na = clip_grad_norm_(a.parameters(), max_norm, norm_type)
    nb = torch.nn.utils.clip_grad_norm_(b.parameters(), max_norm, norm_type)
    assert torch.equal(na, nb)
    for x, y in zip(a.parameters(), b.parameters()):
        assert torch.equal(x.grad, y.grad)

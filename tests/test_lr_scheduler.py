"""retorch.optim.lr_scheduler against torch.optim.lr_scheduler: the same lr at every step."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import retorch.optim as ro


def _lrs(lib, make, steps=50, groups=(0.5, 0.05)):
    """``get_last_lr()`` after building the scheduler and after each of ``steps`` steps."""
    model = torch.nn.Linear(2, 2)
    opt = lib.SGD(
        [{"params": [model.weight], "lr": groups[0]}, {"params": [model.bias]}], lr=groups[1]
    )
    sched = make(lib.lr_scheduler, opt)
    history = [sched.get_last_lr()]
    for _ in range(steps):
        opt.step()
        sched.step()
        history.append(sched.get_last_lr())
        assert history[-1] == [g["lr"] for g in opt.param_groups]
    return history


def _assert_same_lrs(ours, theirs):
    # Same formulas in the same order: equal floats; 1e-12 leaves room only for libm noise.
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a == pytest.approx(b, rel=1e-12, abs=0)


SCHEDULERS = {
    "StepLR": lambda s, o: s.StepLR(o, step_size=7, gamma=0.5),
    "MultiStepLR": lambda s, o: s.MultiStepLR(o, milestones=[5, 12, 12, 30], gamma=0.3),
    "LambdaLR": lambda s, o: s.LambdaLR(o, lambda e: 1 / (1 + e)),
    "LambdaLR per group": lambda s, o: s.LambdaLR(o, [lambda e: 0.9**e, lambda e: 1 + e]),
    "LinearLR": lambda s, o: s.LinearLR(o, start_factor=0.1, total_iters=9),
    "LinearLR decay": lambda s, o: s.LinearLR(o, start_factor=1.0, end_factor=0.0, total_iters=30),
    "CosineAnnealingLR": lambda s, o: s.CosineAnnealingLR(o, T_max=13, eta_min=0.01),
    "SequentialLR warmup+cosine": lambda s, o: s.SequentialLR(
        o,
        [s.LinearLR(o, start_factor=0.2, total_iters=5), s.CosineAnnealingLR(o, T_max=20)],
        milestones=[5],
    ),
    "SequentialLR three": lambda s, o: s.SequentialLR(
        o,
        [
            s.StepLR(o, step_size=2, gamma=0.5),
            s.MultiStepLR(o, milestones=[3, 6]),
            s.LambdaLR(o, lambda e: 0.5),
        ],
        milestones=[7, 20],
    ),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_schedulers_match_torch(name):
    _assert_same_lrs(_lrs(ro, SCHEDULERS[name]), _lrs(torch.optim, SCHEDULERS[name]))


@given(
    T_max=st.integers(1, 20),
    eta_min=st.sampled_from([0.0, 1e-3, 0.1]),
    lr=st.floats(1e-4, 1.0),
)
def test_cosine_annealing_matches_torch_past_several_periods(T_max, eta_min, lr):
    make = lambda s, o: s.CosineAnnealingLR(o, T_max=T_max, eta_min=eta_min)
    ours = _lrs(ro, make, steps=3 * T_max + 2, groups=(lr, lr / 10))
    theirs = _lrs(torch.optim, make, steps=3 * T_max + 2, groups=(lr, lr / 10))
    _assert_same_lrs(ours, theirs)
    # The recursive form follows the closed form: a cosine between lr and eta_min.
    for epoch in range(0, T_max + 1):
        closed = eta_min + (lr - eta_min) * (1 + math.cos(math.pi * epoch / T_max)) / 2
        assert ours[epoch][0] == pytest.approx(closed, rel=1e-9, abs=1e-12)


def test_linear_warmup_changes_the_lr_before_the_first_step():
    for lib in (ro, torch.optim):
        opt = lib.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0)
        lib.lr_scheduler.LinearLR(opt, start_factor=0.25)
        assert opt.param_groups[0]["lr"] == 0.25
        assert opt.param_groups[0]["initial_lr"] == 1.0


def test_state_dict_resumes_the_schedule():
    def run(lib, split):
        opt = lib.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0)
        make = SCHEDULERS["SequentialLR warmup+cosine"]
        sched = make(lib.lr_scheduler, opt)
        for _ in range(split):
            opt.step()
            sched.step()
        saved_opt, saved = copy.deepcopy(opt.state_dict()), copy.deepcopy(sched.state_dict())
        opt = lib.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0)
        sched = make(lib.lr_scheduler, opt)
        sched.load_state_dict(saved)
        opt.load_state_dict(saved_opt)  # after the scheduler, as torch's docs ask
        lrs = []
        for _ in range(15):
            opt.step()
            sched.step()
            lrs.append(sched.get_last_lr())
        return lrs, saved

    (ours, our_saved), (theirs, their_saved) = run(ro, 8), run(torch.optim, 8)
    _assert_same_lrs(ours, theirs)
    assert sorted(our_saved) == sorted(their_saved)


def test_lambda_lr_state_dict_keeps_callable_objects_only():
    class Decay:
        def __init__(self, rate):
            self.rate = rate

        def __call__(self, epoch):
            return self.rate**epoch

    for lib in (ro, torch.optim):
        opt = lib.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0)
        sched = lib.lr_scheduler.LambdaLR(opt, Decay(0.5))
        assert sched.state_dict()["lr_lambdas"] == [{"rate": 0.5}]
        sched.load_state_dict(dict(sched.state_dict(), lr_lambdas=[{"rate": 0.1}]))
        assert sched.lr_lambdas[0].rate == 0.1
        function_based = lib.lr_scheduler.LambdaLR(opt, lambda e: 1.0)
        assert function_based.state_dict()["lr_lambdas"] == [None]


def _error(fn):
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value)


@pytest.mark.parametrize(
    "make",
    [
        lambda s, o: s.LinearLR(o, start_factor=0),
        lambda s, o: s.LinearLR(o, start_factor=1.5),
        lambda s, o: s.LinearLR(o, end_factor=-0.1),
        lambda s, o: s.LambdaLR(o, [lambda e: 1.0]),
        lambda s, o: s.SequentialLR(o, [], milestones=[]),
        lambda s, o: s.SequentialLR(o, [s.StepLR(o, 2)], milestones=[3]),
        lambda s, o: s.SequentialLR(o, [s.StepLR(o, 2), object()], milestones=[3]),
        lambda s, o: s.StepLR(o, 2, last_epoch=4),
        lambda s, o: s.StepLR(object(), 2),
    ],
)
def test_bad_arguments_raise_torchs_errors(make):
    def attempt(lib):
        model = torch.nn.Linear(2, 2)
        opt = lib.SGD([{"params": [model.weight]}, {"params": [model.bias]}], lr=0.5)
        return _error(lambda: make(lib.lr_scheduler, opt))

    assert attempt(ro) == attempt(torch.optim)


def test_sequential_lr_rejects_schedulers_of_another_optimizer():
    for lib in (ro, torch.optim):
        a = lib.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.5)
        b = lib.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.5)
        with pytest.raises(
            ValueError, match="expects all schedulers to belong to the same optimizer"
        ):
            lib.lr_scheduler.SequentialLR(
                a, [lib.lr_scheduler.StepLR(a, 2), lib.lr_scheduler.StepLR(b, 2)], milestones=[3]
            )


def test_step_with_an_epoch_warns_and_uses_the_closed_form():
    for lib in (ro, torch.optim):
        opt = lib.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0)
        sched = lib.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        opt.step()
        with pytest.warns(UserWarning, match="epoch parameter in `scheduler.step\\(\\)`"):
            sched.step(7)
        assert sched.get_last_lr() == [0.25]

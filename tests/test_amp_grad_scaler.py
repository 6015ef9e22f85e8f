"""retorch.amp.GradScaler against torch.amp.GradScaler("cpu"), step by step.

Each case runs the same training loop with both scalers: a loss whose gradients are chosen
(finite, or with an inf or a NaN), scaled, backward, an optional explicit ``unscale_``, step,
update. After every step the scale, the growth tracker, the unscaled gradients, the
parameters, the optimizer's state and the scaler's state_dict must equal torch's: exactly for
SGD (the same float32 operations), within 1e-6 for the fused Adam (its kernel rounds
differently from torch's, as chapter 2 shows). Misuse raises torch's exception and message.
"""

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch.optim
from retorch.amp import GradScaler
from retorch.amp.grad_scaler import _amp_update_scale_

# One step of a sequence: what the gradient holds, and whether unscale_ is called by hand.
STEP = st.tuples(
    st.sampled_from(["finite", "finite", "finite", "inf", "-inf", "nan"]), st.booleans()
)


def _grads(kind, rng):
    w = [rng.standard_normal(5).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)]
    if kind != "finite":
        w[int(rng.integers(2))].reshape(-1)[int(rng.integers(5))] = float(kind)
    return [torch.from_numpy(a) for a in w]


def _run(scaler, opt, params, kind, unscale, rng):
    """One iteration; returns what a check compares."""
    opt.zero_grad()
    loss = sum((p * w).sum() for p, w in zip(params, _grads(kind, rng)))
    scaler.scale(loss).backward()
    if unscale:
        scaler.unscale_(opt)
    scaler.step(opt)
    grads = [p.grad.clone() for p in params]
    scaler.update()
    return grads


def _compare(ours, theirs, tol):
    (s, o, ps, gs), (ts, to, tps, tgs) = ours, theirs
    assert s.get_scale() == ts.get_scale()
    assert s._get_growth_tracker() == ts._get_growth_tracker()
    assert s.state_dict() == ts.state_dict()
    for a, b in zip(gs, tgs):
        torch.testing.assert_close(a, b, rtol=tol, atol=0, equal_nan=True)
    for a, b in zip(ps, tps):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    for a, b in zip(o.state.values(), to.state.values()):
        for k in b:
            torch.testing.assert_close(a[k], b[k], rtol=tol, atol=tol, check_dtype=False)


def _pair(make_ours, make_torch, **scaler_kwargs):
    torch.manual_seed(0)
    params = [torch.randn(5, requires_grad=True), torch.randn(2, 3, requires_grad=True)]
    tparams = copy.deepcopy(params)
    return (
        GradScaler("cpu", **scaler_kwargs), make_ours(params), params,
        torch.amp.GradScaler("cpu", **scaler_kwargs), make_torch(tparams), tparams,
    )  # fmt: skip


OPTIMIZERS = {
    "sgd": (
        lambda p: retorch.optim.SGD(p, lr=0.1, momentum=0.9),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        0.0,
    ),
    "adam-fused": (
        lambda p: retorch.optim.Adam(p, lr=0.01, fused=True),
        lambda p: torch.optim.Adam(p, lr=0.01, fused=True),
        1e-6,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OPTIMIZERS))
@settings(max_examples=25, deadline=None)
@given(
    steps=st.lists(STEP, min_size=1, max_size=12),
    init_scale=st.sampled_from([2.0**16, 1.0, 3.0e38, 2.0**-3]),
    growth_interval=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_equal_to_torch_step_by_step(name, steps, init_scale, growth_interval, seed):
    make_ours, make_torch, tol = OPTIMIZERS[name]
    kw = dict(init_scale=init_scale, growth_interval=growth_interval, backoff_factor=0.25)
    s, o, ps, ts, to, tps = _pair(make_ours, make_torch, **kw)
    rng_ours, rng_torch = np.random.default_rng(seed), np.random.default_rng(seed)
    for kind, unscale in steps:
        gs = _run(s, o, ps, kind, unscale, rng_ours)
        tgs = _run(ts, to, tps, kind, unscale, rng_torch)
        _compare((s, o, ps, gs), (ts, to, tps, tgs), tol)


@pytest.mark.slow  # seconds long: make unit runs it, make check-fast does not
def test_skipped_step_leaves_parameters_and_fused_step_count():
    s, o, ps, ts, to, tps = _pair(*OPTIMIZERS["adam-fused"][:2])
    before = [p.detach().clone() for p in ps]
    rng = np.random.default_rng(1)
    _run(s, o, ps, "nan", False, rng)
    assert all(torch.equal(a, b) for a, b in zip(before, ps))
    assert s.get_scale() == 2.0**15
    # the fused step ran with found_inf set: its step count went up and back down, as torch's
    _run(ts, to, tps, "nan", False, np.random.default_rng(1))
    assert [o.state[p]["step"].item() for p in ps] == [to.state[p]["step"].item() for p in tps]


@settings(max_examples=200, deadline=None)
@given(
    scale=st.floats(2.0**-20, 2.0**127, width=32),
    tracker=st.integers(0, 5),
    found=st.sampled_from([0.0, 1.0, 2.0]),
    interval=st.integers(1, 6),
    growth=st.sampled_from([2.0, 1.5, 3.0e5]),
    backoff=st.sampled_from([0.5, 0.3, 1e-3]),
)
def test_update_scale_kernel_equals_torch(scale, tracker, found, interval, growth, backoff):
    tracker = min(tracker, interval - 1)
    ours = [torch.tensor(scale), torch.tensor(tracker, dtype=torch.int32), torch.tensor(found)]
    theirs = [t.clone() for t in ours]
    _amp_update_scale_(*ours, growth, backoff, interval)
    torch._amp_update_scale_(*theirs, growth, backoff, interval)
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


def _both(fn):
    """``fn(GradScaler)`` for each library: the exception type and message raised."""
    out = []
    for cls in (GradScaler, torch.amp.GradScaler):
        with pytest.raises(Exception) as info:
            fn(cls)
        out.append((type(info.value), str(info.value)))
    return out


def _scaled(cls, opt_fn=lambda p: torch.optim.SGD(p, lr=0.1)):
    p = torch.ones(3, requires_grad=True)
    opt = opt_fn([p])
    s = cls("cpu")
    s.scale((p * 2).sum()).backward()
    return s, opt


def _unscale_twice(cls):
    s, opt = _scaled(cls)
    s.unscale_(opt)
    s.unscale_(opt)


def _unscale_after_step(cls):
    s, opt = _scaled(cls)
    s.step(opt)
    s.unscale_(opt)


def _step_twice(cls):
    s, opt = _scaled(cls)
    s.step(opt)
    s.step(opt)


def _closure(cls):
    s, opt = _scaled(cls)
    s.step(opt, closure=lambda: 0.0)


def _update_before_scale(cls):
    cls("cpu").update()


def _unscale_before_scale(cls):
    cls("cpu").unscale_(torch.optim.SGD([torch.ones(1, requires_grad=True)], lr=0.1))


def _fp16_grads(cls):
    p = torch.ones(3, dtype=torch.float16, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1)
    s = cls("cpu")
    s.scale((p * 2).sum()).backward()
    s.unscale_(opt)


def _empty_state(cls):
    cls("cpu").load_state_dict({})


def _bad_growth(cls):
    cls("cpu", growth_factor=1.0)


def _bad_backoff(cls):
    cls("cpu", backoff_factor=1.0)


def _update_without_step(cls):
    s, _ = _scaled(cls)
    s.update()


MISUSES = [_unscale_twice, _unscale_after_step, _step_twice, _closure, _update_before_scale,
           _unscale_before_scale, _fp16_grads, _empty_state, _bad_growth, _bad_backoff,
           _update_without_step]  # fmt: skip


@pytest.mark.parametrize("misuse", MISUSES, ids=lambda f: f.__name__)
def test_misuse_raises_as_torch(misuse):
    ours, theirs = _both(misuse)
    assert ours == theirs


def test_disabled_is_a_pass_through():
    s, ts = GradScaler("cpu", enabled=False), torch.amp.GradScaler("cpu", enabled=False)
    loss = torch.tensor(3.0)
    assert s.scale(loss) is loss
    assert (s.get_scale(), s.state_dict(), s.is_enabled()) == (
        ts.get_scale(), ts.state_dict(), ts.is_enabled(),
    )  # fmt: skip
    s.load_state_dict({})  # a no-op, as torch's
    p = torch.ones(2, requires_grad=True)
    opt = retorch.optim.SGD([p], lr=1.0)
    p.grad = torch.full((2,), float("inf"))
    s.step(opt)  # no inf check when disabled: the step happens
    assert torch.isinf(p).all()


def test_state_dict_loads_into_torch_and_back():
    s, o, ps, ts, to, tps = _pair(*OPTIMIZERS["sgd"][:2], growth_interval=3)
    rng = np.random.default_rng(2)
    for kind in ["finite", "finite", "inf", "finite"]:
        _run(s, o, ps, kind, False, rng)
    t2 = torch.amp.GradScaler("cpu")
    t2.load_state_dict(s.state_dict())
    s2 = GradScaler("cpu")
    s2.load_state_dict(t2.state_dict())
    assert s2.state_dict() == t2.state_dict() == s.state_dict()
    assert s.state_dict()["_growth_tracker"] == 1 and s.get_scale() == 2.0**15


def test_scale_nested_outputs():
    s, ts = GradScaler("cpu", init_scale=4.0), torch.amp.GradScaler("cpu", init_scale=4.0)
    outs = [torch.ones(2), (torch.full((1,), 3.0), torch.zeros(3))]
    ours, theirs = s.scale(outs), ts.scale(outs)
    assert type(ours[1]) is tuple
    assert all(torch.equal(a, b) for a, b in zip([ours[0], *ours[1]], [theirs[0], *theirs[1]]))
    assert _both(lambda cls: cls("cpu").scale([torch.ones(1), 3.0]))[0][0] is ValueError


def test_retorch_tensor_training_equals_torch():
    """Chapter 5's retorch.Tensor parameters and retorch's SGD: torch runs no arithmetic in the
    loop, only the creation and reading of the scaler's own 0-d tensors (scale, found_inf)."""
    from retorch.autograd import count_aten_calls
    from retorch.dispatch import Tensor

    rng = np.random.default_rng(0)
    a = rng.standard_normal(4).astype(np.float32)
    p, tp = Tensor.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(a.copy())
    tp.requires_grad_()
    s, ts = GradScaler("cpu", growth_interval=2), torch.amp.GradScaler("cpu", growth_interval=2)
    o = retorch.optim.SGD([p], lr=0.1, momentum=0.9)
    to = torch.optim.SGD([tp], lr=0.1, momentum=0.9)
    for kind in ["finite", "inf", "finite", "finite", "nan", "finite", "finite"]:
        w = rng.standard_normal(4).astype(np.float32)
        if kind != "finite":
            w[1] = float(kind)
        with count_aten_calls() as calls:
            o.zero_grad()
            s.scale((p * Tensor.from_numpy(w)).sum()).backward()
            s.step(o)
            s.update()
        to.zero_grad()
        ts.scale((tp * torch.from_numpy(w)).sum()).backward()
        ts.step(to)
        ts.update()
        bookkeeping = {"full", "lift_fresh", "_local_scalar_dense", "detach"}
        assert {name.split(".")[1] for name in calls.calls} <= bookkeeping, calls.calls
        assert (s.get_scale(), s._get_growth_tracker()) == (
            ts.get_scale(),
            ts._get_growth_tracker(),
        )
        assert np.array_equal(p.numpy(), tp.detach().numpy())
        assert np.array_equal(p.grad.numpy(), tp.grad.numpy(), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_unscale_kernel_equals_torch_per_dtype(dtype):
    """_amp_foreach_non_finite_check_and_unscale_ against torch's, 16-bit gradients included
    (computed in float32, rounded once), with an inv_scale that is not a power of two."""
    from retorch.amp.grad_scaler import _amp_foreach_non_finite_check_and_unscale_

    gen = torch.Generator().manual_seed(3)
    for special in [None, float("inf"), float("nan")]:
        grads = [torch.randn(37, generator=gen).mul(1000).to(dtype) for _ in range(3)]
        if special is not None:
            grads[1][5] = special
        theirs = [g.clone() for g in grads]
        for inv in [1.0, 1 / 3, 2.0**-16]:
            found, tfound = torch.zeros(()), torch.zeros(())
            inv_scale = torch.tensor(inv, dtype=torch.float32)
            _amp_foreach_non_finite_check_and_unscale_(grads, found, inv_scale)
            torch._amp_foreach_non_finite_check_and_unscale_(theirs, tfound, inv_scale)
            assert found.item() == tfound.item() == (special is not None)
            for a, b in zip(grads, theirs):
                assert torch.equal(a.float().nan_to_num(7.0), b.float().nan_to_num(7.0))


def test_gradients_off_the_cpu_are_refused_with_a_sentence():
    p = torch.ones(2, device="meta", requires_grad=True)
    p.grad = torch.ones(2, device="meta")
    s = GradScaler("cpu")
    s.scale(torch.ones(()))
    with pytest.raises(RuntimeError, match="run on the CPU, not on meta"):
        s.unscale_(retorch.optim.SGD([p], lr=0.1))

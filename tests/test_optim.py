"""retorch.optim against torch.optim: same steps, same state_dicts, same errors.

The loop and foreach optimizers must match torch's bit for bit (``torch.equal``): they issue
the same float32 operations in the same order. The fused Numba kernels round differently
(as torch's own fused kernels do) and are compared within a tolerance.
"""

from __future__ import annotations

import contextlib
import copy
import inspect

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch.optim as ro
from retorch.nn.utils import clip_grad_norm_
from retorch.optim import _fused

# Measured for fused Numba Adam/AdamW, all flag combinations: after 20 steps on ~200K
# parameters of size up to ~4, at most 1.1e-6 from torch's fused and from its loop (torch's
# fused is itself up to 4.8e-7 from its loop); after 100 steps of the test MLP, below 1e-7.
FUSED_TOL = dict(rtol=2e-6, atol=2e-6)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))


def _train(make_opt, model, steps, frozen=(), set_to_none=True):
    """``steps`` optimizer steps on fixed random batches; ``frozen[i]`` gets no grad at odd steps."""
    opt = make_opt(model)
    params = list(model.parameters())
    torch.manual_seed(1)
    for step in range(steps):
        x = torch.randn(4, 5)
        opt.zero_grad(set_to_none=set_to_none)
        model(x).pow(2).sum().backward()
        if step % 2:
            for i in frozen:
                params[i].grad = None
        opt.step()
    return opt


def _assert_same_params(a, b):
    for x, y in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(x, y)


def _assert_close_params(a, b, **tol):
    for x, y in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(x, y, **tol)


def _both(name, options, steps, **train_kw):
    """Train two copies of the model with retorch's and torch's optimizer ``name``."""
    ours, theirs = _model(), _model()
    our_opt = _train(
        lambda m: getattr(ro, name)(m.parameters(), **options), ours, steps, **train_kw
    )
    their_opt = _train(
        lambda m: getattr(torch.optim, name)(m.parameters(), **options), theirs, steps, **train_kw
    )
    return ours, theirs, our_opt, their_opt


sgd_options = st.fixed_dictionaries(
    {
        "lr": st.sampled_from([0.01, 0.1]),
        "momentum": st.sampled_from([0.0, 0.5, 0.9]),
        "dampening": st.sampled_from([0.0, 0.3]),
        "weight_decay": st.sampled_from([0.0, 0.05]),
        "nesterov": st.booleans(),
        "maximize": st.booleans(),
        "foreach": st.sampled_from([None, False, True]),
    }
).filter(lambda o: not o["nesterov"] or (o["momentum"] > 0 and o["dampening"] == 0))

adam_options = st.fixed_dictionaries(
    {
        "lr": st.sampled_from([1e-3, 1e-2]),
        "betas": st.sampled_from([(0.9, 0.999), (0.8, 0.99), (0.5, 0.9)]),
        "eps": st.sampled_from([1e-8, 1e-3]),
        "weight_decay": st.sampled_from([0.0, 0.1]),
        "amsgrad": st.booleans(),
        "maximize": st.booleans(),
        "foreach": st.sampled_from([None, False, True]),
    }
)


@pytest.mark.slow  # seconds long: make unit runs it, make check-fast does not
@settings(max_examples=20)
@given(sgd_options, st.booleans())
def test_sgd_matches_torch_bit_for_bit(options, set_to_none):
    ours, theirs, _, _ = _both("SGD", options, 8, frozen=(1,), set_to_none=set_to_none)
    _assert_same_params(ours, theirs)


@settings(max_examples=20)
@given(adam_options, st.sampled_from(["Adam", "AdamW"]), st.booleans())
def test_adam_and_adamw_match_torch_bit_for_bit(options, name, decoupled):
    if name == "Adam":
        options = dict(options, decoupled_weight_decay=decoupled)
    ours, theirs, _, _ = _both(name, options, 8, frozen=(1,))
    _assert_same_params(ours, theirs)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,options",
    [
        ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
        ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.5, weight_decay=0.1)),
        ("Adam", dict(lr=1e-2, amsgrad=True, weight_decay=0.1)),
        ("AdamW", dict(lr=1e-2, betas=(0.8, 0.99), maximize=True)),
    ],
)
@pytest.mark.parametrize("foreach", [False, True])
def test_hundred_steps_bit_for_bit(name, options, foreach):
    ours, theirs, _, _ = _both(name, dict(options, foreach=foreach), 100)
    _assert_same_params(ours, theirs)


@pytest.mark.parametrize("lib", [ro, torch.optim], ids=["retorch", "torch"])
def test_loop_and_foreach_take_the_same_steps(lib):
    loop, foreach = _model(), _model()
    _train(lambda m: lib.Adam(m.parameters(), lr=0.01, amsgrad=True, foreach=False), loop, 10)
    _train(lambda m: lib.Adam(m.parameters(), lr=0.01, amsgrad=True, foreach=True), foreach, 10)
    _assert_same_params(loop, foreach)


@pytest.mark.parametrize("name", ["SGD", "Adam"])
@pytest.mark.parametrize("foreach", [False, True])
def test_param_groups_with_their_own_options(name, foreach):
    def groups(lib):
        def make(m):
            return getattr(lib, name)(
                [
                    {"params": m[0].parameters(), "lr": 0.05, "weight_decay": 0.1},
                    {"params": m[2].parameters(), "maximize": True},
                ],
                lr=0.01,
                foreach=foreach,
                **({"momentum": 0.9} if name == "SGD" else {}),
            )

        return make

    ours, theirs = _model(), _model()
    our_opt = _train(groups(ro), ours, 10, frozen=(0, 3))
    their_opt = _train(groups(torch.optim), theirs, 10, frozen=(0, 3))
    _assert_same_params(ours, theirs)
    assert [g["lr"] for g in our_opt.param_groups] == [0.05, 0.01]
    assert repr(our_opt) == repr(their_opt)


def test_parameters_that_never_get_a_gradient_are_left_alone():
    m = _model()
    frozen = m[2].bias
    frozen.requires_grad_(False)
    before = frozen.clone()
    opt = _train(lambda m: ro.Adam(m.parameters(), lr=0.1, weight_decay=0.1), m, 3)
    assert torch.equal(frozen, before)
    assert frozen not in opt.state  # no state is created for it


def test_step_evaluates_the_closure_with_grad_enabled_and_returns_its_loss():
    for lib in (ro, torch.optim):
        m = _model()
        opt = lib.SGD(m.parameters(), lr=0.1)
        seen = []

        def closure():
            seen.append(torch.is_grad_enabled())
            opt.zero_grad()
            loss = m(torch.ones(1, 5)).sum()
            loss.backward()
            return loss

        with torch.no_grad():
            expected = m(torch.ones(1, 5)).sum()
            assert torch.equal(opt.step(closure), expected)
        assert seen == [True]
        assert opt.step() is None


def test_named_parameters_keep_their_names_in_the_state_dict():
    ours, theirs = _model(), _model()
    our_sd = ro.SGD(ours.named_parameters(), lr=0.1).state_dict()
    their_sd = torch.optim.SGD(theirs.named_parameters(), lr=0.1).state_dict()
    assert our_sd == their_sd
    assert our_sd["param_groups"][0]["param_names"] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def _assert_same_state_dict(ours: dict, theirs: dict):
    """Same format: equal param_groups; same state keys; tensors equal in value, dtype, device."""
    assert ours["param_groups"] == theirs["param_groups"]
    assert ours["state"].keys() == theirs["state"].keys()
    for k in theirs["state"]:
        assert ours["state"][k].keys() == theirs["state"][k].keys()
        for key, t in theirs["state"][k].items():
            o = ours["state"][k][key]
            assert (o.dtype, o.shape, o.device) == (t.dtype, t.shape, t.device), key
            if key == "step":
                assert torch.equal(o, t)


@pytest.mark.parametrize(
    "name,kw",
    [
        ("SGD", dict(lr=0.1, momentum=0.9)),
        ("Adam", dict(lr=0.01, amsgrad=True)),
        ("AdamW", dict(lr=0.01, foreach=True)),
        ("Adam", dict(lr=0.01, fused=True)),
    ],
)
def test_state_dict_format_and_round_trip_across_libraries(name, kw):
    """Save from torch mid-training, continue in retorch, save again, continue in torch."""
    exact = not kw.get("fused")
    reference = _model()
    ref_opt = _train(lambda m: getattr(torch.optim, name)(m.parameters(), **kw), reference, 6)
    ours = copy.deepcopy(reference)
    our_opt = getattr(ro, name)(ours.parameters(), **kw)
    our_opt.load_state_dict(copy.deepcopy(ref_opt.state_dict()))
    _assert_same_state_dict(our_opt.state_dict(), ref_opt.state_dict())

    torch.manual_seed(5)
    for _ in range(5):  # the same continuation on both sides
        x = torch.randn(4, 5)
        for m, o in ((reference, ref_opt), (ours, our_opt)):
            o.zero_grad()
            m(x).pow(2).sum().backward()
            o.step()
    _assert_same_state_dict(our_opt.state_dict(), ref_opt.state_dict())
    if exact:
        _assert_same_params(ours, reference)
    else:
        _assert_close_params(ours, reference, **FUSED_TOL)

    back = copy.deepcopy(ours)
    back_opt = getattr(torch.optim, name)(back.parameters(), **kw)
    back_opt.load_state_dict(copy.deepcopy(our_opt.state_dict()))
    torch.manual_seed(6)
    for _ in range(3):
        x = torch.randn(4, 5)
        for m, o in ((back, back_opt), (ours, our_opt)):
            o.zero_grad()
            m(x).pow(2).sum().backward()
            o.step()
    if exact:
        _assert_same_params(ours, back)
    else:
        _assert_close_params(ours, back, **FUSED_TOL)


def test_load_state_dict_errors_match():
    m = _model()
    for lib in (ro, torch.optim):
        opt = lib.SGD(m.parameters(), lr=0.1)
        two_groups = lib.SGD([{"params": m[0].parameters()}, {"params": m[2].parameters()}], lr=0.1)
        with pytest.raises(ValueError, match="different number of parameter groups"):
            opt.load_state_dict(two_groups.state_dict())
        smaller = lib.SGD(m[0].parameters(), lr=0.1)
        with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
            smaller.load_state_dict(opt.state_dict())


def test_signatures_and_repr_match_torch():
    for name in ["SGD", "Adam", "AdamW"]:
        ours = inspect.signature(getattr(ro, name))
        theirs = inspect.signature(getattr(torch.optim, name))
        assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
            (p.name, p.kind, p.default) for p in theirs.parameters.values()
        ], name
    for name, kw in [("SGD", dict(lr=0.1, momentum=0.9)), ("AdamW", dict(amsgrad=True))]:
        m = _model()
        assert repr(getattr(ro, name)(m.parameters(), **kw)) == repr(
            getattr(torch.optim, name)(m.parameters(), **kw)
        )


@pytest.mark.parametrize(
    "name,kw",
    [
        ("SGD", dict(lr=-1.0)),
        ("SGD", dict(momentum=-0.5)),
        ("SGD", dict(weight_decay=-1)),
        ("SGD", dict(nesterov=True)),
        ("SGD", dict(nesterov=True, momentum=0.9, dampening=0.1)),
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


def test_misuse_raises_torchs_exceptions():
    m = _model()
    for lib in (ro, torch.optim):
        with pytest.raises(ValueError, match="empty parameter list"):
            lib.SGD([], lr=0.1)
        with pytest.raises(
            TypeError, match="iterable of Tensors or dicts, but got torch.FloatTensor"
        ):
            lib.SGD(m[0].weight, lr=0.1)
        with pytest.raises(TypeError, match="ordered collections"):
            lib.SGD([{"params": {m[0].weight}}], lr=0.1)
        with pytest.raises(TypeError, match="can only optimize Tensors"):
            lib.SGD([1.0], lr=0.1)
        with pytest.raises(ValueError, match="more than one parameter group"):
            lib.SGD([{"params": m.parameters()}, {"params": m[0].parameters()}], lr=0.1)
        with pytest.raises(ValueError, match="non-leaf"):
            lib.SGD([torch.ones(1, requires_grad=True) * 2], lr=0.1)
        with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
            lib.Adam(m.parameters(), fused=True, foreach=True)
        with pytest.warns(UserWarning, match="duplicate parameters"):
            lib.SGD([m[0].weight, m[0].weight], lr=0.1)


def test_what_retorch_does_not_rebuild_says_so():
    m = _model()
    with pytest.raises(NotImplementedError, match="fused kernels for Adam and AdamW only"):
        ro.SGD(m.parameters(), lr=0.1, fused=True)
    with pytest.raises(NotImplementedError, match="capturable"):
        ro.Adam(m.parameters(), capturable=True)
    opt = ro.Adam([torch.zeros(3, dtype=torch.float64, requires_grad=True)], fused=True)
    opt.param_groups[0]["params"][0].grad = torch.ones(3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="contiguous float32 Tensors on cpu or cuda, but got "):
        opt.step()


@pytest.mark.parametrize(
    "name,kw",
    [
        ("Adam", dict()),
        ("AdamW", dict(amsgrad=True, maximize=True)),
    ],
)
def test_fused_numba_step_within_tolerance_of_torch(name, kw):
    kw = dict(kw, lr=1e-2, weight_decay=0.1)
    ours, fused, loop = _model(), _model(), _model()
    # Parameter 1 skips every other step, so the tensors' step counts differ within the group.
    _train(lambda m: getattr(ro, name)(m.parameters(), fused=True, **kw), ours, 40, frozen=(1,))
    _train(
        lambda m: getattr(torch.optim, name)(m.parameters(), fused=True, **kw),
        fused,
        40,
        frozen=(1,),
    )
    _train(lambda m: getattr(torch.optim, name)(m.parameters(), **kw), loop, 40, frozen=(1,))
    _assert_close_params(ours, fused, **FUSED_TOL)
    _assert_close_params(ours, loop, **FUSED_TOL)


@pytest.mark.slow
@pytest.mark.parametrize("adamw", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("maximize", [False, True])
def test_fused_numba_step_every_flag_combination(adamw, amsgrad, maximize):
    """Large tensors too: the kernel cuts them into several chunks of ``_fused.CHUNK``."""
    torch.manual_seed(0)
    sizes = (3, _fused.CHUNK * 2 + 5, 1000)
    ours = [torch.randn(n, requires_grad=True) for n in sizes]
    theirs = [p.detach().clone().requires_grad_() for p in ours]
    kw = dict(lr=1e-2, weight_decay=0.1, amsgrad=amsgrad, maximize=maximize, fused=True)
    cls = "AdamW" if adamw else "Adam"
    our_opt, their_opt = getattr(ro, cls)(ours, **kw), getattr(torch.optim, cls)(theirs, **kw)
    for _ in range(100):
        for a, b in zip(ours, theirs):
            a.grad = torch.randn_like(a)
            b.grad = a.grad.clone()
        our_opt.step()
        their_opt.step()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, **FUSED_TOL)


def _run_cuda_path_under_simulator(adamw, amsgrad, steps=2):
    """Fused Adam's CUDA path (flat buffers, one launch) on CPU tensors, under the simulator,
    against torch's fused step; parameter 1 misses its gradient at odd steps."""
    torch.manual_seed(0)
    sizes = (150, 7, 200)
    ours = [torch.randn(n, requires_grad=True) for n in sizes]
    theirs = [p.detach().clone().requires_grad_() for p in ours]
    kw = dict(lr=0.01, weight_decay=0.1, amsgrad=amsgrad, maximize=True, fused=True)
    cls = "AdamW" if adamw else "Adam"
    our_opt, their_opt = getattr(ro, cls)(ours, **kw), getattr(torch.optim, cls)(theirs, **kw)
    for step in range(steps):
        for i, (a, b) in enumerate(zip(ours, theirs)):
            frozen = step % 2 and i == 1
            a.grad = None if frozen else torch.randn_like(a)
            b.grad = None if frozen else a.grad.clone()
        with _fused.simulated_cuda_path():
            our_opt.step()
        their_opt.step()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.detach(), b.detach(), **FUSED_TOL)
    ours_sd, theirs_sd = our_opt.state_dict(), their_opt.state_dict()
    for i in range(len(sizes)):
        assert ours_sd["state"][i]["step"].item() == theirs_sd["state"][i]["step"].item()
        torch.testing.assert_close(
            ours_sd["state"][i]["exp_avg"], theirs_sd["state"][i]["exp_avg"], **FUSED_TOL
        )
    return our_opt


@pytest.mark.simulator
def test_cuda_path_under_the_simulator_matches_torch_fused(monkeypatch):
    # Small chunks, so that a few hundred elements already span several thread blocks.
    monkeypatch.setattr(_fused, "CHUNK", 64)
    _run_cuda_path_under_simulator(adamw=True, amsgrad=True)


@pytest.mark.slow
@pytest.mark.simulator
@pytest.mark.parametrize("adamw", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_cuda_path_under_the_simulator_every_mode(monkeypatch, adamw, amsgrad):
    monkeypatch.setattr(_fused, "CHUNK", 64)
    _run_cuda_path_under_simulator(adamw, amsgrad, steps=4)


@pytest.mark.simulator
def test_cuda_path_launches_on_device_arrays_made_from_the_tensors(monkeypatch):
    """What crashed on the H100: torch tensors reached the launch code (``param.size`` is a
    method there). The launch must receive the device arrays ``as_cuda_array`` makes, sharing
    the flat buffers' memory, on a GPU and under the simulator alike."""
    monkeypatch.setattr(_fused, "CHUNK", 64)
    received = []
    real_kernel = _fused.fused_adam_cuda_kernel

    class Spy:
        def __getitem__(self, geometry):
            def launch(*args):
                received.append(args)
                return real_kernel[geometry](*args)

            return launch

    monkeypatch.setattr(_fused, "fused_adam_cuda_kernel", Spy())
    opt = _run_cuda_path_under_simulator(adamw=False, amsgrad=False, steps=1)
    (args,) = received
    (buffers,) = opt._flat.values()
    flat = [buffers.param, buffers.grad, buffers.exp_avg, buffers.exp_avg_sq]
    for arg, tensor in zip(args, flat):
        assert not isinstance(arg, torch.Tensor), "the kernel got a torch tensor"
        assert type(arg) is type(_fused.as_cuda_array(tensor))
        assert arg.shape == tuple(tensor.shape)
        assert _fused.cuda_array_interface(tensor)["data"][0] == tensor.data_ptr()
    # A torch tensor's .size is a method (what crashed on the GPU); the device array's is the
    # element count the launch code needs.
    tensor = torch.zeros(2, 3)
    assert callable(tensor.size) and _fused.as_cuda_array(tensor).size == 6
    assert _fused.as_cuda_array(tensor).shape == (2, 3)
    # The device array is the tensor's memory, not a copy: a write shows in the tensor.
    array = _fused.as_cuda_array(buffers.exp_avg)
    array[3] = 42.0
    assert buffers.exp_avg[3].item() == 42.0


@pytest.mark.simulator
def test_cuda_path_keeps_state_as_views_of_flat_buffers(monkeypatch):
    monkeypatch.setattr(_fused, "CHUNK", 64)
    opt = _run_cuda_path_under_simulator(adamw=False, amsgrad=False, steps=2)
    (buffers,) = opt._flat.values()
    for p in buffers.params:
        state = opt.state[p]
        assert p.data_ptr() == buffers.view(buffers.param, p).data_ptr()
        if p.grad is not None:  # parameter 1 had none at the last step
            assert p.grad.data_ptr() == buffers.view(buffers.grad, p).data_ptr()
        for key, flat in [("exp_avg", buffers.exp_avg), ("exp_avg_sq", buffers.exp_avg_sq),
                          ("step", buffers.step)]:  # fmt: skip
            assert state[key].data_ptr() == buffers.view(flat, p).data_ptr(), key
    # Loading a state_dict gives fresh tensors: the next step copies them into the buffers.
    opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    p = buffers.params[0]
    assert opt.state[p]["exp_avg"].data_ptr() != buffers.view(buffers.exp_avg, p).data_ptr()
    with _fused.simulated_cuda_path():
        opt.step()
    assert opt.state[p]["exp_avg"].data_ptr() == buffers.view(buffers.exp_avg, p).data_ptr()


def test_cuda_array_interface_needs_the_simulator_for_cpu_tensors(monkeypatch):
    monkeypatch.setattr(_fused, "simulator_enabled", lambda: False)
    with pytest.raises(TypeError, match="no __cuda_array_interface__"):
        _fused.cuda_array_interface(torch.zeros(3))


@pytest.mark.parametrize("simulated_cuda", [False, pytest.param(True, marks=pytest.mark.simulator)])
def test_fused_step_under_grad_scaler_matches_torch(monkeypatch, simulated_cuda):
    """GradScaler hands fused optimizers grad_scale and found_inf; an overflow skips a step."""
    if simulated_cuda:  # (the CPU kernel was compiled with CHUNK as a constant: leave it)
        monkeypatch.setattr(_fused, "CHUNK", 64)
    torch.manual_seed(0)
    ours = [torch.randn(n, requires_grad=True) for n in (70, 5)]
    theirs = [p.detach().clone().requires_grad_() for p in ours]
    runs = []
    for lib, params in ((ro, ours), (torch.optim, theirs)):
        opt = lib.Adam(params, lr=0.01, fused=True)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
        gen = torch.Generator().manual_seed(1)
        for step in range(4):
            weights = [torch.randn(p.shape, generator=gen) for p in params]
            if step == 2:
                weights[1][0] = float("inf")  # an overflow: the step is skipped
            opt.zero_grad()
            scaler.scale(sum((p * w).sum() for p, w in zip(params, weights))).backward()
            context = _fused.simulated_cuda_path() if simulated_cuda and lib is ro else None
            with context or contextlib.nullcontext():
                scaler.step(opt)
            scaler.update()
        runs.append((opt.state_dict(), scaler.get_scale()))
    (ours_sd, our_scale), (theirs_sd, their_scale) = runs
    assert our_scale == their_scale
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.detach(), b.detach(), **FUSED_TOL)
    for i in range(2):
        assert ours_sd["state"][i]["step"].item() == theirs_sd["state"][i]["step"].item() == 3


def test_fused_step_reads_grad_scale_and_found_inf_as_torch_does():
    """What GradScaler.step sets on a fused optimizer, set by hand: the gradients are divided
    by grad_scale (and left unscaled), and found_inf skips the update and the step count."""
    results = []
    for lib in (ro, torch.optim):
        torch.manual_seed(0)
        p = torch.randn(6, requires_grad=True)
        opt = lib.Adam([p], lr=0.1, fused=True)
        assert opt._step_supports_amp_scaling
        p.grad = torch.randn(6) * 512
        opt.grad_scale, opt.found_inf = torch.tensor(512.0), torch.tensor(0.0)
        opt.step()
        after_one, grad = p.detach().clone(), p.grad.clone()
        opt.found_inf = torch.tensor(1.0)
        opt.step()
        results.append((after_one, grad, p.detach().clone(), opt.state[p]["step"].item()))
    (a1, g1, a2, s1), (b1, h1, b2, t1) = results
    torch.testing.assert_close(a1, b1, **FUSED_TOL)
    torch.testing.assert_close(g1, h1, rtol=0, atol=0)
    assert torch.equal(a2, a1) and torch.equal(b2, b1) and s1 == t1 == 1


def test_group_tensors_by_device_and_dtype_matches_torch():
    from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype as theirs

    from retorch.optim.optimizer import _group_tensors_by_device_and_dtype as ours

    a = [torch.zeros(2), torch.zeros(3, dtype=torch.float64), torch.zeros(1), torch.zeros(4)]
    b = [t + 1 for t in a]
    got, want = ours([a, b, []]), theirs([a, b, []], with_indices=True)
    assert set(got) == set(want)
    for key, (lists, indices) in want.items():
        assert got[key][1] == indices
        for got_list, want_list in zip(got[key][0], lists):
            assert [t is u for t, u in zip(got_list, want_list)] == [True] * len(want_list)
            assert len(got_list) == len(want_list)


def test_chunk_table_cuts_tensors_like_multi_tensor_apply(monkeypatch):
    monkeypatch.setattr(_fused, "CHUNK", 4)
    tensor, start = _fused.chunk_table([9, 4, 1])
    assert tensor.tolist() == [0, 0, 0, 1, 2]
    assert start.tolist() == [0, 4, 8, 0, 0]


@given(
    max_norm=st.floats(0.01, 10),
    norm_type=st.sampled_from([1.0, 2.0, 3.0, float("inf")]),
    frozen=st.booleans(),
)
def test_clip_grad_norm_matches_torch(max_norm, norm_type, frozen):
    a, b = _model(), _model()
    for m in (a, b):
        torch.manual_seed(3)
        m(torch.randn(3, 5)).sum().backward()
        if frozen:
            m[0].bias.grad = None
    na = clip_grad_norm_(a.parameters(), max_norm, norm_type)
    nb = torch.nn.utils.clip_grad_norm_(b.parameters(), max_norm, norm_type)
    assert torch.equal(na, nb)
    for x, y in zip(a.parameters(), b.parameters()):
        assert (x.grad is None and y.grad is None) or torch.equal(x.grad, y.grad)


def test_clip_grad_norm_edge_cases_match_torch():
    for clip in (clip_grad_norm_, torch.nn.utils.clip_grad_norm_):
        p = torch.ones(3, requires_grad=True)
        assert torch.equal(clip([p], 1.0), torch.tensor(0.0))  # no gradients at all
        p.grad = torch.tensor([float("inf"), 1.0, 1.0])
        with pytest.raises(RuntimeError, match="non-finite, so it cannot be clipped"):
            clip(p, 1.0, error_if_nonfinite=True)
        with pytest.warns(UserWarning, match="empty generator"):
            clip((q for q in []), 1.0)

"""The capstone's Transformer (retorch.models) on the rebuilt stack, beside torch.

Tolerances, measured on this machine (float32 unless said):
- one forward and backward: loss within 1e-6, every gradient within 1e-6 per element
  (measured 1.2e-7 and 6e-8: the kernels sum in another order than torch's);
- float64: losses of 10 AdamW steps within 1e-12 (measured ~1e-15);
- float32 training: the first 10 steps' losses within 1e-6 (measured 2.4e-7), 200 steps within
  2e-4 (measured 3.8e-5: rounding differences grow as each step feeds the next);
- the learning-rate schedule: equal to torch's to 1e-15 at every step.
A wrong causal mask, a missing 1/sqrt(d) scale, untied weights or a wrong warm-up move the
first step's loss or gradients by 1e-3 or more.
"""

import io

import numpy as np
import pytest
import torch

import retorch.optim
from retorch.dispatch import from_torch
from retorch.models import GPTConfig, build_gpt, load_torch_state_dict, to_retorch, torch_state_dict
from retorch.models.tasks import char_windows, sort_task
from retorch.models.train import make_optimizer, sort_accuracy, sort_loss, train

N = 6
SORT = GPTConfig(vocab_size=10, block_size=2 * N - 1, n_layer=2, n_head=2, n_embd=32)


def _models(config=SORT, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    ours = build_gpt(config)  # chapter 1's retorch.nn modules, torch tensors
    ours = ours.double() if dtype == torch.float64 else ours
    return ours, to_retorch(ours)


def _loss(n=N):
    return lambda m, x, y: sort_loss(m, x, y, n)


def _batches(steps, size, seed=0):
    x, y = sort_task(steps * size, n=N, seed=seed)
    return [(x[i * size : (i + 1) * size], y[i * size : (i + 1) * size]) for i in range(steps)]


def _retorch(batches):
    return [(from_torch(x), from_torch(y)) for x, y in batches]


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float64, 1e-13)])
def test_one_step_loss_and_gradients_equal_torch(dtype, tol):
    tm, rm = _models(dtype=dtype)
    (x, y), = _batches(1, 8, seed=3)  # fmt: skip
    lt, lr = sort_loss(tm, x, y, N), sort_loss(rm, from_torch(x), from_torch(y), N)
    lt.backward()
    lr.backward()
    assert abs(lt.item() - lr.item()) < tol
    named_t, named_r = list(tm.named_parameters()), list(rm.named_parameters())
    for (nt, pt), (nr, pr) in zip(named_t, named_r, strict=True):
        assert nt == nr
        diff = np.abs(pt.grad.numpy() - pr.grad.numpy()).max()
        assert diff < tol, (nt, diff)


def test_weight_tying_survives_to_retorch():
    tm, rm = _models()
    assert tm.lm_head.weight is tm.wte.weight
    assert rm.lm_head.weight is rm.wte.weight
    names = [n for n, _ in rm.named_parameters()]
    assert "lm_head.weight" not in names and "wte.weight" in names
    assert sum(p.numel() for p in rm.parameters()) == sum(p.numel() for p in tm.parameters())


def test_schedule_is_torchs_warmup_then_cosine():
    steps, warmup = 40, 8
    lrs = {}
    for lib in (torch.optim, retorch.optim):
        p = torch.zeros(1, requires_grad=True)
        opt, sched = make_optimizer(lib, [p], 1e-2, warmup, steps)
        lrs[lib.__name__] = [opt.param_groups[0]["lr"]]
        for _ in range(steps):
            opt.step()
            sched.step()
            lrs[lib.__name__].append(opt.param_groups[0]["lr"])
    t, r = np.array(lrs["torch.optim"]), np.array(lrs["retorch.optim"])
    assert t[0] == pytest.approx(1e-2 / warmup) and t[warmup] == pytest.approx(1e-2)
    np.testing.assert_allclose(r, t, rtol=0, atol=1e-15)


@pytest.mark.slow
@pytest.mark.parametrize("dtype,steps,tol", [(torch.float32, 10, 1e-6), (torch.float64, 10, 1e-12)])
def test_training_steps_equal_torch(dtype, steps, tol):
    tm, rm = _models(dtype=dtype)
    batches = _batches(steps, 16)
    opt, sched = make_optimizer(torch.optim, tm.parameters(), 3e-3, 3, steps)
    expected = train(tm, opt, sched, batches, _loss())
    opt, sched = make_optimizer(retorch.optim, list(rm.parameters()), 3e-3, 3, steps)
    got = train(rm, opt, sched, _retorch(batches), _loss())
    diff = np.abs(np.array(got) - np.array(expected))
    assert diff.max() < tol, (diff.max(), int(diff.argmax()))
    assert expected[-1] < expected[0] - 0.05  # it moved
    for (n, p), q in zip(rm.named_parameters(), tm.parameters(), strict=True):
        d = np.abs(p.numpy() - q.detach().numpy()).max()
        assert d < 100 * tol, (n, d)


def _torch_twin(config=SORT):
    return build_gpt(config, torch.nn)  # an unmodified torch.nn model of the same code


def test_checkpoint_trained_on_retorch_loads_into_torch_and_back():
    tm, rm = _models()
    batches = _batches(5, 16)
    opt, sched = make_optimizer(retorch.optim, list(rm.parameters()), 3e-3, 2, 5)
    train(rm, opt, sched, _retorch(batches), _loss())

    buf = io.BytesIO()
    torch.save(torch_state_dict(rm), buf)  # torch's file format, torch's key names
    buf.seek(0)
    twin = _torch_twin()
    assert twin.load_state_dict(torch.load(buf)) is not None  # strict: every key, every shape
    x, _ = sort_task(4, n=N, seed=9)
    with torch.no_grad():
        expected = twin(x).numpy()
    got = rm(from_torch(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert twin.lm_head.weight is twin.wte.weight  # loading kept torch's tying

    # and back: a torch-trained twin's state_dict into a fresh model on retorch
    opt, sched = make_optimizer(torch.optim, twin.parameters(), 3e-3, 2, 5)
    train(twin, opt, sched, _batches(5, 16, seed=4), _loss())
    _, fresh = _models(seed=1)
    load_torch_state_dict(fresh, twin.state_dict())
    with torch.no_grad():
        expected = twin(x).numpy()
    np.testing.assert_allclose(fresh(from_torch(x)).numpy(), expected, rtol=0, atol=1e-5)
    assert fresh.lm_head.weight is fresh.wte.weight


def test_loading_a_wrong_checkpoint_raises_as_torch():
    _, rm = _models()
    sd = _torch_twin().state_dict()
    del sd["ln_f.bias"]
    with pytest.raises(RuntimeError, match="Missing key"):
        load_torch_state_dict(rm, sd)
    with pytest.raises(RuntimeError, match="Missing key"):
        _torch_twin().load_state_dict(sd)


def test_char_model_forward_equals_torch():
    x, y, chars = char_windows(block_size=24, count=4, seed=0)
    config = GPTConfig(vocab_size=len(chars), block_size=32, n_layer=1, n_head=4, n_embd=32)
    tm, rm = _models(config)
    lt, loss_t = tm(x, y)
    lr, loss_r = rm(from_torch(x), from_torch(y))
    assert abs(loss_t.item() - loss_r.item()) < 1e-6
    np.testing.assert_allclose(lr.numpy(), lt.detach().numpy(), rtol=0, atol=1e-5)


def test_misuse_raises_torchs_exception_types():
    tm, rm = _models()
    long = torch.zeros(1, SORT.block_size + 1, dtype=torch.int64)
    for model, make in ((tm, lambda t: t), (rm, from_torch)):
        with pytest.raises(ValueError, match="block size is only 11"):
            model(make(long))
        with pytest.raises(RuntimeError, match="'indices' to have one of the following"):
            model.wte(make(torch.zeros(1, 3)))
        with pytest.raises(RuntimeError, match=r"expected input with shape \[\*, 32\]"):
            model.ln_f(make(torch.zeros(2, 31)))


@pytest.mark.slow
def test_sort_task_learns_on_retorch_as_on_torch():
    """200 AdamW steps of 64 sequences (about 45 s on retorch here): held-out accuracy of the
    sorted half at least 95% on both, losses within 2e-4 of torch's at every step."""
    steps = 200
    tm, rm = _models()
    batches = _batches(steps, 64)
    opt, sched = make_optimizer(torch.optim, tm.parameters(), 3e-3, steps // 10, steps)
    expected = train(tm, opt, sched, batches, _loss())
    opt, sched = make_optimizer(retorch.optim, list(rm.parameters()), 3e-3, steps // 10, steps)
    got = train(rm, opt, sched, _retorch(batches), _loss())
    diff = np.abs(np.array(got) - np.array(expected))
    assert diff[:10].max() < 1e-6 and diff.max() < 2e-4, (diff[:10].max(), diff.max())
    xt, yt = sort_task(500, n=N, seed=1)
    assert sort_accuracy(tm, xt, yt, N) >= 0.95
    assert sort_accuracy(rm, from_torch(xt), from_torch(yt), N) >= 0.95

"""retorch.Tensor through the dispatcher beside torch: keys, tables of the aten ops, values and
gradients, meta shapes, errors."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import retorch.tensor as rt
from retorch.autograd import count_aten_calls, no_grad
from retorch.dispatch import Tensor
from retorch.dispatch import native_functions as nf
from retorch.dispatch.dispatcher import get_dispatcher

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow

aten = nf.aten
ROWS = ("CPU", "Meta", "AutogradCPU", "ADInplaceOrView")
#: Rows where retorch's aten library differs from torch's, and why.
KNOWN = {("sqrt", "AutogradCPU"): "no sqrt formula in chapter 3's table: autograd fallback"}


def _rows(text):
    out = {}
    for line in text.splitlines():
        key = line.split(":")[0]
        if key in ROWS:
            out[key] = (line.split("[")[-1].rstrip("]"), "fallthrough" in line)
    return {k: out.get(k, ("missing", False)) for k in ROWS}


@pytest.mark.parametrize("name", [s.split("(")[0] for s in nf.SCHEMAS])
def test_aten_schema_and_table_as_torch(name):
    ours = get_dispatcher().find_schema_or_throw(f"aten::{name}")
    theirs = torch._C._dispatch_dump(f"aten::{name}")
    assert f"schema: {ours.schema}\n" in theirs
    got, expected = _rows(ours.dump_table()), _rows(torch._C._dispatch_dump_table(f"aten::{name}"))
    for row in ROWS:
        if (name, row) in KNOWN:
            assert got[row] != expected[row]  # still a difference: else drop it from KNOWN
        else:
            assert got[row] == expected[row], (name, row)


def test_key_sets_as_torch():
    for device in ("cpu", "meta"):
        ours = Tensor(rt.ones((2,), device=device))
        theirs = torch._C._dispatch_keys(torch.ones(2, device=device))
        assert ours.key_set.raw_repr() == theirs.raw_repr()
        assert repr(ours.key_set) == repr(theirs)


def _pair(shape, seed, positive=False):
    a = np.random.default_rng(seed).standard_normal(shape)
    a = np.abs(a) + 0.5 if positive else a
    return Tensor(rt.tensor(a), requires_grad=True), torch.tensor(a, requires_grad=True)


def _check(ours, theirs, leaves):
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert ours.grad_fn.name() == theirs.grad_fn.name()  # the exact node, not any *Backward0
    inputs_ours = [n.name() for n, _ in ours.grad_fn.next_functions if n is not None]
    inputs_theirs = [n.name() for n, _ in theirs.grad_fn.next_functions if n is not None]
    assert inputs_ours == inputs_theirs
    ours.sum().backward()
    theirs.sum().backward()
    for o, t in leaves:
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


UNARY = {
    "neg": (lambda x: -x, lambda x: -x),
    "relu": (lambda x: x.relu(), torch.relu),
    "exp": (lambda x: x.exp(), torch.exp),
    "log": (lambda x: x.log(), torch.log),
    "pow": (lambda x: x**3, lambda x: x**3),
    "softmax": (lambda x: x.softmax(-1), lambda x: x.softmax(-1)),
    "log_softmax": (lambda x: x.log_softmax(1), lambda x: x.log_softmax(1)),
    "mean_dim": (lambda x: x.mean(0, keepdim=True), lambda x: x.mean(0, keepdim=True)),
    "sum_dim": (lambda x: x.sum(1) * 2, lambda x: x.sum(1) * 2),
    "t_view": (lambda x: x.t().reshape(-1), lambda x: x.t().reshape(-1)),
    "view": (lambda x: x.view(-1) * 3.0, lambda x: x.view(-1) * 3.0),
    "mean": (lambda x: x.mean(), torch.mean),
}
BINARY = {
    "add": (lambda a, b: a.add(b, alpha=2), lambda a, b: a.add(b, alpha=2)),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    "matmul": (lambda a, b: a @ b.t(), lambda a, b: a @ b.t()),
}


@given(st.sampled_from(sorted(UNARY)), st.integers(1, 4), st.integers(1, 4), st.integers(0, 99))
def test_unary_ops_and_gradients_as_torch(name, m, n, seed):
    (x, tx) = _pair((m, n), seed, positive=name == "log")
    ours, theirs = UNARY[name]
    _check(ours(x), theirs(tx), [(x, tx)])


@given(st.sampled_from(sorted(BINARY)), st.integers(1, 4), st.integers(1, 4), st.integers(0, 99))
def test_binary_ops_and_gradients_as_torch(name, m, n, seed):
    (a, ta), (b, tb) = _pair((m, n), seed), _pair((m, n), seed + 1, positive=name == "div")
    ours, theirs = BINARY[name]
    _check(ours(a, b), theirs(ta, tb), [(a, ta), (b, tb)])


def test_mlp_step_graph_and_gradients_as_torch_with_no_aten_call():
    (x, tx), (w, tw), (b, tb) = _pair((5, 3), 0), _pair((4, 3), 1), _pair((4,), 2)
    target = np.array([0, 3, 1, 2, 3])
    with count_aten_calls() as calls:
        loss = F.cross_entropy(F.relu(F.linear(x, w, b)), Tensor.from_numpy(target))
        loss.backward()
    assert calls.total == 0
    tl = F.cross_entropy(F.relu(F.linear(tx, tw, tb)), torch.from_numpy(target))
    tl.backward()
    assert loss.grad_fn.name() == tl.grad_fn.name() == "NllLossBackward0"
    assert abs(loss.item() - tl.item()) < 1e-12
    for o, t in [(x, tx), (w, tw), (b, tb)]:
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_autograd_key_redispatches_below_itself():
    """The kernels one add runs, in order: AutogradCPU, then CPU (ADInplaceOrView falls through)."""
    seen = []
    d = get_dispatcher()
    handle = d.find_schema_or_throw("aten::add.Tensor")
    select = d._select

    def spy(h, ks):
        kernel, ks2 = select(h, ks)
        if h is handle:
            seen.append(ks2.highest_priority_type_id().name)
        return kernel, ks2

    d._select = spy
    try:
        a, _ = _pair((2,), 0)
        out = a + a
    finally:
        del d._select
    assert seen == ["AutogradCPU", "CPU"]
    ta = torch.tensor(a.numpy(), requires_grad=True)
    assert out.grad_fn.name() == (ta + ta).grad_fn.name()
    with no_grad():
        assert (a + a).grad_fn is None  # grad mode off: the autograd kernel records nothing


def test_meta_tensors_compute_shapes_only():
    x = Tensor(rt.empty((8, 3), device="meta"), requires_grad=True)
    w = Tensor(rt.empty((4, 3), device="meta"), requires_grad=True)
    y = F.linear(x, w).relu().sum(1)
    tx, tw = torch.empty(8, 3, device="meta"), torch.empty(4, 3, device="meta")
    ty = F.linear(tx, tw).relu().sum(1)
    assert tuple(y.shape) == tuple(ty.shape) and y.grad_fn.name() == "SumBackward1"
    assert y.key_set.raw_repr() == torch._C._dispatch_keys(ty).raw_repr()


def test_version_counter_and_views_as_torch():
    a, ta = _pair((2, 3), 0)
    with no_grad():
        v = a.t()
        v.mul_(2.0)
    with torch.no_grad():
        tv = ta.t()
        tv.mul_(2.0)
    assert a._version == ta._version == 1 and v._base is a and tv._base is ta


def test_misuse_raises_clear_errors():
    a, ta = _pair((2,), 0)
    with pytest.raises(RuntimeError) as t:
        ta.add_(1.0)
    with pytest.raises(RuntimeError) as r:
        a.add_(1.0)
    assert str(r.value) == str(t.value)
    with pytest.raises(TypeError, match="retorch.Tensor wraps a retorch.tensor.Tensor"):
        Tensor(np.zeros(2))
    with pytest.raises(NotImplementedError, match="does not implement torch function"):
        torch.tanh(a)
    x = Tensor(rt.ones((2, 2)))
    with pytest.raises(NotImplementedError, match="matmul handles 2-D @ 2-D"):
        x.view(4) @ x


def test_cuda_tensors_dispatch_to_the_numba_cuda_kernels():
    """CUDA keys route to retorch.tensor's Numba-CUDA kernels (the simulator without a GPU)."""
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    x = Tensor(rt.tensor(xv).to(device="cuda"))
    w = Tensor(rt.tensor(wv).to(device="cuda"), requires_grad=True)
    target = Tensor(rt.tensor(np.array([0, 1, 2, 3])).to(device="cuda"))
    assert repr(x.key_set) == "DispatchKeySet(CUDA, ADInplaceOrView, AutogradCUDA, AutocastCUDA)"
    loss = F.cross_entropy(F.relu(F.linear(x, w)), target)
    loss.backward()
    tw = torch.tensor(wv, requires_grad=True)
    tl = F.cross_entropy(F.relu(F.linear(torch.tensor(xv), tw)), torch.tensor([0, 1, 2, 3]))
    tl.backward()
    assert loss.data.device == w.grad.data.device == "cuda"
    assert abs(loss.item() - tl.item()) < 1e-12
    grad = w.grad.data.to(device="cpu").numpy()
    np.testing.assert_allclose(grad, tw.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_sgd_with_zeroed_grads_as_torch():
    """``zero_grad(set_to_none=False)`` zeroes retorch grads in place through the dispatcher."""
    from retorch.optim import SGD

    (w, tw) = _pair((3, 2), 5)
    opt, topt = SGD([w], lr=0.1, momentum=0.9), torch.optim.SGD([tw], lr=0.1, momentum=0.9)
    for _ in range(3):
        opt.zero_grad(set_to_none=False)
        topt.zero_grad(set_to_none=False)
        (w * w).sum().backward()
        (tw * tw).sum().backward()
        opt.step()
        topt.step()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-13, atol=1e-15)
    assert isinstance(w.grad, Tensor) and w.grad.grad_fn is None
    with pytest.raises(RuntimeError, match="Can't detach views in-place"):
        w.t().detach_()


def test_trace_records_the_path_down_the_keys():
    a, _ = _pair((2,), 0)
    with get_dispatcher().trace() as seen:
        a + a
    assert seen == [("aten::add.Tensor", "AutogradCPU"), ("aten::add.Tensor", "CPU")]
    with get_dispatcher().trace() as seen, no_grad():  # no_grad does not remove the key, as
        out = a * 2  # in torch: the autograd kernel still runs, and records nothing
    assert seen == [("aten::mul.Tensor", "AutogradCPU"), ("aten::mul.Tensor", "CPU")]
    assert out.grad_fn is None
    assert "_select" not in vars(get_dispatcher())  # the spy is removed after the block


@pytest.mark.parametrize("name", sorted(UNARY) + sorted(BINARY))
def test_every_op_records_torchs_node_on_a_2_by_3_input(name):
    """Each op once on a (2, 3) input, where a transpose is not contiguous (the randomized
    tests above may draw only shapes where it is): the node and its inputs' nodes by name."""
    (a, ta), (b, tb) = _pair((2, 3), 0, positive=True), _pair((2, 3), 1, positive=True)
    if name in UNARY:
        ours, theirs = UNARY[name][0](a), UNARY[name][1](ta)
    else:
        ours, theirs = BINARY[name][0](a, b), BINARY[name][1](ta, tb)
    _check(ours, theirs, [(a, ta)] if name in UNARY else [(a, ta), (b, tb)])


@pytest.mark.parametrize("number", [2, 1.5, True])
@pytest.mark.parametrize("dtype", ["int64", "float32", "float64", "bool"])
def test_python_numbers_promote_as_torch_wrapped_numbers(dtype, number):
    """A Python number is a wrapped number: only its category takes part in promotion, so
    ``int_tensor * 1.5`` is a float tensor and ``float32_tensor * 2.5`` stays float32."""
    values = np.array([1, 0, 1]).astype(dtype)
    ours, theirs = Tensor(rt.from_numpy(values.copy())), torch.from_numpy(values.copy())
    for name, fn in {"x + n": lambda x: x + number, "x * n": lambda x: x * number,
                     "n - x": lambda x: number - x, "x / n": lambda x: x / number}.items():  # fmt: skip
        try:
            expected = fn(theirs)
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match=str(e)[:25]):
                fn(ours)
            continue
        got = fn(ours)
        assert got.data.dtype.name == str(expected.dtype).removeprefix("torch."), name
        assert got.tolist() == expected.tolist(), name

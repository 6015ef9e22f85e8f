"""Chapter 3's autograd over chapter 4's tensors: ``set_array_backend("retorch")``.

Forward and backward of an MLP and of a single-head attention block run on ``retorch.tensor``
with no aten op in the compute path (a TorchDispatchMode counts them: 0), and their gradients
equal torch's autograd on the same inputs: within 1e-10 in float64, within 2e-5 (relative and
absolute) in float32. Random expression graphs (hypothesis) agree with torch the same way.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import retorch.autograd as ra
import retorch.tensor as rt
from retorch.autograd import _ops

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow

F64_TOL = dict(rtol=1e-10, atol=1e-10)
F32_TOL = dict(rtol=2e-5, atol=2e-5)


@pytest.fixture(autouse=True)
def torch_backend_after_each_test():
    assert ra.get_array_backend() == "torch"
    yield
    ra.set_array_backend("torch")


def close(ours, theirs, tol):
    assert isinstance(ours, rt.Tensor), type(ours)
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), **tol)


# ---------------------------------------------------------------- the switch itself


def test_switch_rebinds_every_function_of_the_contract_and_back():
    torch_add = _ops.add
    assert torch_add is torch.add
    assert ra.set_array_backend("retorch") == "torch"
    assert ra.get_array_backend() == "retorch"
    for name in ra.backend.CONTRACT:
        assert getattr(_ops, name) is getattr(ra._ops_retorch, name), name
    assert _ops.Array is rt.Tensor
    leaf = ra.tensor([1.0, 2.0], requires_grad=True)
    assert isinstance(leaf.data, rt.Tensor) and leaf.dtype is rt.float32
    assert ra.set_array_backend("torch") == "retorch"
    assert _ops.add is torch_add and isinstance(ra.tensor([1.0]).data, torch.Tensor)


def test_context_manager_restores_the_backend_even_on_error():
    with ra.array_backend("retorch"):
        assert isinstance(ra.tensor([1.0]).data, rt.Tensor)
    assert ra.get_array_backend() == "torch"
    with pytest.raises(ZeroDivisionError), ra.array_backend("retorch"):
        raise ZeroDivisionError
    assert ra.get_array_backend() == "torch" and _ops.add is torch.add


def test_unknown_backend_is_a_runtime_error_and_changes_nothing():
    with pytest.raises(RuntimeError, match=r"Expected one of torch, retorch array backend"):
        ra.set_array_backend("numpy")
    assert ra.get_array_backend() == "torch" and _ops.add is torch.add


def test_as_array_takes_torch_numpy_and_python_values():
    ra.set_array_backend("retorch")
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    shared = _ops.as_array(a)
    assert shared.dtype is rt.float64 and shared.shape == (2, 3)
    a[0, 0] = 7.0  # as torch.as_tensor: a NumPy array's memory is shared
    assert shared.numpy()[0, 0] == 7.0
    from_torch = _ops.as_array(torch.ones(2, 2, dtype=torch.float64, requires_grad=True))
    assert from_torch.dtype is rt.float64 and from_torch.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert _ops.as_array([1, 2], dtype=torch.float64).dtype is rt.float64
    assert _ops.as_array([1, 2]).dtype is rt.int64


def test_the_counter_sees_torchs_kernels():
    """The control for every ``total == 0`` below: the same counter counts torch's ops."""
    x = torch.randn(3, 4, requires_grad=True)
    with ra.count_aten_calls() as calls:
        (x @ x.t()).relu().sum().backward()
    assert calls.calls["aten.mm.default"] >= 2 and calls.total >= 6
    leaf = ra.tensor(torch.randn(3, 4), requires_grad=True)  # chapter 3: torch underneath
    with ra.count_aten_calls() as calls:
        (leaf @ leaf.t()).relu().sum().backward()
    assert calls.calls["aten.mm.default"] >= 2


# ---------------------------------------------------------------- chapter 3's examples


def mlp_data(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    params = {
        "w1": torch.randn(8, 16, generator=g, dtype=dtype) * 0.4,
        "b1": torch.randn(16, generator=g, dtype=dtype) * 0.1,
        "w2": torch.randn(16, 5, generator=g, dtype=dtype) * 0.4,
        "b2": torch.randn(5, generator=g, dtype=dtype) * 0.1,
    }
    x = torch.randn(6, 8, generator=g, dtype=dtype)
    y = torch.randint(0, 5, (6,), generator=g)
    return params, x, y


def mlp(p, x, y, cross_entropy):
    """Linear-ReLU-Linear and cross-entropy, as chapter 3 writes it."""
    return cross_entropy((x @ p["w1"] + p["b1"]).relu() @ p["w2"] + p["b2"], y)


def attention_data(dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    d = 4
    params = {k: torch.randn(d, d, generator=g, dtype=dtype) * 0.5 for k in ("wq", "wk", "wv")}
    x = torch.randn(2, 5, d, generator=g, dtype=dtype)
    target = torch.randn(2, 5, d, generator=g, dtype=dtype)
    return params, x, target


def attention(p, x, target):
    """One head: softmax(Q K^T / sqrt(d)) V, then a squared error against ``target``."""
    q, k, v = x @ p["wq"], x @ p["wk"], x @ p["wv"]
    att = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).softmax(-1)
    out = att @ v
    return ((out - target) ** 2).mean()


def run_retorch(data, loss_fn, extra):
    """Leaves from the data's values (no torch call), then forward and backward, counted."""
    ra.set_array_backend("retorch")
    params, inputs = data[0], data[1:]
    ours = {k: ra.tensor(v.numpy(), requires_grad=True) for k, v in params.items()}
    args = [ra.tensor(t.numpy()) for t in inputs]
    with ra.count_aten_calls() as calls:
        loss = loss_fn(ours, *args, *extra)
        loss.backward()
    return loss, ours, calls


def run_torch(data, loss_fn, extra):
    params, inputs = data[0], data[1:]
    theirs = {k: v.clone().requires_grad_() for k, v in params.items()}
    loss = loss_fn(theirs, *inputs, *extra)
    loss.backward()
    return loss, theirs


CASES = {
    "mlp": (mlp_data, mlp, ((ra.cross_entropy,), (F.cross_entropy,))),
    "attention": (attention_data, attention, ((), ())),
}


@pytest.mark.parametrize("dtype, tol", [(torch.float64, F64_TOL), (torch.float32, F32_TOL)])
@pytest.mark.parametrize("case", list(CASES))
def test_examples_run_with_no_aten_call_and_torchs_gradients(case, dtype, tol):
    make, loss_fn, (our_extra, their_extra) = CASES[case]
    data = make(dtype)
    loss, ours, calls = run_retorch(data, loss_fn, our_extra)
    assert calls.total == 0, calls.calls
    assert isinstance(loss.data, rt.Tensor) and loss.grad_fn is not None
    tloss, theirs = run_torch(data, loss_fn, their_extra)
    close(loss.data, tloss, tol)
    for k in theirs:
        assert ours[k].grad.dtype.name == str(dtype).replace("torch.", "")
        close(ours[k].grad.data, theirs[k].grad, tol)


def test_a_training_loop_stays_on_retorch_and_with_torch():
    """Three SGD steps of the MLP: every step's gradients as torch's (float64, 1e-10)."""
    params, x, y = mlp_data(torch.float64, seed=3)
    theirs = {k: v.clone().requires_grad_() for k, v in params.items()}
    ra.set_array_backend("retorch")
    ours = {k: ra.tensor(v.numpy(), requires_grad=True) for k, v in params.items()}
    rx, ry = ra.tensor(x.numpy()), ra.tensor(y.numpy())
    for _ in range(3):
        with ra.count_aten_calls() as calls:
            loss = mlp(ours, rx, ry, ra.cross_entropy)
            loss.backward()
            with ra.no_grad():
                for p in ours.values():
                    p.data = p.data - 0.5 * p.grad.data
        assert calls.total == 0
        mlp(theirs, x, y, F.cross_entropy).backward()
        for k, p in ours.items():
            close(p.grad.data, theirs[k].grad, F64_TOL)
            p.grad = None
        with torch.no_grad():
            for p in theirs.values():
                p -= 0.5 * p.grad
                p.grad = None


@pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaIRAssumptionWarning")
def test_a_tiny_mlp_on_retorchs_cuda_kernels():
    """Leaves on device "cuda" (the Numba-CUDA kernels; the simulator without a GPU): the whole
    graph stays there, no aten call, float64 gradients as torch's within 1e-10. Tiny, because
    the simulator runs a Python thread per CUDA thread."""
    g = torch.Generator().manual_seed(0)
    shapes = {"w1": (3, 4), "b1": (4,), "w2": (4, 2), "b2": (2,)}
    params = {k: torch.randn(s, generator=g, dtype=torch.float64) for k, s in shapes.items()}
    x, y = torch.randn(2, 3, generator=g, dtype=torch.float64), torch.tensor([0, 1])
    ra.set_array_backend("retorch")
    cuda = {k: ra.tensor(rt.tensor(v.numpy(), device="cuda"), requires_grad=True)
            for k, v in params.items()}  # fmt: skip
    rx, ry = (ra.tensor(rt.tensor(t.numpy(), device="cuda")) for t in (x, y))
    with ra.count_aten_calls() as calls:
        loss = mlp(cuda, rx, ry, ra.cross_entropy)
        loss.backward()
    assert calls.total == 0 and loss.device == "cuda"
    tloss, theirs = run_torch((params, x, y), mlp, (F.cross_entropy,))
    close(loss.data.cpu(), tloss, F64_TOL)
    for k in theirs:
        assert cuda[k].grad.device == "cuda"
        close(cuda[k].grad.data.cpu(), theirs[k].grad, F64_TOL)


def test_forward_ad_and_gradcheck_run_on_retorch():
    ra.set_array_backend("retorch")
    x = ra.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)
    with ra.count_aten_calls() as calls:
        assert ra.gradcheck(lambda t: (t.exp() * t).sum(1).log_softmax(0), [x])
        from retorch.autograd import forward_ad as fwad

        with fwad.dual_level():
            tangent = ra.tensor(np.ones((2, 3)))
            dual = fwad.make_dual(ra.tensor(np.linspace(-1, 1, 6).reshape(2, 3)), tangent)
            out = fwad.unpack_dual((dual.tanh() * dual).sum()).tangent
    assert calls.total == 0
    xs = torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3)
    expected = (1 - xs.tanh() ** 2) * xs + xs.tanh()
    assert abs(out.item() - expected.sum().item()) < 1e-12


# ---------------------------------------------------------------- random expression graphs


class Lib:
    """The few calls whose spelling differs between retorch.autograd and torch."""

    def __init__(self, ours: bool):
        self.ours = ours

    def leaf(self, values: np.ndarray, grad: bool = True):
        if self.ours:
            return ra.tensor(values, requires_grad=grad)
        return torch.tensor(values, requires_grad=grad)

    def where(self, c, a, b):
        return ra.where(c, a, b) if self.ours else torch.where(c, a, b)


#: Each op maps a (3, 4) value (and the pool, the leaves) to a (3, 4) value.
UNARY = {
    "tanh": lambda a, p, L: a.tanh(),
    "sigmoid": lambda a, p, L: a.sigmoid(),
    "relu": lambda a, p, L: a.relu(),
    "exp": lambda a, p, L: (a * 0.3).exp(),
    "log1p_sq": lambda a, p, L: (a * a + 1).log(),
    "recip": lambda a, p, L: (a * a + 1).reciprocal(),
    "square": lambda a, p, L: a**2,
    "neg_rsub": lambda a, p, L: 2.0 - a,
    "div_num": lambda a, p, L: a / 3.0,
    "pow_base": lambda a, p, L: 1.5**a,
    "softmax": lambda a, p, L: a.softmax(-1),
    "log_softmax0": lambda a, p, L: a.log_softmax(0),
    "center": lambda a, p, L: a - a.mean(1, keepdim=True),
    "sum0": lambda a, p, L: a * a.sum(0, keepdim=True),
    "max_dim": lambda a, p, L: a - a.max(1, keepdim=True).values,
    "max_all": lambda a, p, L: a * a.max(),
    "matmul_w": lambda a, p, L: a @ p["w"],
    "gram": lambda a, p, L: (a @ a.t()) @ a * 0.1,
    "bias_row": lambda a, p, L: a + p["v"],
    "scale_row": lambda a, p, L: a * p["v"],
    "slice_row": lambda a, p, L: a * a[:1, :],
    "select_row": lambda a, p, L: a - a[1],
    "reshape_t": lambda a, p, L: a.t().reshape(12).view(4, 3).t(),
    "permute_batch": lambda a, p, L: (a.reshape(3, 2, 2).permute(0, 2, 1) * 1.0).reshape(3, 4),
    "bmm_self": lambda a, p, L: (a.unsqueeze(0) @ p["w"].unsqueeze(0)).squeeze(0),
    "mv_w": lambda a, p, L: a * (p["w"] @ p["v"]),
    "where_pos": lambda a, p, L: L.where(a > 0, a, a * 0.5),
    "gather_rows": lambda a, p, L: a[p["idx"]],
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b * b + 1),
}


def run_graph(program, values, ours: bool):
    """Run ``program`` (a list of ops over a pool that starts with two leaves) and backprop
    ``sum(result * weights)``; returns the result and the leaves' gradients."""
    L = Lib(ours)
    leaves = {k: L.leaf(values[k]) for k in ("a", "b", "w", "v")}
    pool = {
        "w": leaves["w"],
        "v": leaves["v"],
        "idx": (ra.tensor if ours else torch.tensor)(np.array([2, 0, 1, 1])[:3]),
    }
    stack = [leaves["a"], leaves["b"]]
    for kind, name, i, j in program:
        a = stack[i % len(stack)]
        if kind == "unary":
            stack.append(UNARY[name](a, pool, L))
        else:
            stack.append(BINARY[name](a, stack[j % len(stack)]))
    out = stack[-1]
    (out * L.leaf(values["weights"], grad=False)).sum().backward()
    return out, [leaves[k].grad for k in ("a", "b", "w", "v")]


OPS = [("unary", name) for name in sorted(UNARY)] + [("binary", name) for name in sorted(BINARY)]


def random_values(rng):
    return {
        "a": rng.normal(size=(3, 4)),
        "b": rng.normal(size=(3, 4)),
        "w": rng.normal(size=(4, 4)) * 0.5,
        "v": rng.normal(size=4),
        "weights": rng.normal(size=(3, 4)),
    }


def check_graph(program, values):
    expected, expected_grads = run_graph(program, values, ours=False)
    ra.set_array_backend("retorch")
    with ra.count_aten_calls() as calls:
        out, grads = run_graph(program, values, ours=True)
    ra.set_array_backend("torch")
    assert calls.total == 0, calls.calls
    close(out.data, expected, F64_TOL)
    for ours, theirs in zip(grads, expected_grads):
        if theirs is None:  # a leaf the program never used
            assert ours is None
        else:
            close(ours.data, theirs, F64_TOL)


@pytest.mark.parametrize("kind, name", OPS)
def test_each_op_of_the_random_graphs_alone(kind, name):
    """Every op once, on both leaves (a binary op on a and b), so none is left to chance."""
    check_graph([(kind, name, 0, 1)], random_values(np.random.default_rng(len(name))))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), length=st.integers(1, 6))
def test_random_graphs_on_retorch_equal_torch(seed, length):
    """Programs drawn uniformly from OPS (a NumPy generator seeded by hypothesis: hypothesis's
    own choices favour the first entries of a list), operands from the pool built so far."""
    rng = np.random.default_rng(seed)
    program = []
    for _ in range(length):
        kind, name = OPS[rng.integers(len(OPS))]
        program.append((kind, name, int(rng.integers(10)), int(rng.integers(10))))
    note(f"program: {program}")
    check_graph(program, random_values(rng))

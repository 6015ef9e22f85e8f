"""retorch.autograd.forward_ad against torch.autograd.forward_ad: the same primals and
tangents (Jacobian-vector products) through every op with a forward formula, the same errors,
and tangents that live only inside their level."""

import pytest
import torch
import torch.autograd.forward_ad as tfw

import retorch.autograd as ra
from retorch.autograd import forward_ad as rfw

F64 = torch.float64

FUNCTIONS = {
    "elementwise": lambda t: ((t.exp() * t).tanh() / (t.sigmoid() + 1) - t.relu()).sum(),
    "pow, reciprocal, rsub, neg": lambda t: ((t**3).reciprocal() + (1 - t) - (-t)).mean(),
    "log": lambda t: (t * t + 1).log().sum(),
    "matmul and softmax": lambda t: (t.view(2, 3) @ t.view(3, 2)).softmax(1).log_softmax(0),
    "views": lambda t: (t.view(2, 3).t().unsqueeze(0).expand(2, 3, 2) ** 2).sum(1).mean(0),
    "slices and select": lambda t: t[1:4] * t[:3] - t[2:5] + t[0],
    "mv, dot, bmm": lambda t: (
        (t.view(2, 3).mv(t[:3]) + t[:3].dot(t[3:]))
        .unsqueeze(0)
        .unsqueeze(0)
        .bmm(t[:2].view(1, 2, 1))
    ),
    "0-dim softmax": lambda t: t.sum().softmax(0) + t.sum(0).log_softmax(-1),
    "permute, squeeze, reshape": lambda t: t.view(1, 2, 3).permute(2, 0, 1).squeeze(1).reshape(6),
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_jvp_equals_torchs_forward_mode(name, seed):
    f = FUNCTIONS[name]
    torch.manual_seed(seed)
    p, v = torch.randn(6, dtype=F64), torch.randn(6, dtype=F64)
    with rfw.dual_level():
        ours = rfw.unpack_dual(f(rfw.make_dual(ra.tensor(p), ra.tensor(v))))
    with tfw.dual_level():
        theirs = tfw.unpack_dual(f(tfw.make_dual(p, v)))
    torch.testing.assert_close(ours.primal.data, theirs.primal)
    torch.testing.assert_close(ours.tangent.data, theirs.tangent, rtol=1e-10, atol=1e-12)


def test_a_missing_tangent_counts_as_zero_and_matches_reverse_mode():
    torch.manual_seed(3)
    p, q, v = torch.randn(4, dtype=F64), torch.randn(4, dtype=F64), torch.randn(4, dtype=F64)
    with rfw.dual_level():
        x = rfw.make_dual(ra.tensor(p), ra.tensor(v))
        ours = rfw.unpack_dual((x * ra.tensor(q)).exp().sum()).tangent
    leaf = ra.tensor(p, requires_grad=True)
    (grad,) = ra.grad((leaf * ra.tensor(q)).exp().sum(), leaf)
    torch.testing.assert_close(ours.data, (grad.data * v).sum())


def raised(fn):
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value)


def test_errors_as_torchs():
    assert raised(lambda: rfw.make_dual(ra.tensor(torch.ones(3)), torch.ones(3))) == raised(
        lambda: tfw.make_dual(torch.ones(3), torch.ones(3))
    )
    with rfw.dual_level():
        ours = raised(lambda: rfw.make_dual(ra.tensor(torch.ones(3)), torch.ones(2)))
    with tfw.dual_level():
        theirs = raised(lambda: tfw.make_dual(torch.ones(3), torch.ones(2)))
    assert ours == theirs


def test_tangents_live_only_inside_their_level():
    with rfw.dual_level():
        ours = rfw.make_dual(ra.tensor(torch.ones(2)), torch.ones(2)) * 2
        inside = rfw.unpack_dual(ours).tangent
    with tfw.dual_level():
        theirs = tfw.make_dual(torch.ones(2), torch.ones(2)) * 2
    assert inside is not None
    assert rfw.unpack_dual(ours).tangent is None and tfw.unpack_dual(theirs).tangent is None


def test_an_op_without_a_forward_formula_says_so():
    with rfw.dual_level():
        x = rfw.make_dual(ra.tensor(torch.ones(2, 2)), torch.ones(2, 2))
        with pytest.raises(NotImplementedError, match="forward AD with max_dim"):
            x.max(0)


def test_reverse_mode_is_unchanged_inside_a_level():
    a = ra.tensor(torch.tensor([0.5, 2.0], dtype=F64), requires_grad=True)
    with rfw.dual_level():
        d = rfw.make_dual(a, torch.ones(2, dtype=F64))
        (d.exp() * d).sum().backward()
    torch.testing.assert_close(a.grad.data, (a.data.exp() * (a.data + 1)))

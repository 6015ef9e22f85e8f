"""The Functionalize key: retorch's functionalization against torch 2.13's
``make_fx(torch.func.functionalize(f))`` (retorch/dispatch/functionalize.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

import retorch.tensor as rt
from retorch.dispatch import DispatchKey, Tensor, native_functions  # noqa: F401  (registers aten)
from retorch.dispatch.functionalize import (
    from_functional_tensor,
    functionalize,
    fx_program,
    is_functional_tensor,
    recorded_program,
    to_functional_tensor,
)


def _inputs(n: int, seed: int = 0):
    """``n`` float64 vectors of 6 values, as (retorch, torch) pairs."""
    g = np.random.default_rng(seed)
    values = [g.integers(-4, 5, 6).astype(np.float64) for _ in range(n)]
    return [Tensor(rt.tensor(v)) for v in values], [torch.tensor(v) for v in values]


def _compare(fn, n: int = 2, seed: int = 0):
    """retorch's program and values against torch's, for the same inputs."""
    ours, theirs = _inputs(n, seed)
    names = "xyzw"[:n]
    lines = recorded_program(functionalize(fn), **dict(zip(names, ours, strict=True)))
    ours2, theirs2 = _inputs(n, seed)
    out = functionalize(fn)(*ours2)
    gm = make_fx(torch.func.functionalize(fn))(*[t.clone() for t in theirs])
    torch_out = torch.func.functionalize(fn)(*theirs2)
    assert lines == fx_program(gm, names)
    assert np.array_equal(np.asarray(out.data.tolist()), torch_out.numpy())
    for a, b in zip(ours2, theirs2, strict=True):  # inputs written back with copy_
        assert np.array_equal(np.asarray(a.data.tolist()), b.numpy())
    return lines


def test_key_set_of_a_functional_tensor_is_torchs():
    ours = to_functional_tensor(Tensor(rt.tensor(np.arange(2.0))))
    theirs = torch._to_functional_tensor(torch.arange(2.0, dtype=torch.float64))
    assert repr(ours.key_set) == repr(torch._C._dispatch_keys(theirs))
    assert DispatchKey.Functionalize in ours.key_set
    assert is_functional_tensor(ours) and torch._is_functional_tensor(theirs)


def test_mutations_become_functional_ops_and_copies_back():
    def f(x, y):
        x.add_(y, alpha=2)
        z = x.mul(y)
        z.div_(2)
        y.mul_(z)
        return z

    lines = _compare(f)
    assert lines[-2:] == ["copy_ = copy_(x, add)", "copy__1 = copy_(y, mul_1)"]
    assert not any("add_" in line or "mul_." in line for line in lines)


def test_a_mutation_through_a_view_goes_back_to_the_base():
    def f(x):
        v = x.view(2, 3)
        v.add_(1)
        return x * 2

    assert _compare(f, 1) == [
        "view = view(x, [2, 3])",
        "add = add.Tensor(view, 1)",
        "view_1 = view(add, [6])",  # the inverse: the base's new value
        "view_2 = view(view_1, [2, 3])",  # the view regenerated from it
        "mul = mul.Tensor(view_1, 2)",
        "copy_ = copy_(x, view_1)",
    ]


def test_nested_views_and_a_stale_view_regenerated_when_used():
    def f(x, y):
        v = x.view(2, 3)
        w = v.t()
        w.mul_(y.view(3, 2))  # through two views
        x.add_(1)  # the base itself: v and w are stale now
        return w + v.t()

    _compare(f)


def test_an_untouched_input_is_not_copied_back():
    def f(x, y):
        return x.mul(y).add(1)

    assert not any(line.startswith("copy_") for line in _compare(f))


def test_from_functional_tensor_syncs_first():
    x = to_functional_tensor(Tensor(rt.tensor(np.arange(6.0))))
    from retorch.dispatch import IncludeDispatchKeyGuard

    with IncludeDispatchKeyGuard(DispatchKey.Functionalize):
        v = x.view(2, 3)
        v.mul_(10)
    assert from_functional_tensor(x).data.tolist() == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]


def test_an_inplace_op_without_a_functional_variant_says_so():
    x = Tensor(rt.tensor(np.arange(3.0)))
    with pytest.raises(NotImplementedError, match="no functional variant aten::zero"):
        functionalize(lambda t: t.zero_())(x)


# ----------------------------------------------------------------- random programs
VIEWS = {
    (6,): [("view23", (2, 3)), ("view32", (3, 2))],
    (2, 3): [("t", (3, 2)), ("flat", (6,))],
    (3, 2): [("t", (2, 3)), ("flat", (6,))],
}


def _run(steps, x, y):
    """Run a random program on two (6,) tensors; each step reads its operands by index."""
    pool = [x, y]
    for kind, i, j, alpha in steps:
        a = pool[i % len(pool)]
        same = [t for t in pool if tuple(t.shape) == tuple(a.shape)]
        b = same[j % len(same)]
        if kind == "view":
            name, shape = VIEWS[tuple(a.shape)][j % 2 if a.is_contiguous() else 0]  # no flat
            pool.append(a.t() if name == "t" else a.view(*shape))
        elif kind == "add_":
            a.add_(b, alpha=alpha)
        elif kind == "mul_":
            a.mul_(b)
        elif kind == "div_":
            a.div_(2)
        elif kind == "add":
            pool.append(a.add(b, alpha=alpha))
        else:
            pool.append(a * b)
    return pool[-1] * 1  # a fresh tensor, whatever the last step made


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["view", "add_", "mul_", "div_", "add", "mul"]),
            st.integers(0, 7),
            st.integers(0, 7),
            st.sampled_from([1, 2, -1]),
        ),
        min_size=1,
        max_size=7,
    ),
    st.integers(0, 1000),
)
@pytest.mark.slow  # seconds each: make unit runs it, check-fast stays under a minute
def test_random_programs_match_torchs_graph_and_values(steps, seed):
    _compare(lambda x, y: _run(steps, x, y), 2, seed)

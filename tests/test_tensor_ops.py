"""retorch.tensor ops against torch on the CPU: broadcasting and type promotion (0-dim
tensors and Python scalars included), the TensorIterator's output layout, every elementwise
op, reductions, softmax, indexing, matmul and copies. Exact where both sides do the same IEEE
operations (add, sub, mul, div, comparisons, copies, integer math, gather); otherwise within
the tolerance stated at each comparison."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import retorch.tensor as rt

# Numba's pedantic SSA check warns while compiling the inlined op switch (harmless; the
# package silences it outside pytest, which resets warning filters per test)
pytestmark = pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaIRAssumptionWarning")

DTYPES = ["bool", "int32", "int64", "float32", "float64"]
#: elementwise float math (exp, log, tanh, sigmoid, pow, softmax): torch uses SLEEF vector
#: code, retorch libm in float64 rounded once; both are within a few ulp of the exact value.
RTOL = {"float32": 2e-6, "float64": 1e-14}
#: sums and matmuls: both sides add in different orders (torch cascades, we split by thread)
SUM_RTOL = {"float32": 1e-5, "float64": 1e-12}


def outcome(fn):
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001
        return "error", (type(e), str(e))


def sample(shape, dtype, rng, positive=False):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in ("int32", "int64"):
        lo = 1 if positive else -5
        return rng.integers(lo, 6, size=shape).astype(dtype)
    v = rng.standard_normal(shape).astype(dtype)
    return np.abs(v) + 0.1 if positive else v


def pair(arr):
    """(retorch tensor, torch tensor) over copies of one array."""
    return rt.from_numpy(np.array(arr)), torch.from_numpy(np.array(arr))


def check(ours, theirs, rtol=0.0, atol=0.0):
    assert ours.dtype.name == str(theirs.dtype).replace("torch.", "")
    assert ours.shape == tuple(theirs.shape)
    assert ours.stride() == theirs.stride(), "the output's layout differs from torch's"
    a, b = ours.numpy(), theirs.numpy()
    if rtol == 0 and atol == 0:
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


# ---- promotion and broadcasting -----------------------------------------------------------------
KINDS = ["dim", "zero_dim", "scalar"]


def operand(kind, dtype):
    if kind == "scalar":
        return {"bool": True, "int32": 3, "int64": 3, "float32": 2.5, "float64": 2.5}[dtype]
    shape = (2,) if kind == "dim" else ()
    arr = np.ones(shape, dtype=dtype)
    return rt.from_numpy(arr.copy()), torch.from_numpy(arr.copy())


@pytest.mark.parametrize(
    "ka,kb", [k for k in itertools.product(KINDS, KINDS) if k != ("scalar", "scalar")]
)
def test_result_type_matches_torch(ka, kb):
    for da, db in itertools.product(DTYPES, DTYPES):
        a, b = operand(ka, da), operand(kb, db)
        ours = rt.result_type(a[0] if ka != "scalar" else a, b[0] if kb != "scalar" else b)
        theirs = torch.result_type(a[1] if ka != "scalar" else a, b[1] if kb != "scalar" else b)
        assert ours.name == str(theirs).replace("torch.", ""), (ka, da, kb, db)


def test_promote_types_table():
    for da, db in itertools.product(DTYPES, DTYPES):
        ours = rt.promote_types(getattr(rt, da), getattr(rt, db))
        theirs = torch.promote_types(getattr(torch, da), getattr(torch, db))
        assert ours.name == str(theirs).replace("torch.", "")


shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


@st.composite
def broadcastable(draw):
    """Two shapes that usually broadcast, sometimes not (an error to compare)."""
    out = draw(shapes)
    a = tuple(draw(st.sampled_from([s, 1])) for s in out)
    b = tuple(draw(st.sampled_from([s, 1])) for s in out)
    a = a[draw(st.integers(0, len(a))) :]
    if draw(st.integers(0, 5)) == 0 and b:
        b = b[:-1] + (b[-1] + 1,)
    return a, b


@given(broadcastable(), st.sampled_from(DTYPES), st.sampled_from(DTYPES), st.integers(0, 2**31))
def test_binary_ops_broadcast_and_promote_like_torch(shapes_, da, db, seed):
    rng = np.random.default_rng(seed)
    a, ta = pair(sample(shapes_[0], da, rng))
    b, tb = pair(sample(shapes_[1], db, rng, positive=True))
    for name in ("add", "mul", "div", "maximum", "gt", "le", "eq", "ne", "lt", "ge", "sub"):
        r = outcome(lambda: getattr(rt, name)(a, b))
        t = outcome(lambda: getattr(torch, name)(ta, tb))
        assert r[0] == t[0], (name, r, t)
        if r[0] == "error":
            assert r[1] == t[1], name
        else:
            check(r[1], t[1])
            assert r[1].stride() == t[1].stride(), name  # TensorIterator's output layout


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [True, 3, -2, 2.5])
def test_python_scalars_and_0_dim_tensors(dtype, value):
    rng = np.random.default_rng(0)
    a, ta = pair(sample((2, 3), dtype, rng))
    s, ts = pair(np.array(value))
    for name in ("add", "mul", "maximum", "gt"):
        for rhs, trhs in ((value, value), (s, ts)):
            r = outcome(lambda: getattr(rt, name)(a, rhs))
            t = outcome(lambda: getattr(torch, name)(ta, trhs))
            assert r[0] == t[0]
            if r[0] == "ok":
                check(r[1], t[1])
            else:
                assert r[1] == t[1]
    # reflected operators on Python numbers
    if dtype != "bool":
        check(
            value - a if not isinstance(value, bool) else a + value,
            value - ta if not isinstance(value, bool) else ta + value,
        )
        check(2 * a, 2 * ta)


def test_output_follows_input_layout():
    x, tx = pair(np.arange(24.0, dtype=np.float32).reshape(2, 3, 4))
    cases = [
        lambda t: t.transpose(0, 2) + 1,
        lambda t: t.permute(1, 2, 0) * t.permute(1, 2, 0),
        lambda t: t.transpose(0, 2) + t.transpose(0, 2)[0:1],
        lambda t: t[:, :, ::2] - 1,
        lambda t: t[:, :, :3].transpose(1, 2) + t[:, :, :3],  # two layouts: the first decides
        lambda t: t[0:1].expand(5, 3, 4) + t[1],
    ]
    for fn in cases:
        r, t = fn(x), fn(tx)
        check(r, t)
        assert r.stride() == t.stride()


def test_iterator_coalesces_dimensions():
    from retorch.tensor.tensor_iterator import TensorIteratorConfig

    x = rt.zeros(4, 5, 6)
    it = TensorIteratorConfig().add_output(None).add_input(x).add_input(x).build()
    assert it.shape == [120]
    it = (
        TensorIteratorConfig()
        .add_output(None)
        .add_input(x[:, :, :3])
        .add_input(1.0 * x[:, :, :3])
        .build()
    )
    assert it.shape == [3, 20]  # the sliced last dim cannot merge; the other two can
    assert [op.stride_bytes for op in it.operands][1] == [4, 24]
    y = rt.zeros(4, 1, 6).expand(4, 5, 6)
    it = TensorIteratorConfig().add_output(None).add_input(y).add_input(x).build()
    assert it.shape == [6, 5, 4]
    assert it.operands[1].stride_bytes == [4, 0, 24]


def test_iterator_trace_shows_each_step():
    from retorch.tensor.tensor_iterator import TensorIteratorConfig

    x = rt.zeros(2, 3, 4)
    cfg = TensorIteratorConfig().add_output(None).add_input(x.transpose(0, 2))
    cfg.add_input(rt.scalar_tensor(1.0, wrapped=True))
    cfg.trace = True
    it = cfg.build()
    steps = {name: (shape, strides) for name, shape, strides in it.steps}
    assert steps["compute_strides"] == ([4, 3, 2], [None, [4, 16, 48], [0, 0, 0]])
    assert steps["reorder_dimensions"][0] == [
        4,
        3,
        2,
    ]  # the transposed input is fastest along dim 0
    assert steps["coalesce_dimensions"] == ([24], [[4], [4], [0]])
    assert it.output().stride() == torch.zeros(2, 3, 4).transpose(0, 2).add(1.0).stride()


def test_repr_is_torch_like():
    assert repr(rt.arange(4.0).view(2, 2)) == repr(torch.arange(4.0).view(2, 2))
    assert repr(rt.tensor([1, 2])) == repr(torch.tensor([1, 2]))


def test_infer_size_error_matches_torch():
    for a, b in [((3, 4), (5,)), ((2, 1, 3), (4, 2, 2)), ((0,), (2,))]:
        r = outcome(lambda: rt.infer_size(a, b))
        t = outcome(lambda: torch.empty(a) + torch.empty(b))
        assert r[0] == t[0] == "error" and r[1] == t[1]
        assert outcome(lambda: rt.zeros(a) + rt.zeros(b)) == t


# ---- out=, in place, misuse -------------------------------------------------------------------
def test_vector_width_reaches_llvm():
    """``vector_width`` puts LLVM's ``"prefer-vector-width"`` attribute on the function that
    calls it, and leaves what the function computes alone."""
    from numba import njit

    from retorch.tensor import cpu_kernels

    capped = cpu_kernels.vector_width(cpu_kernels.STREAM_VECTOR_BITS)

    @njit
    def add_one(x):
        capped()
        for i in range(x.shape[0]):
            x[i] += 1.0

    x = np.arange(100, dtype=np.float32)
    add_one(x)
    np.testing.assert_array_equal(x, np.arange(1, 101, dtype=np.float32))
    llvm_ir = "\n".join(add_one.inspect_llvm().values())
    assert f'"prefer-vector-width"="{cpu_kernels.STREAM_VECTOR_BITS}"' in llvm_ir


def test_add_out():
    rng = np.random.default_rng(1)
    a, ta = pair(sample((3, 4), "float32", rng))
    b, tb = pair(sample((4,), "float32", rng))
    out, tout = rt.empty(3, 4), torch.empty(3, 4)
    res = rt.add(a, b, alpha=2, out=out)
    torch.add(ta, tb, alpha=2, out=tout)
    assert res is out
    # alpha != 1: torch rounds a + alpha*b once (an FMA); retorch rounds the float64 sum,
    # which differs only when it lands on a float32 tie: allow 1 ulp
    np.testing.assert_array_max_ulp(out.numpy(), tout.numpy(), maxulp=1)
    out64, tout64 = rt.empty(3, 4, dtype=rt.float64), torch.empty(3, 4, dtype=torch.float64)
    check(rt.add(a, b, out=out64), torch.add(ta, tb, out=tout64))
    for bad, tbad in [(rt.empty(3, 4, dtype=rt.int64), torch.empty(3, 4, dtype=torch.int64))]:
        assert outcome(lambda: rt.add(a, b, out=bad)) == outcome(
            lambda: torch.add(ta, tb, out=tbad)
        )
    small, tsmall = rt.empty(2), torch.empty(2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        rt.add(a, b, out=small)
    assert "was resized" in str(w[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.add(ta, tb, out=tsmall)
    check(small, tsmall)


def test_in_place_ops_and_their_errors():
    x, tx = pair(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    x.add_(x, alpha=3)  # the very same elements: allowed
    tx.add_(tx, alpha=3)
    check(x, tx)
    x.mul_(2.5)
    tx.mul_(2.5)
    check(x, tx)
    i, ti = pair(np.arange(3))
    for fn, tfn in [
        (lambda: x[0].add_(x), lambda: tx[0].add_(tx)),
        (lambda: x.add_(x[0]), lambda: tx.add_(tx[0])),  # partial overlap
        (lambda: x[0].expand(2, 3).add_(1), lambda: tx[0].expand(2, 3).add_(1)),
        (lambda: rt.add(x, 1, out=x.t()), lambda: torch.add(tx, 1, out=tx.t())),
        # out= of the right shape (no resize), overlapping an input or itself
        (lambda: rt.add(x[0, :2], 1, out=x[0, 1:]), lambda: torch.add(tx[0, :2], 1, out=tx[0, 1:])),
        (
            lambda: rt.add(x, 1, out=x[0].expand(2, 3)),
            lambda: torch.add(tx, 1, out=tx[0].expand(2, 3)),
        ),  # fmt: skip
        (lambda: i.add_(x[0]), lambda: ti.add_(tx[0])),
        (lambda: i.add(i, alpha=0.5), lambda: ti.add(ti, alpha=0.5)),
        (lambda: i.gt(0).sub(i.gt(1)), lambda: ti.gt(0).sub(ti.gt(1))),
        (lambda: i.gt(0) - i, lambda: ti.gt(0) - ti),
        (lambda: -(i.gt(0)), lambda: -(ti.gt(0))),
        (lambda: rt.relu(i.gt(0)), lambda: torch.relu(ti.gt(0))),
        (lambda: i**-1, lambda: ti**-1),
        (lambda: rt.where(x, x, x), lambda: torch.where(tx, tx, tx)),
        (lambda: x.item(), lambda: tx.item()),
        (lambda: rt.mean(i), lambda: torch.mean(ti)),
    ]:
        r, t = outcome(fn), outcome(tfn)
        assert r[0] == t[0] == "error" and r[1] == t[1], (r, t)
    x.zero_()
    assert x.numpy().sum() == 0


# ---- unary ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_ops(dtype):
    rng = np.random.default_rng(2)
    x, tx = pair(sample((4, 5), dtype, rng, positive=True))
    nx, tnx = pair(sample((3, 4), dtype, rng))
    for name in ("neg", "exp", "log", "tanh", "sigmoid", "relu", "reciprocal"):
        for a, ta in ((x, tx), (nx.t(), tnx.t())):
            r = outcome(lambda: getattr(rt, name)(a))
            t = outcome(lambda: getattr(torch, name)(ta))
            assert r[0] == t[0], (name, r, t)
            if r[0] == "error":
                assert r[1] == t[1]
                continue
            exact = name in ("neg", "relu") or (name == "reciprocal" and dtype in ("float64",))
            tol = 0 if exact else RTOL.get(r[1].dtype.name)
            check(r[1], t[1], rtol=tol, atol=0 if exact else 1e-30)
            assert r[1].stride() == t[1].stride()


def test_special_values():
    vals = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1e-40, 100.0], np.float32)
    x, tx = pair(vals)
    for name in ("exp", "log", "tanh", "sigmoid", "relu", "reciprocal", "neg"):
        np.testing.assert_allclose(
            getattr(rt, name)(x).numpy(), getattr(torch, name)(tx).numpy(), rtol=RTOL["float32"]
        )
    y, ty = pair(np.array([np.nan, 1.0, -np.inf, 2.0], np.float32))
    check(rt.maximum(x[:4], y), torch.maximum(tx[:4], ty))
    check(rt.amax(y), torch.amax(ty))
    vals2 = np.array([[1.0, np.nan, 3.0], [2.0, 5.0, 5.0]], np.float32)
    m, tm = pair(vals2)
    v, i = rt.max(m, 1)
    tv, ti = torch.max(tm, 1)
    check(v, tv)
    check(i, ti)


def test_pow_and_where():
    rng = np.random.default_rng(3)
    for dtype in ("float32", "float64", "int64"):
        a, ta = pair(sample((3, 4), dtype, rng, positive=True))
        b, tb = pair(sample((4,), dtype, rng, positive=True) % 4)
        r, t = rt.pow(a, b), torch.pow(ta, tb)
        check(r, t, rtol=RTOL.get(dtype, 0))
        c, tc = pair(rng.random((3, 1)) < 0.5)
        check(rt.where(c, a, b), torch.where(tc, ta, tb))
        check(rt.where(c, a, 0.5), torch.where(tc, ta, 0.5))


# ---- reductions ------------------------------------------------------------------------------------
@given(
    st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple),
    st.sampled_from(["float32", "float64", "int64", "int32", "bool"]),
    st.data(),
)
def test_reductions_match_torch(shape, dtype, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    x, tx = pair(sample(shape, dtype, rng))
    if data.draw(st.booleans()) and len(shape) >= 2:
        x, tx = x.transpose(0, -1), tx.transpose(0, -1)
    n = x.dim()
    dims = data.draw(
        st.one_of(
            st.none(),
            st.integers(-max(n, 1), max(n, 1) - 1),
            st.lists(st.integers(-max(n, 1), max(n, 1) - 1), max_size=3).map(tuple),
        )
    )
    keepdim = data.draw(st.booleans())
    args = () if dims is None else (dims,)
    for name in ("sum", "mean", "amax"):
        kw = {} if dims is None else {"keepdim": keepdim}
        r = outcome(lambda: getattr(rt, name)(x, *args, **kw))
        t = outcome(lambda: getattr(torch, name)(tx, *args, **kw))
        assert r[0] == t[0], (name, dims, r, t)
        if r[0] == "error":
            assert r[1] == t[1], name
        else:
            floating = r[1].dtype.name.startswith("float")
            check(
                r[1],
                t[1],
                rtol=SUM_RTOL.get(r[1].dtype.name, 0) if floating else 0,
                atol=1e-6 if floating else 0,
            )
    if isinstance(dims, int):
        r = outcome(lambda: rt.max(x, dims, keepdim))
        t = outcome(lambda: torch.max(tx, dims, keepdim))
        assert r[0] == t[0]
        if r[0] == "ok":
            check(r[1][0], t[1][0])
            check(r[1][1], t[1][1])
        else:
            assert r[1] == t[1]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_and_log_softmax(dtype):
    rng = np.random.default_rng(4)
    x, tx = pair(sample((3, 5, 4), dtype, rng) * 30)
    for dim in (0, 1, -1):
        check(rt.softmax(x, dim), torch.softmax(tx, dim), rtol=4 * RTOL[dtype], atol=1e-7)
        check(rt.log_softmax(x, dim), torch.log_softmax(tx, dim), rtol=4 * RTOL[dtype], atol=1e-6)
    i, ti = pair(np.arange(3))
    assert outcome(lambda: rt.softmax(i, 0)) == outcome(lambda: torch.softmax(ti, 0))
    assert outcome(lambda: rt.log_softmax(i, 0)) == outcome(lambda: torch.log_softmax(ti, 0))


@pytest.mark.slow  # (seconds: make unit runs it, check-fast stays under a minute)
@given(
    rows=st.integers(1, 6), n=st.integers(1, 40), dtype=st.sampled_from(["float32", "float64"]),
    special=st.sampled_from([None, "nan", "inf", "-inf row", "large"]), transposed=st.booleans(),
)  # fmt: skip
def test_softmax_over_the_last_dim_in_one_pass_equals_torch(rows, n, dtype, special, transposed):
    """The CPU kernel for the last dim (``softmax_lastdim_kernel``): each row's max, sum and
    result in one pass, beside torch's on rows with NaN, infinities, a row of -inf and large
    values (NaN where torch gives NaN), from a transposed input and from rows at an offset."""
    rng = np.random.default_rng(rows * 100 + n)
    v = sample((rows, n), dtype, rng) * 10
    if special == "nan":
        v[0, n // 2] = np.nan
    elif special == "inf":
        v[rows - 1, 0] = np.inf
    elif special == "-inf row":
        v[0, :] = -np.inf
    elif special == "large":
        v += 1e6  # (x - max - log(sum), in that order: x - (max + log(sum)) loses digits)
    x, tx = pair(np.ascontiguousarray(v.T).T if transposed else v)
    if not transposed:  # rows 1.. of a contiguous tensor: a storage offset
        big, tbig = pair(np.concatenate([np.zeros((1, n), dtype), v]))
        x, tx = big[1:], tbig[1:]
    for name in ("softmax", "log_softmax"):
        ours, theirs = getattr(rt, name)(x, -1), getattr(torch, name)(tx, -1)
        assert ours.stride() == theirs.stride()
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=4 * RTOL[dtype],
                                   atol=1e-6, equal_nan=True)  # fmt: skip


@pytest.mark.parametrize("alpha", [2, 2.5, True, False])
@pytest.mark.parametrize("da, db", [("float32", "float32"), ("float64", "float32"),
                                    ("int64", "int64"), ("int32", "float64"), ("bool", "bool"),
                                    ("float32", "bool")])  # fmt: skip
def test_add_and_sub_alpha_checked_as_torch(da, db, alpha):
    """``alpha_check``: a float alpha needs a floating result, a bool alpha a bool one (True
    excepted for non-bool results); the same outcome, value or error, as torch's."""
    a, ta = pair(np.array([1, 0, 1]).astype(da))
    b, tb = pair(np.array([1, 1, 0]).astype(db))
    for name in ("add", "sub"):
        ours = outcome(lambda: getattr(rt, name)(a, b, alpha=alpha).tolist())
        theirs = outcome(lambda: getattr(torch, name)(ta, tb, alpha=alpha).tolist())
        assert ours == theirs, (name, da, db, alpha)


def test_large_sum_is_parallel_and_close():
    rng = np.random.default_rng(5)
    x, tx = pair(rng.random(300_000, dtype=np.float32))
    check(rt.sum(x), torch.sum(tx), rtol=SUM_RTOL["float32"])
    check(rt.mean(x), torch.mean(tx), rtol=SUM_RTOL["float32"])


# ---- indexing --------------------------------------------------------------------------------------
def test_index_select_and_gather():
    rng = np.random.default_rng(6)
    x, tx = pair(sample((4, 5, 3), "float32", rng))
    for dim in (0, 1, 2, -1):
        size = x.shape[dim]
        idx, tidx = pair(rng.integers(0, size, 7))
        check(rt.index_select(x, dim, idx), torch.index_select(tx, dim, tidx))
        xt, txt = x.transpose(0, 1), tx.transpose(0, 1)
        idx2, tidx2 = pair(rng.integers(0, xt.shape[dim], 4))
        check(rt.index_select(xt, dim, idx2), torch.index_select(txt, dim, tidx2))
        gshape = list(x.shape)
        gshape[dim] = 6
        g, tg = pair(rng.integers(0, size, gshape))
        check(rt.gather(x, dim, g), torch.gather(tx, dim, tg))
    bad = [
        (
            lambda: rt.index_select(x, 0, rt.tensor([4])),
            lambda: torch.index_select(tx, 0, torch.tensor([4])),
        ),
        (
            lambda: rt.index_select(x, 0, rt.tensor([0.0])),
            lambda: torch.index_select(tx, 0, torch.tensor([0.0])),
        ),
        (
            lambda: rt.index_select(x, 0, rt.tensor([[0]])),
            lambda: torch.index_select(tx, 0, torch.tensor([[0]])),
        ),
        (
            lambda: rt.gather(x, 0, rt.tensor([[[4]]])),
            lambda: torch.gather(tx, 0, torch.tensor([[[4]]])),
        ),
        (
            lambda: rt.gather(x, 0, rt.zeros(1, 6, 1, dtype=rt.int64)),
            lambda: torch.gather(tx, 0, torch.zeros(1, 6, 1, dtype=torch.int64)),
        ),
    ]
    for fn, tfn in bad:
        r, t = outcome(fn), outcome(tfn)
        assert r[0] == t[0] == "error" and r[1] == t[1], (r, t)


# ---- matmul ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "sa,sb",
    [
        ((5,), (5,)),
        ((3, 5), (5,)),
        ((5,), (5, 4)),
        ((3, 5), (5, 4)),
        ((2, 3, 5), (5, 4)),
        ((2, 3, 5), (5,)),
        ((2, 1, 3, 5), (4, 5, 2)),
        ((5,), (2, 5, 3)),
        ((70, 130), (130, 65)),
        ((3, 0), (0, 4)),
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul(sa, sb, dtype):
    rng = np.random.default_rng(7)
    a, ta = pair(sample(sa, dtype, rng))
    b, tb = pair(sample(sb, dtype, rng))
    check(rt.matmul(a, b), torch.matmul(ta, tb), rtol=SUM_RTOL[dtype], atol=1e-5)
    if len(sa) == 2 and len(sb) == 2:
        check(a.t().t() @ b, ta @ tb, rtol=SUM_RTOL[dtype], atol=1e-5)


@pytest.mark.slow  # (seconds: make unit runs it, check-fast stays under a minute)
@given(
    m=st.integers(1, 9), k=st.integers(1, 9), n=st.integers(1, 9), batch=st.integers(1, 3),
    a_perm=st.permutations([0, 1, 2]), b_perm=st.permutations([0, 1, 2]),
    a_step=st.integers(1, 2), b_step=st.integers(1, 2), dtype=st.sampled_from(["float32", "float64"]),
)  # fmt: skip
def test_bmm_reads_any_strides_with_the_bits_of_contiguous_inputs(
    m, k, n, batch, a_perm, b_perm, a_step, b_step, dtype
):
    """The CPU kernel reads row-major rows in place and packs anything else (a transposed,
    permuted or sliced operand) into a row-major buffer: the products are the bits the same
    values give when laid out contiguously, and torch's within the sum tolerance."""
    rng = np.random.default_rng(m * 100 + k * 10 + n)

    def laid_out(shape, perm, step):  # ``shape`` values at strides given by perm and a slice
        big = [shape[0], shape[1], shape[2]]
        big[perm[2]] *= step  # every step-th element of one dim, in a permuted buffer
        buf = sample([big[d] for d in perm], dtype, rng)
        t = rt.from_numpy(buf).permute(*np.argsort(perm).tolist())
        index = [slice(None)] * 3
        index[perm[2]] = slice(None, None, step)
        return t[tuple(index)]

    a, b = laid_out((batch, m, k), a_perm, a_step), laid_out((batch, k, n), b_perm, b_step)
    assert a.shape == (batch, m, k) and b.shape == (batch, k, n)
    ours = rt.bmm(a, b)
    dense = rt.bmm(rt.from_numpy(np.ascontiguousarray(a.numpy())),
                   rt.from_numpy(np.ascontiguousarray(b.numpy())))  # fmt: skip
    np.testing.assert_array_equal(ours.numpy(), dense.numpy())
    check(ours, torch.bmm(torch.from_numpy(a.numpy()), torch.from_numpy(b.numpy())),
          rtol=SUM_RTOL[dtype], atol=1e-5)  # fmt: skip


def test_matmul_errors_match_torch():
    f32, f64 = rt.ones(2, 3), rt.ones(3, 2, dtype=rt.float64)
    t32, t64 = torch.ones(2, 3), torch.ones(3, 2, dtype=torch.float64)
    for fn, tfn in [
        (lambda: f32 @ f32, lambda: t32 @ t32),
        (lambda: rt.mm(f32, f64), lambda: torch.mm(t32, t64)),
        (lambda: rt.mm(f32, rt.ones(3)), lambda: torch.mm(t32, torch.ones(3))),
        (
            lambda: rt.bmm(rt.ones(2, 3, 3), rt.ones(3, 3, 2)),
            lambda: torch.bmm(torch.ones(2, 3, 3), torch.ones(3, 3, 2)),
        ),
        (lambda: rt.dot(rt.ones(3), rt.ones(4)), lambda: torch.dot(torch.ones(3), torch.ones(4))),
        (lambda: rt.mv(f32, rt.ones(4)), lambda: torch.mv(t32, torch.ones(4))),
        (lambda: rt.matmul(rt.tensor(1.0), f32), lambda: torch.matmul(torch.tensor(1.0), t32)),
    ]:
        r, t = outcome(fn), outcome(tfn)
        assert r[0] == t[0] == "error" and r[1] == t[1], (r, t)


# ---- copies, conversions, creation -----------------------------------------------------------------
@pytest.mark.parametrize("src,dst", list(itertools.product(DTYPES, DTYPES)))
def test_to_dtype_exact(src, dst):
    rng = np.random.default_rng(8)
    x, tx = pair(sample((3, 4), src, rng) * (3 if src.startswith("float") else 1))
    check(x.t().to(dtype=getattr(rt, dst)), tx.t().to(getattr(torch, dst)))
    check(x.to(getattr(rt, dst)), tx.to(getattr(torch, dst)))
    check(x[1, 2].to(getattr(rt, dst)), tx[1, 2].to(getattr(torch, dst)))  # 0-dim: host path


@pytest.mark.parametrize(
    "data",
    [
        1,
        2.5,
        True,
        [1, 2],
        [1.0, 2],
        [True, False],
        [True, 2],
        [[1, 2], [3, 4]],
        [],
        [[]],
        np.float64(1.5),
        np.array([1, 2], np.int32),
        [np.float64(1), 2],
        np.arange(6.0).reshape(2, 3),
    ],
)
def test_tensor_infers_dtype_like_torch(data):
    check(rt.tensor(data), torch.tensor(data))


def test_tensor_construction_errors():
    for data in ([1, "a"], [[1, 2], [3]]):
        assert outcome(lambda: rt.tensor(data)) == outcome(lambda: torch.tensor(data))


@pytest.mark.parametrize(
    "args", [(5,), (2, 7), (0, 1, 0.25), (1.5, 4), (10, 0, -3), (0, 1, 0.1), (-2.0, 2.0, 0.5)]
)
def test_arange(args):
    check(rt.arange(*args), torch.arange(*args))


def test_factories_and_item():
    check(rt.zeros(2, 3), torch.zeros(2, 3))
    check(rt.ones((2, 3), dtype=rt.int32), torch.ones((2, 3), dtype=torch.int32))
    check(rt.full((2,), 7), torch.full((2,), 7))
    e, te = rt.empty_strided((2, 3), (1, 2)), torch.empty_strided((2, 3), (1, 2))
    assert (
        e.stride() == te.stride() and e.untyped_storage().nbytes() == te.untyped_storage().nbytes()
    )
    assert rt.tensor(2.5).item() == torch.tensor(2.5).item()
    assert rt.tensor([[1, 2]]).tolist() == torch.tensor([[1, 2]]).tolist()
    assert outcome(lambda: rt.zeros(-1)) == outcome(lambda: torch.zeros(-1))
    c, tc = pair(np.arange(6.0).reshape(2, 3))
    check(c.t().clone(), tc.t().clone())
    assert c.t().clone().stride() == tc.t().clone().stride()
    assert c.t().contiguous().stride() == tc.t().contiguous().stride()


# ---- what the autograd formulas need (retorch/autograd/_ops.py) -----------------------------------
def test_setitem_scatter_index_add_nll_loss():
    rng = np.random.default_rng(9)
    z, tz = pair(np.zeros((3, 4), np.float32))
    src, tsrc = pair(sample((2, 2), "float32", rng))
    z[1:, ::2] = src
    tz[1:, ::2] = tsrc
    check(z, tz)
    z[0] = 5.0
    tz[0] = 5.0
    check(z, tz)
    idx, tidx = pair(np.array([[1], [3], [0]]))
    check(rt.zeros(3, 4).scatter(1, idx, 1.0), torch.zeros(3, 4).scatter(1, tidx, 1.0))
    rows, trows = pair(np.array([2, 0, 2, 2]))  # repeated rows accumulate
    s, ts = pair(sample((4, 3), "float64", rng))
    out = rt.zeros(3, 3, dtype=rt.float64).index_add_(0, rows, s)
    tout = torch.zeros(3, 3, dtype=torch.float64).index_add_(0, trows, ts)
    check(out, tout, rtol=1e-15)
    cols, tcols = pair(np.array([1, 1]))
    s2, ts2 = pair(sample((3, 2), "float64", rng))
    check(
        rt.zeros(3, 3, dtype=rt.float64).index_add_(1, cols, s2),
        torch.zeros(3, 3, dtype=torch.float64).index_add_(1, tcols, ts2),
        rtol=1e-15,
    )
    lp, tlp = pair(sample((4, 5), "float32", rng))
    tgt, ttgt = pair(np.array([0, 4, 2, 2]))
    for red in ("mean", "sum", "none"):
        check(
            rt.nll_loss(lp, tgt, reduction=red),
            torch.nn.functional.nll_loss(tlp, ttgt, reduction=red),
            rtol=1e-6,
        )
    n, tn = pair(np.array([1.0, np.nan]))
    check(rt.isnan(n), torch.isnan(tn))
    assert rt.any(rt.isnan(n)).item() is True and rt.any(rt.isnan(n[:1])).item() is False


@pytest.mark.parametrize(
    "shapes",
    [((2, 3), (4, 3)), ((3, 1, 4), (2, 1)), ((2,), (-1,)), ((-1,),), (3, (2, 3)), ((3,), None),
     ([2, 1], (1, 5)), ((3,), (2,), (3,)), ((2, 3), 2.5), ()],
)  # fmt: skip
def test_broadcast_shapes_matches_torch_values_and_errors(shapes):
    def run(fn):
        try:
            return fn(*shapes)
        except Exception as e:  # noqa: BLE001 - the exception is what is compared
            return type(e), str(e)

    ours, theirs = run(rt.broadcast_shapes), run(torch.broadcast_shapes)
    assert ours == (tuple(theirs) if isinstance(theirs, torch.Size) else theirs)


def test_sum_reads_strided_input_in_place(monkeypatch):
    """As torch's sum (a reduction TensorIterator, no copy in its profile), retorch's CPU sum
    of a transposed or sliced tensor runs no copy kernel: the iterator reads it in place,
    with the reduced dims first."""
    from retorch.tensor import ops as rops
    from retorch.tensor.dispatch_stub import stub

    copies = []
    real = stub("copy").table["cpu"]
    monkeypatch.setitem(stub("copy").table, "cpu", lambda it: copies.append(it) or real(it))
    x, tx = pair(np.arange(60.0).reshape(6, 10))
    for view in (lambda t: t.t(), lambda t: t[1:, ::3], lambda t: t.t()[2:]):
        for dim in (0, 1, (0, 1)):
            check(rt.sum(view(x), dim), view(tx).sum(dim), rtol=1e-12)
    assert copies == []
    _, it = rops.make_reduction("sum", x.t(), 1, False, rt.float64)
    assert it.shape == [6, 10]  # the reduced dim (6 rows of x.t()) first
    assert [op.stride_bytes for op in it.operands] == [[0, 8], [80, 8]]
    assert it.operands[1].tensor.data_ptr() == x.data_ptr()


# ---- max / amax / mean on strided inputs, in place -------------------------------------------
STRIDED_VIEWS = {
    "transposed": lambda t: t.transpose(0, -1),
    "sliced": lambda t: t[..., ::2],
    "expanded": lambda t: t.unsqueeze(1).expand(t.shape[0], 2, *t.shape[1:]),
    "permuted": lambda t: t.permute(*range(t.dim() - 1, -1, -1))[1:],
}


@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple),
    st.sampled_from(["float32", "float64", "int64", "int32", "bool"]),
    st.sampled_from(sorted(STRIDED_VIEWS)),
    st.data(),
)
def test_max_amax_mean_of_strided_views_match_torch(shape, dtype, view, data):
    """Values AND indices on non-contiguous inputs, with ties (values drawn from 3 integers)
    and NaNs (first NaN wins), empty dims and every dim or several reduced."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    arr = sample(shape, "int64", rng).clip(-1, 1).astype(dtype)  # few values: many ties
    if dtype.startswith("float") and arr.size and data.draw(st.booleans()):
        arr.flat[rng.integers(0, arr.size, size=2)] = np.nan
    base, tbase = pair(arr)
    x, tx = STRIDED_VIEWS[view](base), STRIDED_VIEWS[view](tbase)
    n = x.dim()
    dims = data.draw(st.lists(st.integers(-n, n - 1), max_size=3).map(tuple))
    keepdim = data.draw(st.booleans())
    calls = [("amax", dims), ("max", None)] + [("max", d) for d in range(-n, n)]
    if dtype.startswith("float"):
        calls.append(("mean", dims))
    for name, d in calls:
        args = () if d is None else (d,)
        kw = {} if d is None else {"keepdim": keepdim}
        r = outcome(lambda: getattr(rt, name)(x, *args, **kw))
        t = outcome(lambda: getattr(torch, name)(tx, *args, **kw))
        assert r[0] == t[0], (name, d, r, t)
        if r[0] == "error":
            assert r[1] == t[1], (name, d)
            continue
        tol = {"rtol": SUM_RTOL[dtype], "atol": 1e-6} if name == "mean" else {}
        for ours, theirs in zip(*(v if isinstance(v, tuple) else (v,) for v in (r[1], t[1]))):
            check(ours, theirs, **tol)


def test_max_and_amax_read_strided_input_in_place(monkeypatch):
    """As torch's (no copy in the profile of ``x.t().amax(1)``), retorch's CPU max, amax and
    mean of a transposed, sliced or expanded tensor run no copy kernel."""
    from retorch.tensor.dispatch_stub import stub

    copies = []
    real = stub("copy").table["cpu"]
    monkeypatch.setitem(stub("copy").table, "cpu", lambda it: copies.append(it) or real(it))
    x, tx = pair(np.arange(60.0).reshape(6, 10) % 7)
    views = (lambda t: t.t(), lambda t: t[1:, ::3], lambda t: t[:1].expand(4, 10))
    for view in views:
        for dim in (0, 1):
            check(rt.amax(view(x), dim), view(tx).amax(dim))
            for ours, theirs in zip(rt.max(view(x), dim), view(tx).max(dim)):
                check(ours, theirs)
            check(rt.mean(view(x), dim), view(tx).mean(dim), rtol=1e-12)
        check(rt.max(view(x)), view(tx).max())
    assert copies == []

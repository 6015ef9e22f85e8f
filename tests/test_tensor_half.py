"""float16 and bfloat16 in retorch.tensor against torch on the CPU: conversion bit for bit
(all 65,536 bit patterns of each type widened to float32; float32 rounded to each type over
every half value, every midpoint between two neighbours (the ties that round to even) and
two million random float32 bit patterns), c10's promotion table, and ops computed in float32
and rounded once on store (elementwise: bit for bit; sums and matmul: the stated tolerance).

NaN: every NaN input gives a NaN, but which NaN bits depends on torch's code path (c10's scalar
``round_to_nearest_even`` gives 0x7FC0, the AVX2 ``Vectorized<BFloat16>`` conversion 0xFFFF;
float16 goes through the F16C instruction, which keeps part of the payload), so NaN outputs
are compared as NaN, not by payload."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import retorch.tensor as rt
from retorch.tensor import half as H

pytestmark = pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaIRAssumptionWarning")

PAIRS = [(rt.float16, torch.float16), (rt.bfloat16, torch.bfloat16)]
IDS = ["float16", "bfloat16"]
ALL_BITS = np.arange(1 << 16, dtype=np.uint16)


def torch_bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16).ravel()


def ours_bits(t: rt.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.contiguous().numpy()).view(np.uint16).ravel()


def from_bits(bits: np.ndarray, tdt) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).view(tdt)


def assert_same_bits(ours: np.ndarray, theirs: np.ndarray, ours_nan, theirs_nan):
    """Bit for bit where torch's value is not NaN; NaN exactly where torch's is NaN."""
    np.testing.assert_array_equal(ours_nan, theirs_nan)
    keep = ~np.asarray(theirs_nan)
    np.testing.assert_array_equal(ours[keep], theirs[keep])


@pytest.mark.parametrize(("d", "td"), PAIRS, ids=IDS)
def test_widening_all_65536_patterns_bit_for_bit(d, td):
    ours = H.to_float32(ALL_BITS, d)
    theirs = from_bits(ALL_BITS, td).float().numpy()
    assert_same_bits(ours.view(np.uint32), theirs.view(np.uint32), np.isnan(ours),
                     np.isnan(theirs))  # fmt: skip


def _float32_edges(d):
    """Every value of the type, every midpoint between neighbours (ties), a quarter either
    side of each midpoint, and float32 specials: as float32."""
    wide = H.to_float32(ALL_BITS, d)
    wide = np.unique(wide[np.isfinite(wide)])
    w64 = wide.astype(np.float64)
    mids = (w64[:-1] + w64[1:]) / 2
    quarter = (w64[1:] - w64[:-1]) / 4
    extra = np.array([0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x33000000, 0x33000001,
                      0x477FF000, 0x477FEFFF, 0x7F800000, 0xFF800000, 0x7FC00000],
                     dtype=np.uint32).view(np.float32)  # fmt: skip
    return np.concatenate([wide, mids, mids - quarter, mids + quarter, extra]).astype(np.float32)


@pytest.mark.parametrize(("d", "td"), PAIRS, ids=IDS)
def test_rounding_every_value_tie_and_edge_bit_for_bit(d, td):
    f = _float32_edges(d)
    f = np.concatenate([f, -f])
    ours = H.from_float32(f, d)
    theirs = torch_bits(torch.from_numpy(f).to(td))
    nan = np.isnan(f)
    assert_same_bits(ours, theirs, np.isnan(H.to_float32(ours, d)), nan)


@pytest.mark.parametrize(("d", "td"), PAIRS, ids=IDS)
def test_rounding_random_float32_patterns_bit_for_bit(d, td):
    rng = np.random.default_rng(29)
    f = rng.integers(0, 1 << 32, 2_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    ours = H.from_float32(f, d)
    theirs = torch_bits(torch.from_numpy(f).to(td))
    assert_same_bits(ours, theirs, np.isnan(H.to_float32(ours, d)), np.isnan(f))


@pytest.mark.parametrize(("d", "td"), PAIRS, ids=IDS)
def test_tensor_to_and_back_as_torch(d, td):
    """Through the copy kernel (``.to``): float32 -> half, half -> float32 and float64 ->
    half, which torch rounds twice (double -> float -> half, ``c10::convert``)."""
    f = _float32_edges(d)
    ours, theirs = rt.tensor(f).to(dtype=d), torch.from_numpy(f).to(td)
    nan = np.isnan(f)
    assert_same_bits(ours_bits(ours), torch_bits(theirs), np.isnan(ours.to(dtype=rt.float32)
                     .numpy()), nan)  # fmt: skip
    h = rt.from_numpy(ALL_BITS.view(np.float16)) if d is rt.float16 else None
    if h is not None:
        back = h.to(dtype=rt.float32).numpy()
        want = from_bits(ALL_BITS, td).float().numpy()
        assert_same_bits(back.view(np.uint32), want.view(np.uint32), np.isnan(back),
                         np.isnan(want))  # fmt: skip
    rng = np.random.default_rng(3)
    x = rng.standard_normal(100_000) * np.exp(rng.uniform(-20, 12, 100_000))
    x[:3] = [1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40, 1 + 2**-11]  # double rounding shows
    assert_same_bits(ours_bits(rt.tensor(x).to(dtype=d)), torch_bits(torch.from_numpy(x).to(td)),
                     False, False)  # fmt: skip


def test_promotion_table_as_torch():
    names = ["bool", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
    for a in names:
        for b in names:
            ours = rt.promote_types(getattr(rt, a), getattr(rt, b)).name
            theirs = str(torch.promote_types(getattr(torch, a), getattr(torch, b)))
            assert "torch." + ours == theirs, (a, b)


@pytest.mark.parametrize(("d", "td"), PAIRS, ids=IDS)
def test_result_type_with_scalars_and_0dim_as_torch(d, td):
    cases = [
        (lambda m, x, i: m.result_type(x, 2.5)),
        (lambda m, x, i: m.result_type(x, 3)),
        (lambda m, x, i: m.result_type(i, x[0])),
        (lambda m, x, i: m.result_type(x, i)),
    ]
    ours_x, ours_i = rt.tensor([1.0, 2.0], dtype=d), rt.tensor([1, 2])
    t_x, t_i = torch.tensor([1.0, 2.0], dtype=td), torch.tensor([1, 2])
    for case in cases:
        assert "torch." + case(rt, ours_x, ours_i).name == str(case(torch, t_x, t_i))
    assert (ours_x + 2.5).dtype is d and (ours_i + ours_x).dtype is d


def _halves(rng, shape, d):
    """Random values of the type, across its range, with a few specials."""
    x = (rng.standard_normal(shape) * np.exp(rng.uniform(-12, 10, shape))).astype(np.float32)
    x.reshape(-1)[:4] = [np.inf, -0.0, 6e-8, 65504.0][: x.size]
    return H.from_float32(x, d).view(d.np)


def _pair(bits, d, td):
    return H.tensor_from_bits(bits.view(np.uint16), d), from_bits(bits.view(np.uint16), td)


BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "add_alpha": lambda a, b: a.add(b, alpha=0.3),
    "add_scalar": lambda a, b: a + 1.1,
    "broadcast_t": lambda a, b: a.t() * b[:1],
    "maximum": lambda a, b: a.maximum(b),
}


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize(("d", "td"), PAIRS, ids=IDS)
def test_elementwise_bit_for_bit(d, td, op):
    """torch's CPU kernels widen each element to float32, compute, and round once when they
    store; retorch's opmath wrappers do the same, so every result bit agrees."""
    rng = np.random.default_rng(7)
    a, ta = _pair(_halves(rng, (64, 64), d), d, td)
    b, tb = _pair(_halves(rng, (64, 64), d), d, td)
    ours, theirs = BINARY[op](a, b), BINARY[op](ta, tb)
    assert ours.dtype is d and theirs.dtype == td
    assert_same_bits(ours_bits(ours), torch_bits(theirs),
                     np.isnan(ours.to(dtype=rt.float32).numpy()).ravel(),
                     torch.isnan(theirs).contiguous().numpy().ravel())  # fmt: skip


@pytest.mark.parametrize(("d", "td"), PAIRS, ids=IDS)
def test_unary_compare_where_gather_as_torch(d, td):
    rng = np.random.default_rng(8)
    a, ta = _pair(_halves(rng, (8, 33), d), d, td)
    # (values: torch's relu keeps -0.0, retorch's gives +0.0, in float32 as well)
    assert np.array_equal(a.relu().to(dtype=rt.float32).numpy(), ta.relu().float().numpy())
    assert np.array_equal(ours_bits(-a), torch_bits(-ta))
    assert np.array_equal((a > 0.5).numpy(), (ta > 0.5).numpy())
    assert np.array_equal(ours_bits(rt.where(a > 0, a, a * 2)), torch_bits(torch.where(ta > 0,
                          ta, ta * 2)))  # fmt: skip
    idx = rng.integers(0, 33, (8, 5))
    got = a.gather(1, rt.tensor(idx))
    assert np.array_equal(ours_bits(got), torch_bits(ta.gather(1, torch.from_numpy(idx))))
    np.testing.assert_array_equal(a.max().to(dtype=rt.float32).numpy(), ta.max().float().numpy())


def test_opmath_sum_rounds_once_as_torch():
    """4096 ones: rounded after each step, a float16 sum stops at 2048 (2048 + 1 is a tie,
    rounded to even); torch and retorch accumulate in float32 and give 4096."""
    ours = rt.ones(4096).to(dtype=rt.float16).sum()
    theirs = torch.ones(4096, dtype=torch.float16).sum()
    assert float(ours.to(dtype=rt.float32).numpy()) == theirs.item() == 4096.0
    step = np.float16(0)
    for _ in range(4096):
        step = np.float16(step + np.float16(1))
    assert step == 2048.0


def ulp_distance(ours_bits16, theirs_bits16) -> np.ndarray:
    """Per element, how many 16-bit values apart two results are (sign-magnitude patterns
    mapped to ordered integers: adjacent values differ by 1, +0 and -0 are equal)."""

    def ordered(b):
        b = np.asarray(b, dtype=np.uint16).astype(np.int64)
        return np.where(b & 0x8000, -(b & 0x7FFF), b)

    return np.abs(ordered(ours_bits16) - ordered(theirs_bits16))


@pytest.mark.parametrize(("d", "td"), PAIRS, ids=IDS)
def test_sum_and_matmul_within_one_ulp_per_element(d, td):
    """Sums and matmul accumulate in float32 on both sides, in different orders (torch:
    cascade sum, oneDNN/blocked GEMM; retorch: its own loops): the float32 results differ
    by float32 rounding only, so each rounded element is torch's or one of its two 16-bit
    neighbours (one unit in the last place of that element, not of the largest). A sum
    rounded to 16 bits after every addition is several units off (the plant this catches)."""
    rng = np.random.default_rng(9)
    x = H.from_float32(rng.standard_normal((48, 400)).astype(np.float32), d).view(d.np)
    w = H.from_float32(rng.standard_normal((400, 24)).astype(np.float32), d).view(d.np)
    (a, ta), (b, tb) = _pair(x, d, td), _pair(w, d, td)
    for ours, theirs in [(a.sum(), ta.sum()), (a.sum(1), ta.sum(1)), (a.sum(0), ta.sum(0)),
                         (a @ b, ta @ tb)]:  # fmt: skip
        assert ours.dtype is d and theirs.dtype == td
        assert ulp_distance(ours_bits(ours), torch_bits(theirs)).max() <= 1


@given(st.lists(st.integers(0, (1 << 32) - 1), min_size=1, max_size=64))
def test_hypothesis_float32_to_both_types(words):
    f = np.array(words, dtype=np.uint32).view(np.float32)
    for d, td in PAIRS:
        ours = ours_bits(rt.tensor(f).to(dtype=d))
        theirs = torch_bits(torch.from_numpy(f).to(td))
        assert_same_bits(ours, theirs, np.isnan(H.to_float32(ours, d)), np.isnan(f))


@given(st.lists(st.integers(0, (1 << 16) - 1), min_size=2, max_size=40), st.sampled_from(IDS))
def test_hypothesis_add_mul_bit_for_bit(words, name):
    d, td = PAIRS[IDS.index(name)]
    bits = np.array(words, dtype=np.uint16)
    a, ta = _pair(bits.view(d.np), d, td)
    b, tb = _pair(bits[::-1].copy().view(d.np), d, td)
    for ours, theirs in [(a + b, ta + tb), (a * b, ta * tb)]:
        o = ours_bits(ours)
        assert_same_bits(o, torch_bits(theirs), np.isnan(H.to_float32(o, d)),
                         torch.isnan(theirs).numpy().ravel())  # fmt: skip


def test_bfloat16_storage_is_the_top_half_of_a_float32():
    x = rt.tensor([1.0, -2.5, 3.140625]).to(dtype=rt.bfloat16)
    assert x.element_size() == 2 and x.numpy().dtype == np.uint16
    top = np.array([1.0, -2.5, 3.140625], dtype=np.float32).view(np.uint32) >> 16
    np.testing.assert_array_equal(x.numpy(), top.astype(np.uint16))


@pytest.mark.parametrize(("d", "td"), PAIRS, ids=IDS)
def test_factories_round_python_floats_twice_as_torch(d, td):
    """A Python float (a double) becomes a 16-bit value through float32 in torch
    (``c10::convert``; Half and BFloat16 are built from a float): 1 + 2**-11 + 2**-40 is just
    above a float16 tie, but its float32 is the tie itself, which rounds to even."""
    vals = [1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40, 0.1, 65519.99, 1e-8, -3e38]
    assert np.array_equal(ours_bits(rt.tensor(vals, dtype=d)),
                          torch_bits(torch.tensor(vals, dtype=td)))  # fmt: skip
    assert np.array_equal(ours_bits(rt.full((3,), vals[0], dtype=d)),
                          torch_bits(torch.full((3,), vals[0], dtype=td)))  # fmt: skip
    assert rt.tensor(vals, dtype=d).tolist() == torch.tensor(vals, dtype=td).tolist()


@pytest.mark.parametrize(("d", "td"), PAIRS, ids=IDS)
def test_add_alpha_on_strided_inputs_rounds_twice_as_torch(d, td):
    """A strided operand sends torch's add/sub with alpha to cpu_kernel_vec's scalar loop,
    ``self + alpha * other`` in 16-bit arithmetic: the product is rounded to the 16-bit type
    before the sum. retorch mirrors it: every bit agrees on an odd size (10,001) and for
    sub (alpha negated)."""
    rng = np.random.default_rng(11)
    y = (rng.standard_normal((2, 2 * 10_001)) * 100).astype(np.float32)
    a, b = (rt.tensor(v).to(dtype=d)[::2] for v in y)
    ta, tb = (torch.from_numpy(v).to(td)[::2] for v in y)
    for ours, theirs in [(a.add(b, alpha=0.3), ta.add(tb, alpha=0.3)),
                         (a.sub(b, alpha=0.3), ta.sub(tb, alpha=0.3)),
                         (b.add(a, alpha=-1.7), tb.add(ta, alpha=-1.7))]:  # fmt: skip
        assert np.array_equal(ours_bits(ours), torch_bits(theirs))


@pytest.mark.parametrize(("d", "td"), PAIRS, ids=IDS)
def test_add_alpha_contiguous_odd_size_differs_only_in_torchs_scalar_tail(d, td):
    """Contiguous inputs take torch's vectorized loop (one rounding, as retorch) except the
    last ``n % (2 * vector width)`` elements, which its scalar loop rounds twice: retorch
    does not mirror that tail (its position depends on the CPU's vector width and, past one
    grain of 32,768 elements, on the thread count). On 10,001 elements (10,001 % 32 and
    10,001 % 64 are both 17) torch run on one thread differs only in the last 17."""
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((2, 10_001)) * 100).astype(np.float32)
    a, b = (rt.tensor(v).to(dtype=d) for v in x)
    ta, tb = (torch.from_numpy(v).to(td) for v in x)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        theirs = ta.add(tb, alpha=0.3)
    finally:
        torch.set_num_threads(threads)
    differ = np.flatnonzero(ours_bits(a.add(b, alpha=0.3)) != torch_bits(theirs))
    assert differ.size == 0 or differ.min() >= 10_001 - 17

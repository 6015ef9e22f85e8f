"""The CPU loops' chunking against torch, on the sizes where chunking goes wrong.

``cpu_kernels`` cuts each row of an iteration into tasks of ``GRAIN`` elements (the reductions
into chunks of ``_CHUNK``), and runs a threaded loop only from ``GRAIN_SIZE`` elements up. A
chunk count rounded down, a last chunk cut short or a row start computed from the wrong dim
leaves elements unwritten or unread only at sizes that are not a multiple of the chunk, on
rows longer than one chunk, or on strided rows. So sizes here are drawn around multiples of
both (one to three chunks, a few elements either side), on contiguous, transposed, sliced and
broadcast operands of every dtype, and compared with torch exactly (the ops are exact: add,
sub, mul, maximum, neg, relu, comparisons, where, copies with casts; the sums of integers are
exact, of floats within a stated tolerance)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch.tensor as rt
from retorch.tensor import cpu_kernels

pytestmark = pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaIRAssumptionWarning")

DTYPES = ["bool", "int32", "int64", "float32", "float64"]
GRAIN, CHUNK, GRAIN_SIZE = cpu_kernels.GRAIN, cpu_kernels._CHUNK, cpu_kernels.GRAIN_SIZE


def near_chunks(chunk):
    """A row length of one to three chunks, a few elements off a multiple (or on one)."""
    return st.builds(lambda k, d: k * chunk + d, st.integers(1, 3), st.integers(-3, 3))


def values(shape, dtype, rng):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return (rng.standard_normal(shape) + 3).astype(dtype)  # never 0: unwritten shows


def pair(arr):
    return rt.from_numpy(np.array(arr)), torch.from_numpy(np.array(arr))


def same(ours, theirs, rtol=0.0):
    assert ours.dtype.name == str(theirs.dtype).removeprefix("torch.")
    assert ours.shape == tuple(theirs.shape)
    assert ours.stride() == theirs.stride()
    if rtol:
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=rtol)
    else:
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


#: layouts of an operand with rows of ``n`` elements: (shape of the array made, view of it)
LAYOUTS = {
    "contiguous": (lambda n: (n,), lambda t: t),
    "rows": (lambda n: (2, n), lambda t: t),  # two rows: the row start of each task
    "transposed": (lambda n: (n, 3), lambda t: t.t()),  # strided rows (stride 3)
    "sliced": (lambda n: (2 * n + 1,), lambda t: t[1::2]),  # stride 2, offset 1
    "size-1 dim": (lambda n: (1, n), lambda t: t),
}
#: the layouts of one row, which broadcast against any of LAYOUTS (stride 0 across its rows)
ROWS = ["contiguous", "sliced", "size-1 dim"]


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(
    near_chunks(GRAIN),
    st.sampled_from(ROWS),
    st.sampled_from(sorted(LAYOUTS)),
    st.sampled_from(DTYPES),
    st.integers(0, 2**31),
)
def test_elementwise_ops_write_every_element(n, layout_a, layout_b, dtype, seed):
    rng = np.random.default_rng(seed)
    (shape_a, view_a), (shape_b, view_b) = LAYOUTS[layout_a], LAYOUTS[layout_b]
    a, ta = (view_a(t) for t in pair(values(shape_a(n), dtype, rng)))
    b, tb = (view_b(t) for t in pair(values(shape_b(n), dtype, rng)))
    same(rt.eq(a, b), torch.eq(ta, tb))
    same(rt.gt(b, a), torch.gt(tb, ta))
    same(rt.where(rt.gt(a, b), a, b), torch.where(torch.gt(ta, tb), ta, tb))
    same(b.contiguous(), tb.contiguous())  # copy_loop
    same(b.to(rt.float64), tb.to(torch.float64))  # copy_loop with a cast
    if dtype == "bool":
        return
    for ours, theirs in [(rt.add, torch.add), (rt.sub, torch.sub), (rt.mul, torch.mul),
                         (rt.maximum, torch.maximum)]:  # fmt: skip
        same(ours(a, b), theirs(ta, tb))
        same(ours(b, a), theirs(tb, ta))
    same(rt.neg(b), torch.neg(tb))
    same(rt.relu(b), torch.relu(tb))
    out, tout = pair(np.zeros(tuple(tb.shape), dtype="float64"))
    same(rt.add(b, a, alpha=2, out=out), torch.add(tb, ta, alpha=2, out=tout))


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(near_chunks(CHUNK), st.sampled_from(sorted(LAYOUTS)), st.sampled_from(DTYPES), st.data())
def test_sums_read_every_element(n, layout, dtype, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    make, view = LAYOUTS[layout]
    x, tx = (view(t) for t in pair(values(make(n), dtype, rng)))
    dims = [None] + list(range(x.dim()))
    dim = data.draw(st.sampled_from(dims))
    ours, theirs = (rt.sum(x), torch.sum(tx)) if dim is None else (rt.sum(x, dim), tx.sum(dim))
    same(ours, theirs, rtol=1e-5 if dtype == "float32" else 1e-12 if dtype == "float64" else 0)


@pytest.mark.parametrize("n", [GRAIN_SIZE - 1, GRAIN_SIZE, GRAIN_SIZE + 1, 2 * GRAIN + 7])
def test_the_serial_and_threaded_loops_agree_at_the_switch(n):
    """``_pick`` runs the serial twin below GRAIN_SIZE elements and the threaded loop from it
    on: both must write every element of a row longer than one GRAIN."""
    rng = np.random.default_rng(n)
    a, ta = pair(values((n,), "float32", rng))
    b, tb = pair(values((n,), "float32", rng))
    same(rt.add(a, b, alpha=2), torch.add(ta, tb, alpha=2))
    same(rt.add(a.view(1, n).t(), b.view(n, 1)), torch.add(ta.view(1, n).t(), tb.view(n, 1)))

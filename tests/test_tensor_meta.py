"""retorch.tensor on device "meta": the same ops, shape-only, against torch's ``device="meta"``.

For random shapes, dtypes and layouts (contiguous, permuted, strided slices) each op's output
has torch's sizes, strides and dtype, and the layout retorch's CPU run of the same op gives; or
both raise the same exception type with the same message. Exact comparisons: no tolerance.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch.tensor as rt

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow

DTYPES = ["float32", "float64", "int64", "int32", "bool"]
FLOATS = ["float32", "float64"]


class Lib:
    """The spellings that differ between retorch.tensor and torch."""

    def __init__(self, ours: bool, device: str = "meta"):
        self.mod, self.ours, self.device = (rt if ours else torch), ours, device

    def empty(self, shape, dtype):
        d = getattr(rt, dtype) if self.ours else getattr(torch, dtype)
        if self.device == "cpu":  # values, for the CPU run: zeros (no op here reads them)
            return self.mod.zeros(tuple(shape), dtype=d, device="cpu")
        return self.mod.empty(tuple(shape), dtype=d, device=self.device)

    def make(self, shape, dtype, layout):
        """A tensor of ``shape`` laid out as ``layout`` says."""
        shape = tuple(shape)
        if layout == "permuted" and len(shape) >= 2:
            return self.empty(shape[::-1], dtype).permute(*reversed(range(len(shape))))
        if layout == "sliced" and len(shape) >= 1:
            return self.empty((2 * shape[0] + 1,) + shape[1:], dtype)[1::2]
        return self.empty(shape, dtype)

    def where(self, c, a, b):
        return self.mod.where(c, a, b)


def addressing_strides(r):
    """The strides that place elements: those of dims of size 2 or more (a size-0 or size-1
    dim's stride never enters an address, and torch's meta and CPU paths set it differently;
    an empty tensor has no address at all: None)."""
    if r.numel() == 0:
        return None
    return tuple(s if n > 1 else None for n, s in zip(r.shape, r.stride()))


def describe(r):
    """What a meta result is: sizes, the strides that place elements, dtype."""
    if isinstance(r, tuple):
        return tuple(describe(x) for x in r)
    dtype = r.dtype.name if isinstance(r, rt.Tensor) else str(r.dtype).replace("torch.", "")
    return tuple(r.shape), addressing_strides(r), dtype


def outcome(fn, lib):
    try:
        r = fn(lib)
    except Exception as e:  # noqa: BLE001  (any exception: its type and message are compared)
        return "raises", type(e).__name__, str(e)
    return "returns", describe(r)


def same_on_meta(fn):
    """``fn(lib)`` on retorch's meta equals it on torch's meta (the result's layout, or the
    error); where it returns, the result holds no data, and the same op on retorch's CPU lays
    its output out as torch's CPU does."""
    ours, theirs = outcome(fn, Lib(True)), outcome(fn, Lib(False))
    assert ours == theirs
    if ours[0] == "returns":
        got = fn(Lib(True))
        for t in got if isinstance(got, tuple) else (got,):
            assert t.device == "meta" and t.untyped_storage()._data is None
        cpu, torch_cpu = outcome(fn, Lib(True, "cpu")), outcome(fn, Lib(False, "cpu"))
        assert cpu == torch_cpu
    return ours


dims = st.integers(0, 3)
shapes = st.lists(dims, max_size=3).map(tuple)
layouts = st.sampled_from(["contiguous", "permuted", "sliced"])


@st.composite
def broadcast_partner(draw, shape):
    """A shape that usually broadcasts with ``shape``: each dim kept, set to 1 or redrawn,
    leading dims dropped or added."""
    out = [draw(st.sampled_from([n, 1, n, draw(dims)])) for n in shape]
    out = out[draw(st.integers(0, len(out))) :]
    return tuple([draw(dims) for _ in range(draw(st.integers(0, 1)))] + out)


BINARY = {
    "add": lambda L, a, b: a + b,
    "sub": lambda L, a, b: a - b,
    "mul": lambda L, a, b: a * b,
    "div": lambda L, a, b: a / b,
    "maximum": lambda L, a, b: L.mod.maximum(a, b),
    "gt": lambda L, a, b: a > b,
    "eq": lambda L, a, b: a == b,
    "and": lambda L, a, b: (a > 0) & (b > 0),
}


@settings(max_examples=60, deadline=None)
@given(data=st.data(), op=st.sampled_from(sorted(BINARY)))
def test_elementwise_broadcasting_and_promotion(data, op):
    sa = data.draw(shapes, label="a")
    sb = data.draw(broadcast_partner(sa), label="b")
    da, db = data.draw(st.sampled_from(DTYPES)), data.draw(st.sampled_from(DTYPES))
    if op == "sub" and "bool" in (da, db) and da != db:
        db = da  # torch's meta sub lets one bool operand through (its CPU kernel refuses)
    la, lb = data.draw(layouts), data.draw(layouts)
    same_on_meta(lambda L: BINARY[op](L, L.make(sa, da, la), L.make(sb, db, lb)))


@pytest.mark.parametrize(
    "what",
    ["a > 0", "a + 1", "a * rt.tensor(2.0)", "(a > 0) & (b > 0)", "a + b"],
)
def test_cpu_scalars_take_no_part_in_the_output_layout(what):
    """A permuted (2, 1, 1) that is contiguous once its size-1 dims are ignored: torch's meta
    refs drop CPU scalars (Python numbers, 0-dim CPU tensors) before they look for a layout,
    so ``a > 0`` comes out contiguous, (1, 1, 1), where TensorIterator on CPU keeps (1, 2, 2)
    (a case hypothesis found)."""

    def run(L):
        a = L.make((2, 1, 1), "float32", "permuted")
        b = L.make((1, 2), "float32", "permuted")
        return eval(what, {"a": a, "b": b, "rt": L.mod})  # noqa: S307  (fixed strings above)

    ours, theirs = run(Lib(True)), run(Lib(False))
    assert (tuple(ours.shape), ours.stride()) == (tuple(theirs.shape), theirs.stride())


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_where_and_python_numbers(data):
    sc = data.draw(shapes, label="cond")
    sa, sb = data.draw(broadcast_partner(sc)), data.draw(broadcast_partner(sc))
    da = data.draw(st.sampled_from(DTYPES))
    number, lc = data.draw(st.sampled_from([2, 2.5, True])), data.draw(layouts)
    same_on_meta(
        lambda L: L.where(L.make(sc, "bool", lc), L.make(sa, da, "sliced"), L.make(sb, da, ""))
    )
    same_on_meta(lambda L: L.make(sa, da, "permuted") * number)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(0, 3), min_size=1, max_size=3).map(tuple),
    data=st.data(),
    layout=layouts,
)
def test_reductions(shape, data, layout):
    n = len(shape)
    dim = data.draw(st.integers(-n - 1, n), label="dim")  # sometimes out of range
    keepdim = data.draw(st.booleans())
    dtype = data.draw(st.sampled_from(FLOATS))
    same_on_meta(lambda L: L.make(shape, dtype, layout).sum(dim, keepdim=keepdim))
    same_on_meta(lambda L: L.make(shape, dtype, layout).sum())
    same_on_meta(lambda L: L.make(shape, "int32", layout).sum(dim))  # int sums are int64
    same_on_meta(lambda L: L.make(shape, dtype, layout).mean(dim, keepdim=keepdim))
    same_on_meta(lambda L: L.make(shape, "int64", layout).mean())
    same_on_meta(lambda L: L.make(shape, dtype, layout).amax(dim, keepdim=keepdim))
    if all(shape):  # torch's meta max() of an empty tensor returns; its CPU kernel refuses
        same_on_meta(lambda L: tuple(L.make(shape, dtype, layout).max(dim, keepdim=keepdim)))


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple), data=st.data())
def test_softmax_layouts(shape, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))  # torch's meta does not check dim
    layout, dtype = data.draw(layouts), data.draw(st.sampled_from(FLOATS))
    same_on_meta(lambda L: L.make(shape, dtype, layout).softmax(dim))
    same_on_meta(lambda L: L.make(shape, dtype, layout).log_softmax(dim))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_matmul_mm_bmm_mv_dot(data):
    n, k, m, b = (data.draw(st.integers(0, 3)) for _ in range(4))
    k2 = data.draw(st.sampled_from([k, k, k + 1]))  # sometimes the inner sizes differ
    dtype, la, lb = data.draw(st.sampled_from(FLOATS)), data.draw(layouts), data.draw(layouts)
    rank_a, rank_b = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    sa = ((b,) * (rank_a - 2) + (n, k))[-rank_a:] if rank_a > 1 else (k,)
    sb = ((b,) * (rank_b - 2) + (k2, m))[-rank_b:] if rank_b > 1 else (k2,)
    same_on_meta(lambda L: L.make(sa, dtype, la) @ L.make(sb, dtype, lb))
    same_on_meta(lambda L: L.make(sa, dtype, la).mm(L.make(sb, dtype, lb)))
    same_on_meta(lambda L: L.make((b, n, k), dtype, la).bmm(L.make((b, k2, m), dtype, lb)))
    same_on_meta(lambda L: L.make(sa, dtype, la).mv(L.make(sb, dtype, lb)))
    same_on_meta(lambda L: L.make(sa, dtype, la).dot(L.make(sb, dtype, lb)))


def _double(x):
    return x.to(dtype=rt.float64 if isinstance(x, rt.Tensor) else torch.float64)


#: name -> (strategy of the arguments for a tensor of rank n, the view given them)
VIEWS = {
    "view": (lambda n: st.sampled_from([(-1,), (1, -1), (2, -1), (4,)]), lambda x, a: x.view(a)),
    "reshape": (lambda n: st.sampled_from([(-1,), (1, -1), (-1, 2), (3,)]), lambda x, a: x.reshape(a)),
    "transpose": (lambda n: st.tuples(st.integers(-3, 2), st.integers(-3, 2)), lambda x, a: x.transpose(*a)),
    "t": (lambda n: st.none(), lambda x, a: x.t()),
    "permute": (lambda n: st.permutations(range(n)), lambda x, a: x.permute(*a)),
    "permute_dup": (lambda n: st.none(), lambda x, a: x.permute(*([0] * x.dim()))),
    "expand": (lambda n: st.integers(1, 3), lambda x, a: x.expand(a, *x.shape)),
    "expand_bad": (lambda n: st.none(), lambda x, a: x.expand(*(s + 1 for s in x.shape))),
    "unsqueeze": (lambda n: st.integers(-4, 3), lambda x, a: x.unsqueeze(a)),
    "squeeze": (lambda n: st.integers(-3, 2), lambda x, a: x.squeeze(a)),
    "squeeze_all": (lambda n: st.none(), lambda x, a: x.squeeze()),
    "narrow": (lambda n: st.tuples(st.integers(-2, 1), st.integers(0, 2)), lambda x, a: x.narrow(a[0], a[1], 1)),
    "select": (lambda n: st.tuples(st.integers(-2, 1), st.integers(-2, 2)), lambda x, a: x.select(*a)),
    "slice": (lambda n: st.none(), lambda x, a: x[..., 1::2]),
    "flatten": (lambda n: st.none(), lambda x, a: x.flatten()),
    "contiguous": (lambda n: st.none(), lambda x, a: x.contiguous()),
    "clone": (lambda n: st.none(), lambda x, a: x.clone()),
    "to_double": (lambda n: st.none(), lambda x, a: _double(x)),
}  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(
    shape=st.lists(st.integers(0, 3), min_size=1, max_size=3).map(tuple),
    layout=layouts,
    view=st.sampled_from(sorted(VIEWS)),
    data=st.data(),
)
def test_views_and_copies(shape, layout, view, data):
    args_of, fn = VIEWS[view]
    args = data.draw(args_of(len(shape)), label="args")
    same_on_meta(lambda L: fn(L.make(shape, "float32", layout), args))


# ---------------------------------------------------------------- no data, and reading it


def test_storage_has_the_size_but_no_buffer():
    ours, theirs = rt.empty(4, 5, device="meta"), torch.empty(4, 5, device="meta")
    view, tview = ours[1:, 2:], theirs[1:, 2:]
    assert view.untyped_storage() is ours.untyped_storage()
    assert ours.untyped_storage()._data is None
    assert view.untyped_storage().nbytes() == tview.untyped_storage().nbytes() == 80
    assert view.data_ptr() == tview.data_ptr() == 28  # a null pointer plus the offset in bytes
    huge = rt.empty(2**20, 2**20, device="meta")  # 4 TiB: nothing is allocated
    assert huge.untyped_storage().nbytes() == 4 * 2**40 and huge.is_meta
    assert (huge @ huge).shape == (2**20, 2**20)
    assert ours.type() == theirs.type() == "torch.meta.FloatTensor"
    for x, y in ((ours, theirs), (rt.empty(2, dtype=rt.int64, device="meta"),
                                  torch.empty(2, dtype=torch.int64, device="meta"))):  # fmt: skip
        assert repr(x) == repr(y).replace("torch.", "retorch.")
    assert rt.ones(2, 3).t().to("meta").stride() == torch.ones(2, 3).t().to("meta").stride()


READS = {
    "numpy": lambda L: L.make((2, 3), "float32", "").numpy(),
    "item": lambda L: L.make((), "float32", "").item(),
    "item_many": lambda L: L.make((3,), "float32", "").item(),
    "bool": lambda L: bool(L.make((), "float32", "")),
    "float": lambda L: float(L.make((1,), "float32", "")),
    "tolist": lambda L: L.make((2,), "float32", "").tolist(),
    "cpu": lambda L: L.make((2,), "float32", "").cpu(),
    "copy_out": lambda L: L.mod.ones(2).copy_(L.make((2,), "float32", "")),
    "mixed_devices": lambda L: L.make((2,), "float32", "") + L.mod.ones(2),
}


@pytest.mark.parametrize("read", sorted(READS))
def test_reading_values_raises_as_torch(read):
    ours, theirs = outcome(READS[read], Lib(True)), outcome(READS[read], Lib(False))
    assert ours[0] == "raises" and ours == theirs

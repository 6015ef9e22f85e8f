"""The host fast paths of issue 28 give what the full paths give.

- ``TensorIterator.fast_binary_op`` (same shape, dtype and device, contiguous, no ``out=``)
  against ``TensorIteratorConfig.build()`` with the binary-op config, field by field, and
  ``None`` wherever one of its conditions fails;
- ``ops.<ns>.<name>`` cached as torch/_ops.py caches it, dropped when its ``define`` is undone;
- the autograd kernels' early return when no input needs a gradient, and their positional
  stack, against the boxed stack ``schema.bind`` builds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch.tensor as rt
from retorch.dispatch import Tensor, aten
from retorch.dispatch import tensor as rtensor
from retorch.dispatch._ops import ops
from retorch.dispatch.library import _scoped_library
from retorch.tensor.dtype import bool_
from retorch.tensor.tensor_iterator import TensorIterator, TensorIteratorConfig

DTYPES = [rt.float32, rt.float64, rt.int64, rt.int32, bool_]


def _config(out, inputs, static_dtype=None, integer_to_float=False):
    cfg = TensorIteratorConfig().add_output(out)
    for t in inputs:
        cfg.add_input(t)
    cfg.promote_inputs_to_common_dtype_ = True
    cfg.cast_common_dtype_to_outputs_ = True
    cfg.enforce_safe_casting_to_output_ = True
    cfg.promote_integer_inputs_to_float_ = integer_to_float
    cfg.static_dtype = static_dtype
    return cfg


def _state(it):
    """Everything a kernel or a later step reads from an iterator."""
    out = it.output()
    shape, strides = it.kernel_args()[2:]
    return dict(
        shape=list(it.shape),
        perm=list(it.perm),
        device=it.device,
        common_dtype=it.common_dtype,
        noutputs=it.noutputs,
        is_reduction=it.is_reduction,
        operands=[(op.is_output, list(op.stride_bytes), op.tensor.dtype) for op in it.operands],
        values=[op.tensor.tolist() for op in it.operands[1:]],
        out=(out.shape, out.stride(), out.dtype, out.device, out.storage_offset()),
        kernel_shape=shape.tolist(),
        # (a 0-dim op reads element 0 only: any stride will do)
        kernel_strides=strides.tolist() if it.shape else None,
        numel=it.numel(),
    )


@st.composite
def operands(draw):
    """(a, b) and torch's (ta, tb) with the same values, shapes, strides and dtypes; b may be
    a 0-dim tensor or a wrapped Python number."""
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=3)))
    da, db = draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES))
    kind = draw(st.sampled_from(["same", "broadcast", "zero-dim", "python"]))
    other = {"same": shape, "zero-dim": (), "python": ()}.get(kind)
    if other is None:
        other = tuple(draw(st.lists(st.integers(1, 3), max_size=3)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    xa = rng.integers(1, 5, shape).astype(da.np)
    xb = rng.integers(1, 5, other).astype(db.np)
    a, ta = rt.from_numpy(xa), torch.from_numpy(xa)
    b, tb = rt.from_numpy(xb), torch.from_numpy(xb)
    if kind == "python":  # a Python number: torch's wrapped number (int64, float64 or bool)
        value = True if db is bool_ else (2.5 if db.is_floating_point else 3)
        b, tb = rt.scalar_tensor(value, wrapped=True), value
    if draw(st.booleans()) and a.dim() >= 2:  # same shape, not contiguous
        a = a.transpose(0, 1).contiguous().transpose(0, 1)
        ta = ta.transpose(0, 1).contiguous().transpose(0, 1)
    if draw(st.booleans()) and b.dim() >= 2:
        b = b.transpose(0, 1).contiguous().transpose(0, 1)
        tb = tb.transpose(0, 1).contiguous().transpose(0, 1)
    return a, b, ta, tb


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(operands(), st.sampled_from(["new", "in-place", "out", "static-bool", "to-float"]))
def test_fast_op_equals_the_full_build(ab, how):
    """Whenever fast_op answers, its iterator equals the one every step builds."""
    a, b, _, _ = ab
    out, static, to_float = None, None, how == "to-float"
    if how == "in-place":
        out = a
    elif how == "out":
        out = rt.empty(*a.shape, dtype=a.dtype)
    elif how == "static-bool":
        static = bool_
    fast = TensorIterator.fast_op(out, (a, b), static, to_float)
    if fast is None:
        return
    try:
        full = TensorIterator(_config(out, (a, b), static, to_float))
    except RuntimeError as e:  # the long way raises: the fast one must not have answered
        raise AssertionError(f"fast_op answered where build raises: {e}") from None
    assert _state(fast) == _state(full)


def _replayed(make_config):
    """(the iterator every step builds, the one replayed from its plan) for two configs of
    the same operands; None when the build leaves no plan."""
    full = TensorIterator(make_config())
    plan = full._plan(make_config())
    if plan is None:
        return None
    return full, TensorIterator._from_plan(make_config(), plan)


def _plan_state(it):
    state = _state(it)
    state["more"] = [(op.will_resize, op.target_dtype) for op in it.operands]
    state["flags"] = (it.all_ops_same_shape, it.resize_outputs, it._contiguous)
    return state


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(operands(), st.sampled_from(["new", "static-bool", "to-float", "reduction"]))
def test_plan_replay_equals_the_full_build(ab, how):
    """An iterator replayed from an earlier build's plan equals the one every step builds,
    for operands of any shape, strides and dtypes (casts, broadcasts, wrapped numbers)."""

    a, b, _, _ = ab
    if how == "reduction":
        if a.dim() == 0 or a.dtype is bool_:
            return
        out = rt.empty(*a.shape[1:], dtype=a.dtype).unsqueeze(0).expand(*a.shape)
        pair = _replayed(lambda: _reduction_config(out, a))
    else:
        static, to_float = (bool_ if how == "static-bool" else None), how == "to-float"
        try:
            TensorIterator(_config(None, (a, b), static, to_float))
        except RuntimeError:
            return  # (no plan is made where build raises)
        pair = _replayed(lambda: _config(None, (a, b), static, to_float))
    assert pair is not None
    assert _plan_state(pair[0]) == _plan_state(pair[1])
    if how != "reduction":  # (a reduction's output is given)
        assert pair[1].output() is not pair[0].output()  # a new output each time


def _reduction_config(out, a):
    cfg = TensorIteratorConfig().add_output(out).add_input(a)
    cfg.check_mem_overlap, cfg.resize_outputs_, cfg.is_reduction = False, False, True
    cfg.promote_inputs_to_common_dtype_ = True
    return cfg


@pytest.mark.parametrize(
    "case, inputs",
    [
        ("broadcast row", lambda: (_f(3, 4), _f(4))),
        ("transposed", lambda: (_f(4, 3).t(), _f(3, 4))),
        ("dtypes differ: a cast input", lambda: (_f(3), _f(3, dtype=np.float64))),
        ("int tensor, wrapped float", lambda: (_f(3, dtype=np.int64), rt.scalar_tensor(2.5, wrapped=True))),
        ("column and row", lambda: (_f(3, 1), _f(1, 4))),
    ],
)  # fmt: skip
def test_plans_are_replayed_and_keyed_by_metadata(case, inputs):
    from retorch.tensor import tensor_iterator as ti

    a, b = inputs()
    key = _config(None, (a, b))._plan_key()
    ti._PLANS.pop(key, None)
    first = rt.add(a, b)  # builds, and leaves its plan
    assert key in ti._PLANS, case
    again = rt.add(a, b)  # replayed
    assert again.tolist() == first.tolist() and again.stride() == first.stride()
    assert _config(None, (a.contiguous(), b))._plan_key() != key or a.is_contiguous()
    expected = torch.add(torch.from_numpy(a.numpy()), torch.from_numpy(b.numpy())
                         if b.dim() else b.item())  # fmt: skip
    assert again.stride() == expected.stride() and again.tolist() == expected.tolist()


def test_a_replayed_plan_still_checks_overlap_as_torch():
    """Step 0 compares storages, which no plan key holds: a plan made on operands that do not
    overlap is replayed for operands of the same metadata only after the overlap check."""
    from retorch.tensor import tensor_iterator as ti

    def operands(base, row):  # out = base[0:12] and an input base[4:16], as 3 x 4; a row (4,)
        return base[:12].view(3, 4), (base[4:].view(3, 4), row)

    out, inputs = operands(_f(16), _f(4))
    fine = _config(_f(16)[:12].view(3, 4), (_f(16)[4:].view(3, 4), _f(4)))  # no overlap
    assert fine._plan_key() == _config(out, inputs)._plan_key()
    ti._PLANS.pop(fine._plan_key(), None)
    fine.build()  # (a broadcast row: every step runs, and leaves its plan)
    assert fine._plan_key() in ti._PLANS
    tout, tinputs = operands(torch.arange(16.0), torch.arange(4.0))
    with pytest.raises(RuntimeError) as theirs:
        torch.add(*tinputs, out=tout)
    with pytest.raises(RuntimeError) as ours:
        _config(out, inputs).build()
    assert str(ours.value) == str(theirs.value)


def test_no_plan_where_build_reads_more_than_metadata():
    cfg = _config(None, (_f(3), _f(3)))
    cfg.trace = True
    assert cfg._plan_key() is None
    out = rt.empty(3, dtype="float64")  # copied back into an output of another dtype
    cfg = _config(out, (_f(3), _f(3)))
    cfg.check_mem_overlap = False
    assert TensorIterator(cfg)._plan(cfg) is None


def _f(*shape, dtype=np.float32):
    return rt.from_numpy(np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape))


@pytest.mark.parametrize(
    "case, out, inputs, taken",
    [
        ("same shape", None, lambda: (_f(3, 4), _f(3, 4)), True),
        ("unary", None, lambda: (_f(3, 4),), True),
        ("0-dim operands", None, lambda: (_f(), _f()), True),
        ("tensor and 0-dim of its dtype", None, lambda: (_f(3, 4), _f()), True),
        ("tensor and a wrapped float", None, lambda: (_f(3), rt.scalar_tensor(2.5, wrapped=True)), True),
        ("broadcast row", None, lambda: (_f(3, 4), _f(4)), False),
        ("transposed", None, lambda: (_f(4, 3).t(), _f(3, 4)), False),
        ("dtypes differ", None, lambda: (_f(3), _f(3, dtype=np.float64)), False),
        ("int tensor, wrapped float", None, lambda: (_f(3, dtype=np.int64), rt.scalar_tensor(2.5, wrapped=True)), False),
        ("0-dim first", None, lambda: (_f(), _f(3)), False),
        ("0-dim and a wrapped float", None, lambda: (_f(), rt.scalar_tensor(2.5, wrapped=True)), True),
        ("wrapped first", None, lambda: (rt.scalar_tensor(2.5, wrapped=True), _f()), False),
        ("no elements and a scalar", None, lambda: (_f(0, 2), _f()), False),
    ],
)  # fmt: skip
def test_fast_op_taken_exactly_where_meant(case, out, inputs, taken):
    assert (TensorIterator.fast_op(out, inputs(), None, False) is not None) == taken, case


def test_fast_op_with_outputs_given():
    a, b = _f(6), _f(6)
    assert TensorIterator.fast_op(a, (a, b), None, False) is not None  # x.add_(y)
    assert TensorIterator.fast_op(rt.empty(6), (a, b), None, False) is not None
    assert TensorIterator.fast_op(rt.empty(6, dtype="float64"), (a, b), None, False) is None
    base = _f(8)
    # overlapping in part: compute_mem_overlaps must see it, and raise as torch does
    assert TensorIterator.fast_op(base[:6], (base[2:], b), None, False) is None
    with pytest.raises(RuntimeError, match="some elements of the input tensor and"):
        rt.add(base[2:], b, out=base[:6])
    assert rt.add(a, b, out=a) is a and a.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


@pytest.mark.parametrize("name", ["add", "mul"])
def test_a_0_dim_view_of_the_output_is_a_partial_overlap_as_in_torch(name):
    """``x.mul_(x[0])``: the 0-dim input starts where the output does (same storage, same
    offset), yet overlaps it only in part; torch raises, in place and with ``out=``."""
    x, t = _f(3), torch.arange(3.0)
    assert TensorIterator.fast_op(x, (x, x[0]), None, False) is None
    for mine, torchs in (
        (lambda: getattr(rt.ops, name + "_")(x, x[0]), lambda: getattr(t, name + "_")(t[0])),
        (lambda: getattr(rt, name)(x, x[0], out=x), lambda: getattr(torch, name)(t, t[0], out=t)),
    ):
        with pytest.raises(RuntimeError) as theirs:
            torchs()
        with pytest.raises(RuntimeError, match="some elements of the input tensor and") as ours:
            mine()
        assert str(ours.value) == str(theirs.value)
    assert x.tolist() == t.tolist() == [0.0, 1.0, 2.0]


@settings(max_examples=100, deadline=None)
@given(operands(), st.sampled_from(["add", "sub", "mul", "div"]))
def test_ops_through_either_path_equal_torch(ab, name):
    a, b, ta, tb = ab
    if a.dtype is bool_ or b.dtype is bool_:
        return  # (sub of bools is an error in both; covered by test_tensor_ops)
    try:
        expected = getattr(torch, name)(ta, tb)
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match=str(e).split("(")[0][:30]):
            getattr(rt, name)(a, b)
        return
    ours = getattr(rt, name)(a, b)
    assert ours.dtype.name == str(expected.dtype).removeprefix("torch.")
    assert ours.shape == tuple(expected.shape) and ours.stride() == expected.stride()
    np.testing.assert_array_equal(ours.numpy(), expected.numpy())


def test_op_packets_are_cached_and_dropped_when_undefined():
    assert ops.aten.add is ops.aten.add  # one packet, as torch.ops.aten.add is one object
    assert ops.aten.add.Tensor is ops.aten.add.Tensor
    with _scoped_library("fastpath", "DEF") as lib:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: Tensor(rt.mul(x.data, 2)), "CPU")
        first = ops.fastpath.twice
        assert ops.fastpath.twice is first
        assert ops.fastpath.twice(rtensor([1.0, 2.0])).tolist() == [2.0, 4.0]
    with pytest.raises(AttributeError):
        ops.fastpath.twice  # noqa: B018  (undefined again: no stale packet)
    with _scoped_library("fastpath", "DEF") as lib:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: Tensor(rt.mul(x.data, 3)), "CPU")
        assert ops.fastpath.twice is not first
        assert ops.fastpath.twice(rtensor([1.0])).tolist() == [3.0]


@pytest.mark.parametrize("requires_grad", [False, True])
def test_autograd_kernel_positional_stack_equals_bound_stack(requires_grad):
    a = rtensor([1.0, 2.0], requires_grad=requires_grad)
    b = rtensor([3.0, 4.0])
    for out in (
        aten.add.Tensor(a, b),
        aten.add.Tensor(a, b, alpha=2),
        aten.add.Tensor(self=a, other=b, alpha=2),
    ):
        assert (out.grad_fn is not None) == requires_grad
    out = aten.add.Tensor(a, b, alpha=2)
    assert out.tolist() == [7.0, 10.0]
    if requires_grad:
        assert out.grad_fn.alpha == 2 and type(out.grad_fn).__name__ == "AddBackward0"
        assert aten.add.Tensor(a, b).grad_fn.alpha == 1  # the schema's default, as bind gives
        out.sum().backward()
        assert a.grad.tolist() == [1.0, 1.0]


def test_no_grad_input_records_nothing_and_grad_mode_off_records_nothing():
    from retorch.autograd import grad_mode

    a, b = rtensor([1.0]), rtensor([2.0], requires_grad=True)
    assert (a + a).grad_fn is None and not (a + a).requires_grad
    assert (a + b).grad_fn is not None  # the second input needs a gradient
    with grad_mode.no_grad():
        assert (b + b).grad_fn is None


@pytest.mark.parametrize("sizes, strides", [((0, 1, 2), (0, 0, 0)), ((3, 0, 2), (5, 7, 9))])
def test_a_tensor_of_no_elements_keeps_its_strides_as_torch(sizes, strides):
    """No elements: contiguous at any strides, hence dense, so empty_like and to() keep the
    strides (c10's refresh_contiguous), and an op's output follows from them as torch's."""
    t = torch.empty_strided(sizes, strides, dtype=torch.int64)
    ours = rt.empty_strided(sizes, strides, dtype=rt.int64)
    assert rt.empty_like(ours).stride() == torch.empty_like(t).stride()
    assert ours.to(dtype=rt.float32).stride() == t.to(torch.float32).stride()
    assert rt.add(ours, rt.tensor(4.0)).stride() == (t + torch.tensor(4.0)).stride()

"""Boxing (stacks from schemas, boxed kernels, boxed fallbacks) and the BackendSelect key of the
factories, against torch 2.13 (retorch/dispatch/boxing.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch.tensor as rt
from retorch.dispatch import (
    DispatchKey,
    IncludeDispatchKeyGuard,
    Tensor,
    _scoped_library,
    boxing,
    get_dispatcher,
)

FACTORIES = ["aten::empty.memory_format", "aten::zeros", "aten::arange.start_step"]


def _row(table: str, key: str) -> str:
    return next((ln.split(":", 1)[1] for ln in table.splitlines() if ln.startswith(key + ":")), "")


def _kind(row: str) -> tuple[str, bool]:
    return row.rsplit("[", 1)[-1].rstrip("]"), "fallthrough" in row


@pytest.mark.parametrize("name", FACTORIES + ["aten::add.Tensor", "aten::mul.Tensor"])
def test_backend_select_rows_match_torch(name):
    ours = get_dispatcher().find_schema_or_throw(name).dump_table()
    theirs = torch._C._dispatch_dump_table(name)
    assert _kind(_row(ours, "BackendSelect")) == _kind(_row(theirs, "BackendSelect"))
    assert _row(ours, "BackendSelect")  # both have a row


@pytest.mark.parametrize("name", FACTORIES)
def test_factory_schemas_are_torchs(name):
    ours = get_dispatcher().find_schema_or_throw(name).schema
    base, overload = name.split("::")[1].split(".") if "." in name else (name[6:], "default")
    theirs = getattr(getattr(torch.ops.aten, base), overload)._schema
    assert [a.name for a in ours.arguments] == [a.name for a in theirs.arguments]
    assert [a.kwarg_only for a in ours.arguments] == [a.kwarg_only for a in theirs.arguments]


def _made(t):
    vals = None if str(t.device) == "meta" else t.tolist()
    return str(t.device), str(t.dtype).split(".")[-1], tuple(t.shape), vals


sizes = st.lists(st.integers(0, 4), min_size=0, max_size=3)
devices = st.sampled_from([None, "cpu", "meta"])
dtypes = st.sampled_from([None, torch.float64, torch.float32, torch.int64])


@settings(max_examples=40, deadline=None)
@given(size=sizes, device=devices, dtype=dtypes)
def test_zeros_and_empty_reach_the_backend_of_their_options(size, device, dtype):
    d = get_dispatcher()
    kwargs = {k: v for k, v in (("device", device), ("dtype", dtype)) if v is not None}
    with d.trace() as seen:
        ours = d.find_schema_or_throw("aten::zeros")(size, **kwargs)
    assert _made(ours) == _made(torch.ops.aten.zeros.default(size, **kwargs))
    want = {None: "CPU", "cpu": "CPU", "meta": "Meta"}[device]
    assert [k for _, k in seen] == ["BackendSelect", want]
    empty = d.find_schema_or_throw("aten::empty.memory_format")(size, **kwargs)
    theirs = torch.ops.aten.empty.memory_format(size, **kwargs)
    assert _made(empty)[:3] == _made(theirs)[:3]


@settings(max_examples=40, deadline=None)
@given(
    start=st.integers(-5, 5),
    n=st.integers(0, 6),
    step=st.sampled_from([1, 2, 3, -1, -2, 0.5]),
    device=devices,
)
def test_arange_matches_torch(start, n, step, device):
    end = start + n * step
    kwargs = {} if device is None else {"device": device}
    ours = get_dispatcher().find_schema_or_throw("aten::arange.start_step")(
        start, end, step, **kwargs
    )
    theirs = torch.ops.aten.arange.start_step(start, end, step, **kwargs)
    assert _made(ours) == _made(theirs)


def test_backend_select_rejects_a_layout_it_lacks():
    with pytest.raises(RuntimeError, match="strided"):
        get_dispatcher().find_schema_or_throw("aten::zeros")([2], layout=torch.sparse_coo)


def _torch_stack(schema, args, kwargs):
    out = []
    for i, a in enumerate(schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out.append(args[i])
        elif a.name in kwargs:
            out.append(kwargs[a.name])
        else:
            out.append(a.default_value)
    return out


BOX_CASES = [
    ("aten::add.Tensor", ("x", "y"), {}),
    ("aten::add.Tensor", ("x", "y"), {"alpha": 3}),
    ("aten::sum.dim_IntList", ("x", [0]), {}),
    ("aten::sum.dim_IntList", ("x", [0, 1]), {"keepdim": True, "dtype": "f"}),
    ("aten::mean.dim", ("x", [1], True), {}),
    ("aten::zeros", ([2],), {"device": "meta"}),
    ("aten::arange.start_step", (0, 4), {"pin_memory": False}),
    ("aten::nll_loss", ("x", "t"), {"ignore_index": 3}),
    ("aten::linear", ("x", "w"), {}),
]


@pytest.mark.parametrize("name,args,kwargs", BOX_CASES)
def test_box_gives_torchs_schema_order_and_defaults(name, args, kwargs):
    schema = get_dispatcher().find_schema_or_throw(name).schema
    top = name.split("::")[1]
    base, overload = top.split(".") if "." in top else (top, "default")
    theirs = getattr(getattr(torch.ops.aten, base), overload)._schema
    stack = boxing.box(schema, args, kwargs)
    assert stack == _torch_stack(theirs, args, kwargs)
    assert boxing.unbox(schema, stack) == boxing.unbox(
        schema, boxing.box(schema, *boxing.unbox(schema, stack))
    )


def test_boxed_from_unboxed_runs_the_same_kernel():
    seen = []

    def unboxed(x, *, scale=1.0):
        seen.append(scale)
        return Tensor(rt.tensor(np.asarray(x.data.tolist()) * scale))

    with _scoped_library("boxdemo", "DEF") as lib:
        lib.define("scale(Tensor x, *, float scale=1.0) -> Tensor")
        lib.impl("scale", boxing.make_boxed_from_unboxed_functor(unboxed), "CPU")
        op = get_dispatcher().find_schema_or_throw("boxdemo::scale")
        x = Tensor(rt.tensor(np.arange(3.0)))
        assert op(x, scale=2.0).tolist() == [0.0, 2.0, 4.0]  # unboxed call, boxed kernel
        stack = op.call_boxed([x, 3.0])
        assert len(stack) == 1 and stack[0].tolist() == [0.0, 3.0, 6.0]
        assert op(x).tolist() == [0.0, 1.0, 2.0]  # default filled in by boxing
    assert seen == [2.0, 3.0, 1.0]


def test_logging_fallback_sees_every_op_with_its_stack():
    log = []
    a = Tensor(rt.tensor(np.arange(3.0)))
    with _scoped_library("_", "IMPL") as lib:
        lib.fallback(boxing.logging_fallback(DispatchKey.Tracer, log), "Tracer")
        with IncludeDispatchKeyGuard(DispatchKey.Tracer):
            out = (a + a).sum()
            z = get_dispatcher().find_schema_or_throw("aten::zeros")([2])
    assert [name for name, _ in log] == ["aten::add.Tensor", "aten::sum", "aten::zeros"]
    assert log[0][1][2] == 1 and log[0][1][0] is a and log[0][1][1] is a  # alpha filled in
    assert log[2][1] == [[2], None, None, None, None]
    assert out.item() == 6.0 and z.tolist() == [0.0, 0.0]
    log.clear()
    (a + a).sum()  # the library is gone: no fallback, no log
    assert log == []

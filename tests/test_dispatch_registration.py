"""Operators, dispatch tables and the call path beside torch's (OperatorEntry.cpp, Dispatcher.cpp).

Each case registers the same kernels in retorch and in torch (a FRAGMENT library in a scratch
namespace, destroyed after the case so it can run again) and compares the computed tables row
by row, then calls both and compares which kernel ran.
"""

import re

import pytest
import torch
import torch.library
from hypothesis import given
from hypothesis import strategies as st

from retorch.dispatch import library as rlib
from retorch.dispatch.dispatch_key import DispatchKey
from retorch.dispatch.dispatch_key_set import DispatchKeySet, tensor_key_set_for
from retorch.dispatch.dispatcher import Dispatcher
from retorch.dispatch.function_schema import parse_schema
from retorch.dispatch.local_dispatch_key_set import ExcludeDispatchKeyGuard

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow

NS = "rtdisp"
SCHEMA = "op(Tensor self, *, Scalar alpha=1) -> Tensor"
#: The rows compared: every key retorch models, fallbacks included.
ROWS = ["Undefined", "CPU", "CUDA", "Meta", "PrivateUse1", "SparseCPU", "QuantizedCPU",
        "NestedTensorCPU", "BackendSelect", "ADInplaceOrView", "AutogradOther", "AutogradCPU",
        "AutogradCUDA", "AutogradMeta", "AutogradPrivateUse1", "AutocastCPU", "AutocastCUDA"]  # fmt: skip
REGISTRABLE = ["CPU", "CUDA", "Meta", "PrivateUse1", "SparseCPU", "AutogradCPU",
               "AutogradPrivateUse1", "Autograd", "CompositeImplicitAutograd",
               "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional"]  # fmt: skip
ROW = re.compile(
    r"^(\w+): (fallthrough )?(?:registered at .*|ambiguous_autogradother) \[([\w ]+)\]$"
)


def _parse_dump(text: str) -> dict:
    rows = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            rows[m[1]] = (bool(m[2]), m[3])
    return {k: rows.get(k, (False, "missing")) for k in ROWS}


def _kernel(i):
    return lambda self, alpha=1: self * 0 + i


def _both(keys, fallthrough=()):
    """Register ``keys`` (kernel i returns i) in both; yield the two tables and callers."""
    d = Dispatcher.singleton()
    tlib = torch.library.Library(NS, "FRAGMENT")
    rl = rlib.Library(NS, "FRAGMENT")
    try:
        tlib.define(SCHEMA)
        rl.define(SCHEMA)
        registered = []
        for i, k in enumerate(keys):
            try:
                tlib.impl("op", _kernel(i), k)
            except RuntimeError as e:  # torch.library refuses Meta after CompositeImplicit
                with pytest.raises(RuntimeError, match=re.escape(str(e)[:60])):
                    rl.impl("op", _kernel(i), k)
                continue
            rl.impl("op", _kernel(i), k)
            registered.append(k)
        for k in fallthrough:
            tlib.impl("op", torch.library.fallthrough_kernel, k)
            rl.impl("op", rlib.fallthrough_kernel, k)
        theirs = _parse_dump(torch._C._dispatch_dump_table(f"{NS}::op"))
        handle = d.find_schema_or_throw(f"{NS}::op")
        ours = _parse_dump(handle.dump_table())
        return theirs, ours, handle, getattr(torch.ops, NS).op.default, tlib, rl, registered
    except BaseException:
        tlib._destroy()
        rl._destroy()
        raise


class FakeCPU:
    """The smallest thing the dispatcher reads keys from: a CPU tensor's key set and a value."""

    key_set = tensor_key_set_for(DispatchKey.CPU)

    def __init__(self, value=1.0):
        self.value = value

    def __mul__(self, other):
        return FakeCPU(self.value * other)

    def __add__(self, other):
        return FakeCPU(self.value + other)


CASES = [
    ["CompositeExplicitAutograd"],
    ["CompositeImplicitAutograd"],
    ["CPU", "CompositeImplicitAutograd"],
    ["CPU", "Autograd"],
    ["CPU", "AutogradCPU", "Meta"],
    ["CompositeExplicitAutograd", "CompositeImplicitAutograd", "Autograd"],
    ["SparseCPU", "CompositeImplicitAutograd"],  # AutogradOther: ambiguous
    ["CompositeExplicitAutogradNonFunctional", "CUDA"],
    ["CompositeImplicitAutograd", "CompositeExplicitAutograd"],  # stale AutogradCPU: runs CIA
]


def _compare(keys, fallthrough=()):
    theirs, ours, handle, top, tlib, rl, registered = _both(keys, fallthrough)
    try:
        assert ours == theirs
        for k in ROWS[1:]:
            # The dump recomputes each row; _dispatch_has_computed_kernel_for_dispatch_key
            # reads the table, which both update row by row, so both can hold stale rows
            # (CompositeImplicitAutograd, then CompositeExplicitAutograd: NestedTensorCPU and
            # AutogradCPU keep the math kernel the dump no longer shows).
            table = torch._C._dispatch_has_computed_kernel_for_dispatch_key(f"{NS}::op", k)
            assert handle.has_computed_kernel_for_dispatch_key(k) == table, k
        for k in registered:
            assert handle.has_kernel_for_dispatch_key(k)
            assert torch._C._dispatch_has_kernel_for_dispatch_key(f"{NS}::op", k)
        # the call: which kernel runs for a CPU tensor, or the same error
        try:
            expected = int(top(torch.ones(1)).item())
        except NotImplementedError:
            expected = NotImplementedError
        try:
            got = int(handle(FakeCPU()).value)
        except NotImplementedError:
            got = NotImplementedError
        assert got == expected
    finally:
        tlib._destroy()
        rl._destroy()


@pytest.mark.parametrize("keys", CASES, ids=["+".join(c) for c in CASES])
def test_tables_as_torch(keys):
    _compare(keys)


@given(st.lists(st.sampled_from(REGISTRABLE), unique=True, max_size=5))
def test_random_registrations_as_torch(keys):
    _compare(keys)


def test_fallthrough_kernel_as_torch():
    """A fallthrough at AutogradCPU: the row says so, and the call skips to CPU."""
    _compare(["CPU", "CompositeImplicitAutograd"], fallthrough=["AutogradCPU"])


def test_missing_kernel_message_as_torch():
    theirs, ours, handle, top, tlib, rl, registered = _both(["Meta"])
    try:
        with pytest.raises(NotImplementedError) as t:
            top(torch.ones(1))
        with pytest.raises(NotImplementedError) as r:
            handle(FakeCPU())
        first = "Could not run 'rtdisp::op' with arguments from the 'CPU' backend."
        assert str(t.value).startswith(first) and str(r.value).startswith(first)
        assert "'rtdisp::op' is only available for these backends: [Meta, BackendSelect" in str(
            r.value
        )
    finally:
        tlib._destroy()
        rl._destroy()


def test_registration_errors_name_operator_and_key():
    with rlib._scoped_library(NS, "FRAGMENT") as lib:
        lib.define(SCHEMA)
        with pytest.raises(RuntimeError, match="same name and overload name multiple times"):
            lib.define(SCHEMA)
        lib.impl("op", _kernel(0), "CPU")
        with pytest.raises(RuntimeError, match="rtdisp::op is already registered to the CPU"):
            lib.impl("op", _kernel(1), "CPU")
        with pytest.raises(RuntimeError, match="could not parse dispatch key: 'Cpu'"):
            lib.impl("op", _kernel(1), "Cpu")
    with rlib._scoped_library(NS, "DEF"):
        with pytest.raises(RuntimeError, match="Only a single TORCH_LIBRARY"):
            rlib.Library(NS, "DEF")
    with pytest.raises(RuntimeError, match="Cannot define an operator inside of a TORCH_LIB"):
        rlib.Library(NS, "IMPL").define(SCHEMA)
    with pytest.raises(
        RuntimeError, match=r"dispatch key \(Meta\) is inconsistent with .* \(CPU\)"
    ):
        rlib.Library(NS, "IMPL", "CPU").impl("op", _kernel(0), "Meta")
    with pytest.raises(RuntimeError, match="fallback\\(\\) registers for every namespace"):
        rlib.Library(NS, "IMPL", "CPU").fallback(lambda op, ks, stack: None)
    with pytest.raises(ValueError, match="Unsupported kind: 'DEFINE'"):
        rlib.Library(NS, "DEFINE")
    with pytest.raises(RuntimeError, match="Could not find schema for rtdisp::op"):
        Dispatcher.singleton().find_schema_or_throw(f"{NS}::op")
    assert f"{NS}::op" not in Dispatcher.singleton().operators  # destroyed: nothing left


def test_schema_parse_and_argument_errors_as_torch():
    for text in [
        "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
        "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
        "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
        "max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
        "nll_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=1, SymInt ignore_index=-100) -> Tensor",
    ]:
        assert str(parse_schema(text)) == str(torch._C.parse_schema(text)) == text
    s = parse_schema("add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)")
    assert s.arguments[0].alias_info.is_write and s.arguments[2].kwarg_only
    assert s.bind((1, 2), {"alpha": 3}) == [1, 2, 3]
    with pytest.raises(TypeError, match=r"expected at most 2 argument\(s\) but received 3"):
        s.bind((1, 2, 3), {})
    with pytest.raises(ValueError, match="could not parse the schema"):
        parse_schema("add Tensor self")


def test_boxed_unboxed_redispatch_and_tls():
    log = []

    def cpu(self, alpha=1):
        log.append(("CPU", alpha))
        return self

    def autograd(ks, self, alpha=1):
        log.append(("AutogradCPU", ks.highest_priority_type_id().name))
        return handle.redispatch(
            ks & DispatchKeySet.full_after(DispatchKey.AutogradOther), self, alpha=alpha
        )

    with rlib._scoped_library(NS, "FRAGMENT") as lib:
        lib.define(SCHEMA)
        lib.impl("op", cpu, "CPU")
        lib.impl("op", autograd, "AutogradCPU", with_keyset=True)
        handle = Dispatcher.singleton().find_schema_or_throw(f"{NS}::op")
        x = FakeCPU()
        assert handle(x, alpha=2) is x
        assert log == [("AutogradCPU", "AutogradCPU"), ("CPU", 2)]
        log.clear()
        assert handle.call_boxed([x, 3]) == [x]  # boxed: a stack in, the results left in it
        assert log == [("AutogradCPU", "AutogradCPU"), ("CPU", 3)]
        log.clear()
        with ExcludeDispatchKeyGuard(DispatchKeySet(DispatchKey.AutogradFunctionality)):
            handle(x)
        assert log == [("CPU", 1)]  # the excluded key never runs


def test_boxed_fallback_for_every_operator():
    """``Library("_", "IMPL").fallback``: one boxed kernel serves operators with no kernel."""
    seen = []

    def fallback(op, ks, stack):
        seen.append((op.name, ks.highest_priority_type_id().name, len(stack)))
        stack[:] = [stack[0]]

    with rlib._scoped_library(NS, "FRAGMENT") as lib, rlib._scoped_library("_", "IMPL") as fb:
        lib.define(SCHEMA)
        fb.fallback(fallback, "PrivateUse1")
        handle = Dispatcher.singleton().find_schema_or_throw(f"{NS}::op")
        assert handle.has_computed_kernel_for_dispatch_key("PrivateUse1")

        class FakeP1(FakeCPU):
            key_set = tensor_key_set_for(DispatchKey.PrivateUse1)

        x = FakeP1()
        assert handle(x) is x
        assert seen == [(f"{NS}::op", "PrivateUse1", 2)]
    assert not handle.has_computed_kernel_for_dispatch_key("PrivateUse1")


def test_every_torch_schema_round_trips():
    """Each of the ~3,600 schemas torch registers parses and prints back exactly as torch prints
    it, but varargs (``...``), a string default with escapes, and one schema that names an
    argument twice (retorch refuses that one)."""
    done = 0
    for name in torch._C._dispatch_get_all_op_names():
        base, _, overload = name.partition(".")
        try:
            text = str(torch._C._get_schema(base, overload))
        except RuntimeError:
            continue
        if "..." in text or "\\" in text:
            continue
        try:
            parsed = parse_schema(text)
        except ValueError as e:
            assert "twice" in str(e), text
            continue
        assert str(parsed) == text
        done += 1
    assert done > 3500

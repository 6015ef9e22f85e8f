"""The kernel a call runs at each key, on torch and on retorch, for sets of registrations to
runtime and alias keys (OperatorEntry.cpp's computeDispatchTableEntryWithDebug), and for
registrations made in any order (updateDispatchTable_ recomputes only some rows, so rows can
go stale: retorch must keep the same stale rows as torch)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retorch.dispatch.precedence import REGISTRATION_ORDER, kernels_run
from retorch.testing.dispatch_lab import ORDER_CASES, ROWS, fresh_row, torch_rows_after

# Multi-second randomized tests against torch: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow

KEYS = ["Undefined", "CPU", "XLA", "Meta", "AutogradCPU", "AutogradXLA", "AutogradMeta"]
REGISTRABLE = list(REGISTRATION_ORDER) + ["XLA", "AutogradCPU"]


@settings(max_examples=25, deadline=None)
@given(st.sets(st.sampled_from(REGISTRABLE), min_size=1))
def test_kernel_run_at_each_key_equals_torch(registered):
    assert kernels_run("retorch", registered, KEYS) == kernels_run("torch", registered, KEYS)


def _retorch_rows_after(registrations):
    """retorch's table read as torch's is by the grader: redispatch to each row alone."""
    import retorch.tensor as rt
    from retorch.dispatch import DispatchKey, DispatchKeySet, Tensor, _scoped_library
    from retorch.dispatch.dispatcher import get_dispatcher

    ran = []

    def kernel(name):
        def k(ks, x):
            ran.append((name, ks.highest_priority_type_id().name))
            return x

        return k

    out = []
    with _scoped_library("lab5ours", "DEF") as lib:
        lib.define("f(Tensor x) -> Tensor")
        for key in registrations:
            lib.impl("f", kernel(key), key, with_keyset=True)
        handle = get_dispatcher().find_schema_or_throw("lab5ours::f")
        x = Tensor(rt.ones(1))
        for row in ROWS:
            ran.clear()
            try:
                handle.redispatch(DispatchKeySet(DispatchKey[row]), x)
            except NotImplementedError as e:
                out.append("missing" if f"from the '{row}' backend" in str(e) else "fallback")
                continue
            out.append(ran[0][0] if ran and ran[0][1] == row else "fallback")
    return out


@pytest.mark.parametrize("registrations", ORDER_CASES, ids=lambda c: "-".join(c))
def test_rows_after_registrations_in_order_equal_torch_stale_rows_included(registrations):
    assert _retorch_rows_after(registrations) == torch_rows_after(registrations)


def test_the_order_cases_include_stale_rows():
    """Else the lab's check could not tell a table recomputed at every step from torch's."""
    stale = [c for c in ORDER_CASES if torch_rows_after(c) != [fresh_row(set(c), r) for r in ROWS]]
    assert len(stale) >= 3

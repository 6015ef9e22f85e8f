"""The grading helpers lab 3 relies on: long values show where they first differ, and a crash
of the student's code inside a check is a graded failure (CheckFailed), not a raw traceback."""

import pytest
import torch

from retorch.testing import grading


def test_long_lists_show_their_first_difference():
    want = [f"Node{i}Backward0" for i in range(12)]
    got = want[:7] + ["Other"] + want[8:]
    with pytest.raises(grading.CheckFailed, match="first difference at index 7: expected 'Node7"):
        grading.check("Exercise 9 (demo)", lambda cmp: cmp.equal(got, want, "order", "hint"))


def test_long_texts_show_their_first_difference():
    want = "one of the variables needed for gradient computation: is at version 5; expected "
    want += "version 2 instead. " * 3
    got = want.replace("version 2", "version 4", 1)
    with pytest.raises(grading.CheckFailed, match="first difference at character 88"):
        grading.check("Exercise 9 (demo)", lambda cmp: cmp.equal(got, want, "message", "hint"))


def test_short_values_need_no_difference_line():
    with pytest.raises(grading.CheckFailed) as info:
        grading.check("Exercise 9 (demo)", lambda cmp: cmp.equal([1, 2], [1, 3], "x", "h"))
    assert "first difference" not in str(info.value)


def test_a_crash_in_the_students_code_is_a_graded_failure():
    def run(cmp):
        cmp.equal(1, 1, "first", "h")
        {}["missing"]

    with pytest.raises(
        grading.CheckFailed, match="(?s)your code raised KeyError.*after 1 comparison"
    ):
        grading.check("Exercise 9 (demo)", run)


def test_call_attaches_the_hint_to_a_crash():
    def run(cmp):
        cmp.call(lambda: 1 / 0, "running the engine", "divide by the count, not by zero")

    with pytest.raises(grading.CheckFailed) as info:
        grading.check("Exercise 9 (demo)", run)
    assert "ZeroDivisionError" in str(info.value)
    assert "hint: divide by the count, not by zero" in str(info.value)


def test_call_lets_the_stub_say_not_implemented():
    def stub():
        raise NotImplementedError("write it")

    with pytest.raises(grading.CheckFailed, match="not implemented yet"):
        grading.check("Exercise 9 (demo)", lambda cmp: cmp.call(stub, "x", "h"))


def _tensor_like(got, expected, **kw):
    grading.check(
        "Exercise 9 (demo)", lambda cmp: cmp.tensor_like(got, expected, "x", "hint", **kw)
    )


def test_tensor_like_fails_on_the_dtype_that_close_converts_away():
    want = torch.arange(3.0, dtype=torch.float64)
    grading.check("Exercise 9 (demo)", lambda cmp: cmp.close(want.float(), want, "x", "h"))
    with pytest.raises(grading.CheckFailed, match="x has the wrong dtype"):
        _tensor_like(want.float(), want, rtol=1e-6, atol=1e-6)


def test_tensor_like_fails_on_the_device_and_compares_only_metadata_on_meta():
    want = torch.empty(2, 3, device="meta")
    _tensor_like(torch.empty(2, 3, device="meta"), want)
    with pytest.raises(grading.CheckFailed, match="x has the wrong device"):
        _tensor_like(torch.zeros(2, 3), want)
    with pytest.raises(grading.CheckFailed, match="x has the wrong shape"):
        _tensor_like(torch.empty(3, 2, device="meta"), want)


def test_tensor_like_compares_strides_only_when_asked():
    want = torch.arange(6.0).view(2, 3).t()
    _tensor_like(want.contiguous(), want)
    with pytest.raises(grading.CheckFailed, match=r"(?s)x has the wrong stride.*\(1, 3\)"):
        _tensor_like(want.contiguous(), want, strides=True)


def test_tensor_like_values_exact_or_within_tolerance():
    want = torch.tensor([1.0, 2.0, 3.0])
    near = want + 1e-7
    with pytest.raises(grading.CheckFailed, match="x has the wrong values"):
        _tensor_like(near, want)
    _tensor_like(near, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(grading.CheckFailed, match=r"x differs \(max abs error"):
        _tensor_like(want + 1e-3, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(grading.CheckFailed, match="x should be a torch.Tensor"):
        _tensor_like([1.0, 2.0, 3.0], want)

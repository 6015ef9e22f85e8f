"""Lab 8's exercise 5 grader (retorch/testing/runtime_lab.py, ``check_aggregate_ranges``): the
ranges it hands over and the rows it expects, against the profilers' own ``key_averages``
(``torch/autograd/profiler_util.py``), and its switch that keeps the student from calling them.
The other four graders are proved by nbval (the solution passes) and by
``tools/check_wrong_answers.py`` / ``tools/check_lab_stubs.py`` (wrong answers and stubs fail)."""

from __future__ import annotations

import collections

import pytest
import torch.autograd.profiler_util as tpu

from retorch.profiler import EventList, FunctionEvent
from retorch.profiler import profiler_util as rpu
from retorch.testing import grading
from retorch.testing import runtime_lab as lab


def _retorch_events(ranges):
    made = []
    for k, (name, start, end, parent) in enumerate(ranges):
        e = FunctionEvent(k, name, 0, start)
        e.end_us = end
        if parent is not None:
            e.cpu_parent = made[parent]
            made[parent].cpu_children.append(e)
        made.append(e)
    return EventList(made)


def test_hand_made_rows_are_retorchs_key_averages():
    """The exact rows of the hand-made recordings are what retorch's ``key_averages`` (torch's
    formulas: self = total minus the direct children's totals) gives on the same ranges."""
    for what, ranges in lab.AGGREGATE_CASES:
        want = {a.key: (a.count, a.cpu_time_total, a.self_cpu_time_total)
                for a in _retorch_events(ranges).key_averages()}  # fmt: skip
        assert lab._exact_averages(ranges) == want, what


@pytest.mark.slow
def test_step_ranges_are_consistent_with_each_profilers_rows():
    """For both profilers' recordings of the step: parents come before their children and
    enclose them, the counts are the names' counts, and the self times summed over all rows
    equal the top-level ranges' durations (within 1e-6 µs, the grader's tolerance)."""
    for ranges, want in (lab._torch_step_ranges(), lab._retorch_step_ranges()):
        assert len(ranges) > 20
        for k, (_, start, end, parent) in enumerate(ranges):
            assert start <= end
            if parent is not None:
                assert parent < k and ranges[parent][1] <= start and end <= ranges[parent][2]
        counts = collections.Counter(name for name, *_ in ranges)
        assert {n: row[0] for n, row in want.items()} == dict(counts)
        top = sum(e - s for _, s, e, parent in ranges if parent is None)
        assert abs(sum(row[2] for row in want.values()) - top) <= lab.AGGREGATE_ATOL
        assert all(row[2] <= row[1] + lab.AGGREGATE_ATOL for row in want.values())


@pytest.mark.slow  # ~1 s: a profiled training step
def test_torch_step_records_the_names_the_exercise_is_about():
    """torch's step has nested ranges of one name (aten::to in aten::_to_copy in aten::to is in
    the hand-made case; the step has aten::detach and detach) and ranges in ranges."""
    ranges, want = lab._torch_step_ranges()
    assert {"aten::detach", "detach", "aten::linear", "aten::addmm"} <= set(want)
    assert any(parent is not None for *_, parent in ranges)


def test_aggregation_off_refuses_inside_and_restores_after_an_exception():
    saved = (tpu.EventList.key_averages, rpu.FunctionEventAvg.add,
             rpu.FunctionEvent.__dict__["self_cpu_time_total"])  # fmt: skip
    events = _retorch_events(lab.AGGREGATE_CASES[1][1])
    with pytest.raises(ZeroDivisionError), lab.aggregation_off():
        with pytest.raises(RuntimeError, match="aggregation itself"):
            events.key_averages()
        with pytest.raises(RuntimeError, match="aggregation itself"):
            _ = events[0].self_cpu_time_total
        raise ZeroDivisionError
    assert (tpu.EventList.key_averages, rpu.FunctionEventAvg.add,
            rpu.FunctionEvent.__dict__["self_cpu_time_total"]) == saved  # fmt: skip
    assert events.key_averages()[0].count == 2


def _solution(events):
    children = [0.0] * len(events)
    for _, start, end, parent in events:
        if parent is not None:
            children[parent] += end - start
    rows = {}
    for (name, start, end, _), inside in zip(events, children):
        count, total, self_cpu = rows.get(name, (0, 0.0, 0.0))
        rows[name] = (count + 1, total + (end - start), self_cpu + ((end - start) - inside))
    return rows


@pytest.mark.slow
def test_check_passes_the_solution_and_fails_self_equal_total():
    grading.check("Exercise 5", lambda cmp: lab.check_aggregate_ranges(cmp, _solution))

    def no_children(events):
        rows = {}
        for name, start, end, _ in events:
            count, total, self_cpu = rows.get(name, (0, 0.0, 0.0))
            rows[name] = (count + 1, total + (end - start), self_cpu + (end - start))
        return rows

    with pytest.raises(grading.CheckFailed, match="self CPU"):
        grading.check("Exercise 5", lambda cmp: lab.check_aggregate_ranges(cmp, no_children))

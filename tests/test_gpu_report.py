"""``make gpu-report`` (tools/gpu_report.py) without a GPU: its table against issue 28's goals,
where it stores results, and its steps' independence (a failing or hanging step does not stop
the others). The dry run through every step is ``make gpu-report GPU_REPORT_DRY=1``."""

from __future__ import annotations

import json
import sys

import pytest

from tools import gpu_report
from tools.gpu_report import Report, goals, store, summary_table


def rows(case, **impls):
    return [{"case": case, "impl": impl, "value": v} for impl, v in impls.items()]


def results_meeting(met: bool) -> dict:
    """Synthetic GPU sections shaped like bench/bench_*.py's run_gpu, every goal met or not."""
    k = 1.0 if met else 3.0  # retorch's times multiplied, its rates divided, by k
    optim = []
    for case in ("10M params in 10 tensors", "10M params in 100 tensors",
                 "100M params in 10 tensors"):  # fmt: skip
        optim += rows(case, **{"torch fused": 1.0, "torch foreach": 2.0, "retorch fused": 1.2 * k})
    inductor = []
    for case in ("gelu (8 ops), 1M", "softmax rows, 1000x1000", "layer_norm rows, 1000x1000"):
        inductor += rows(case, **{"eager torch": 3.0, "torch.compile (inductor)": 1.0,
                                  "retorch.inductor": 1.5 * k})  # fmt: skip
    return {
        "launch": {"retorch.tensor add, host µs": 15 * k,
                   "retorch.Tensor add (requires_grad), host µs": 60 * k},  # fmt: skip
        "dispatch": {"rows": rows("MLP training step, batch 16 on CUDA tensors (ms per step)",
                                  torch=1.0, retorch=8.0 * k)},  # fmt: skip
        "overview": {"rows": rows("a + 1.5 * b, 64M float32", **{"torch.add(out=)": 3.0,
                                  "add_kernel (numba-cuda)": 2.8 / k}), "bit_identical": True},
        "tensor": {"rows": rows("add, 64M float32", **{"torch.add": 3000.0,
                                                       "retorch add": 2900.0 / k})},
        "matmul": {"rows": rows("4096 x 4096 float32", **{"torch (cuBLAS)": 50.0,
                                "retorch naive": 1.0, "retorch 2-D tiles": 30.0 / k})},
        "optim": {"rows": optim},
        "inductor": {"rows": inductor},
    }  # fmt: skip


def test_every_goal_of_the_issue_is_in_the_table():
    table = goals(results_meeting(True))
    assert len(table) == 12
    text = " ".join(r["goal"] for r in table)
    for needle in ("<= 20", "<= 80", "MLP", "0.9x", "0.5x cuBLAS", "100M params in 10 tensors",
                   "gelu", "softmax", "layer_norm"):  # fmt: skip
        assert needle in text


def test_goals_met_and_not_met_each_way_round():
    """Times (host µs, MLP ratio, Triton ratio) must be at most their goal, rates (bandwidth,
    cuBLAS share, Adam speed) at least: a direction flipped fails one of the two cases."""
    assert [r["met"] for r in goals(results_meeting(True))] == [True] * 12
    assert [r["met"] for r in goals(results_meeting(False))] == [False] * 12


def test_goal_values_are_the_ratios_the_issue_names():
    table = {r["goal"]: r for r in goals(results_meeting(True))}
    sgemm = next(r for g, r in table.items() if "SGEMM" in g)
    assert sgemm["measured"] == pytest.approx(30.0 / 50.0)  # the best rung, not the first
    assert "retorch 2-D tiles" in sgemm["shown"]
    adam = next(r for g, r in table.items() if "10M params in 100" in g)
    assert adam["measured"] == pytest.approx(1.0 / 1.2)  # speed: torch's time over ours
    gelu = next(r for g, r in table.items() if "gelu" in g)
    assert gelu["measured"] == pytest.approx(1.5)  # time: ours over Triton's
    bandwidth = next(r for g, r in table.items() if "(overview)" in g)
    assert bandwidth["measured"] == pytest.approx(2.8 / 3.0)
    assert "bit-identical: True" in bandwidth["shown"]


def test_missing_or_skipped_sections_are_not_measured_not_met():
    results = results_meeting(True)
    results["matmul"] = {"skipped": "no GPU"}
    del results["launch"], results["optim"]
    table = goals(results)
    missing = [r for r in table if r["met"] is None]
    assert len(missing) == 6 and all(r["shown"] == "not measured" for r in missing)
    text = summary_table(table, "header")
    assert text.startswith("header\n| goal | measured | met |")
    assert text.count("| not measured |") == 6
    assert "6 of 12 goals met." in text


def test_a_result_is_stored_in_the_repository_only_when_real_and_storable(tmp_path, monkeypatch):
    root, out = tmp_path / "root", tmp_path / "out"
    (root / "bench" / "results" / "gpu").mkdir(parents=True)
    monkeypatch.setattr(gpu_report, "ROOT", root)
    clean = {"rows": rows("c", torch=1.0), "unit": "ms", "commit": "abc"}
    stored = root / "bench" / "results" / "gpu" / "x.json"
    for result, dry in (
        (dict(clean), True),  # a dry run: $OUT only
        ({"skipped": "no GPU"}, False),  # skipped: $OUT only
        (dict(clean, commit="abc+dirty"), False),  # measured from a dirty tree
        (dict(clean, unit="furlongs"), False),  # a direction that cannot be told
    ):
        said = store(result, "x", out, dry)
        assert json.loads((out / "bench/results/gpu/x.json").read_text()) == result
        assert not stored.exists(), said
    said = store(clean, "x", out, False)
    assert json.loads(stored.read_text()) == clean and "stored in" in said


@pytest.mark.slow  # waits out a hanging step's timeout; make unit runs it
def test_a_failing_or_hanging_step_does_not_stop_the_next(tmp_path):
    report = Report(tmp_path, dry=True, budget=60)
    assert not report.run("fails", [sys.executable, "-c", "raise SystemExit(3)"], 20)
    assert not report.run("hangs", [sys.executable, "-c", "import time; time.sleep(30)"], 2)
    assert report.run("works", [sys.executable, "-c", "print('measured')"], 20)
    status = {s["step"]: s["status"] for s in report.steps}
    assert status == {"fails": "failed (exit 3)", "hangs": "timed out after 2 s", "works": "ok"}
    assert "measured" in (tmp_path / "gpu-report" / "works.log").read_text()
    saved = json.loads((tmp_path / "gpu-report" / "steps.json").read_text())
    assert [s["step"] for s in saved] == ["fails", "hangs", "works"]


def test_steps_past_the_budget_are_not_started(tmp_path):
    report = Report(tmp_path, dry=True, budget=5)
    assert not report.run("late", [sys.executable, "-c", "print(1)"], 20)
    assert report.steps[0]["status"] == "not run (out of time)"

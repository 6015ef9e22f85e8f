"""Benchmarks run, and the stored results describe the code as it is now."""

import importlib
import json
import subprocess
import sys

import pytest

from tools import bench
from tools.bench import names
from tools.course import ROOT

RESULTS = sorted((ROOT / "bench" / "results").glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("name", names())
def test_benchmark_runs_quick(name):
    module = importlib.import_module(f"bench.bench_{name}")
    if getattr(module, "FRESH_PROCESS", False):  # (as tools/bench.py runs every benchmark)
        code = f"import json; from bench import bench_{name} as b; print(json.dumps(b.run(True)))"
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              cwd=ROOT, timeout=900)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    else:
        result = module.run(quick=True)
    assert result["rows"] and result["unit"] and result["title"]
    cases = {row["case"] for row in result["rows"]}
    impls = {row["impl"] for row in result["rows"]}
    # Ratios are only meaningful when every implementation ran on every case in the same run.
    assert len(result["rows"]) == len(cases) * len(impls), "a case misses an implementation"
    for row in result["rows"]:
        assert set(row) >= {"case", "impl", "value"}
        assert isinstance(row["value"], float) and 0 < row["value"] < float("inf"), row


GPU_RESULTS = sorted((ROOT / "bench" / "results" / "gpu").glob("*.json"))


@pytest.mark.parametrize("path", GPU_RESULTS, ids=lambda p: p.stem)
def test_stored_gpu_result_describes_the_code_as_it_is(path):
    """A GPU section measured on a GPU machine (tools/bench.py --gpu) is held to the same rule:
    when its code changes, measure it again on a GPU, or delete it (the chapter then says it
    was not measured)."""
    result = json.loads(path.read_text())
    assert result.get("device") and result.get("rows") and result.get("commit"), path.name
    changed = bench.stale(result)
    assert not changed, (
        f"gpu/{path.name} was measured on {result['device']} at {result['commit']}, but these "
        f"files changed since: {', '.join(changed)}. Run `tools/bench.py --gpu {path.stem}` on "
        f"a GPU machine, or delete bench/results/gpu/{path.name}."
    )


def test_every_benchmark_has_a_stored_result():
    assert {p.stem for p in RESULTS} == set(names())


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
def test_stored_result_is_not_older_than_the_code_it_measured(path):
    result = json.loads(path.read_text())
    assert result.get("commit") and result.get("sources"), (
        f"{path.name} does not record the commit and files it measured: run make bench"
    )
    assert f"bench/bench_{path.stem}.py" in result["sources"]
    changed = bench.stale(result)
    assert not changed, (
        f"{path.name} was measured at {result['commit']}, but these files changed since: "
        f"{', '.join(changed)}. Run `make bench` to measure the code as it is."
    )


def test_staleness_check_sees_a_changed_file(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    (tmp_path / "retorch").mkdir()
    measured = tmp_path / "retorch" / "kernel.py"
    measured.write_text("x = 1\n")
    result = {"sources": {"retorch/kernel.py": bench.file_hash(measured)}}
    assert bench.stale(result) == []
    measured.write_text("x = 2\n")  # a later edit of the measured code
    assert bench.stale(result) == ["retorch/kernel.py"]
    measured.unlink()
    assert bench.stale(result) == ["retorch/kernel.py"]


def test_a_reviewed_change_counts_until_the_file_changes_again(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    (tmp_path / "retorch").mkdir()
    measured = tmp_path / "retorch" / "kernel.py"
    measured.write_text("x = 1\n")
    stored = tmp_path / "result.json"
    stored.write_text(json.dumps({"sources": {"retorch/kernel.py": bench.file_hash(measured)}}))
    measured.write_text("x = 1  # a comment\n")
    assert bench.stale(json.loads(stored.read_text())) == ["retorch/kernel.py"]
    result = bench.review(stored, ["retorch/kernel.py"], "a comment only")
    assert bench.stale(result) == [] and result["reviewed"][0]["why"] == "a comment only"
    measured.write_text("x = 2\n")  # an edit after the review is stale again
    assert bench.stale(result) == ["retorch/kernel.py"]
    with pytest.raises(ValueError, match="not among the files"):
        bench.review(stored, ["retorch/other.py"], "never measured")


def test_a_review_re_executes_every_page_that_prints_it():
    """The reviews are printed by ``bench_summary``: the pages that call it for a result, and
    the benchmarks page, must be re-executed after ``--review`` (session 40 reviewed a result
    and left the benchmarks page's stored output without the review: CI's nbval failed)."""
    printing = {
        md.stem for md in (ROOT / "notebooks").glob("*.md") if "bench_summary(" in md.read_text()
    }
    for result in RESULTS:
        pages = {p.stem for p in bench.pages_printing_reviews(result.stem)}
        assert "benchmarks" in pages and pages <= printing | {"benchmarks"}
    assert {p.stem for p in bench.pages_printing_reviews("parallel")} == {
        "benchmarks",
        "07_distributed",
    }
    assert all(p.is_file() for p in bench.pages_printing_reviews("inductor"))


def test_loaded_sources_names_the_benchmark_and_the_code_it_imports():
    importlib.import_module("bench.bench_overview")
    sources = bench.loaded_sources()
    assert "bench/bench_overview.py" in sources
    assert "retorch/overview/kernels.py" in sources
    assert all(p.split("/")[0] in ("retorch", "bench") for p in sources)


def test_gpu_timing_blocks_follow_an_untimed_call(monkeypatch):
    """The GPU sections' timer (needs CUDA events, so its order of calls is checked here with
    stand-ins): per turn, one untimed call, then a timed block of ``number`` calls."""
    import numba.cuda
    import torch

    from bench import gpu_events

    log = []

    class Event:
        def __init__(self, enable_timing):
            self.at = None

        def record(self):
            log.append("record")
            self.at = len(log)

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return float(end.at - self.at)  # "ms": one per log entry between the events

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: log.append("sync"))
    monkeypatch.setattr(numba.cuda, "synchronize", lambda: None)
    impls = {"a": lambda: log.append("a"), "b": lambda: log.append("b")}
    samples = gpu_events.event_ms_per_call(impls, turns=2, number=3)
    assert log[:2] == ["a", "b"]  # warm-up
    turn = ["a", "sync", "record", "a", "a", "a", "record"]
    assert log[2:] == (turn + [x.replace("a", "b") for x in turn]) * 2
    assert samples == {"a": [4 / 3, 4 / 3], "b": [4 / 3, 4 / 3]}


@pytest.mark.slow
def test_gpu_matmul_variant_stands_in_for_the_register_tiled_kernel():
    """The GPU section's capped variant runs through bmm in place of mm_regtile_kernel (here
    under the simulator, on a product that needs two 128 x 128 tiles), and the defaults come
    back afterwards."""
    import numpy as np

    import retorch.tensor as rt
    from bench import bench_matmul
    from retorch.tensor import cuda_kernels

    launched = []
    real = cuda_kernels.mm_regtile_kernel
    capped = bench_matmul.capped_regtile(128)

    class Counted:
        def __getitem__(self, config):
            launched.append(config)
            return capped[config]

    gen = np.random.default_rng(0)
    x, y = gen.standard_normal((9, 13)), gen.standard_normal((13, 130))
    got = bench_matmul.mm_with("regtile", rt.tensor(x, device="cuda"), rt.tensor(y, device="cuda"),
                               Counted())  # fmt: skip
    np.testing.assert_allclose(got.cpu().numpy(), x @ y, rtol=1e-12, atol=1e-12)
    assert len(launched) == 1 and launched[0][0] == (2, 1, 1)
    assert cuda_kernels.mm_regtile_kernel is real and cuda_kernels.MM_KERNEL["name"] == "auto"


@pytest.mark.parametrize("path", RESULTS + GPU_RESULTS, ids=lambda p: p.parent.name + "/" + p.stem)
def test_stored_result_was_measured_from_a_clean_tree(path):
    """A result whose measured files had uncommitted edits describes code no commit holds."""
    result = json.loads(path.read_text())
    assert not str(result.get("commit")).endswith("+dirty"), (
        f"{path.name} was measured from a dirty tree ({result['commit']}): commit, then run "
        f"`tools/bench.py {path.stem}`{' --gpu on a GPU machine' if 'device' in result else ''}"
    )


def test_the_runner_refuses_to_store_a_dirty_or_undirected_result():
    assert bench.storable({"commit": "abc+dirty", "unit": "ms"}).startswith("measured from a dirty")
    assert bench.storable({"commit": "abc", "unit": "ms"}) is None
    assert "neither a rate nor a time" in bench.storable({"commit": "abc", "unit": "widgets"})
    assert bench.storable({"commit": "abc", "unit": "widgets", "higher_is_better": True}) is None


@pytest.mark.parametrize("path", RESULTS + GPU_RESULTS, ids=lambda p: p.parent.name + "/" + p.stem)
def test_stored_result_ranks_in_the_direction_of_its_unit(path):
    """Every stored result, CPU or GPU, has a direction its unit agrees with, and the table's
    1.00x goes to the best value of each case: the highest rate, the lowest time."""
    from retorch.notebook import higher_is_better, relative_to_best

    result = json.loads(path.read_text())
    higher = higher_is_better(result)
    assert higher == any("/s" in w for w in result["unit"].split()), result["unit"]
    ratios = relative_to_best(result)
    for case, values in ratios.items():
        raw = {r["impl"]: r["value"] for r in result["rows"] if r["case"] == case}
        best = (max if higher else min)(raw, key=raw.get)
        assert values[best] == 1.0 and all(v >= 1.0 for v in values.values()), (case, values)


def test_rates_rank_highest_first_and_times_lowest_first():
    from retorch.notebook import higher_is_better, relative_to_best

    rows = [{"case": "c", "impl": "a", "value": 2.0}, {"case": "c", "impl": "b", "value": 8.0}]
    assert relative_to_best({"unit": "GB/s", "rows": rows}) == {"c": {"a": 4.0, "b": 1.0}}
    assert relative_to_best({"unit": "ms", "rows": rows}) == {"c": {"a": 1.0, "b": 4.0}}
    assert higher_is_better({"unit": "as each case says: µs per call, ms per step"}) is False
    for bad in [{"unit": "GB/s", "higher_is_better": False}, {"unit": "ms/s per µs"}]:
        with pytest.raises(ValueError):
            higher_is_better(bad)


@pytest.mark.slow  # seconds long: make unit runs it, make check-fast does not
def test_a_result_of_another_torch_says_so_in_its_table_and_plot():
    import matplotlib.pyplot as plt

    from retorch.notebook import bench_summary, load_bench, plot_bench

    gpu = [p.stem for p in GPU_RESULTS]
    other = [n for n in gpu if not load_bench(n)["gpu"]["versions"]["torch"].startswith("2.13.")]
    for name in other:
        version = load_bench(name)["gpu"]["versions"]["torch"]
        assert f"measured with torch {version}" in bench_summary(name, gpu=True).data
        ax = plot_bench(name, gpu=True)
        assert f"measured with torch {version}" in ax.get_title()
        plt.close(ax.figure)

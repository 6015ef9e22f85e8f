"""The stored benchmark results travel with the package (issue 32): a wheel ships
bench/results/ (their one home) as retorch/_bench_results, and load_bench reads whichever is
there; a missing result is a sentence."""

from __future__ import annotations

import zipfile

import pytest

import retorch.notebook as rn
from tools.check_wheel_install import build_wheel
from tools.course import ROOT

# Building the wheel takes seconds: make unit runs these, make check-fast does not.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return zipfile.ZipFile(build_wheel(tmp_path_factory.mktemp("wheel")))  # from a copy


@pytest.mark.slow
def test_the_wheel_ships_every_stored_result_as_it_is(wheel):
    stored = sorted((ROOT / "bench" / "results").rglob("*.json"))
    assert stored
    for path in stored:
        rel = path.relative_to(ROOT / "bench" / "results").as_posix()
        assert wheel.read(f"retorch/_bench_results/{rel}") == path.read_bytes(), rel


def test_the_wheel_ships_the_set_up_cells_installer_and_the_benchmarks_code(wheel):
    names = wheel.namelist()
    assert "retorch/install.py" in names  # the set-up cell imports it
    assert "bench/bench_inductor.py" in names and "bench/gpu.py" in names  # chapter 6b runs them


def test_the_wheel_ships_every_file_of_the_package(wheel):
    """Data files too (the capstone's corpus): a pip-installed retorch (Colab) has nothing
    else."""
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "retorch"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()  # fmt: skip
    assert "retorch/models/data/corpus.txt" in tracked
    missing = sorted(set(tracked) - set(wheel.namelist()))
    assert not missing, missing


def test_results_are_read_from_the_package_copy_when_there_is_one(tmp_path, monkeypatch):
    shipped = tmp_path / "retorch" / "_bench_results"
    (shipped / "gpu").mkdir(parents=True)
    src = ROOT / "bench" / "results" / "overview.json"
    (shipped / "overview.json").write_bytes(src.read_bytes())
    monkeypatch.setattr(rn, "__file__", str(tmp_path / "retorch" / "notebook.py"))
    assert rn.bench_results_dir() == shipped.resolve()
    assert [p.name for p in rn.stored_benches()] == ["overview.json"]
    assert rn.load_bench("overview")["rows"]


def test_in_a_checkout_results_come_from_bench_results():
    assert rn.bench_results_dir() == ROOT / "bench" / "results"
    assert len(rn.stored_benches()) == len(list((ROOT / "bench" / "results").glob("*.json")))


def test_a_missing_result_says_what_to_do():
    with pytest.raises(rn.BenchMissing, match=r"No stored result of bench/bench_nope\.py here"):
        rn.load_bench("nope")
    assert issubclass(rn.BenchMissing, FileNotFoundError)

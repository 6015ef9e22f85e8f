"""Packaging beyond what pyproject.toml can say: the stored benchmark results travel with the
package. Their one home is bench/results/ (tools/bench.py writes them there, tests/test_bench.py
checks them against the code); a wheel ships that folder as ``retorch/_bench_results`` so that
a pip-installed retorch (Colab) shows them: ``retorch.notebook.bench_results_dir``. The
benchmarks' code (the ``bench`` package) ships too: chapter 6b runs bench_inductor's workloads."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["retorch*", "bench"]) + ["retorch._bench_results"],
    package_dir={"retorch._bench_results": "bench/results"},
    package_data={
        "retorch._bench_results": ["*.json", "gpu/*.json"],
        "retorch.models": ["data/*.txt"],  # the capstone's corpus
    },
)

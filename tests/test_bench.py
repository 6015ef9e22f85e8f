"""Every benchmark runs in quick mode and returns rows the runner and the book can use."""

import importlib

import pytest

from tools.bench import names


@pytest.mark.slow
@pytest.mark.parametrize("name", names())
def test_benchmark_runs_quick(name):
    result = importlib.import_module(f"bench.bench_{name}").run(quick=True)
    assert result["rows"] and result["unit"] and result["title"]
    for row in result["rows"]:
        assert set(row) >= {"case", "impl", "value"} and row["value"] > 0

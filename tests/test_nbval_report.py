"""The nbval plugin: counts compared cells, and refuses an opted-out cell that gives no reason."""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest

from tools.course import ROOT


def _notebook(path, cells):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    for count, (source, tags, text) in enumerate(cells, 1):
        cell = nbformat.v4.new_code_cell(source, metadata={"tags": tags}, execution_count=count)
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)] if text else []
        nb.cells.append(cell)
    nbformat.write(nb, path)


def _pytest(path):
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "tools.nbval_report",
        "--nbval",
        "--nbval-current-env",
        str(path),
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_counts_and_reasons(tmp_path):
    good = tmp_path / "good.ipynb"
    _notebook(
        good,
        [
            ("print(1)", [], "1\n"),
            (
                "# Not compared: it is random\nimport random; print(random.random())",
                ["nbval-ignore-output"],
                "0.5\n",
            ),
        ],
    )
    result = _pytest(good)
    assert result.returncode == 0, result.stdout
    assert "nbval: 1 cells compared, 1 not compared" in result.stdout
    assert "it is random" in result.stdout

    bad = tmp_path / "bad.ipynb"
    _notebook(bad, [("print(2)", ["nbval-ignore-output"], "2\n")])
    result = _pytest(bad)
    assert result.returncode != 0
    assert "opt out of nbval without saying why" in result.stdout + result.stderr

    wrong = tmp_path / "wrong.ipynb"
    _notebook(wrong, [("print(3)", [], "4\n")])
    assert _pytest(wrong).returncode != 0  # a stored output that differs fails

"""Tests for the course tooling: lab generation, grading, pairs, single source, sanitizing."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys

import jupytext
import nbformat
import pytest
import torch

from retorch.testing import grading
from tools import make_labs
from tools.check_pairs import pair_problems
from tools.course import ROOT, colab_url

SOLUTION = """\
def f(x):
    ### BEGIN SOLUTION
    y = x + 1
    return y
    ### END SOLUTION
"""


def test_stub_replaces_each_region_with_a_named_not_implemented_error():
    out = make_labs.stub_out(SOLUTION, "Exercise 1 (f)", "here")
    assert "y = x + 1" not in out and "BEGIN SOLUTION" not in out
    assert out.splitlines() == [
        "def f(x):",
        "    # YOUR CODE HERE",
        '    raise NotImplementedError("Exercise 1 (f): replace this line with your code")',
    ]
    namespace = {}
    exec(out, namespace)
    with pytest.raises(NotImplementedError, match=r"Exercise 1 \(f\)"):
        namespace["f"](1)


@pytest.mark.parametrize(
    "source, problem",
    [
        ("def f():\n    return 1\n", "no ### BEGIN SOLUTION"),
        ("### BEGIN SOLUTION\nx = 1\n", "never closed"),
        ("x = 1\n### END SOLUTION\n", "without"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n", "nested"),
    ],
)
def test_malformed_markers_are_rejected(source, problem):
    with pytest.raises(make_labs.LabError, match=problem):
        make_labs.stub_out(source, "Exercise 1 (f)", "here")


def test_exercise_labels_come_from_nbgrader_grade_ids():
    assert make_labs.exercise_label("ex3_first_key") == "Exercise 3 (first_key)"
    assert make_labs.exercise_label("ex3_first_key_check") == "Exercise 3 (first_key)"
    with pytest.raises(make_labs.LabError):
        make_labs.exercise_label("first_key")


def _solution_nb(check_grade=True):
    nb = nbformat.v4.new_notebook()
    badge = f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url('solutions/x.ipynb')})"
    setup = nbformat.v4.new_code_cell(make_labs.setup_source(), metadata={"tags": ["setup"]})
    sol = nbformat.v4.new_code_cell(
        SOLUTION, metadata={"nbgrader": {"solution": True, "grade": False, "grade_id": "ex1_f"}}
    )
    sol.outputs = [nbformat.v4.new_output("stream", text="hi")]
    meta = {
        "grade": check_grade,
        "solution": False,
        "locked": True,
        "points": 1,
        "grade_id": "ex1_f_check",
    }
    check = nbformat.v4.new_code_cell("check()", metadata={"nbgrader": meta})
    nb.cells = [nbformat.v4.new_markdown_cell(f"# Lab\n\n{badge}"), setup, sol, check]
    return nb


def test_make_lab_strips_solutions_outputs_and_points_the_badge_at_the_lab():
    lab = make_labs.make_lab(_solution_nb(), "labs/x.ipynb")
    assert "y = x + 1" not in lab.cells[2].source
    assert lab.cells[2].outputs == []
    assert colab_url("labs/x.ipynb") in lab.cells[0].source
    assert colab_url("solutions/x.ipynb") not in lab.cells[0].source


def test_an_exercise_without_a_check_cell_is_rejected():
    with pytest.raises(make_labs.LabError, match="needs a solution cell and a check cell"):
        make_labs.make_lab(_solution_nb(check_grade=False), "labs/x.ipynb")


@pytest.mark.slow  # the labs-check step of make check-fast and make test runs the same check
def test_labs_on_disk_are_what_the_generator_makes():
    result = subprocess.run(
        [sys.executable, "tools/make_labs.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


def test_check_pairs_detects_a_notebook_edited_on_one_side(tmp_path):
    nb = jupytext.reads("# T\n\n```{code-cell} ipython3\nx = 1\n```\n", fmt="md:myst")
    nb.metadata["jupytext"] = {"formats": "ipynb,md:myst"}
    jupytext.write(nb, tmp_path / "a.ipynb", fmt="ipynb")
    jupytext.write(nb, tmp_path / "a.md", fmt="md:myst")
    assert pair_problems(tmp_path) == []
    (tmp_path / "a.md").write_text((tmp_path / "a.md").read_text().replace("x = 1", "x = 2"))
    problems = pair_problems(tmp_path)
    assert len(problems) == 1 and "differ" in problems[0] and "x = 2" in problems[0]
    (tmp_path / "b.md").write_text("# lonely\n")
    assert any("no twin" in p for p in pair_problems(tmp_path))


def test_grading_passes_and_reports_count(capsys):
    grading.check(
        "Exercise 9 (demo)", lambda cmp: cmp.equal(torch.ones(2), torch.ones(2), "ones", "h")
    )
    assert capsys.readouterr().out.strip() == "✓ Exercise 9 (demo): passed (1 comparison)"


def test_grading_failure_says_expected_got_and_hint():
    with pytest.raises(grading.CheckFailed) as info:
        grading.check(
            "Exercise 9 (demo)",
            lambda cmp: cmp.equal(torch.zeros(2), torch.ones(2), "ones", "use torch.ones"),
        )
    text = str(info.value)
    assert "Exercise 9 (demo): ones has the wrong values" in text
    assert "expected: tensor([1., 1.])" in text and "got:      tensor([0., 0.])" in text
    assert "hint: use torch.ones" in text
    assert isinstance(info.value, AssertionError)  # what nbgrader counts as a failed test


def test_grading_names_a_stub_as_not_implemented():
    def stub():
        raise NotImplementedError("Exercise 9 (demo): replace this line with your code")

    with pytest.raises(grading.CheckFailed, match="not implemented yet"):
        grading.check("Exercise 9 (demo)", lambda cmp: cmp.equal(stub(), 1, "x", "h"))


def test_grading_shape_dtype_tolerance_and_exception_checks():
    with pytest.raises(grading.CheckFailed, match="wrong shape or dtype"):
        grading.check("E", lambda c: c.equal(torch.ones(3), torch.ones(2), "x", "h"))
    with pytest.raises(grading.CheckFailed, match="max abs error"):
        grading.check("E", lambda c: c.close(torch.ones(2) + 1e-3, torch.ones(2), "x", "h"))
    got = torch.zeros(3, 4)
    got[1, 2], got[2, 0] = 5.0, float("nan")
    with pytest.raises(grading.CheckFailed, match=r"2 of 12 elements, the first at index \(1, 2\): "
                       r"expected 0, got 5\)"):  # fmt: skip
        grading.check("E", lambda c: c.close(got, torch.zeros(3, 4), "x", "h"))
    grading.check("E", lambda c: c.close(torch.ones(2) + 1e-8, torch.ones(2), "x", "h"))
    with pytest.raises(grading.CheckFailed, match="no exception"):
        grading.check("E", lambda c: c.raises(lambda: 1, ValueError, "x", "h"))
    with pytest.raises(grading.CheckFailed, match="ran no comparison"):
        grading.check("E", lambda c: None)


def test_sanitize_rules_rewrite_only_what_varies():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "tools/nbval_sanitize.cfg")
    rules = [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]

    def clean(text):
        for regex, repl in rules:
            text = regex.sub(repl, text)
        return text

    assert clean("<object at 0x7f3a2b1c0d90>") == clean("<object at 0x7f11aa22bb33>")
    assert clean("139696833382912 -> 139696821835216") == "ID -> ID"
    assert clean("12.5ms  3.1 us") == "TIME  TIME"
    assert clean("2 steps of 10 samples, 37 values") == "2 steps of 10 samples, 37 values"
    assert clean("tensor([1., 2.])") == "tensor([1., 2.])"


@pytest.mark.slow  # the single-source step of make check-fast and make test runs the same check
def test_single_source_check_passes_on_the_repository():
    result = subprocess.run(
        [sys.executable, "tools/check_single_source.py"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


@pytest.mark.slow  # seconds each: make unit runs it, check-fast stays under a minute
def test_single_source_check_catches_a_copied_function(tmp_path, monkeypatch):
    from tools import check_single_source as css

    names, bodies = css.retorch_definitions()
    import inspect

    from retorch.overview import introspect

    src = inspect.getsource(introspect.dispatch_keys)
    tree = css.ast.parse(src.replace("def dispatch_keys", "def my_keys"))
    assert css._body_key(tree.body[0]) in bodies
    assert "dispatch_keys" in names


def test_single_source_check_catches_a_listing_that_is_never_displayed(tmp_path, monkeypatch):
    from tools import check_single_source as css

    (tmp_path / "notebooks").mkdir()
    (tmp_path / "solutions").mkdir()
    (tmp_path / "retorch").mkdir()
    md = tmp_path / "notebooks" / "99_x.md"
    cells = [
        "show(f)\nprint(1)",  # lost: show's value is thrown away
        "print(1)\nshow(f)",  # shown: the cell's value
        "display(excerpt(f, 'a'))\nx = 1",  # shown explicitly
    ]
    md.write_text("\n\n".join(f"```{{code-cell}} ipython3\n{c}\n```" for c in cells) + "\n")
    monkeypatch.setattr(css, "ROOT", tmp_path)
    out = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: out.append(" ".join(map(str, a))))
    assert css.main() == 1
    assert len(out) == 1 and "99_x.md cell 0: show(...) is not the cell's last" in out[0]

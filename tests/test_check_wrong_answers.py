"""The wrong-answer checker substitutes a student's mistake exactly where the solution was."""

import ast
import runpy

import jupytext
import pytest

from tools.check_wrong_answers import replace_regions
from tools.course import ROOT
from tools.make_labs import BEGIN, LabError

CELL = """def step(p, g):
    ### BEGIN SOLUTION
    p -= g
    ### END SOLUTION
    return p

def other(x):
    ### BEGIN SOLUTION
    return x * 2
    ### END SOLUTION"""


def test_one_replacement_per_region_keeps_indentation_and_the_rest():
    out = replace_regions(CELL, ["p += g", None], "t")
    assert out.split("\n")[:3] == ["def step(p, g):", "    p += g", "    return p"]
    assert "    return x * 2" in out and "BEGIN" not in out and "END" not in out


def test_multi_line_replacement_is_indented_like_the_region():
    out = replace_regions(CELL, ["q = g\np -= 2 * q", "return x"], "t")
    assert "    q = g\n    p -= 2 * q\n    return p" in out
    assert out.endswith("    return x")


def test_the_number_of_replacements_must_match_the_regions():
    with pytest.raises(LabError, match="more solution regions than replacements"):
        replace_regions(CELL, "p += g", "t")
    with pytest.raises(LabError, match="2 solution regions, 3 replacements"):
        replace_regions(CELL, ["a", "b", "c"], "t")


LABS = sorted(p.stem for p in (ROOT / "solutions" / "wrong").glob("*.py"))


@pytest.mark.parametrize("lab", LABS)
def test_every_wrong_answer_parses_and_differs_from_the_solution(lab):
    """A ``.replace`` that matches nothing leaves the solution as it was: that "wrong answer"
    would pass its check, and the tool would say so only after minutes of kernels. Catch it
    here, with the answer's name, without running anything."""
    wrong = runpy.run_path(str(ROOT / "solutions" / "wrong" / f"{lab}.py"))["WRONG"]
    cells = {}
    for cell in jupytext.read(ROOT / "solutions" / f"{lab}.md").cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            cells[meta["grade_id"]] = cell.source
    for gid, answers in wrong.items():
        assert gid in cells, f"{lab}: wrong answers for unknown exercise {gid}"
        regions = cells[gid].count(BEGIN)
        solution = replace_regions(cells[gid], [None] * regions, gid)
        for what, code in answers:
            altered = replace_regions(cells[gid], code, f"{gid} / {what}")
            assert altered != solution, f"{lab} {gid}: '{what}' is the solution itself"
            try:
                ast.parse(altered)
            except SyntaxError as e:
                pytest.fail(f"{lab} {gid}: '{what}' is not Python: {e}")

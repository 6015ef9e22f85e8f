"""The wrong-answer checker substitutes a student's mistake exactly where the solution was."""

import pytest

from tools.check_wrong_answers import replace_regions
from tools.make_labs import LabError

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

"""Generate the student labs (labs/) from the solved labs (solutions/), the single source.

A solution notebook marks each exercise the way nbgrader does:

* a solution cell (nbgrader metadata ``solution: true``, ``grade_id: exN_<name>``) whose answer
  sits between ``### BEGIN SOLUTION`` and ``### END SOLUTION``;
* one or more check cells (``grade: true``, ``locked: true``, ``points``, ``grade_id:
  exN_<name>_check``) that compare the student's code with torch.

The lab is the solution with every marked region replaced by a stub that raises
``NotImplementedError`` naming the exercise (nbgrader's own convention), outputs cleared, and
the Colab badge pointing at the lab. The first code cell of every solution and of every
chapter notebook is the standard set-up cell (tools/templates/setup_cell.py: install what the
runtime lacks, then ``retorch.environment.check()``); this tool writes it into the solutions
and chapters too, so it is kept in one place. In chapters it is folded (tag ``hide-cell``).

    python tools/make_labs.py          # regenerate labs/ (and refresh set-up cells)
    python tools/make_labs.py --check  # fail if labs/ differs from what would be generated
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import jupytext
import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.course import ROOT, colab_badge, number_cells, repository_url  # noqa: E402

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
GRADE_ID = re.compile(r"^ex(\d+)_([a-z0-9_]+?)(_check\d*)?$")
BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")


class LabError(ValueError):
    """A solution notebook that does not follow the exercise conventions."""


def setup_source() -> str:
    text = (ROOT / "tools/templates/setup_cell.py").read_text().rstrip("\n")
    return text.replace("{repository_url}", repository_url())


def exercise_label(grade_id: str) -> str:
    m = GRADE_ID.match(grade_id)
    if not m:
        raise LabError(f"grade_id {grade_id!r} must look like 'ex1_name' or 'ex1_name_check'")
    return f"Exercise {m.group(1)} ({m.group(2)})"


def stub_out(source: str, label: str, where: str) -> str:
    """Replace each BEGIN/END SOLUTION region with a stub raising NotImplementedError."""
    out, inside, regions = [], False, 0
    for line in source.split("\n"):
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise LabError(f"{where}: nested {BEGIN}")
            inside, regions = True, regions + 1
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}# YOUR CODE HERE")
            stub = f'raise NotImplementedError("{label}: replace this line with your code")'
            if len(indent) + len(stub) > 88:  # keep it within the page (1400 px)
                stub = (
                    f"raise NotImplementedError(\n{indent}    "
                    f'"{label}: replace this with your code"\n{indent})'
                )
            out.append(f"{indent}{stub}")
        elif stripped == END:
            if not inside:
                raise LabError(f"{where}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise LabError(f"{where}: {BEGIN} is never closed")
    if not regions:
        raise LabError(f"{where}: a solution cell has no {BEGIN} / {END} region")
    return "\n".join(out)


def nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def refresh_solution(nb, rel: str) -> bool:
    """Put the standard set-up cell and the solution's own Colab badge in place; True if changed."""
    changed = False
    code = [c for c in nb.cells if c.cell_type == "code"]
    if not code or "setup" not in code[0].metadata.get("tags", []):
        raise LabError(f"{rel}: the first code cell must be the set-up cell, tagged 'setup'")
    if code[0].source != setup_source():
        code[0].source, changed = setup_source(), True
    first_md = next(c for c in nb.cells if c.cell_type == "markdown")
    badge = colab_badge(rel)
    new = BADGE.sub(lambda _: badge, first_md.source)
    if badge not in new:
        raise LabError(f"{rel}: the first markdown cell must hold an 'Open In Colab' badge")
    if new != first_md.source:
        first_md.source, changed = new, True
    return changed


def refresh_chapter(nb, rel: str) -> bool:
    """Put the standard set-up cell first in a chapter notebook, folded; True if changed."""
    tags = ["setup", "hide-cell"]
    code = [c for c in nb.cells if c.cell_type == "code"]
    if code and "setup" in code[0].metadata.get("tags", []):
        cell = code[0]
        if cell.source == setup_source() and cell.metadata.get("tags") == tags:
            return False
        cell.source, cell.metadata["tags"] = setup_source(), tags
        return True
    cell = nbformat.v4.new_code_cell(setup_source(), metadata={"tags": tags})
    first_code = nb.cells.index(code[0]) if code else len(nb.cells)
    nb.cells.insert(first_code, cell)
    number_cells(nb)
    return True


def write_with_outputs(nb, md: Path) -> None:
    """Write a notebook's .md and .ipynb twins, keeping the stored outputs of unchanged cells."""
    ipynb = md.with_suffix(".ipynb")
    stored = nbformat.read(ipynb, as_version=4) if ipynb.exists() else nb
    # a copy: the caller's notebook (read from the .md) goes on to make the lab, which must be
    # the same whether or not its twins were just rewritten (make labs is idempotent)
    nb = copy.deepcopy(nb)
    if "language_info" in stored.metadata:  # written by the kernel; jupytext's .md lacks it
        nb.metadata.setdefault("language_info", stored.metadata["language_info"])
    code = [c for c in stored.cells if c.cell_type == "code"]
    old = {c.source: c for c in code}
    # The set-up cell prints the same wherever everything is installed (CI): a new version of
    # it keeps the stored outputs of the old one, which nbval then checks.
    setup = [c for c in code if "setup" in c.metadata.get("tags", [])]
    for cell in nb.cells:
        if cell.cell_type == "code":
            is_setup = "setup" in cell.metadata.get("tags", [])
            was = old.get(cell.source) or (setup[0] if setup and is_setup else None)
            cell.outputs = was.get("outputs", []) if was else []
            cell.execution_count = was.get("execution_count") if was else None
    jupytext.write(nb, md, fmt="md:myst")
    jupytext.write(nb, ipynb, fmt="ipynb")


def make_lab(solution, lab_rel: str):
    """The student version of a solution notebook."""
    nb = copy.deepcopy(solution)
    exercises, checks = set(), set()
    for i, cell in enumerate(nb.cells):
        meta = nbgrader(cell)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        if meta.get("solution"):
            label = exercise_label(meta["grade_id"])
            exercises.add(label)
            cell.source = stub_out(cell.source, label, f"{lab_rel} cell {i}")
        elif BEGIN in cell.source:
            raise LabError(f"{lab_rel} cell {i}: {BEGIN} outside a cell marked nbgrader solution")
        if meta.get("grade"):
            if not meta.get("locked") or "points" not in meta:
                raise LabError(f"{lab_rel} cell {i}: a check cell needs locked: true and points")
            checks.add(exercise_label(meta["grade_id"]))
    if not exercises or exercises != checks:
        raise LabError(
            f"{lab_rel}: every exercise needs a solution cell and a check cell "
            f"(solutions: {sorted(exercises)}, checks: {sorted(checks)})"
        )
    first_md = next(c for c in nb.cells if c.cell_type == "markdown")
    first_md.source = BADGE.sub(lambda _: colab_badge(lab_rel), first_md.source)
    return nb


def texts(nb) -> dict[str, str]:
    return {".md": jupytext.writes(nb, fmt="md:myst"), ".ipynb": jupytext.writes(nb, fmt="ipynb")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check; write nothing")
    args = parser.parse_args()
    stale = []
    solutions = sorted((ROOT / "solutions").glob("*.md"))
    for md in solutions:
        sol_rel = f"solutions/{md.stem}.ipynb"
        nb = jupytext.read(md)
        number_cells(nb)
        if args.check:
            fresh = copy.deepcopy(nb)
            if refresh_solution(fresh, sol_rel):
                stale.append(f"{md.relative_to(ROOT)} (set-up cell or Colab badge out of date)")
        elif refresh_solution(nb, sol_rel):
            write_with_outputs(nb, md)
        lab = make_lab(nb, f"labs/{md.stem}.ipynb")
        for suffix, text in texts(lab).items():
            target = ROOT / "labs" / f"{md.stem}{suffix}"
            if args.check:
                if not target.exists() or target.read_text() != text:
                    stale.append(str(target.relative_to(ROOT)))
            else:
                target.parent.mkdir(exist_ok=True)
                target.write_text(text)
    for md in sorted((ROOT / "notebooks").glob("*.md")):
        nb = jupytext.read(md)
        number_cells(nb)
        if refresh_chapter(nb, f"notebooks/{md.name}"):
            if args.check:
                stale.append(f"{md.relative_to(ROOT)} (set-up cell missing or out of date)")
            else:
                write_with_outputs(nb, md)
    extra = {p.stem for p in (ROOT / "labs").glob("*.*")} - {p.stem for p in solutions}
    stale += [f"labs/{stem}.* (no solution)" for stem in sorted(extra)]
    if stale:
        print("labs/ is out of date with solutions/; run `make labs`:\n  " + "\n  ".join(stale))
        return 1
    verb = "in sync with" if args.check else "generated from"
    print(f"labs/ {verb} solutions/: {len(solutions)} lab(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Prove that every lab check catches the wrong answers a student would plausibly write.

For each solved lab ``solutions/NN_name.ipynb`` there is a file ``solutions/wrong/NN_name.py``
defining ``WRONG``: for each exercise (its ``grade_id``), a list of ``(what the mistake is,
code)`` pairs. ``code`` replaces the text between ``### BEGIN SOLUTION`` and
``### END SOLUTION`` of that exercise's solution cell (a list of strings when the cell has
several regions; ``None`` keeps the solution's region).

The tool runs the solution in one kernel, then for every wrong answer runs the altered solution
cell (which must itself run without error: a check judges code that runs) and that exercise's
check cells, and requires that a check failed with ``CheckFailed``
(the graded verdict, with expected/got and the hint), not some other exception; then it runs
the real solution cell again so the next wrong answer starts from a correct state. Every
exercise of every lab needs at least two wrong answers.

    python tools/check_wrong_answers.py                 # every lab
    python tools/check_wrong_answers.py 02_optim_lab    # one lab
"""

from __future__ import annotations

import copy
import runpy
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.course import ROOT  # noqa: E402
from tools.make_labs import BEGIN, END, LabError  # noqa: E402

MIN_WRONG = 2


def replace_regions(source: str, replacements, where: str) -> str:
    """``source`` with its BEGIN/END SOLUTION regions' bodies replaced, markers dropped."""
    if isinstance(replacements, str):
        replacements = [replacements]
    out, inside, k = [], False, 0
    for line in source.split("\n"):
        stripped = line.strip()
        if stripped == BEGIN:
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            if k >= len(replacements):
                raise LabError(f"{where}: more solution regions than replacements")
            new = replacements[k]
            k += 1
            if new is not None:
                out += [indent + s if s else s for s in new.strip("\n").split("\n")]
        elif stripped == END:
            inside = False
        elif not inside or replacements[k - 1] is None:
            out.append(line)
    if k != len(replacements):
        raise LabError(f"{where}: {k} solution regions, {len(replacements)} replacements")
    return "\n".join(out)


def _error_of(cell) -> tuple[str, str] | None:
    for o in cell.get("outputs", []):
        if o.get("output_type") == "error":
            return o["ename"], o["evalue"]
    return None


def check_lab(nb_path: Path, wrong: dict) -> tuple[list[str], int]:
    nb = nbformat.read(nb_path, as_version=4)
    solution_cells, check_cells = {}, {}
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {}) if cell.cell_type == "code" else {}
        if meta.get("solution") and not meta.get("grade"):
            solution_cells[meta["grade_id"]] = i
        elif meta.get("grade"):
            check_cells.setdefault(meta["grade_id"].split("_check")[0], []).append(i)
    problems = [
        f"{nb_path.name}: {gid} has {len(wrong.get(gid, []))} wrong answers, needs {MIN_WRONG}"
        for gid in solution_cells
        if len(wrong.get(gid, [])) < MIN_WRONG
    ]
    problems += [
        f"{nb_path.name}: wrong answers for unknown exercise {gid}"
        for gid in wrong
        if gid not in solution_cells
    ]
    client = NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        allow_errors=True,
        record_timing=False,
        resources={"metadata": {"path": str(nb_path.parent)}},
    )
    # nbclient stores each executed cell back into the notebook: keep the originals apart.
    pristine = copy.deepcopy(nb.cells)
    tried = 0
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):  # the whole solution, once
            if cell.cell_type == "code":
                client.execute_cell(cell, i)
                if _error_of(cell):
                    return [f"{nb_path.name} cell {i}: the solution itself fails"], 0
        for gid, answers in wrong.items():
            if gid not in solution_cells:
                continue
            s = solution_cells[gid]
            for what, code in answers:
                tried += 1
                altered = copy.deepcopy(pristine[s])
                altered.source = replace_regions(altered.source, code, f"{gid} / {what}")
                try:
                    client.execute_cell(altered, s)
                except CellExecutionError:
                    pass
                if _error_of(altered):
                    # The previous, correct definitions would still be in the kernel: a wrong
                    # answer must run, so that the check is what judges it.
                    ename, evalue = _error_of(altered)
                    problems.append(
                        f"{nb_path.name} {gid}: wrong answer '{what}' fails in its own cell "
                        f"({ename}: {evalue[:120]}); write wrong answers that run"
                    )
                    client.execute_cell(copy.deepcopy(pristine[s]), s)
                    continue
                verdicts = []
                for c in check_cells[gid]:
                    check = copy.deepcopy(pristine[c])
                    client.execute_cell(check, c)
                    verdicts.append(_error_of(check))
                caught = [v for v in verdicts if v and v[0] == "CheckFailed"]
                other = [v for v in verdicts if v and v[0] != "CheckFailed"]
                if other and not caught:
                    ename, evalue = other[0]
                    problems.append(
                        f"{nb_path.name} {gid}: wrong answer '{what}' crashed the check with "
                        f"{ename}: {evalue[:200]} (it should fail with CheckFailed and the hint)"
                    )
                elif not caught:
                    problems.append(f"{nb_path.name} {gid}: wrong answer '{what}' passed")
                client.execute_cell(copy.deepcopy(pristine[s]), s)  # back to the solution
    return problems, tried


def main(argv: list[str]) -> int:
    names = argv or sorted(p.stem for p in (ROOT / "solutions").glob("*.ipynb"))
    all_problems, total = [], 0
    for name in names:
        wrong_file = ROOT / "solutions" / "wrong" / f"{name}.py"
        if not wrong_file.exists():
            all_problems.append(f"{name}: no {wrong_file.relative_to(ROOT)}")
            continue
        wrong = runpy.run_path(str(wrong_file))["WRONG"]
        t0 = time.perf_counter()
        problems, tried = check_lab(ROOT / "solutions" / f"{name}.ipynb", wrong)
        total += tried
        all_problems += problems
        print(
            f"{name}: {tried} wrong answers, {tried - len(problems)} caught"
            f" ({time.perf_counter() - t0:.1f} s)"
        )
    if all_problems:
        print("\n".join(all_problems))
        return 1
    print(f"wrong answers: all {total} caught by the graded checks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Prove that every lab's graded checks fail on the untouched student stubs, clearly.

Runs each labs/*.ipynb top to bottom (errors allowed) and requires, for every check cell
(nbgrader ``grade: true``), that it failed with ``CheckFailed`` naming its exercise and saying
it is "not implemented yet"; and that no other cell failed (so a stub never breaks the
notebook before its own check). The solutions passing all their checks is proved by nbval.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.course import ROOT  # noqa: E402
from tools.make_labs import exercise_label  # noqa: E402


def errors(cell) -> list[dict]:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def check_lab(path: Path) -> tuple[list[str], int]:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        allow_errors=True,
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    problems, checks = [], 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        errs = errors(cell)
        if meta.get("grade"):
            checks += 1
            label = exercise_label(meta["grade_id"])
            ok = any(
                e["ename"] == "CheckFailed"
                and label in e["evalue"]
                and "not implemented yet" in e["evalue"]
                for e in errs
            )
            if not ok:
                got = "; ".join(f"{e['ename']}: {e['evalue'][:200]}" for e in errs) or "it passed"
                problems.append(
                    f"{path.name} cell {i} ({label}): check should fail on the stub; {got}"
                )
        elif errs:
            e = errs[0]
            problems.append(
                f"{path.name} cell {i}: a non-check cell failed: {e['ename']}: {e['evalue'][:200]}"
            )
    return problems, checks


def main(argv: list[str]) -> int:
    """Check every lab, or only those named (``04_tensor_lab`` or ``labs/04_tensor_lab.ipynb``)."""
    labs = sorted((ROOT / "labs").glob("*.ipynb"))
    if argv:
        wanted = {Path(a).stem for a in argv}
        labs = [lab for lab in labs if lab.stem in wanted]
        if len(labs) != len(wanted):
            print(f"no such lab among {sorted(wanted)}")
            return 1
    all_problems, total = [], 0
    for lab in labs:
        t0 = time.perf_counter()
        problems, checks = check_lab(lab)
        total += checks
        all_problems += problems
        print(
            f"{lab.name}: {checks} checks fail on the stubs as they should"
            f"{'' if not problems else f', {len(problems)} problems'} ({time.perf_counter() - t0:.1f} s)"
        )
    if all_problems:
        print("\n".join(all_problems))
        return 1
    if not total:
        print("no lab checks found: nothing was proved")
        return 1
    print(f"lab stubs: {total} checks across {len(labs)} labs fail clearly on the untouched stubs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

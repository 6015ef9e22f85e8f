"""Check that every notebook is a jupytext pair (MyST .md + .ipynb) and that the two agree.

The .md is the reviewable text; the .ipynb carries the outputs (what Colab opens and the book
renders). They agree when writing the .ipynb back as MyST markdown gives the .md exactly.
Fix a failing pair with `jupytext --sync <file>` (or edit the .md and run `make execute`).
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("notebooks", "solutions", "labs")


def pair_problems(folder: Path) -> list[str]:
    problems = []
    mds = {p.stem for p in folder.glob("*.md")}
    nbs = {p.stem for p in folder.glob("*.ipynb")}
    for stem in sorted(mds ^ nbs):
        have = "md" if stem in mds else "ipynb"
        problems.append(f"{folder.name}/{stem}.{have} has no twin: run `jupytext --sync` on it")
    for stem in sorted(mds & nbs):
        md_path, nb_path = folder / f"{stem}.md", folder / f"{stem}.ipynb"
        want = md_path.read_text()
        got = jupytext.writes(jupytext.read(nb_path), fmt="md:myst")
        if want != got:
            diff = difflib.unified_diff(
                want.splitlines(), got.splitlines(), str(md_path), f"{nb_path} as MyST", lineterm=""
            )
            problems.append(
                f"{folder.name}/{stem}: .md and .ipynb differ\n" + "\n".join(list(diff)[:40])
            )
    return problems


def main() -> int:
    problems, count = [], 0
    for name in FOLDERS:
        folder = ROOT / name
        if folder.is_dir():
            count += len(list(folder.glob("*.ipynb")))
            problems += pair_problems(folder)
    if problems:
        print("\n\n".join(problems))
        print(f"\n{len(problems)} jupytext pair problem(s)")
        return 1
    print(f"jupytext pairs in sync: {count} notebooks")
    return 0


if __name__ == "__main__":
    sys.exit(main())

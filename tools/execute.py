"""Re-run notebooks from their MyST source and store fresh outputs in the .ipynb twin.

For each notebook: read the .md (the source of truth for text and code), execute it top to
bottom in a fresh kernel of this environment, write the .ipynb with its outputs, and rewrite the
.md in jupytext's canonical form, so the pair is in sync by construction.

    python tools/execute.py notebooks/00_overview.ipynb solutions/*.ipynb
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jupytext
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.course import number_cells  # noqa: E402


def execute(path: Path) -> float:
    md = path.with_suffix(".md")
    nb = jupytext.read(md)
    number_cells(nb)
    t0 = time.perf_counter()
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent.resolve())}},
    ).execute()
    seconds = time.perf_counter() - t0
    jupytext.write(nb, path.with_suffix(".ipynb"), fmt="ipynb")
    jupytext.write(nb, md, fmt="md:myst")
    return seconds


def main(argv: list[str]) -> int:
    for arg in argv:
        seconds = execute(Path(arg))
        print(f"executed {arg} in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

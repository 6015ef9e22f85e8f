"""Run the course the way Colab does: retorch installed from a wheel, each notebook alone.

CI's other checks run the notebooks from the checkout, with retorch installed editable, so a
path that exists only in the checkout (``bench/results``, ``tools/``) or a file left out of the
package passes them and fails for a student. This check:

1. builds a wheel (``pip wheel --no-deps``) from a copy of the files git knows (tracked, and
   untracked but not ignored: what a clone plus the work in progress would hold);
2. makes a throwaway venv (``--without-pip``) that sees the .venv's packages through a ``.pth``
   line and runs the .venv's own ``.pth`` hooks (numba-cuda's), except the editable retorch's,
   and installs the wheel into it;
3. copies each chapter and solution notebook (only the .ipynb) into its own empty temporary
   folder and runs it there, in a kernel of that venv, failing on any cell error. Solutions
   must pass entirely; labs are not run (their stubs fail by design: tools/check_lab_stubs.py).

    python tools/check_wheel_install.py                       # every chapter and solution
    python tools/check_wheel_install.py notebooks/02_optim.ipynb  # some
    python tools/check_wheel_install.py --python /tmp/venv-torch/bin/python  # another torch

``--python`` names the interpreter of another venv (with another torch, as a student's runtime
has): its packages come first in the throwaway venv, the .venv's after (numba, nbclient...).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.course import ROOT  # noqa: E402

#: Run in the throwaway venv: execute one notebook in the current folder, print the first error.
RUNNER = """
import sys, nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
nb = nbformat.read(sys.argv[1], as_version=4)
try:
    NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": "."}}).execute()
except CellExecutionError as e:
    sys.exit(str(e)[-3000:])
import retorch
print(len([c for c in nb.cells if c.cell_type == "code"]), "cells; retorch from", retorch.__file__)
"""


def build_wheel(tmp: Path) -> Path:
    """A wheel of the files git knows (tracked, or untracked and not ignored)."""
    src = tmp / "src"
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for rel in filter(None, (f.decode() for f in files)):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    out = tmp / "wheel"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(
        pip + ["wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        check=True,
    )
    return next(out.glob("retorch-*.whl"))


def make_venv(tmp: Path, wheel: Path, first: Path | None = None) -> Path:
    """A venv that imports the .venv's packages, and retorch only from ``wheel``; with
    ``first`` (another venv's python), that venv's packages before the .venv's."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = Path(sysconfig.get_paths()["purelib"])
    # sorts first, so the .pth files copied below find their modules (numba-cuda's redirects
    # numba.cuda to numba_cuda); the editable install's are left behind: retorch is the wheel's
    theirs = ""
    if first is not None:
        theirs = subprocess.run(
            [first, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    Path(site, "00_course_venv.pth").write_text(f"{theirs}{ours}\n")
    for pth in ours.glob("*.pth"):
        if not pth.name.startswith("__editable__"):
            shutil.copy2(pth, Path(site, pth.name))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        check=True,
    )
    return python


def run(python: Path, notebook: Path, tmp: Path) -> tuple[bool, str, float]:
    """Run ``notebook`` alone in an empty folder; (passed, what it said, seconds)."""
    folder = Path(tempfile.mkdtemp(prefix=notebook.stem + "-", dir=tmp))
    shutil.copy2(notebook, folder / notebook.name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    t0 = time.perf_counter()
    done = subprocess.run(
        [python, "-c", RUNNER, notebook.name], cwd=folder, env=env, capture_output=True, text=True
    )
    said = done.stdout.strip() if done.returncode == 0 else done.stderr.strip()
    said = re.sub(r"\x1b\[[0-9;]*m", "", said)  # IPython's colours
    return done.returncode == 0, said, time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every chapter, solution")
    parser.add_argument("--python", type=Path, help="another venv's python: its torch first")
    args = parser.parse_args()
    notebooks = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted(
        (ROOT / "solutions").glob("*.ipynb")
    )
    start, failed = time.perf_counter(), []
    with tempfile.TemporaryDirectory(prefix="wheel-install-") as name:
        tmp = Path(name)
        wheel = build_wheel(tmp)
        python = make_venv(tmp, wheel, args.python)
        print(f"{wheel.name} installed alone in a throwaway venv; each notebook in its own folder")
        if args.python:
            torch = subprocess.run(
                [python, "-c", "import torch; print(torch.__version__, torch.__file__)"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            print(f"torch {torch}")
        for nb in notebooks:
            ok, said, seconds = run(python, nb.resolve(), tmp)
            rel = nb.resolve().relative_to(ROOT)
            print(f"  {'ok  ' if ok else 'FAIL'} {rel} ({seconds:.0f} s)" + ("" if ok else ":"))
            if not ok:
                failed.append(str(rel))
                print("\n".join("       " + line for line in said.splitlines()[-25:]))
            elif "site-packages" not in said:
                failed.append(f"{rel} (retorch not imported from the wheel: {said})")
    total = time.perf_counter() - start
    if failed:
        print(f"{len(failed)} of {len(notebooks)} failed from the wheel: " + ", ".join(failed))
        return 1
    print(f"{len(notebooks)} notebook(s) ran from the wheel in {total:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

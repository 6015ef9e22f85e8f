"""Run the course's benchmarks and store their results under version control.

Each ``bench/bench_<name>.py`` exposes ``run(quick=False) -> dict`` with ``name``, ``title``,
``unit``, ``rows`` (``case``, ``impl``, ``value``) and ``notes``. This runner times every
implementation of a benchmark in one run (so their ratios are comparable), adds the machine it
ran on, and writes ``bench/results/<name>.json``, which the book plots.

Each benchmark runs in a fresh process, and its result records what it measured: the commit
(``git describe``-style, marked ``+dirty`` when measured files had uncommitted changes) and a
hash of every file of ``retorch/`` and ``bench/`` that the process loaded. ``stale()`` compares
those hashes with the files as they are now (for a GPU section, only the files whose code ran
while it was measured, ``"ran"``: see ``ran_sources``): ``tests/test_bench.py`` fails when a stored result
describes code that has changed since, so the book never plots numbers of older code. A result
measured from a dirty tree (uncommitted edits of measured files) is not stored: its code exists
at no commit, so nobody could measure it again (``storable``; commit, then measure). Each result
stores its direction, ``higher_is_better`` (from its unit, see
``retorch.notebook.higher_is_better``), so that tables and plots rank rates and times the right
way round.

    python tools/bench.py              # all benchmarks, full size
    python tools/bench.py optim --quick
    python tools/bench.py --gpu        # on a GPU machine: only the GPU sections
    python tools/bench.py --review bench/results/gpu/optim.json retorch/__init__.py --why "..."

A GPU section is stored apart, in ``bench/results/gpu/<name>.json`` (``load_bench`` puts it
under the result's ``"gpu"`` key), so that the CPU results keep this machine's numbers and a
GPU machine can add its own. Where ``BENCH_COMMIT`` is set (a copied tree on another machine,
whose ``.git`` may not be its commit), it names the commit measured.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.course import ROOT  # noqa: E402


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}"


def names() -> list[str]:
    return sorted(p.stem.removeprefix("bench_") for p in (ROOT / "bench").glob("bench_*.py"))


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def loaded_sources() -> dict[str, str]:
    """Hashes of the files of retorch/ and bench/ loaded in this process, by relative path."""
    out = {}
    for module in list(sys.modules.values()):
        path = Path(getattr(module, "__file__", None) or "/nonexistent").resolve()
        if path.suffix == ".py" and path.is_file():
            rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else None
            if rel and rel.split("/")[0] in ("retorch", "bench"):
                out[rel] = file_hash(path)
    return dict(sorted(out.items()))


def _measured_rel(filename: str) -> str | None:
    """``filename`` relative to the repository when it is a file of retorch/ or bench/."""
    path = Path(filename).resolve()
    if path.suffix != ".py" or not path.is_relative_to(ROOT) or not path.is_file():
        return None
    rel = path.relative_to(ROOT).as_posix()
    return rel if rel.split("/")[0] in ("retorch", "bench") else None


def compiled_numba_files() -> set[str]:
    """Files of the Numba-compiled functions (CPU ``njit`` and CUDA kernels and device
    functions) of retorch/ and bench/ that have a compiled overload in this process: their
    Python code runs as machine code, so a call trace does not see it."""
    files = set()
    for module in list(sys.modules.values()):
        if not (getattr(module, "__file__", None) and _measured_rel(module.__file__)):
            continue
        for obj in list(vars(module).values()):
            py_func, overloads = getattr(obj, "py_func", None), getattr(obj, "overloads", None)
            if py_func is not None and overloads and hasattr(py_func, "__code__"):
                files.add(py_func.__code__.co_filename)
    return files


TRACE_TOOL = 4  # a sys.monitoring tool id left free by debuggers (0), coverage (1), profilers (2)


def ran_sources(fn) -> tuple[object, dict[str, str]]:
    """Call ``fn`` once with a profile hook on, and return its value and the hashes of the
    files of retorch/ and bench/ whose code ran: Python functions called (a ``call`` event on
    any thread) and Numba-compiled functions (``compiled_numba_files``). A GPU section is
    traced in one untimed pass at quick sizes (the same code paths, smaller tensors), then
    measured untraced, so the hook costs its timings nothing."""
    import threading

    seen: set[str] = set()
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+: one event per code object
    if monitoring is not None and monitoring.get_tool(TRACE_TOOL) is None:

        def start(code, offset):
            seen.add(code.co_filename)
            return monitoring.DISABLE  # this code object is seen: no more events for it

        monitoring.use_tool_id(TRACE_TOOL, "tools.bench.ran_sources")
        monitoring.register_callback(TRACE_TOOL, monitoring.events.PY_START, start)
        monitoring.set_events(TRACE_TOOL, monitoring.events.PY_START)
        try:
            value = fn()
        finally:
            monitoring.set_events(TRACE_TOOL, 0)
            monitoring.register_callback(TRACE_TOOL, monitoring.events.PY_START, None)
            monitoring.free_tool_id(TRACE_TOOL)
            monitoring.restart_events()
    else:

        def hook(frame, event, arg):
            if event == "call":
                seen.add(frame.f_code.co_filename)

        threading.setprofile(hook)
        sys.setprofile(hook)
        try:
            value = fn()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    rels = {rel for f in seen | compiled_numba_files() if (rel := _measured_rel(f))}
    return value, {rel: file_hash(ROOT / rel) for rel in sorted(rels)}


def commit_of(paths) -> str:
    """The current commit, with ``+dirty`` if any of ``paths`` differs from it."""
    if os.environ.get("BENCH_COMMIT"):  # a copied tree, whose .git (if any) is not its commit
        return os.environ["BENCH_COMMIT"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=10", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "diff", "--quiet", "HEAD", "--", *paths], cwd=ROOT, capture_output=True
        ).returncode
    except OSError:
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def stale(result: dict) -> list[str]:
    """The measured files that changed (or vanished) since ``result`` was measured.

    A GPU section (``tools/bench.py --gpu``) records under ``"ran"`` the files whose code ran
    while it was measured (``ran_sources``), and only those count: an edit of a file it merely
    imported keeps it. A CPU result keeps the broader rule (every file its process loaded): it
    is measured again here whenever its code changes, so the rule costs little.

    A file whose current content was *reviewed* against the result (``review()``: an edit
    that does not touch what was measured, recorded with its reason and shown wherever the
    result is) counts as unchanged until it changes again."""
    changed = []
    reviewed = {r["file"]: r["hash"] for r in result.get("reviewed", [])}
    measured = result["ran"] if "ran" in result else result.get("sources", {})
    for rel, digest in measured.items():
        path = ROOT / rel
        now = file_hash(path) if path.is_file() else None
        if now != digest and (now is None or reviewed.get(rel) != now):
            changed.append(rel)
    return changed


def review(path: Path, files: list[str], why: str) -> dict:
    """Record in a stored result that the measured ``files`` changed since it was measured
    without changing what it measures (``why``), at the current commit. Meant for a result that
    cannot be measured again here (a GPU section on a CPU machine), or an edit outside the
    timed path (code that runs once, at import); otherwise measure again. The record travels
    with the result: ``plot_bench`` and the benchmarks page print it."""
    result = json.loads(path.read_text())
    sources = result.get("sources", {})
    for rel in files:
        if rel not in sources:
            raise ValueError(f"{rel} is not among the files {path.name} measured")
        if not (ROOT / rel).is_file():
            raise ValueError(f"{rel} no longer exists: measure {path.stem} again")
    commit = subprocess.run(
        ["git", "rev-parse", "--short=10", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    kept = [r for r in result.get("reviewed", []) if r["file"] not in files]
    new = [
        {"file": rel, "hash": file_hash(ROOT / rel), "commit": commit, "why": why} for rel in files
    ]
    result["reviewed"] = kept + new
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def pages_printing_reviews(name: str) -> list[Path]:
    """The notebooks whose stored outputs print the reviews of result ``name`` (``bench_summary``
    prints them): the benchmarks page, which summarises every result, and each chapter that
    calls ``bench_summary("<name>")``. A review changes their outputs, so ``--review``
    re-executes them (nbval would otherwise fail on the stored page)."""
    pages = [ROOT / "notebooks" / "benchmarks.ipynb"]
    for md in sorted((ROOT / "notebooks").glob("*.md")):
        if md.stem != "benchmarks" and f'bench_summary("{name}"' in md.read_text():
            pages.append(md.with_suffix(".ipynb"))
    return pages


def storable(result: dict) -> str | None:
    """Why ``result`` must not be stored (``None`` when it may): it was measured from a dirty
    tree, or its direction cannot be told."""
    if str(result.get("commit", "")).endswith("+dirty"):
        return (
            f"measured from a dirty tree ({result['commit']}): commit the measured files "
            "(retorch/, bench/), then measure again"
        )
    from retorch.notebook import higher_is_better

    try:
        higher_is_better(result)
    except ValueError as e:
        return str(e)
    return None


def gpu_names() -> list[str]:
    """The benchmarks with a GPU section (a ``run_gpu(quick)`` function)."""
    return [n for n in names() if "def run_gpu(" in (ROOT / "bench" / f"bench_{n}.py").read_text()]


def gpu_versions() -> dict:
    """numba, numba-cuda and (under ``make gpu-report``, which records them once) the device's
    driver and compute capability, for a GPU section's result."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package in ("numba", "numba-cuda", "numpy"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    recorded = os.environ.get("GPU_REPORT_VERSIONS")
    if recorded and Path(recorded).is_file():
        seen = json.loads(Path(recorded).read_text())
        out.update(
            {k: seen[k] for k in ("driver", "compute capability", "torch cuda") if k in seen}
        )
    return out


def run_one(name: str, quick: bool, gpu: bool = False) -> dict:
    module = importlib.import_module(f"bench.bench_{name}")
    ran = None
    if gpu:  # which files' code runs: one untimed, traced pass at quick sizes (see ran_sources)
        _, ran = ran_sources(lambda: module.run_gpu(quick=True))
    t0 = time.perf_counter()
    result = module.run_gpu(quick=quick) if gpu else module.run(quick=quick)
    result.setdefault("name", name)
    result["machine"] = machine()
    result["seconds"] = round(time.perf_counter() - t0, 1)
    import torch

    result["versions"] = {"torch": torch.__version__, "python": platform.python_version()}
    if gpu:
        result["versions"].update(gpu_versions())
    result["sources"] = loaded_sources()
    if ran is not None:
        result["ran"] = {rel: digest for rel, digest in ran.items() if rel in result["sources"]}
    result["commit"] = commit_of(list(result["sources"]))
    if "rows" in result:  # imported after the sources are listed: not part of what was measured
        from retorch.notebook import higher_is_better

        result["higher_is_better"] = higher_is_better(result)
    return result


def run_in_subprocess(name: str, quick: bool, gpu: bool = False) -> dict:
    """``run_one`` in a fresh interpreter, so each benchmark records only what it loaded."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, __file__, "--one", name, "--to", str(out)]
        cmd += (["--quick"] if quick else []) + (["--gpu"] if gpu else [])
        subprocess.run(cmd, check=True, cwd=ROOT)
        return json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("only", nargs="*", help="benchmark names (default: all)")
    parser.add_argument("--quick", action="store_true", help="small sizes; results not stored")
    parser.add_argument("--gpu", action="store_true", help="only the GPU sections, stored apart")
    parser.add_argument(
        "--review",
        nargs="+",
        metavar=("RESULT", "FILE"),
        help="record that FILEs changed without changing what RESULT (a path) measured; "
        "needs --why",
    )
    parser.add_argument("--why", help="the reason recorded by --review")
    parser.add_argument(
        "--no-execute",
        action="store_true",
        help="--review without re-executing the pages that print the review",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one benchmark, this process
    parser.add_argument("--to", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.review:
        if len(args.review) < 2 or not args.why:
            parser.error("--review RESULT FILE [FILE ...] --why REASON")
        review(Path(args.review[0]), args.review[1:], args.why)
        pages = pages_printing_reviews(Path(args.review[0]).stem)
        if args.no_execute:
            print("the review is printed by", " ".join(map(str, pages)), "- re-execute them")
            return 0
        return subprocess.run(
            [sys.executable, str(ROOT / "tools" / "execute.py"), *map(str, pages)]
        ).returncode
    if args.one:
        Path(args.to).write_text(json.dumps(run_one(args.one, args.quick, args.gpu)))
        return 0
    refused = 0
    for name in args.only or (gpu_names() if args.gpu else names()):
        result = run_in_subprocess(name, args.quick, args.gpu)
        print(f"{name}: {result.get('title', 'GPU section')} ({result['seconds']} s)")
        if "skipped" in result:
            print(f"  skipped: {result['skipped']}")
            continue
        for row in result["rows"]:
            print(f"  {row['case']:<28} {row['impl']:<26} {row['value']:>12.4g} {result['unit']}")
        if not args.quick and (why := storable(result)):
            print(f"  NOT STORED: {why}")
            refused += 1
        elif not args.quick:
            folder = ROOT / "bench" / "results" / ("gpu" if args.gpu else "")
            out = folder / f"{name}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())

"""Run the course's benchmarks and store their results under version control.

Each ``bench/bench_<name>.py`` exposes ``run(quick=False) -> dict`` with ``name``, ``title``,
``unit``, ``rows`` (``case``, ``impl``, ``value``) and ``notes``. This runner times every
implementation of a benchmark in one run (so their ratios are comparable), adds the machine it
ran on, and writes ``bench/results/<name>.json``, which the book plots.

    python tools/bench.py              # all benchmarks, full size
    python tools/bench.py optim --quick
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
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


def run_one(name: str, quick: bool) -> dict:
    module = importlib.import_module(f"bench.bench_{name}")
    t0 = time.perf_counter()
    result = module.run(quick=quick)
    result.setdefault("name", name)
    result["machine"] = machine()
    result["seconds"] = round(time.perf_counter() - t0, 1)
    import torch

    result["versions"] = {"torch": torch.__version__, "python": platform.python_version()}
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("only", nargs="*", help="benchmark names (default: all)")
    parser.add_argument("--quick", action="store_true", help="small sizes; results not stored")
    args = parser.parse_args()
    for name in args.only or names():
        result = run_one(name, args.quick)
        print(f"{name}: {result['title']} ({result['seconds']} s)")
        for row in result["rows"]:
            print(f"  {row['case']:<28} {row['impl']:<26} {row['value']:>12.4g} {result['unit']}")
        if not args.quick:
            out = ROOT / "bench" / "results" / f"{name}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

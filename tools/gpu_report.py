"""One command on a GPU: ``make gpu-report`` (issue 28, "One command on a GPU").

On a machine with an NVIDIA GPU, in at most 8 minutes including set-up, this runs, each step
in its own process with its own timeout (one failure does not stop the others):

1. ``setup``     installs the carried wheels (``.whl/``, from ``make gpu-wheels``) into a
                 private folder when this is not the course's .venv;
2. ``versions``  device, driver, torch, numba, numba-cuda, numpy, Python;
3. ``launch``    host cost of one 1-element CUDA add (``retorch.tensor`` and chapter 5's
                 ``retorch.Tensor`` with autograd), and a cProfile of N launches (top entries),
                 so chapter 4 can show where a launch's microseconds go;
4. ``memory``    one warm training step (MLP 64-256-32, batch 16) recorded by torch's
                 ``_record_memory_history`` and by retorch's (``tools/gpu_memory_history.py``,
                 issue 29): per library the count of each trace action, the peak of requested
                 bytes, the rise of ``max_memory_allocated``, the allocations without frames,
                 and whether what ``retorch.cuda_memory.EXPECTED`` states holds; at most 60 s
                 of the budget (retorch's half compiles its kernels in this fresh process: its
                 time on a GPU is not yet measured; the step's time is in the summary, and a
                 timeout loses this step only);
5. ``bench:*``   every GPU benchmark section (``tools/bench.py --gpu``), one process each;
6. ``tests``     the CUDA tests with the simulator off;
7. ``notebooks`` nbval of the CUDA chapters with the simulator off;
8. ``summary``   one table against the issue's goals (goal, measured, met or not).

Everything measured is written under ``$OUT`` as soon as its step ends (so it comes back even
if a later step fails): ``$OUT/bench/results/gpu/*.json`` (copy them into the checkout),
``$OUT/gpu-report/*.json``, the logs, and ``summary.md``. A GPU section is also stored in
``bench/results/gpu/`` when ``tools.bench.storable`` allows it (measured at a known, clean
commit: on a copied tree without ``.git`` set ``BENCH_COMMIT``, which ``make gpu-command``
fills in).

``--dry`` (``make gpu-report GPU_REPORT_DRY=1``) goes through every step on a machine without
a GPU: the simulator on, tiny sizes, results written only under ``$OUT`` (default
``/tmp/gpu-report-dry``), never into ``bench/results``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.course import ROOT  # noqa: E402

BUDGET_S = 8 * 60 - 30  # the 8 minutes, less a margin for the machine's own start
SITE = Path("/tmp/retorch-gpu-site")
# The CUDA chapters and labs whose GPU cells run with the simulator off.
NOTEBOOKS = [
    "notebooks/00_overview.ipynb",
    "notebooks/02_optim.ipynb",
    "notebooks/04_tensor.ipynb",
    "notebooks/06b_codegen.ipynb",
    "notebooks/08c_streams.ipynb",  # the record_stream race and stream timeline on a GPU
]
# Test files that exercise retorch's CUDA code (the rest run on the CPU only).
TESTS = [
    "tests/test_cuda.py",
    "tests/test_cuda_launch.py",
    "tests/test_dispatch_device.py",
    "tests/test_dispatch_tensor.py",
    "tests/test_inductor.py",
    "tests/test_tensor_allocator.py",  # the allocator model beside torch.cuda's, record_stream too
    "tests/test_cuda_sgemm.py",  # the SGEMM ladder's values on the GPU itself
    "tests/test_optim_multi_tensor.py",  # its PTX; the rest reruns with the simulator on
    "tests/test_cuda_ptr.py",
    "tests/test_cuda_vector.py",
    "tests/test_cuda_streams.py",  # streams, events, record_stream with real events
    "tests/test_cuda_graphs.py",
    "tests/test_memory_snapshot.py",  # the memory history entry by entry beside torch's
]


# What the Makefile exports (nbval needs them), for `PYTHONPATH=. python3 tools/gpu_report.py`
# on a machine without make.
MAKEFILE_ENV = {
    "NUMBA_CACHE_DIR": "~/.cache/retorch/numba",
    "TORCHINDUCTOR_CACHE_DIR": "~/.cache/retorch/inductor",
    "IPYKERNEL_CELL_NAME": "<IPY-INPUT>",
    "PYTHONHASHSEED": "0",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    "JUPYTER_PLATFORM_DIRS": "1",
}


# ---------------------------------------------------------------- goals
def _rows(results: dict, name: str) -> list[dict]:
    result = results.get(name) or {}
    return [] if "skipped" in result else result.get("rows", [])


def _value(results: dict, name: str, case: str, impl: str) -> float | None:
    """The value of the row of ``results[name]`` whose case and impl contain the given
    substrings (case-insensitive), or None."""
    for row in _rows(results, name):
        if case.lower() in row["case"].lower() and impl.lower() in row["impl"].lower():
            return row["value"]
    return None


def _cases(results: dict, name: str, case: str = "") -> list[str]:
    seen = []
    for row in _rows(results, name):
        if case.lower() in row["case"].lower() and row["case"] not in seen:
            seen.append(row["case"])
    return seen


def _best_retorch(results: dict, name: str, case: str) -> tuple[str, float] | None:
    best = None
    for row in _rows(results, name):
        if case.lower() in row["case"].lower() and "retorch" in row["impl"].lower():
            if best is None or row["value"] > best[1]:
                best = (row["impl"], row["value"])
    return best


def goals(results: dict) -> list[dict]:
    """The issue's GPU goals, each with its measured value and whether it is met.

    ``results`` maps a benchmark name (``overview``, ``tensor``, ``dispatch``, ``matmul``,
    ``optim``, ``inductor``) to its GPU section and ``launch`` to the launch step's result.
    A goal whose rows are missing is reported as not measured (``met`` is None)."""
    out = []

    def add(goal: str, measured: float | None, limit: float, higher: bool, fmt: str, why=""):
        met = None if measured is None else (measured >= limit if higher else measured <= limit)
        shown = "not measured" if measured is None else fmt.format(measured)
        out.append({"goal": goal, "measured": measured, "shown": shown + why, "met": met})

    launch = results.get("launch") or {}
    add("retorch.tensor CUDA add, 1 element: host µs <= 20",
        launch.get("retorch.tensor add, host µs"), 20, False, "{:.1f} µs")  # fmt: skip
    autograd = launch.get("retorch.Tensor add (requires_grad), host µs")
    add(
        "retorch.Tensor (autograd) CUDA add, 1 element: host µs <= 80",
        autograd,
        80,
        False,
        "{:.1f} µs",
    )
    mlp = [_value(results, "dispatch", "MLP", impl) for impl in ("retorch", "torch")]
    mlp_ratio = mlp[0] / mlp[1] if None not in mlp else None
    add("MLP step on CUDA <= 10x torch eager", mlp_ratio, 10, False, "{:.1f}x torch")
    for name, case in (("overview", "64M"), ("tensor", "64M")):
        torch_v = _value(results, name, case, "torch")
        best = _best_retorch(results, name, case) or next(
            ((r["impl"], r["value"]) for r in _rows(results, name)
             if case in r["case"] and "torch" not in r["impl"].lower()), None)  # fmt: skip
        ratio = best[1] / torch_v if best and torch_v else None
        bits = (results.get(name) or {}).get("bit_identical")
        why = "" if bits is None else f" (bit-identical: {bits})"
        kernel = (results.get(name) or {}).get("kernel")  # which retorch kernel ran
        why += f" ({kernel})" if kernel else ""
        add(f"add on 64M float32 >= 0.9x torch's bandwidth ({name})", ratio, 0.9, True,
            "{:.2f}x torch", why)  # fmt: skip
    cublas = _value(results, "matmul", "4096", "torch") or _value(
        results, "matmul", "4096", "cublas"
    )
    best = _best_retorch(results, "matmul", "4096")
    add("best SGEMM rung >= 0.5x cuBLAS fp32 at 4096 (TF32 off)",
        best[1] / cublas if best and cublas else None, 0.5, True,
        "{:.3f}x cuBLAS", f" ({best[0]})" if best else "")  # fmt: skip
    for case in (
        "10M params in 10 tensors",
        "10M params in 100 tensors",
        "100M params in 10 tensors",
    ):
        torch_ms = _value(results, "optim", case, "torch fused")
        ours = min((r["value"] for r in _rows(results, "optim")
                    if case.lower() in r["case"].lower() and "retorch" in r["impl"].lower()),
                   default=None)  # the fastest of retorch's fused steps  # fmt: skip
        add(f"fused Adam >= 0.8x torch fused's speed, {case.strip()}",
            torch_ms / ours if torch_ms and ours else None, 0.8, True, "{:.2f}x")  # fmt: skip
    for kernel in ("gelu", "softmax", "layer_norm"):
        for case in _cases(results, "inductor", kernel) or [kernel]:
            triton = _value(results, "inductor", case, "torch.compile")
            ours = _value(results, "inductor", case, "retorch")
            add(f"generated CUDA <= 2x Triton's time: {case}",
                ours / triton if ours and triton else None, 2, False, "{:.2f}x Triton")  # fmt: skip
    return out


def summary_table(rows: list[dict], header: str = "") -> str:
    """The goals as a Markdown table (goal, measured, met)."""
    mark = {True: "met", False: "NOT met", None: "not measured"}
    lines = [header] if header else []
    lines += ["| goal | measured | met |", "|---|---|---|"]
    lines += [f"| {r['goal']} | {r['shown']} | {mark[r['met']]} |" for r in rows]
    met = sum(r["met"] is True for r in rows)
    lines.append(f"\n{met} of {len(rows)} goals met.")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- storage
def store(result: dict, name: str, out: Path, dry: bool) -> str:
    """Write a GPU section under ``out`` always, and into ``bench/results/gpu`` when it is a
    real, storable measurement. Returns what was done, for the log."""
    from tools.bench import storable

    target = out / "bench" / "results" / "gpu" / f"{name}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=1) + "\n")
    if dry or "skipped" in result:
        return f"written to {target} only ({'dry run' if dry else result['skipped']})"
    if why := storable(result):
        return f"written to {target}; NOT stored in bench/results/gpu: {why}"
    (ROOT / "bench" / "results" / "gpu" / f"{name}.json").write_text(target.read_text())
    return f"stored in bench/results/gpu/{name}.json and {target}"


# ---------------------------------------------------------------- steps
class Report:
    def __init__(self, out: Path, dry: bool, budget: float):
        self.out, self.dry = out, dry
        self.deadline = time.monotonic() + budget
        self.steps: list[dict] = []
        (out / "gpu-report").mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1" if dry else "0")
        for key, value in MAKEFILE_ENV.items():  # as the Makefile exports them, without make
            self.env.setdefault(key, value.replace("~", str(Path.home())))
        if SITE.is_dir():
            self.env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(SITE)])
        else:
            self.env["PYTHONPATH"] = str(ROOT)

    def run(self, name: str, cmd: list[str], timeout: float) -> bool:
        """Run one step in its own process, its log under $OUT; never raises."""
        left = self.deadline - time.monotonic()
        log = self.out / "gpu-report" / f"{name.replace(':', '_')}.log"
        if left < 10:
            self.steps.append({"step": name, "status": "not run (out of time)", "s": 0})
            print(f"==> {name}: not run, the 8-minute budget is spent", flush=True)
            return False
        timeout = min(timeout, left)
        print(f"==> {name} (at most {timeout:.0f} s)", flush=True)
        t0 = time.monotonic()
        with log.open("w") as f:
            try:
                done = subprocess.run(cmd, cwd=ROOT, env=self.env, stdout=f,
                                      stderr=subprocess.STDOUT, timeout=timeout)  # fmt: skip
                rc = done.returncode
                status = "ok" if rc == 0 else f"failed (exit {rc})"
            except subprocess.TimeoutExpired:
                status = f"timed out after {timeout:.0f} s"
            except OSError as e:
                status = f"could not start: {e}"
        took = round(time.monotonic() - t0, 1)
        self.steps.append({"step": name, "status": status, "s": took, "log": log.name})
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        print(f"    {status} in {took} s" + "".join(f"\n    | {t[:150]}" for t in tail), flush=True)
        self.save_steps()
        return status == "ok"

    def save_steps(self) -> None:
        path = self.out / "gpu-report" / "steps.json"
        path.write_text(json.dumps(self.steps, indent=1) + "\n")


def setup(report: Report) -> None:
    """Install the carried wheels when this Python lacks what the report needs."""
    wheels = sorted((ROOT / ".whl").glob("*.whl"))
    in_venv = Path(sys.prefix).resolve() == (ROOT / ".venv").resolve()
    if in_venv or not wheels:
        why = "the course's .venv" if in_venv else "no .whl/ carried"
        report.steps.append({"step": "setup", "status": f"skipped ({why})", "s": 0})
        return
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
           "--disable-pip-version-check", "--target", str(SITE), *map(str, wheels)]  # fmt: skip
    report.run("setup", cmd, 120)
    report.env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(SITE)])


VERSIONS = r"""
import json, platform, subprocess, sys
v = {"python": platform.python_version()}
import numpy, torch, numba
v.update(numpy=numpy.__version__, torch=torch.__version__, numba=numba.__version__)
from importlib.metadata import version
try:
    v["numba-cuda"] = version("numba-cuda")
except Exception as e:
    v["numba-cuda"] = f"unknown ({e})"
import retorch  # settles the simulator switch
from numba import cuda
from retorch.cuda import simulator_enabled
v["simulator"] = simulator_enabled()
v["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU (simulator)"
try:
    v["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
        "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
except Exception as e:
    v["driver"] = f"unknown ({e.__class__.__name__})"
if not simulator_enabled() and cuda.is_available():
    v["cuda driver API"] = ".".join(map(str, cuda.cudadrv.driver.driver.get_version()))
    v["compute capability"] = ".".join(map(str, cuda.get_current_device().compute_capability))
v["torch cuda"] = torch.version.cuda
json.dump(v, open(sys.argv[1], "w"), indent=1)
print(json.dumps(v))
"""


def report_folders(out: Path, dry: bool) -> list[Path]:
    """Where the launch profile and the summary go: under $OUT, and (not in a dry run) in
    bench/results/gpu/report/ (a subfolder: they are not benchmark sections)."""
    folders = [out / "bench" / "results" / "gpu" / "report"]
    folders += [] if dry else [ROOT / "bench" / "results" / "gpu" / "report"]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    return folders


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry", action="store_true", help="simulator, tiny sizes, $OUT only")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds in all")
    args = parser.parse_args()
    default_out = "/tmp/gpu-report-dry" if args.dry else str(ROOT / "gpu-report-out")
    out = Path(os.environ.get("OUT") or default_out).resolve()
    report = Report(out, args.dry, args.budget)
    print(f"gpu-report: results under {out}{' (dry run)' if args.dry else ''}", flush=True)
    setup(report)
    py = sys.executable
    vfile = out / "gpu-report" / "versions.json"
    report.run("versions", [py, "-c", VERSIONS, str(vfile)], 60)
    report.env["GPU_REPORT_VERSIONS"] = str(vfile)
    quick = ["--quick"] if args.dry else []

    results: dict = {}
    launch_file = out / "gpu-report" / "launch.json"
    cmd = [py, "-m", "tools.gpu_launch_profile", "--to", str(launch_file), *quick]
    if report.run("launch", cmd, 90) and launch_file.is_file():
        results["launch"] = json.loads(launch_file.read_text())
        for folder in report_folders(out, args.dry):
            shutil.copy(launch_file, folder / "launch.json")

    memory_file = out / "gpu-report" / "memory_history.json"
    cmd = [py, "-m", "tools.gpu_memory_history", "--to", str(memory_file), *quick]
    if report.run("memory", cmd, 60) and memory_file.is_file():
        for folder in report_folders(out, args.dry):
            shutil.copy(memory_file, folder / "memory_history.json")

    from tools.bench import gpu_names

    per_bench = {"matmul": 120, "inductor": 150, "optim": 90}
    for name in gpu_names():
        tmp = out / "gpu-report" / f"bench_{name}.raw.json"
        cmd = [py, "tools/bench.py", "--one", name, "--to", str(tmp), "--gpu", *quick]
        if report.run(f"bench:{name}", cmd, per_bench.get(name, 60)) and tmp.is_file():
            results[name] = json.loads(tmp.read_text())
            print(f"    {store(results[name], name, out, args.dry)}", flush=True)

    xdist = [] if args.dry else ["-n", "8"]
    tests = TESTS[:2] if args.dry else TESTS
    report.run("tests", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *xdist, *tests], 150)
    nbval = ["-p", "tools.nbval_report", "--nbval", "--nbval-current-env",
             "--nbval-sanitize-with", "tools/nbval_sanitize.cfg"]  # fmt: skip
    notebooks = NOTEBOOKS[:1] if args.dry else NOTEBOOKS
    xdist4 = ["-n", "4"] if xdist else []
    cmd = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *xdist4, *nbval, *notebooks]
    report.run("notebooks", cmd, 180)

    versions = json.loads(vfile.read_text()) if vfile.is_file() else {}
    header = (f"GPU report on {versions.get('device', '?')}, torch {versions.get('torch', '?')}, "
              f"numba-cuda {versions.get('numba-cuda', '?')}, driver {versions.get('driver', '?')}"
              + (" (DRY RUN: simulator, tiny sizes)" if args.dry else "") + "\n")  # fmt: skip
    rows = goals(results)
    steps = "\n".join(f"- {s['step']}: {s['status']} ({s['s']} s)" for s in report.steps)
    text = summary_table(rows, header) + "\nSteps:\n" + steps + "\n"
    (out / "gpu-report" / "summary.md").write_text(text)
    summary = {"versions": versions, "goals": rows, "steps": report.steps, "dry": args.dry}
    (out / "gpu-report" / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    for folder in report_folders(out, args.dry):
        (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print("\n" + text, flush=True)
    return 0 if all(s["status"].startswith(("ok", "skipped")) for s in report.steps) else 1


if __name__ == "__main__":
    sys.exit(main())

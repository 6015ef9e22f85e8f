"""What the set-up cell installs, and the promise it keeps: the runtime's torch stays as it is.

Colab and other hosted runtimes ship their own torch, built for one CUDA (12 or 13) with its
CUDA libraries (``nvidia-*`` wheels, ``triton``, ``cuda-bindings``). The course needs two more
packages, numba-cuda and torchviz; installed carelessly, pip resolves numba-cuda's CUDA extra
against torch's CUDA libraries by *replacing torch* (a CUDA 13 torch 2.15 was downgraded to a
CUDA 12 torch 2.10). So :func:`ensure`:

1. records torch's version, its CUDA (``torch/version.py``, read from disk: no import) and the
   version of every protected package (:data:`PROTECTED`);
2. picks numba-cuda's CUDA extra from that runtime (:func:`cuda_extra`: torch's CUDA major, else
   the driver's, else none: kernels then run on Numba's CUDA simulator);
3. asks pip what it *would* install (``pip install --dry-run --report``) and refuses, before
   anything changes, if that touches a protected package (:func:`pip_refusal`);
4. installs exactly the versions pip reported, with ``--no-deps`` (no second resolution), says
   so in one line, and checks step 1 again afterwards.

``import retorch`` imports neither torch nor numba, so this runs before either is usable.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata as md
import importlib.util
import json
import re
import runpy
import site
import subprocess
import sys
import tempfile
from pathlib import Path

#: Distributions that belong to the runtime's torch: pip may never install, upgrade or
#: downgrade one that is present (adding a new ``nvidia-*`` library is allowed).
PROTECTED = re.compile(r"^(torch|triton|cuda-bindings|cuda-python|cuda-toolkit|nvidia-.*)$")
#: module the course imports -> requirement that provides it (``{extra}``: numba-cuda's CUDA)
NEEDED = {"numba_cuda": "numba-cuda{extra}", "torchviz": "torchviz", "graphviz": "graphviz"}


class TorchWouldChange(RuntimeError):
    """pip would change (or did change) the runtime's torch or its CUDA libraries."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def torch_cuda() -> str | None:
    """``torch.version.cuda`` of the installed torch, read from its file (torch not imported)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    version_py = Path(list(spec.submodule_search_locations)[0]) / "version.py"
    return runpy.run_path(str(version_py)).get("cuda") if version_py.is_file() else None


def runtime_state() -> dict[str, str | None]:
    """torch's version and CUDA, and the version of every protected distribution installed."""
    state: dict[str, str | None] = {}
    for dist in md.distributions():
        name = canonical(dist.metadata["Name"] or "")
        if PROTECTED.match(name):
            state[name] = dist.version
    state["torch.version.cuda"] = torch_cuda()
    return state


def driver_cuda_major() -> int | None:
    """The CUDA major version the NVIDIA driver supports (``cuDriverGetVersion``), or None."""
    lib = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        cuda = ctypes.CDLL(lib)
        version = ctypes.c_int(0)
        if cuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return version.value // 1000


def cuda_extra(torch_cuda: str | None, driver_major: int | None) -> str:
    """numba-cuda's extra for this runtime: torch's own CUDA major if torch is a CUDA build;
    else what the driver supports (cu13 from driver 13, else cu12); no GPU: none (simulator)."""
    if torch_cuda:
        return f"[cu{torch_cuda.split('.')[0]}]"
    if driver_major:
        return "[cu13]" if driver_major >= 13 else "[cu12]"
    return ""


def lacking(extra: str) -> list[str]:
    """The requirements of the course's modules that this runtime cannot import yet."""
    return [
        req.format(extra=extra)
        for mod, req in NEEDED.items()
        if importlib.util.find_spec(mod) is None
    ]


def pip_refusal(report: dict, before: dict[str, str | None]) -> str | None:
    """Why the install in pip's ``report`` must not go ahead, or None if it may."""
    if "torch" not in before:
        return "this runtime has no torch: install the torch you want first, then run this again"
    changes = []
    for item in report.get("install", []):
        name, version = canonical(item["metadata"]["name"]), item["metadata"]["version"]
        if PROTECTED.match(name) and (name in ("torch", "triton") or name in before):
            changes.append(f"{name} {before.get(name, 'absent')} -> {version}")
    if not changes:
        return None
    return (
        "the set-up cell stopped before installing anything: pip would change the runtime's "
        f"torch or its CUDA libraries ({', '.join(changes)}). Nothing was changed. Report this "
        "with the line above; meanwhile install numba-cuda yourself without its dependencies "
        "(`pip install --no-deps numba-cuda`)."
    )


def site_dirs() -> list[Path]:
    """The directories whose ``.pth`` files Python ran at start-up (site-packages)."""
    return [Path(d) for d in [*site.getsitepackages(), site.getusersitepackages()] if d]


def pth_files() -> set[Path]:
    return {p for d in site_dirs() if d.is_dir() for p in d.glob("*.pth")}


def run_new_pth(before: set[Path]) -> list[Path]:
    """Run the ``.pth`` files an install added, as a restart would: numba-cuda's redirects
    ``numba.cuda`` to itself, which this process must see without a restart."""
    new = sorted(pth_files() - before)
    for pth in new:
        site.addpackage(str(pth.parent), pth.name, None)
    return new


def pip(*args: str, capture: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"]
    return subprocess.run(cmd, capture_output=capture, text=True)


def dry_run(requirements: list[str]) -> dict:
    """pip's JSON report of what ``pip install requirements`` would install (nothing is)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        done = pip("install", "--dry-run", "-q", "--report", str(out), *requirements)
        if done.returncode:
            raise RuntimeError(f"pip cannot resolve {requirements}:\n{done.stderr[-2000:]}")
        return json.loads(out.read_text())


def ensure(run_pip=pip, report_for=dry_run) -> list[str]:
    """Install what the course lacks without changing torch; return what was installed.

    Prints one line when it installs something, nothing when everything is present."""
    before = runtime_state()
    extra = cuda_extra(before["torch.version.cuda"], driver_cuda_major())
    wanted = lacking(extra)
    if not wanted:
        return []
    report = report_for(wanted)
    if why := pip_refusal(report, before):
        raise TorchWouldChange(why)
    pins = [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in report["install"]]
    torch_line = f"torch {before.get('torch')} (CUDA {before['torch.version.cuda'] or 'none'})"
    print(f"Installing {', '.join(wanted)} ({len(pins)} packages); {torch_line} stays as it is")
    pth_before = pth_files()
    if pins:
        done = run_pip("install", "-q", "--no-deps", *pins)
        if done.returncode:
            raise RuntimeError(f"pip install failed:\n{(done.stderr or '')[-2000:]}")
    importlib.invalidate_caches()  # this process must see the new packages
    run_new_pth(pth_before)
    after = runtime_state()
    # a protected package added (cuda-bindings for numba-cuda) is fine; a present one changed is not
    changed = {k: (v, after.get(k)) for k, v in before.items() if after.get(k) != v}
    if changed:
        raise TorchWouldChange(
            f"installing {wanted} changed the runtime's torch or CUDA libraries: {changed}. "
            "Restart with a fresh runtime (Runtime > Disconnect and delete runtime)."
        )
    return pins

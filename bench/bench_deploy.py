"""Chapter 9: the capstone's Transformer deployed ahead of time, load and latency.

The sort task's GPT, exported and packaged by retorch (``retorch.export`` and
``retorch.inductor.package``: Numba kernels in Python source) and by torch (``torch.export`` and
AOTInductor: C++ compiled by gcc into a shared library), on a batch of 4 sequences of 11 tokens.
*Load* is measured in a fresh process, from before ``aoti_load_package`` to the end of the first
call, after torch is imported: torch's package opens its shared library; retorch's reads its
source and weights, and Numba loads the kernels' machine code from its disk cache (filled by an
earlier process: a cold first call compiles them, tens of seconds here); eager torch imports
the model's code, builds the model and loads its ``state_dict``. *Call* is the
median time of one call once loaded, in this process, beside eager torch on the same model.
One thread each (``torch.set_num_threads(1)``, ``NUMBA_NUM_THREADS=1``): at this size threads
only add contention on a shared 2-core machine.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import torch

CHILD = """
    import sys, time
    import torch
    torch.set_num_threads(1)
    x = torch.load(sys.argv[3])
    if sys.argv[1] == "retorch":
        from retorch.inductor.package import aoti_load_package
        t0 = time.perf_counter()
        model = aoti_load_package(sys.argv[2], cache_dir=sys.argv[4])
    elif sys.argv[1] == "torch":
        t0 = time.perf_counter()
        model = torch._inductor.aoti_load_package(sys.argv[2])
    else:  # eager: the model's code imported, the model built, its state_dict loaded
        t0 = time.perf_counter()
        from retorch.models import build_gpt, compare
        model = build_gpt(compare.SORT_CONFIG, torch.nn)
        model.load_state_dict(torch.load(sys.argv[2]))
    with torch.no_grad():
        model(x)
    print(time.perf_counter() - t0)
"""


def _load_seconds(library: str, package: str, inputs: Path, cache: Path) -> float:
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), library, package, str(inputs), str(cache)],
        capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return float(proc.stdout.split()[-1])


def _call_ms(fn, x, repeats: int) -> float:
    fn(x)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def run(quick: bool = False) -> dict:
    from retorch.inductor.package import aoti_load_package
    from retorch.models import build_gpt, compare, deploy
    from retorch.models.tasks import sort_task

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_gpt(compare.SORT_CONFIG, torch.nn).eval()
    x, _ = sort_task(4, n=compare.N_SORT, seed=2)
    work = Path(tempfile.mkdtemp())
    torch.save(x, work / "x.pt")
    packages = {
        "retorch package": deploy.retorch_package(model, x, work / "ours.pt2"),
        "torch AOTInductor package": deploy.torch_package(model, x, work / "torch.pt2"),
    }
    torch.save(model.state_dict(), work / "state_dict.pt")
    packages["torch eager"] = str(work / "state_dict.pt")
    cache = work / "numba_cache"
    _load_seconds("retorch", packages["retorch package"], work / "x.pt", cache)  # fills it
    rows = []
    for name, package in packages.items():
        library = name.split()[0] if name != "torch eager" else "eager"
        loads = [_load_seconds(library, package, work / "x.pt", cache) for _ in range(2 if quick else 3)]  # fmt: skip
        rows.append({"case": "load and first call, fresh process", "impl": name,
                     "value": statistics.median(loads) * 1e3})  # fmt: skip
    repeats = 20 if quick else 200
    calls = {
        "retorch package": aoti_load_package(packages["retorch package"], cache_dir=cache),
        "torch AOTInductor package": torch._inductor.aoti_load_package(
            packages["torch AOTInductor package"]
        ),
    }
    with torch.no_grad():
        calls["torch eager"] = model
        for name, fn in calls.items():
            rows.append({"case": "one call, batch 4 x 11 tokens", "impl": name,
                         "value": _call_ms(fn, x, repeats)})  # fmt: skip
    return {
        "name": "deploy",
        "title": "The capstone deployed ahead of time, on CPU (ms, lower is better)",
        "unit": "ms",
        "rows": rows,
        "notes": " ".join(__doc__.split("\n\n")[1].split()),
    }

"""Measure the capstone GPT's AOT packages, retorch's and torch's, side by side.

    .venv/bin/python tools/aot_package_figures.py [--torch] [--out figures.json]

For retorch (retorch.export -> retorch.inductor -> retorch/inductor/package.py) and, with
``--torch``, torch (torch.export -> torch._inductor.aoti_compile_and_package, gcc: slow), it
prints and stores: export and compile time, package size, and, in fresh processes, the time
to import, to load the package, to make the first call (Numba compiles retorch's kernels
there: cold, then from Numba's disk cache) and the latency per call, with one thread
(``NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1``) and with the default threads, and the largest
difference of each package's logits from eager torch's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

CHILD = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    import torch
    kind, path, cache, data = sys.argv[1:5]
    if kind == "retorch":
        from retorch.inductor.package import aoti_load_package
        load = lambda: aoti_load_package(path, cache_dir=cache)
    else:
        load = lambda: torch._inductor.aoti_load_package(path)
    t1 = time.perf_counter()
    model = load()
    t2 = time.perf_counter()
    ref = torch.load(data)
    out = model(ref["idx"])
    t3 = time.perf_counter()
    for _ in range(10):
        model(ref["idx"])
    n, t = 200, time.perf_counter()
    for _ in range(n):
        model(ref["idx"])
    latency = (time.perf_counter() - t) / n
    print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_call_s": t3 - t2,
                      "latency_us": latency * 1e6,
                      "max_abs_diff_vs_eager": (out - ref["out"]).abs().max().item(),
                      "models_imported": any(m.startswith("retorch.models")
                                             for m in sys.modules)}))
""")


def child(kind, path, cache, data, threads=None) -> dict:
    env = dict(os.environ)
    if threads:
        env.update(NUMBA_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    proc = subprocess.run([sys.executable, "-c", CHILD, kind, str(path), str(cache), str(data)],
                          capture_output=True, text=True, env=env, check=True)  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch", action="store_true", help="also torch's AOTI package (gcc)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import torch

    import retorch.export
    from retorch.inductor.package import aoti_compile_and_package
    from retorch.models import GPTConfig, build_gpt

    sort = GPTConfig(vocab_size=10, block_size=11, n_layer=2, n_head=2, n_embd=32)
    torch.manual_seed(0)
    model = build_gpt(sort, torch.nn).eval()
    idx = torch.randint(0, 10, (4, sort.block_size))
    tmp = Path(tempfile.mkdtemp(prefix="aot_figures_"))
    torch.save({"idx": idx, "out": model(idx).detach()}, tmp / "data.pt")
    figures = {}
    for kind in ["retorch"] + (["torch"] if a.torch else []):
        t0 = time.perf_counter()
        ep = (retorch.export.export if kind == "retorch" else torch.export.export)(model, (idx,))
        t1 = time.perf_counter()
        compile_ = (aoti_compile_and_package if kind == "retorch"
                    else torch._inductor.aoti_compile_and_package)  # fmt: skip
        path = compile_(ep, package_path=str(tmp / f"{kind}.pt2"))
        t2 = time.perf_counter()
        f = {"export_s": t1 - t0, "compile_s": t2 - t1, "package_bytes": os.path.getsize(path)}
        cache = tmp / f"{kind}_cache"
        f["cold"] = child(kind, path, cache, tmp / "data.pt", threads=1)
        f["warm_1_thread"] = child(kind, path, cache, tmp / "data.pt", threads=1)
        f["warm_default_threads"] = child(kind, path, cache, tmp / "data.pt")
        figures[kind] = f
        print(kind, json.dumps(f, indent=1), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()

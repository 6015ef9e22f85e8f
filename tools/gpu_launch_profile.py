"""Host cost of one retorch CUDA launch, and where it goes: a step of ``make gpu-report``.

Times, on the host (``time.perf_counter``, no synchronisation inside the timed loop: the GPU
runs the 1-element kernels far faster than the host queues them), one ``add`` of 1-element CUDA
tensors through ``retorch.tensor`` (chapter 4) and through chapter 5's ``retorch.Tensor`` with
``requires_grad`` (the dispatcher and autograd), beside ``torch.add``; then profiles N
``retorch.tensor`` adds with cProfile and keeps the top entries by cumulative and by own time,
so chapter 4 can show the anatomy of a launch (issue 28, "Host cost per op").

Under the simulator (``--quick``, the dry run) the same code runs, on simulated kernels: its
numbers say nothing about a GPU and are never stored in bench/results.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def host_us(fn, per: int, turns: int) -> float:
    """Median host µs per call over ``turns`` blocks of ``per`` calls (after one warm-up)."""
    fn()
    samples = []
    for _ in range(turns):
        t0 = time.perf_counter()
        for _ in range(per):
            fn()
        samples.append((time.perf_counter() - t0) * 1e6 / per)
    return statistics.median(samples)


def top_entries(profile: cProfile.Profile, calls: int, key: str, n: int = 25) -> list[dict]:
    """The top ``n`` functions of ``profile`` by ``key`` ("cumulative" or "tottime"), in µs
    per profiled launch."""
    stats = pstats.Stats(profile)
    rows = []
    entries = stats.stats.items()  # type: ignore[attr-defined]
    for (file, line, func), (_cc, nc, tt, ct, _) in entries:
        rows.append({"function": f"{Path(file).name}:{line}({func})", "file": file,
                     "calls per launch": nc / calls, "own µs per launch": tt * 1e6 / calls,
                     "cumulative µs per launch": ct * 1e6 / calls})  # fmt: skip
    field = "cumulative µs per launch" if key == "cumulative" else "own µs per launch"
    return sorted(rows, key=lambda r: -r[field])[:n]


def _axpy(out, x, y, n):  # jitted in raw_launch, after retorch chose the simulator or not
    i = cuda.grid(1)  # noqa: F821  (the module global set by raw_launch)
    if i < n:
        out[i] = x[i] + 2.0 * y[i]


def raw_launch(per: int, turns: int, profiled: int) -> dict:
    """One kernel launch alone, before and after the one launch path: numba-cuda's
    ``kernel[grid, block](args)`` (a launch configuration built per call, arguments typed per
    call) against ``retorch.cuda_launch.launch`` (configured launcher cached, torch's stream),
    same kernel, same device arrays: host µs and the top of a cProfile of each."""
    import numpy as np

    from retorch import cuda_launch
    from retorch.cuda_launch import cuda

    globals()["cuda"] = cuda
    axpy = cuda.jit(_axpy)
    x, y, out = (cuda.to_device(np.ones(1, np.float32)) for _ in range(3))
    cases = {
        "before (numba kernel[grid, block](...))": lambda: axpy[1, 32](out, x, y, 1),
        "after (retorch.cuda_launch.launch)": lambda: cuda_launch.launch(axpy, 1, 32, out, x, y, 1),
    }
    found: dict = {}
    for name, fn in cases.items():
        found[f"launch {name}, host µs"] = host_us(fn, per, turns)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(profiled):
            fn()
        profile.disable()
        found[f"launch {name}, profile by cumulative time"] = top_entries(
            profile, profiled, "cumulative", 15
        )
    cuda.synchronize()
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--to", required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    import torch

    import retorch.tensor as rt
    from retorch.cuda import simulator_enabled
    from retorch.dispatch import tensor as dtensor

    per, turns, profiled = (20, 3, 20) if args.quick else (1000, 15, 2000)
    a, b = rt.tensor([1.0], device="cuda"), rt.tensor([1.0], device="cuda")
    da = dtensor([1.0], device="cuda", requires_grad=True)
    db = dtensor([1.0], device="cuda", requires_grad=True)
    result: dict = {"simulator": simulator_enabled(), "launches profiled": profiled}
    result["retorch.tensor add, host µs"] = host_us(lambda: rt.add(a, b), per, turns)
    result["retorch.Tensor add (requires_grad), host µs"] = host_us(lambda: da + db, per, turns)
    if torch.cuda.is_available():
        ta, tb = torch.ones(1, device="cuda"), torch.ones(1, device="cuda")
        result["torch.add, host µs"] = host_us(lambda: torch.add(ta, tb), per, turns)
        torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(profiled):
        rt.add(a, b)
    profile.disable()
    result["profile, by cumulative time"] = top_entries(profile, profiled, "cumulative")
    result["profile, by own time"] = top_entries(profile, profiled, "tottime")
    result.update(raw_launch(per, turns, profiled))
    from tools.bench import commit_of, loaded_sources

    result["sources"] = loaded_sources()
    result["commit"] = commit_of(list(result["sources"]))
    result["versions"] = {"torch": torch.__version__}
    if torch.cuda.is_available():
        result["device"] = torch.cuda.get_device_name()
    Path(args.to).write_text(json.dumps(result, indent=1) + "\n")
    for key in [k for k in result if k.endswith("host µs")]:
        print(f"{key}: {result[key]:.1f}")
    for row in result["profile, by cumulative time"][:12]:
        print(f"  {row['cumulative µs per launch']:9.1f} µs  {row['function']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Chapter on Dynamo: capture time and cached-call time, retorch.dynamo beside torch._dynamo.

Capture: the first call of a freshly wrapped function on 4x4 inputs (translate the bytecode,
build and compile the FX graph with a backend that returns `gm.forward`, so no Inductor
compile is counted; run it once), after `torch._dynamo.reset()` for torch. Cached call: a
later call with the same inputs, which checks the cache entry's guards and runs the graph;
on 4x4 inputs that is mostly guard checking and Python overhead. torch checks its guards in
C++ (a tree of guard managers); retorch checks a list of Python guard objects.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import sys
import time
from pathlib import Path

import torch
import torch._dynamo

import retorch.dynamo as rd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import test_dynamo_corpus as corpus  # noqa: E402

CASES = ["straight", "torch_calls", "module_forward", "with_print", "branch", "loop"]


def _torch_backend(gm, example_inputs):
    return gm.forward


def _capture(impl: str, fn, args) -> tuple[float, object]:
    if impl == "torch._dynamo":
        torch._dynamo.reset()
        opt = torch.compile(fn, backend=_torch_backend, dynamic=False)
    else:
        opt = rd.optimize("eager")(fn)
    t0 = time.perf_counter()
    opt(*args)
    return time.perf_counter() - t0, opt


def run(quick: bool = False) -> dict:
    names = CASES[:2] if quick else CASES
    repeats, calls = (2, 20) if quick else (7, 500)
    rows = []
    args = corpus.args_4x4(0)
    with contextlib.redirect_stdout(io.StringIO()):
        for name in names:
            fn = corpus.CORPUS[name][0]
            capture = {impl: [] for impl in ("retorch.dynamo", "torch._dynamo")}
            cached = {impl: [] for impl in capture}
            for _ in range(repeats):
                for impl in capture:  # interleaved, so drifts hit both
                    t, opt = _capture(impl, fn, args)
                    capture[impl].append(t)
                    opt(*args)
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        opt(*args)
                    cached[impl].append((time.perf_counter() - t0) / calls)
            for impl in capture:
                rows.append({"case": f"{name}: capture", "impl": impl,
                             "value": statistics.median(capture[impl]) * 1e3})  # fmt: skip
                rows.append({"case": f"{name}: cached call", "impl": impl,
                             "value": statistics.median(cached[impl]) * 1e3})  # fmt: skip
    torch._dynamo.reset()
    return {
        "name": "dynamo",
        "title": "Dynamo: capture and cached call on 4x4 inputs (ms, lower is better)",
        "unit": "ms",
        "rows": rows,
        "notes": " ".join(__doc__.split("\n\n")[1].split()),
    }


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv)["rows"]:
        print(f"{row['case']:28} {row['impl']:16} {row['value']:.4f}")

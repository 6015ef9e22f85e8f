"""Chapter 0: what torch adds around the loop. ``torch.add`` against the bare loop in Numba.

For a tiny tensor the time is all overhead (argument parsing, dispatch, autograd's check, the
output's allocation); for a large one it is all memory traffic, where a compiled loop and
torch's vectorised kernel meet at the machine's bandwidth. Outputs are preallocated for both
(``out=``), so allocation cost is left out of the large case.

On a machine with a GPU, a GPU section times the chapter's grid-stride add kernel
(``add_kernel`` with ``launch_geometry``) against ``torch.add(out=)`` on 64M float32 values
(``a + 1.5 * b``) with CUDA events, in TB/s (12 bytes per element), and checks the two results
are bit-identical; it is stored with the device's name.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from bench.gpu import gpu_skip_reason
from retorch.overview import add_cpu
from retorch.overview.kernels import add_kernel, launch_geometry


def _time(fn, repeats: int, number: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return statistics.median(samples)


def run(quick: bool = False) -> dict:
    sizes = [10, 100_000] if quick else [10, 100_000, 10_000_000]
    rows = []
    for n in sizes:
        a, b = torch.rand(n), torch.rand(n)
        out = torch.empty(n)
        x, y, o = a.numpy(), b.numpy(), out.numpy()
        number = max(1, min(2000, 2_000_000 // n))
        impls = {
            "torch.add(out=)": lambda: torch.add(a, b, alpha=2.0, out=out),
            "numba prange loop": lambda: add_cpu(x, y, np.float32(2.0), o),
        }
        results = {k: [] for k in impls}
        for _ in range(3 if quick else 7):  # interleave implementations
            for name, fn in impls.items():
                results[name].append(_time(fn, 1, number))
        for name, samples in results.items():
            rows.append(
                {
                    "case": f"add {n:,} floats",
                    "impl": name,
                    "value": statistics.median(samples) * 1e6,
                }
            )
    return {
        "name": "overview",
        "title": "torch.add vs the bare loop (µs per call)",
        "unit": "us",
        "rows": rows,
        "notes": __doc__.strip().split("\n\n")[1],
        "gpu": run_gpu(quick),
    }


def run_gpu(quick: bool = False) -> dict:
    """The add kernel against torch.add on the GPU, in TB/s, or why it was skipped."""
    reason = gpu_skip_reason()
    if reason:
        return {"skipped": reason}
    from numba import cuda

    n = 1 << (22 if quick else 26)
    a, b = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    out, ref = torch.empty_like(a), torch.empty_like(a)
    xs, ys, outs = (cuda.as_cuda_array(t) for t in (a, b, out))
    blocks, threads = launch_geometry(n)
    impls = {
        "torch.add(out=)": lambda: torch.add(a, b, alpha=1.5, out=ref),
        "add_kernel (numba-cuda, grid-stride)": lambda: add_kernel[blocks, threads](
            xs, ys, np.float32(1.5), outs
        ),
    }
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples: dict[str, list[float]] = {name: [] for name in impls}
    for fn in impls.values():
        fn()
    for _ in range(5 if quick else 25):
        for name, fn in impls.items():
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end))
    rows = [
        {"case": f"a + 1.5 * b, {n >> 20}M float32", "impl": name,
         "value": 12 * n / statistics.median(ms) / 1e9}
        for name, ms in samples.items()
    ]  # fmt: skip
    return {"device": torch.cuda.get_device_name(), "unit": "TB/s", "rows": rows,
            "bit_identical": bool(torch.equal(out, ref)),
            "launch": [blocks, threads]}  # fmt: skip

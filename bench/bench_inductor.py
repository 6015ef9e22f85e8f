"""Chapter on Inductor: three fused programs, eager torch vs torch Inductor vs retorch.inductor.

A tanh-GELU written as 8 separate ops on 1M and 10M floats, softmax over rows and LayerNorm
over rows of (1000, 1000) and (10000, 1000) float32, forward only (under no_grad). Eager
torch runs F.softmax and F.layer_norm, each one fused ATen kernel, and the GELU as 8 kernels.
torch.compile (inductor) runs torch's generated C++; retorch.inductor is called the same way,
torch.compile(fn, backend=retorch.inductor.compile_fx), so both pay Dynamo's guards and
AOTAutograd's wrapper. Times are medians of interleaved samples, in ms; a sample is 10 calls
at 1M elements, 1 at 10M, so that the OpenMP threads torch leaves spinning after its own
calls (Numba runs its own pool) slow only the first call of a sample. Compile times (stored
under "compile", seconds) are the first call after torch._dynamo.reset(), with Inductor's
caches disabled so it compiles cold, as ours (Numba, no cache) always does.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F

import retorch.inductor as ri
from bench.gpu import gpu_skip_reason

IMPLS = ("eager torch", "torch.compile (inductor)", "retorch.inductor")


def gelu(x):
    y = x * x * x
    y = y * 0.044715
    y = x + y
    y = y * 0.7978845608
    y = torch.tanh(y)
    y = y + 1.0
    y = y * 0.5
    return x * y


def softmax(x):
    return F.softmax(x, dim=-1)


def layer_norm(x):
    return F.layer_norm(x, x.shape[-1:])


def cases(quick: bool, device: str = "cpu"):
    sizes = [(1000, 1000)] if quick else [(1000, 1000), (10000, 1000)]
    for rows, cols in sizes:
        n = rows * cols
        label = f"{n // 10**6}M"
        x = torch.randn(rows, cols, device=device, generator=None)
        yield f"gelu (8 ops), {label}", gelu, x.reshape(-1)
        yield f"softmax rows, {rows}x{cols}", softmax, x
        yield f"layer_norm rows, {rows}x{cols}", layer_norm, x


def _compile(fn, x, backend):
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend, dynamic=False)
    t0 = time.perf_counter()
    compiled(x)
    return compiled, time.perf_counter() - t0


def time_cases(quick: bool, device: str, sync=lambda: None) -> tuple[list, dict]:
    rows, compile_s = [], {}
    torch.manual_seed(0)
    for case, fn, x in cases(quick, device):
        with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
            inductor, t_ind = _compile(fn, x, "inductor")
            ours, t_ours = _compile(fn, x, ri.compile_fx)
        compile_s[case] = {"torch.compile (inductor)": t_ind, "retorch.inductor": t_ours}
        impls = dict(zip(IMPLS, (fn, inductor, ours)))
        samples = {name: [] for name in impls}
        with torch.no_grad():
            for f in impls.values():
                f(x)
            number = max(1, 10_000_000 // x.numel())
            for _ in range(3 if quick else 25):
                for name, f in impls.items():  # interleaved, so drifts hit all three
                    sync()
                    t0 = time.perf_counter()
                    for _ in range(number):
                        f(x)
                    sync()
                    samples[name].append((time.perf_counter() - t0) / number * 1e3)
        rows += [{"case": case, "impl": name, "value": statistics.median(ms)}
                 for name, ms in samples.items()]  # fmt: skip
    torch._dynamo.reset()
    return rows, compile_s


def run(quick: bool = False) -> dict:
    rows, compile_s = time_cases(quick, "cpu")
    return {
        "name": "inductor",
        "title": "Fused kernels on CPU: eager, Inductor, retorch.inductor (ms, lower is better)",
        "unit": "ms",
        "rows": rows,
        "compile": compile_s,
        "notes": " ".join(__doc__.split("\n\n")[1].split()),
        "gpu": run_gpu(quick),
    }


def run_gpu(quick: bool = False) -> dict:
    """The same cases on the GPU: our Numba-CUDA kernels, torch.cuda eager, Inductor's Triton."""
    reason = gpu_skip_reason()
    if reason:
        return {"skipped": reason}
    rows, compile_s = time_cases(quick, "cuda", torch.cuda.synchronize)
    return {"device": torch.cuda.get_device_name(), "unit": "ms", "rows": rows,
            "compile": compile_s}  # fmt: skip


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    for row in result["rows"]:
        print(f"{row['case']:30} {row['impl']:26} {row['value']:9.3f} ms")
    for case, t in result["compile"].items():
        print(f"compile {case:30} " + "  ".join(f"{k} {v:.2f} s" for k, v in t.items()))

"""Chapter 4: memory-bound kernels of retorch.tensor against torch, in GB/s (higher is better).

Elementwise add of two 10M-element float32 tensors into a preallocated output (torch.add with
out=, retorch's TensorIterator and parallel Numba loop, which runs a memory-bound op in scalar
blocks of 16 elements); the same parallel loop with each row vectorised by LLVM instead (a loop
compiled for add alone); the
same add allocating its 40 MB output, whose first touch costs a page fault per 4 KiB page
(about 9,800); a sum over 10M float32; and retorch's sum with its loop compiled without
fastmath (additions in source order).
All move memory and do almost no arithmetic, so the ceiling is the machine's memory
bandwidth: the copy_ bars measure it (10M floats, each byte read and written once). GB/s
count what an op must read plus write (add: 12 bytes per element, sum: 4).

Implementations take turns (so drifts of the machine hit all of them), and each turn is one
untimed call followed by a timed block of 3 calls (41 turns): torch and Numba each run their own OpenMP
thread pool, and the pool that ran last keeps its threads spinning for a while, which slows
the other library's next call on a 2-core machine. The untimed call absorbs that switch, so
the block measures each library's steady state, as a program calling one op in a loop sees it.

On a machine with a GPU, a GPU section times the same add on 64M floats with CUDA events
around blocks of 10 calls (retorch's Numba-CUDA kernel for contiguous operands against
torch.cuda; within a block the host queues launches ahead of the GPU, as a training loop
does), stored with the device's name.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

import retorch.tensor as rt
from bench.gpu import gpu_skip_reason
from bench.gpu_events import event_ms_per_call
from retorch.tensor import scalar_ops as S


def _sample_ms(fn, samples: list, number: int = 1) -> None:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    samples.append((time.perf_counter() - t0) / number * 1e3)


def _strict_sum_loop():
    """retorch's parallel sum with its row loop compiled without ``fastmath``: the same code,
    but the additions stay in source order, one dependent add after another."""
    from numba import njit, prange

    from retorch.tensor import cpu_kernels

    strict_range = njit(error_model="numpy")(cpu_kernels._sum_range.py_func)
    chunk = cpu_kernels._CHUNK

    @njit(parallel=True, error_model="numpy")
    def strict_sum(x, zero):
        nchunks = (x.shape[0] + chunk - 1) // chunk
        partial = np.zeros(nchunks, dtype=x.dtype)
        for c in prange(nchunks):
            partial[c] = strict_range(x, c * chunk, min(x.shape[0], (c + 1) * chunk), zero)
        return strict_range(partial, 0, nchunks, zero)

    return strict_sum


def _vector_add_loop():
    """retorch's add loop for one contiguous row split into tasks, with every task's row run
    by ``_binary_row_vector`` for the op ``add`` fixed at compile time (the loop LLVM
    vectorises, one compiled loop for this op alone, as torch compiles one per op) instead of
    the scalar blocks that serve every cheap op."""
    from numba import njit, prange

    from retorch.tensor import cpu_kernels

    grain, row, add = cpu_kernels.GRAIN, cpu_kernels._binary_row_vector, S.ADD

    @njit(parallel=True, error_model="numpy")
    def vector_add(out, a, b):
        for t in prange((a.shape[0] + grain - 1) // grain):
            j0 = np.int64(t) * grain
            j1 = min(a.shape[0], j0 + grain)
            row(add, out[j0:j1], a[j0:j1], b[j0:j1], 1.0)

    return vector_add


def run(quick: bool = False) -> dict:
    n = 1_000_000 if quick else 10_000_000
    torch.manual_seed(0)
    a, b, out, dst = torch.rand(n), torch.rand(n), torch.empty(n), torch.empty(n)
    ra, rb, rout = (rt.from_numpy(t.numpy()) for t in (a, b, out))
    strict_sum, x, zero = _strict_sum_loop(), a.numpy(), np.float32(0)
    vector_add, arrays = _vector_add_loop(), (out.numpy(), a.numpy(), b.numpy())
    label = f"{n / 1e6:g}M float32"
    copy = ("bandwidth ceiling (copy_)", lambda: dst.copy_(a))
    cases = {  # case: (bytes the op must move, {implementation: function})
        f"add(out=), {label}": (12 * n, {"torch": lambda: torch.add(a, b, out=out),
                                         "retorch": lambda: rt.add(ra, rb, out=rout)}),
        f"add(out=), {label}, retorch vectorised by LLVM": (12 * n, {
            "torch": lambda: torch.add(a, b, out=out),
            "retorch": lambda: vector_add(*arrays)}),
        f"add, new output, {label}": (12 * n, {"torch": lambda: torch.add(a, b),
                                               "retorch": lambda: rt.add(ra, rb)}),
        f"sum, {label}": (4 * n, {"torch": lambda: a.sum(), "retorch": lambda: rt.sum(ra)}),
        f"sum, {label}, retorch without fastmath": (
            4 * n, {"torch": lambda: a.sum(), "retorch": lambda: strict_sum(x, zero)}),
    }  # fmt: skip
    rows = []
    for case, (nbytes, impls) in cases.items():
        impls = dict(impls, **{copy[0]: copy[1]})
        for fn in impls.values():  # warm up: Numba compilation or cache load, first touch
            fn()
            fn()
        samples: dict[str, list[float]] = {name: [] for name in impls}
        for _ in range(5 if quick else 41):
            for name, fn in impls.items():  # interleaved, so drifts hit every implementation
                fn()  # absorbs the switch from the other library's thread pool
                _sample_ms(fn, samples[name], number=2 if quick else 3)
        for name, ms in samples.items():
            moved = 8 * n if name == copy[0] else nbytes  # copy_ reads and writes each byte
            rows.append({"case": case, "impl": name, "value": moved / statistics.median(ms) / 1e6})
    return {
        "name": "tensor",
        "title": "Memory-bound kernels on CPU (GB/s, higher is better)",
        "unit": "GB/s",
        "higher_is_better": True,
        "log": False,
        "rows": rows,
        "notes": " ".join(__doc__.split("\n\n")[1].split()),
        "gpu": run_gpu(quick),
    }


def run_gpu(quick: bool = False) -> dict:
    """add of 64M float32 on the GPU, in GB/s (CUDA events, median), or why it was skipped."""
    reason = gpu_skip_reason()
    if reason:
        return {"skipped": reason}
    n = 1 << (22 if quick else 26)
    a, b, out = (torch.rand(n, device="cuda") for _ in range(3))
    ra, rb, rout = (rt.tensor(t.cpu().numpy(), device="cuda") for t in (a, b, out))
    impls = {
        "torch.add(out=)": lambda: torch.add(a, b, out=out),
        "retorch add(out=) (numba-cuda)": lambda: rt.add(ra, rb, out=rout),
    }
    samples = event_ms_per_call(impls, turns=5 if quick else 25, number=10)
    rows = [
        {"case": f"add, {n >> 20}M float32", "impl": name,
         "value": 12 * n / statistics.median(ms) / 1e6}
        for name, ms in samples.items()
    ]  # fmt: skip
    return {"device": torch.cuda.get_device_name(), "unit": "GB/s", "rows": rows}

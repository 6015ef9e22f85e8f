"""Chapter 4: matmul of retorch.tensor against torch, in GFLOP/s (higher is better).

Square float32 matmuls of 512 and 1024. torch calls a tuned BLAS (MKL or OpenBLAS: register
blocking, packing, hand-written vector kernels); retorch's CPU kernel is a cache-blocked Numba
loop over dot products of rows (b copied transposed first, 64 x 64 output tiles per task),
register-blocked: 4 rows of a against 4 rows of b at a time, 16 sums in vector registers;
and the same loop without the register blocks (one dot product at a time). 2 n^3
floating-point operations per product.

On a machine with a GPU, a GPU section times retorch's two Numba-CUDA kernels, the 16 x 16
shared-memory tiled one and the register-tiled one (128 x 128 tiles per block, 8 x 8 outputs
per thread), and the register-tiled one compiled with at most 128 registers a thread (so that
two blocks of 256 threads fit an SM's 65,536 registers, for a few values spilled to local
memory), against torch.cuda's matmul (cuBLAS) with TF32 off at 4096, in TFLOP/s (CUDA
events around blocks of 3 calls), with the device's peak fp32 rate from its SM count and
clock as the roofline, stored with the device's name; and every rung of the SGEMM ladder
(``retorch/tensor/cuda_sgemm.py``: uncoalesced, coalesced, shared-memory tiles, 1-D and 2-D
block tiling, 16-byte vectorized) on the same operands.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

import retorch.tensor as rt
from bench.gpu import gpu_skip_reason
from bench.gpu_events import event_ms_per_call


def _unblocked_loop():
    """``bmm_blocked`` without its register blocks: the same tasks and 64 x 64 tiles, every
    output element one call of ``_dot`` (one row of ``a`` against one row of ``bt``)."""
    from numba import njit, prange

    from retorch.tensor import cpu_kernels

    dot, block = cpu_kernels._dot, cpu_kernels._BLOCK

    @njit(parallel=True, error_model="numpy")
    def mm_unblocked(a, bt, out, m, n, k, zero):
        for t in prange((m + block - 1) // block):
            i0 = np.int64(t) * block
            for j0 in range(0, n, block):
                for i in range(i0, min(m, i0 + block)):
                    for j in range(j0, min(n, j0 + block)):
                        out[i * n + j] = dot(a, i * k, bt, j * k, k, zero)

    def mm(a, b):  # as bmm_kernel: copy b transposed, then the loop
        bt, out = np.ascontiguousarray(b.T), np.empty((a.shape[0], b.shape[1]), a.dtype)
        mm_unblocked(a.ravel(), bt.ravel(), out.ravel(), *out.shape, a.shape[1], a.dtype.type(0))
        return out

    return mm


def run(quick: bool = False) -> dict:
    sizes = [128, 256] if quick else [512, 1024]
    unblocked = _unblocked_loop()
    rows = []
    for n in sizes:
        torch.manual_seed(0)
        a, b = torch.randn(n, n), torch.randn(n, n)
        ra, rb = rt.from_numpy(a.numpy()), rt.from_numpy(b.numpy())
        impls = {
            "torch.mm (BLAS)": lambda: torch.mm(a, b),
            "retorch mm (numba)": lambda: rt.mm(ra, rb),
            "retorch without register blocks": lambda: unblocked(a.numpy(), b.numpy()),
        }
        for fn in impls.values():
            fn()
        samples: dict[str, list[float]] = {name: [] for name in impls}
        for _ in range(5 if quick else 15):
            for name, fn in impls.items():
                t0 = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - t0)
        rows += [
            {"case": f"{n} x {n} float32", "impl": name,
             "value": 2 * n**3 / statistics.median(s) / 1e9}
            for name, s in samples.items()
        ]  # fmt: skip
    return {
        "name": "matmul",
        "title": "Matmul on CPU (GFLOP/s, higher is better)",
        "unit": "GFLOP/s",
        "higher_is_better": True,
        "log": False,
        "rows": rows,
        "notes": " ".join(__doc__.split("\n\n")[1].split()),
        "gpu": run_gpu(quick),
    }


def capped_regtile(max_registers: int):
    """``mm_regtile_kernel`` compiled again with at most ``max_registers`` registers a thread
    (under the simulator, which has no registers, as it is)."""
    from numba import cuda

    import retorch.cuda as rcuda
    from retorch.tensor import cuda_kernels

    options = {} if rcuda.simulator_enabled() else {"max_registers": max_registers}
    return cuda.jit(**options)(cuda_kernels.mm_regtile_kernel.py_func)


def mm_with(name: str, a, b, regtile=None):
    """``rt.mm(a, b)`` with the CUDA kernel ``name`` forced, and ``regtile`` (when given) in
    place of ``mm_regtile_kernel``; the defaults are back afterwards."""
    from retorch.tensor import cuda_kernels

    real = cuda_kernels.mm_regtile_kernel
    cuda_kernels.MM_KERNEL["name"] = name
    cuda_kernels.mm_regtile_kernel = regtile or real
    try:
        return rt.mm(a, b)
    finally:
        cuda_kernels.MM_KERNEL["name"] = "auto"
        cuda_kernels.mm_regtile_kernel = real


def sgemm_ladder(a, b) -> dict:
    """The rungs of ``retorch/tensor/cuda_sgemm.py`` on torch's operands (their memory, as
    Numba device arrays: no copy), each writing into one preallocated output."""
    from numba import cuda

    from retorch.tensor import cuda_sgemm

    da, db = cuda.as_cuda_array(a), cuda.as_cuda_array(b)
    dc = cuda.device_array((a.shape[0], b.shape[1]), dtype=np.float32)
    return {f"retorch sgemm ladder: {rung}": (lambda r=rung: cuda_sgemm.sgemm(da, db, r, dc))
            for rung in cuda_sgemm.RUNGS}  # fmt: skip


def run_gpu(quick: bool = False) -> dict:
    """The tiled and the register-tiled kernels against cuBLAS with TF32 off, in TFLOP/s, or
    why it was skipped."""
    reason = gpu_skip_reason()
    if reason:
        return {"skipped": reason}
    from numba import cuda

    n = 1024 if quick else 4096
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    ra, rb = rt.tensor(a.cpu().numpy(), device="cuda"), rt.tensor(b.cpu().numpy(), device="cuda")

    capped = capped_regtile(128)
    impls = {
        "torch.mm (cuBLAS, TF32 off)": lambda: torch.mm(a, b),
        "retorch mm (tiled numba-cuda)": lambda: mm_with("tiled", ra, rb),
        "retorch mm (register-tiled numba-cuda)": lambda: mm_with("regtile", ra, rb),
        "retorch mm (register-tiled, 128 registers)": lambda: mm_with("regtile", ra, rb, capped),
    }
    impls.update(sgemm_ladder(a, b))
    samples = event_ms_per_call(impls, turns=3 if quick else 10, number=3)
    dev = cuda.get_current_device()
    # fp32 roofline: FP32 lanes per SM (64 up to sm_80, 128 from sm_86 on), 2 flops per
    # fused multiply-add
    lanes = 128 if dev.compute_capability >= (8, 6) else 64
    peak = dev.MULTIPROCESSOR_COUNT * lanes * 2 * dev.CLOCK_RATE * 1e3 / 1e12
    rows = [
        {"case": f"{n} x {n} float32", "impl": name,
         "value": 2 * n**3 / statistics.median(ms) / 1e9}
        for name, ms in samples.items()
    ]  # fmt: skip
    return {"device": torch.cuda.get_device_name(), "unit": "TFLOP/s", "rows": rows,
            "roofline_tflops": peak}  # fmt: skip

"""Chapter 4: memory-bound kernels of retorch.tensor against torch, in GB/s (higher is better).

Elementwise add of two float32 tensors into a preallocated output (torch.add with out=,
retorch's TensorIterator and parallel Numba loop, whose row loop for add LLVM vectorises
with 128-bit vectors), at 10M elements (120 MB moved, beyond the caches) and at 1M (12 MB,
which the caches hold after the first call); at both sizes the same parallel loop with its
rows in scalar blocks of 16 elements instead (one compiled loop for every op, which LLVM
leaves scalar); the add allocating its 40 MB output, whose first touch costs a page fault
per 4 KiB page (about 9,800); a sum over 10M float32; and retorch's sum with its loop
compiled without fastmath (additions in source order); the sum over dim 1 of a transposed
square matrix of about 10M floats, which both libraries read in place (a reduction
TensorIterator), and retorch's sum of it copied contiguous first (what the copy costs); last, at 10M on one thread
(torch's pool set to 1 thread, retorch's add loop compiled serial), so that one core's loop,
not the machine's memory, sets the speed: that loop with its vectors capped at 128 bits
(retorch's), 256 and 512; and the same three at 1M, in cache.
All move memory and do almost no arithmetic, so beyond the caches the ceiling is the
machine's memory bandwidth: the copy_ bars measure it (as many floats, each byte read and
written once). GB/s count what an op must read plus write (add: 12 bytes per element, sum: 4).

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


def _width_add_loop(bits: int):
    """retorch's ``binary_loop`` compiled again, serial (its ``prange`` runs as ``range`` on the
    calling thread, as in the serial twin retorch uses for small tensors), with its row loops
    capped at ``bits``-bit vectors, called on 1-d contiguous operands as ``rt.add`` calls it
    for them. (Numba's own ``set_num_threads`` is not used: on this machine torch and Numba's
    OpenMP layer then stalled each other's calls for milliseconds.)"""
    import types as pytypes

    from numba import njit

    from retorch.tensor import cpu_kernels

    py = cpu_kernels.binary_loop.py_func
    names = dict(vars(cpu_kernels), stream_width=cpu_kernels.vector_width(bits))
    loop = njit(error_model="numpy")(
        pytypes.FunctionType(py.__code__, names, f"binary_loop_{bits}")
    )

    def add(out, a, b):
        shape, strides = np.array([a.shape[0]]), np.ones((3, 1), dtype=np.int64)
        loop(S.ADD, out, 0, a, 0, b, 0, shape, strides, 1.0)

    return add


def _blocks_add_loop():
    """retorch's add loop with every row run in blocks of 16 elements through the op switch
    (``binary_scalar`` with ``op`` a run-time value): one compiled loop that serves every op,
    as retorch's loop did before each op got a row loop of its own. LLVM cannot prove that
    the output does not overlap an input inside a block, so it keeps the block scalar."""
    from numba import njit, prange

    from retorch.tensor import cpu_kernels

    grain, scalar, add = cpu_kernels.GRAIN, cpu_kernels.binary_scalar, S.ADD

    @njit(parallel=True, error_model="numpy")
    def blocks_add(op, out, a, b):
        for t in prange((a.shape[0] + grain - 1) // grain):
            j0 = np.int64(t) * grain
            o_, a_, b_ = out[j0 : j0 + grain], a[j0 : j0 + grain], b[j0 : j0 + grain]
            m = o_.shape[0] - o_.shape[0] % 16
            for i in range(0, m, 16):
                for j in range(i, i + 16):
                    o_[j] = scalar(op, a_[j], b_[j], 1.0)
            for j in range(m, o_.shape[0]):
                o_[j] = scalar(op, a_[j], b_[j], 1.0)

    return lambda out, a, b: blocks_add(add, out, a, b)


def run(quick: bool = False) -> dict:
    n = 1_000_000 if quick else 10_000_000
    torch.manual_seed(0)
    a, b, out, dst = torch.rand(n), torch.rand(n), torch.empty(n), torch.empty(n)
    ra, rb, rout = (rt.from_numpy(t.numpy()) for t in (a, b, out))
    strict_sum, x, zero = _strict_sum_loop(), a.numpy(), np.float32(0)
    blocks_add, arrays = _blocks_add_loop(), (out.numpy(), a.numpy(), b.numpy())
    width_adds = {bits: _width_add_loop(bits) for bits in (128, 256, 512)}
    m = n // 10  # the in-cache size: 12 MB moved per add
    sa, sb, sout, sdst = a[:m], b[:m], out[:m], dst[:m]
    rsa, rsb, rsout = (rt.from_numpy(t.numpy()) for t in (sa, sb, sout))
    small = (sout.numpy(), sa.numpy(), sb.numpy())
    label, small_label = f"{n / 1e6:g}M float32", f"{m / 1e6:g}M float32 (in cache)"
    q = int(n**0.5)  # a q x q matrix of about n floats, summed over dim 1 of its transpose
    mat = torch.rand(q, q)
    rmat = rt.from_numpy(mat.numpy())
    copy = lambda: dst.copy_(a)  # noqa: E731
    small_copy = lambda: sdst.copy_(sa)  # noqa: E731
    # case: (elements, bytes the op must move per element, {implementation: function}[, threads])
    cases = {
        f"add(out=), {label}": (n, 12, {"torch": lambda: torch.add(a, b, out=out),
                                        "retorch": lambda: rt.add(ra, rb, out=rout)}),
        f"add(out=), {label}, retorch in scalar blocks": (n, 12, {
            "torch": lambda: torch.add(a, b, out=out),
            "retorch": lambda: blocks_add(*arrays)}),
        f"add(out=), {small_label}": (m, 12, {"torch": lambda: torch.add(sa, sb, out=sout),
                                              "retorch": lambda: rt.add(rsa, rsb, out=rsout)}),
        f"add(out=), {small_label}, retorch in scalar blocks": (m, 12, {
            "torch": lambda: torch.add(sa, sb, out=sout),
            "retorch": lambda: blocks_add(*small)}),
        f"add, new output, {label}": (n, 12, {"torch": lambda: torch.add(a, b),
                                              "retorch": lambda: rt.add(ra, rb)}),
        f"sum, {label}": (n, 4, {"torch": lambda: a.sum(), "retorch": lambda: rt.sum(ra)}),
        f"sum, {label}, retorch without fastmath": (
            n, 4, {"torch": lambda: a.sum(), "retorch": lambda: strict_sum(x, zero)}),
        f"x.t().sum(1), {q} x {q} float32": (q * q, 4, {
            "torch": lambda: mat.t().sum(1), "retorch": lambda: rt.sum(rmat.t(), 1)}),
        f"x.t().sum(1), {q} x {q} float32, retorch copying x.t() first": (
            q * q, 4, {"torch": lambda: mat.t().sum(1),
                       "retorch": lambda: rt.sum(rmat.t().contiguous(), 1)}),
    }  # fmt: skip
    torch_adds = {n: lambda: torch.add(a, b, out=out), m: lambda: torch.add(sa, sb, out=sout)}
    for where, count, operands in [(label, n, arrays), (small_label, m, small)]:
        for bits, loop in width_adds.items():
            cases[f"add(out=), {where}, one thread, retorch at {bits}-bit vectors"] = (
                count,
                12,
                {"torch": torch_adds[count], "retorch": lambda loop=loop, ops=operands: loop(*ops)},
                1,
            )
    rows, threads = [], torch.get_num_threads()
    for case, (count, per_element, impls, *one) in cases.items():
        if one:  # the one-thread cases come last: torch on 1 thread, retorch's loop serial
            torch.set_num_threads(1)
        ceiling = "bandwidth ceiling (copy_)"
        # the yardstick moves the same number of elements as the case (a copy of `count`)
        same_size = {n: copy, m: small_copy}.get(count) or (lambda c=count: dst[:c].copy_(a[:c]))
        impls = dict(impls, **{ceiling: same_size})
        for fn in impls.values():  # warm up: Numba compilation or cache load, first touch
            fn()
            fn()
        samples: dict[str, list[float]] = {name: [] for name in impls}
        for _ in range(5 if quick else 41):
            for name, fn in impls.items():  # interleaved, so drifts hit every implementation
                fn()  # absorbs the switch from the other library's thread pool
                _sample_ms(fn, samples[name], number=2 if quick else 3)
        for name, ms in samples.items():
            moved = count * (8 if name == ceiling else per_element)  # copy_: read + write
            rows.append({"case": case, "impl": name, "value": moved / statistics.median(ms) / 1e6})
    torch.set_num_threads(threads)
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


def _kernel_of(*tensors) -> str:
    """The kernel ``rt.add`` launches for these contiguous float32 operands, output first: the
    vectorized one of ``vec_size`` (``cuda_vectorized.vec_size``, torch's choice), or the
    unrolled scalar one where ``vec_size`` is 1."""
    from retorch.tensor import cuda_vectorized

    vec = cuda_vectorized.vec_size([t.data_ptr() for t in tensors], 4)
    return f"binary_vectorized{vec}_kernel" if vec > 1 else "binary_contiguous_kernel"


def _same_bits(ours, theirs) -> bool:
    return bool(np.array_equal(ours.cpu().numpy().view(np.uint32),
                               theirs.cpu().numpy().view(np.uint32)))  # fmt: skip


def run_gpu(quick: bool = False) -> dict:
    """add of 64M float32 on the GPU, in GB/s (CUDA events, median), or why it was skipped:
    operands as allocated (16-byte aligned: retorch's vectorized kernel, ``kernel``), and
    ``offset_rows``, the same add on views that start one element in (every pointer 4 bytes
    past 16: vec_size 1, the unrolled scalar kernels of both libraries), kept out of ``rows``
    so the goal reads the aligned case. ``bit_identical``: retorch's sums equal torch's."""
    reason = gpu_skip_reason()
    if reason:
        return {"skipped": reason}
    n = 1 << (22 if quick else 26)
    a, b, out = (torch.rand(n + 1, device="cuda") for _ in range(3))
    ra, rb, rout = (rt.tensor(t.cpu().numpy(), device="cuda") for t in (a, b, out))
    result = {"device": torch.cuda.get_device_name(), "unit": "GB/s"}
    for key, at in (("rows", slice(0, n)), ("offset_rows", slice(1, n + 1))):
        ta, tb, tout = a[at], b[at], out[at]
        xa, xb, xout = ra[at], rb[at], rout[at]
        impls = {
            "torch.add(out=)": lambda: torch.add(ta, tb, out=tout),
            "retorch add(out=) (numba-cuda)": lambda: rt.add(xa, xb, out=xout),
        }
        samples = event_ms_per_call(impls, turns=5 if quick else 25, number=10)
        case = f"add, {n >> 20}M float32" + ("" if at.start == 0 else ", from element 1")
        result[key] = [
            {"case": case, "impl": name, "value": 12 * n / statistics.median(ms) / 1e6}
            for name, ms in samples.items()
        ]
        kernel = _kernel_of(xout, xa, xb)
        result["kernel" if at.start == 0 else "offset_kernel"] = kernel
        same = _same_bits(xout, tout)
        result["bit_identical"] = result.get("bit_identical", True) and same
    return result

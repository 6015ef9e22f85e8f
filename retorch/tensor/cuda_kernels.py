"""CUDA kernels: Numba-CUDA grid-stride loops over a TensorIterator's operands.

Mirrors ``aten/src/ATen/native/cuda/Loops.cuh`` and ``CUDALoops.cuh`` (``gpu_kernel``: one
thread per output element, the element's offset in each operand computed from its linear
index by ``OffsetCalculator``; contiguous operands: ``cuda_vectorized.py``, else unrolled),
``Reduce.cuh`` (a block cooperates on one output, with a tree in shared memory),
``ScatterGatherKernel.cu`` and, for matmul, three textbook kernels: naive, shared-memory tiled,
and register-tiled (torch itself calls cuBLAS: ``aten/src/ATen/native/cuda/Blas.cpp``).

Every kernel is declared with :func:`retorch.cuda.kernel` and its Numba signatures, so
``tools/check_ptx.py`` compiles it to PTX for sm_75/80/90; the tests run it under the CUDA
simulator (about 90 µs per simulated thread: :func:`launch_config` keeps test launches tiny).
The kernels cover float32 and float64 (plus the casts ``copy_`` needs); another dtype raises
torch's "not implemented for" RuntimeError in ``ops``.
"""

from __future__ import annotations

import math

from numba import cuda, uint64

from .. import cuda as rcuda
from ..cuda_launch import device_attributes, launch
from . import scalar_ops as S

FLOATS = ("float32", "float64")

binary_float = rcuda.device_function(*(f"float64(int64, {t}, {t}, float64)" for t in FLOATS))(
    S.binary_float
)
compare = rcuda.device_function(*(f"boolean(int64, {t}, {t})" for t in FLOATS))(S.compare)
unary_float = rcuda.device_function(*(f"float64(int64, {t})" for t in FLOATS))(S.unary_float)


def _meta_sig(operands: int, dims: int = 2) -> str:
    """The Numba types of ``shape`` and ``strides`` for ``operands`` operands over ``dims``
    dims: tuples, passed by value (the signatures compile a 2-dim case for the PTX check)."""
    return f"UniTuple(int64, {dims}), UniTuple(int64, {operands * dims})"


@rcuda.device_function(f"int64(int64, {_meta_sig(3)}, int64)")
def offset_of(i, shape, strides, k):
    """``OffsetCalculator::get``: the element offset of linear index ``i`` in operand ``k``.
    ``strides`` holds operand 0's strides, then operand 1's, and so on."""
    nd = len(shape)
    off = 0
    for d in range(nd):
        idx = i % shape[d]
        i //= shape[d]
        off += idx * strides[k * nd + d]
    return off


def by_value(shape, strides) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``kernel_args``' shape and strides arrays as tuples, which a launch passes by value in
    the kernel's parameters, as torch passes its ``OffsetCalculator``. Given a NumPy array
    instead, Numba would copy it to the GPU before the launch and back after it (it cannot
    know the kernel did not write to it), and wait for both: every launch would synchronise."""
    return tuple(shape.tolist()), tuple(strides.ravel().tolist())


@rcuda.kernel(
    *(
        f"void(int64, {t}[:], int64, {t}[:], int64, {t}[:], int64, {_meta_sig(3)}, float64, "
        "int64)"
        for t in FLOATS
    )
)  # fmt: skip
def binary_kernel(op, out, oo, a, ao, b, bo, shape, strides, alpha, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):  # grid-stride: any grid covers any n
        x = a[ao + offset_of(i, shape, strides, 1)]
        y = b[bo + offset_of(i, shape, strides, 2)]
        out[oo + offset_of(i, shape, strides, 0)] = binary_float(op, x, y, alpha)


#: Elements per thread of :func:`binary_contiguous_kernel` (torch's ``thread_work_size``).
UNROLL = 4


@rcuda.kernel(
    *(f"void(int64, {t}[:], int64, {t}[:], int64, {t}[:], int64, float64, int64)" for t in FLOATS)
)
def binary_contiguous_kernel(op, out, oo, a, ao, b, bo, alpha, n):
    """The fast path for operands that are all contiguous (``iter.is_contiguous()`` in
    ``CUDALoops.cuh``): element ``i`` is at offset ``i`` in each, so no ``offset_of`` and its
    divisions. As torch's ``unrolled_elementwise_kernel``, a block of T threads takes
    ``UNROLL * T`` consecutive elements and thread ``t`` the elements ``t, t + T, t + 2T, ..``:
    each of its ``UNROLL`` loads is coalesced across the warp, and all of them are in flight
    before the first add."""
    threads = cuda.blockDim.x
    base = cuda.blockIdx.x * (UNROLL * threads) + cuda.threadIdx.x
    x = cuda.local.array(UNROLL, dtype=a.dtype)
    y = cuda.local.array(UNROLL, dtype=a.dtype)
    for u in range(UNROLL):  # load everything first ...
        i = base + u * threads
        if i < n:
            x[u] = a[ao + i]
            y[u] = b[bo + i]
    for u in range(UNROLL):  # ... then compute and store
        i = base + u * threads
        if i < n:
            out[oo + i] = binary_float(op, x[u], y[u], alpha)


@rcuda.kernel(
    *(
        f"void(int64, boolean[:], int64, {t}[:], int64, {t}[:], int64, {_meta_sig(3)}, int64)"
        for t in FLOATS
    )
)
def compare_kernel(op, out, oo, a, ao, b, bo, shape, strides, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        x = a[ao + offset_of(i, shape, strides, 1)]
        y = b[bo + offset_of(i, shape, strides, 2)]
        out[oo + offset_of(i, shape, strides, 0)] = compare(op, x, y)


@rcuda.kernel(
    *(f"void(int64, {t}[:], int64, {t}[:], int64, {_meta_sig(2)}, int64)" for t in FLOATS)
)
def unary_kernel(op, out, oo, a, ao, shape, strides, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        x = a[ao + offset_of(i, shape, strides, 1)]
        out[oo + offset_of(i, shape, strides, 0)] = unary_float(op, x)


# The contiguous twins of compare, unary and copy: binary_contiguous_kernel's scheme (a block
# of T threads takes UNROLL * T consecutive elements, thread t every T-th), as CUDALoops.cuh
# uses one unrolled kernel for every elementwise op whose operands are contiguous.
@rcuda.kernel(
    *(f"void(int64, boolean[:], int64, {t}[:], int64, {t}[:], int64, int64)" for t in FLOATS)
)
def compare_contiguous_kernel(op, out, oo, a, ao, b, bo, n):
    base = cuda.blockIdx.x * (UNROLL * cuda.blockDim.x) + cuda.threadIdx.x
    x = cuda.local.array(UNROLL, dtype=a.dtype)
    y = cuda.local.array(UNROLL, dtype=a.dtype)
    for u in range(UNROLL):
        i = base + u * cuda.blockDim.x
        if i < n:
            x[u] = a[ao + i]
            y[u] = b[bo + i]
    for u in range(UNROLL):
        i = base + u * cuda.blockDim.x
        if i < n:
            out[oo + i] = compare(op, x[u], y[u])


@rcuda.kernel(*(f"void(int64, {t}[:], int64, {t}[:], int64, int64)" for t in FLOATS))
def unary_contiguous_kernel(op, out, oo, a, ao, n):
    base = cuda.blockIdx.x * (UNROLL * cuda.blockDim.x) + cuda.threadIdx.x
    x = cuda.local.array(UNROLL, dtype=a.dtype)
    for u in range(UNROLL):
        i = base + u * cuda.blockDim.x
        if i < n:
            x[u] = a[ao + i]
    for u in range(UNROLL):
        i = base + u * cuda.blockDim.x
        if i < n:
            out[oo + i] = unary_float(op, x[u])


#: (destination, source) dtypes the CUDA copy kernel converts between.
COPY_PAIRS = tuple((t, t) for t in ("float32", "float64", "int64", "int32", "boolean")) + (
    ("float32", "float64"),
    ("float64", "float32"),
    ("float32", "int64"),
    ("float64", "int64"),
    ("float32", "int32"),
    ("float32", "boolean"),
    ("float64", "boolean"),
    ("int64", "boolean"),
)


@rcuda.kernel(
    *(f"void({d}[:], int64, {s}[:], int64, {_meta_sig(2)}, int64)" for d, s in COPY_PAIRS)
)
def copy_kernel(out, oo, a, ao, shape, strides, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[oo + offset_of(i, shape, strides, 0)] = a[ao + offset_of(i, shape, strides, 1)]


@rcuda.kernel(*(f"void({d}[:], int64, {s}[:], int64, int64)" for d, s in COPY_PAIRS))
def copy_contiguous_kernel(out, oo, a, ao, n):
    base = cuda.blockIdx.x * (UNROLL * cuda.blockDim.x) + cuda.threadIdx.x
    x = cuda.local.array(UNROLL, dtype=a.dtype)
    for u in range(UNROLL):
        i = base + u * cuda.blockDim.x
        if i < n:
            x[u] = a[ao + i]
    for u in range(UNROLL):
        i = base + u * cuda.blockDim.x
        if i < n:
            out[oo + i] = x[u]


@rcuda.kernel(
    *(
        f"void({t}[:], int64, boolean[:], int64, {t}[:], int64, {t}[:], int64, {_meta_sig(4)}, "
        "int64)"
        for t in FLOATS
    )
)
def where_kernel(out, oo, c, co, a, ao, b, bo, shape, strides, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        if c[co + offset_of(i, shape, strides, 1)]:
            v = a[ao + offset_of(i, shape, strides, 2)]
        else:
            v = b[bo + offset_of(i, shape, strides, 3)]
        out[oo + offset_of(i, shape, strides, 0)] = v


@rcuda.kernel(
    *(
        f"void({t}[:], int64, {t}[:], int64, int64[:], int64, {_meta_sig(3)}, int64, int64)"
        for t in FLOATS
    )
)
def gather_kernel(out, oo, src, so, idx, io, shape, strides, dim_stride, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        j = idx[io + offset_of(i, shape, strides, 2)]
        out[oo + offset_of(i, shape, strides, 0)] = src[
            so + offset_of(i, shape, strides, 1) + j * dim_stride
        ]


@rcuda.kernel(
    *(
        f"void(boolean, {t}[:], int64, {t}[:], int64, int64[:], int64, {_meta_sig(3)}, int64, "
        "int64)"
        for t in FLOATS
    )
)
def scatter_kernel(add, out, oo, src, so, idx, io, shape, strides, dim_stride, n):
    """The mirror of gather_kernel; adds are atomic, since two indices may name one element."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        k = (
            oo
            + offset_of(i, shape, strides, 0)
            + idx[io + offset_of(i, shape, strides, 2)] * dim_stride
        )
        v = src[so + offset_of(i, shape, strides, 1)]
        if add:
            cuda.atomic.add(out, k, v)
        else:
            out[k] = v


#: Shared memory slots of the reduction tree; a block has at most this many threads.
REDUCE_THREADS = 256


@rcuda.kernel(*(f"void({t}[:], {t}[:], int64, int64, {t})" for t in FLOATS))
def sum_rows_kernel(x, out, outer, inner, zero):
    """One block per row: each thread sums a strided share, then a tree in shared memory
    halves the partial sums (``blockDim.x`` must be a power of two)."""
    partial = cuda.shared.array(REDUCE_THREADS, dtype=x.dtype)
    tid = cuda.threadIdx.x
    for r in range(cuda.blockIdx.x, outer, cuda.gridDim.x):
        acc = zero
        for j in range(tid, inner, cuda.blockDim.x):
            acc += x[r * inner + j]
        partial[tid] = acc
        cuda.syncthreads()
        s = cuda.blockDim.x // 2
        while s > 0:
            if tid < s:
                partial[tid] += partial[tid + s]
            cuda.syncthreads()
            s //= 2
        if tid == 0:
            out[r] = partial[0]
        cuda.syncthreads()


@rcuda.kernel(*(f"void({t}[:], {t}[:], int64[:], int64, int64)" for t in FLOATS))
def max_rows_kernel(x, out, indices, outer, inner):
    """One thread per row (naive): the max and the index of its first occurrence, NaN wins."""
    for r in range(cuda.grid(1), outer, cuda.gridsize(1)):
        best = x[r * inner]
        at = 0
        for j in range(1, inner):
            v = x[r * inner + j]
            if best != best:
                break
            if v > best or v != v:
                best = v
                at = j
        out[r] = best
        indices[r] = at


@rcuda.kernel(*(f"void({t}[:, :, :], {t}[:, :, :], {t}[:, :, :], {t})" for t in FLOATS))
def mm_naive_kernel(a, b, c, zero):
    """One thread per output element, reading a row of ``a`` and a column of ``b`` from
    global memory: every input element is loaded ``n`` (or ``m``) times. As in the two
    kernels below, ``a``, ``b`` and ``c`` are batches of matrices, and the grid's z index
    picks the one a block works on: a ``bmm`` is one launch."""
    j, i = cuda.grid(2)  # x, which varies fastest within a warp, picks the column of c
    p = cuda.blockIdx.z
    if i < c.shape[1] and j < c.shape[2]:
        acc = zero
        for k in range(a.shape[2]):
            acc += a[p, i, k] * b[p, k, j]
        c[p, i, j] = acc


#: Tile edge of the shared-memory matmul: a block of TILE x TILE threads.
TILE = 16


@rcuda.kernel(*(f"void({t}[:, :, :], {t}[:, :, :], {t}[:, :, :], {t})" for t in FLOATS))
def mm_tiled_kernel(a, b, c, zero):
    """Each block stages TILE x TILE tiles of ``a`` and ``b`` in shared memory, so a global
    element is loaded once per block instead of once per thread: TILE times fewer loads."""
    sa = cuda.shared.array((TILE, TILE), dtype=a.dtype)
    # (each shared array on its own line: the simulator aliases two made on one line)
    sb = cuda.shared.array((TILE, TILE), dtype=a.dtype)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty  # this thread's row of c ...
    j = cuda.blockIdx.x * TILE + tx  # ... and column: neighbouring threads, neighbouring j
    p = cuda.blockIdx.z  # which matrix of the batch
    m, n, kdim = c.shape[1], c.shape[2], a.shape[2]
    acc = zero
    for t in range((kdim + TILE - 1) // TILE):
        k = t * TILE
        sa[ty, tx] = a[p, i, k + tx] if i < m and k + tx < kdim else 0  # sa[r, kk] = a[i0+r, k+kk]
        sb[ty, tx] = b[p, k + ty, j] if k + ty < kdim and j < n else 0  # sb[kk, q] = b[k+kk, j0+q]
        cuda.syncthreads()  # the tiles are complete ...
        for kk in range(TILE):
            acc += sa[ty, kk] * sb[kk, tx]
        cuda.syncthreads()  # ... and everyone is done with them before the next overwrites
    if i < m and j < n:
        c[p, i, j] = acc


#: Register tiling: a block computes a BM x BN tile of ``c`` in steps of BK along ``k``;
#: each of its (BM // TM) * (BN // TN) = 256 threads keeps a TM x TN piece in registers.
BM, BN, BK, TM, TN = 128, 128, 8, 8, 8
MM_THREADS = (BM // TM) * (BN // TN)
#: A thread's TN columns are COL_STRIDE apart (``tj, tj + 16, ..``), so that the 16 threads
#: of a half-warp read 16 neighbouring numbers of ``sb``: 16 different banks.
COL_STRIDE = BN // TN
#: The rows of ``sa`` are padded by 4 numbers: a thread writes a column of it, and with rows
#: of 128 numbers (a multiple of the 32 banks) all 8 numbers of a column share one bank.
SA_ROW = BM + 4
#: Shared memory's banks: 32-bit word ``w`` is in bank ``w % BANKS``.
BANKS = 32


def wavefronts(words) -> int:
    """How many passes shared memory takes to serve one warp's access, given the 32-bit word
    each lane reads or writes: each bank serves one word per pass, and lanes that read the
    same word share it (a *broadcast*). 1 is conflict-free; n means an n-way bank conflict."""
    per_bank: dict[int, int] = {}
    for w in set(words):
        per_bank[w % BANKS] = per_bank.get(w % BANKS, 0) + 1
    return max(per_bank.values())


#: Numbers of each tile that a thread loads (BM == BN: as many of ``a``'s tile as of ``b``'s).
LOADS = BM * BK // MM_THREADS


@rcuda.device_function(
    *(f"void({t}[:, :, :], {t}[:, :, :], {t}[:], {t}[:], int64, int64, int64, int64, {t})"
      for t in FLOATS)
)  # fmt: skip
def fetch_tiles(a, b, pa, pb, p, i0, j0, k, zero):
    """Load this thread's share of the tiles of ``a`` and ``b`` at ``k`` into ``pa`` and ``pb``
    (zero outside the matrices), coalesced: consecutive threads read consecutive ``k`` of a
    row of ``a``, and consecutive ``j`` of a row of ``b``."""
    tid = cuda.threadIdx.x
    m, kdim, n = a.shape[1], a.shape[2], b.shape[2]
    for q in range(LOADS):
        r = tid + q * MM_THREADS
        i, kk = i0 + r // BK, k + r % BK
        pa[q] = a[p, uint64(i), uint64(kk)] if i < m and kk < kdim else zero
        kk, j = k + r // BN, j0 + r % BN
        pb[q] = b[p, uint64(kk), uint64(j)] if kk < kdim and j < n else zero


@rcuda.kernel(*(f"void({t}[:, :, :], {t}[:, :, :], {t}[:, :, :], {t})" for t in FLOATS))
def mm_regtile_kernel(a, b, c, zero):
    """The tiled kernel, one level further (the "2-D block tiling" of the CUDA sgemm
    tutorials; cuBLAS goes further still). A thread computes TM x TN = 64 outputs instead of
    one: per step of ``kk`` it reads TM numbers of ``a`` and TN of ``b`` from shared memory
    and does TM * TN multiply-adds on them, held in registers (``cuda.local.array`` with
    constant indices after unrolling). ``a``'s tile is stored transposed, so the TM numbers a
    thread reads are consecutive. While it computes on one tile, each thread has already
    issued its loads of the next one (``pa``, ``pb``): their latency hides behind the
    arithmetic. Indices are cast to ``uint64``: Numba wraps a negative index around (as
    Python's ``x[-1]``), with a compare and a select on every access, unless the index is
    unsigned. Launch with MM_THREADS threads and one block per BM x BN tile."""
    sa = cuda.shared.array((BK, SA_ROW), dtype=a.dtype)  # sa[kk, i] = a[p, i0 + i, k + kk]
    # (each shared array on its own line: the simulator aliases two made on one line)
    sb = cuda.shared.array((BK, BN), dtype=a.dtype)  # sb[kk, j] = b[p, k + kk, j0 + j]
    acc = cuda.local.array((TM, TN), dtype=a.dtype)
    ra = cuda.local.array(TM, dtype=a.dtype)
    rb = cuda.local.array(TN, dtype=a.dtype)
    pa = cuda.local.array(LOADS, dtype=a.dtype)  # this thread's share of the next tiles
    pb = cuda.local.array(LOADS, dtype=a.dtype)
    tid = cuda.threadIdx.x
    ti, tj = tid // COL_STRIDE, tid % COL_STRIDE  # rows ti*TM + u, columns tj + v*COL_STRIDE
    i0, j0, p = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN, cuda.blockIdx.z
    m, n, kdim = c.shape[1], c.shape[2], a.shape[2]
    for u in range(TM):
        for v in range(TN):
            acc[u, v] = zero
    fetch_tiles(a, b, pa, pb, p, i0, j0, 0, zero)
    for k in range(0, kdim, BK):
        for q in range(LOADS):  # the fetched tiles into shared memory
            r = tid + q * MM_THREADS
            sa[uint64(r % BK), uint64(r // BK)] = pa[q]
            sb[uint64(r // BN), uint64(r % BN)] = pb[q]
        cuda.syncthreads()
        fetch_tiles(a, b, pa, pb, p, i0, j0, k + BK, zero)  # in flight during the arithmetic
        for kk in range(BK):
            for u in range(TM):
                ra[u] = sa[uint64(kk), uint64(ti * TM + u)]
            for v in range(TN):
                rb[v] = sb[uint64(kk), uint64(tj + v * COL_STRIDE)]
            for u in range(TM):
                for v in range(TN):
                    acc[u, v] += ra[u] * rb[v]
        cuda.syncthreads()
    for u in range(TM):
        for v in range(TN):
            i, j = i0 + ti * TM + u, j0 + tj + v * COL_STRIDE
            if i < m and j < n:
                c[p, i, j] = acc[u, v]


# ---- launch geometry ------------------------------------------------------------------------
THREADS = 256
BLOCKS_PER_SM = 32


def launch_config(n: int) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride kernel over ``n`` elements. The simulator runs a
    Python thread per CUDA thread, so there launches are cut to what ``n`` needs."""
    if rcuda.simulator_enabled():
        return 1, max(1, min(n, 32))
    sms = device_attributes().multiprocessor_count  # read once (retorch/cuda_launch.py)
    return max(1, min(math.ceil(n / THREADS), BLOCKS_PER_SM * sms)), THREADS


def reduce_threads(inner: int) -> int:
    """A power of two up to REDUCE_THREADS (8 under the simulator)."""
    cap = 8 if rcuda.simulator_enabled() else REDUCE_THREADS
    t = 1
    while t < min(inner, cap):
        t *= 2
    return t


# ---- the CUDA entries of the dispatch stubs --------------------------------------------------
from .dispatch_stub import stub  # noqa: E402


def check_dtype(name, dtype, allowed=("float32", "float64")):
    """torch's AT_DISPATCH error when a kernel has no instance for ``dtype``."""
    if dtype.name not in allowed:
        raise NotImplementedError(f"\"{name}_cuda\" not implemented for '{dtype.scalar_name}'")


def _contiguous(shape, strides, n) -> bool:
    """True when the iterator coalesced every operand to one dim of stride 1 (torch's
    ``iter.is_contiguous()``): element ``i`` is then at offset ``i`` in each."""
    return len(shape) == 1 and bool((strides == 1).all()) and n > 0


def _unrolled_config(n: int) -> tuple[int, int]:
    """(blocks, threads) of the unrolled kernels: one block per ``UNROLL * 128`` elements
    (under the simulator, the small blocks of :func:`launch_config`)."""
    threads = launch_config(n)[1] if rcuda.simulator_enabled() else 128
    return -(-n // (UNROLL * threads)), threads


def _launch(k, n, *args):
    """A grid-stride kernel over ``n`` elements, through the one launch path (its configured
    launcher cached, on torch's current stream, no host synchronisation)."""
    if n == 0:
        return
    blocks, threads = launch_config(n)
    launch(k, blocks, threads, *args, n)


@stub("binary").register("cuda")
def binary_cuda(it, op, alpha):
    check_dtype(S.BINARY_NAMES[op], it.common_dtype)
    (out, a, b), (oo, ao, bo), shape, strides = it.kernel_args()
    alpha = float(it.common_dtype.np.type(alpha))
    n = it.numel()
    if _contiguous(shape, strides, n):
        from . import cuda_vectorized  # launch_vectorized_kernel; False: vec_size 1

        if not cuda_vectorized.binary(it, op, alpha, n):
            launch(
                binary_contiguous_kernel, *_unrolled_config(n), op, out, oo, a, ao, b, bo, alpha, n
            )
        return
    _launch(binary_kernel, n, op, out, oo, a, ao, b, bo, *by_value(shape, strides), alpha)


@stub("compare").register("cuda")
def compare_cuda(it, op):
    check_dtype(S.COMPARE_NAMES[op], it.common_dtype)
    (out, a, b), (oo, ao, bo), shape, strides = it.kernel_args()
    n = it.numel()
    if _contiguous(shape, strides, n):
        launch(compare_contiguous_kernel, *_unrolled_config(n), op, out, oo, a, ao, b, bo, n)
        return
    _launch(compare_kernel, n, op, out, oo, a, ao, b, bo, *by_value(shape, strides))


@stub("unary").register("cuda")
def unary_cuda(it, op):
    check_dtype(S.UNARY_NAMES[op], it.common_dtype)
    (out, a), (oo, ao), shape, strides = it.kernel_args()
    n = it.numel()
    if _contiguous(shape, strides, n):
        from . import cuda_vectorized

        if not cuda_vectorized.unary(it, op, n):
            launch(unary_contiguous_kernel, *_unrolled_config(n), op, out, oo, a, ao, n)
        return
    _launch(unary_kernel, n, op, out, oo, a, ao, *by_value(shape, strides))


_NUMBA_NAME = {"bool": "boolean"}


@stub("copy").register("cuda")
def copy_cuda(it):
    dst, src = it.output(0).dtype, it.operands[1].tensor.dtype
    pair = (_NUMBA_NAME.get(dst.name, dst.name), _NUMBA_NAME.get(src.name, src.name))
    if pair not in COPY_PAIRS:
        raise NotImplementedError(
            f"\"copy_cuda\" not implemented for '{src.scalar_name}' to '{dst.scalar_name}'"
        )
    (out, a), (oo, ao), shape, strides = it.kernel_args()
    n = it.numel()
    if _contiguous(shape, strides, n):
        launch(copy_contiguous_kernel, *_unrolled_config(n), out, oo, a, ao, n)
        return
    _launch(copy_kernel, n, out, oo, a, ao, *by_value(shape, strides))


@stub("where").register("cuda")
def where_cuda(it):
    check_dtype("where", it.output(0).dtype)
    (out, c, a, b), (oo, co, ao, bo), shape, strides = it.kernel_args()
    _launch(where_kernel, it.numel(), out, oo, c, co, a, ao, b, bo, *by_value(shape, strides))


@stub("gather").register("cuda")
def gather_cuda(it, dim_stride):
    check_dtype("gather", it.output(0).dtype)
    (out, src, idx), (oo, so, io), shape, strides = it.kernel_args()
    meta = by_value(shape, strides)
    _launch(gather_kernel, it.numel(), out, oo, src, so, idx, io, *meta, dim_stride)


@stub("scatter").register("cuda")
def scatter_cuda(it, dim_stride, add):
    check_dtype("scatter", it.operands[0].tensor.dtype)
    (out, src, idx), (oo, so, io), shape, strides = it.kernel_args()
    meta = by_value(shape, strides)
    _launch(scatter_kernel, it.numel(), add, out, oo, src, so, idx, io, *meta, dim_stride)


def _flat(t):
    impl = t._impl
    return impl.storage.typed(impl.dtype.np)[impl.storage_offset : impl.storage_offset + t.numel()]


@stub("sum_rows").register("cuda")
def sum_cuda(x, out, outer, inner):
    check_dtype("sum", x.dtype)
    blocks = 1 if rcuda.simulator_enabled() else min(outer, 65535)
    threads = reduce_threads(inner)
    args = (_flat(x), _flat(out), outer, inner, x.dtype.np.type(0))
    launch(sum_rows_kernel, blocks, threads, *args)


@stub("max").register("cuda")
def max_cuda(x, values, indices, outer, inner):
    check_dtype("max", x.dtype)
    blocks, threads = launch_config(outer)
    launch(max_rows_kernel, blocks, threads, _flat(x), _flat(values), _flat(indices), outer, inner)


#: Which CUDA matmul kernel ``bmm`` launches: "naive", "tiled" (shared memory),
#: "regtile" (shared memory and registers) or "auto": "regtile" on a GPU for products of at
#: least BM x BN outputs, else "tiled" (under the simulator "regtile"'s 256 threads per block
#: cost seconds; tests run it there on purpose, on small inputs).
MM_KERNEL = {"name": "auto"}


#: The largest grid size in z (CUDA's limit): one launch covers this many matrices of a bmm.
MAX_GRID_Z = 65535


def mm_kernel_for(m: int, n: int) -> str:
    name = MM_KERNEL["name"]
    if name == "auto":
        big = m * n >= BM * BN and not rcuda.simulator_enabled()
        name = "regtile" if big else "tiled"
    return name


@stub("bmm").register("cuda")
def bmm_cuda(a, b, out):
    check_dtype("bmm", a.dtype)
    from .tensor_shape import contiguous

    b = contiguous(b)
    batch, m, k = a.shape
    n = b.shape[2]
    name = mm_kernel_for(m, n)
    if name == "regtile":
        k_, grid, block = mm_regtile_kernel, (-(-n // BN), -(-m // BM)), MM_THREADS
    else:
        k_ = mm_tiled_kernel if name == "tiled" else mm_naive_kernel
        grid, block = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE), (TILE, TILE)
    zero = a.dtype.np.type(0)
    A = _flat(a).reshape(batch, m, k)
    B = _flat(b).reshape(batch, k, n)
    C = _flat(out).reshape(batch, m, n)
    for p in range(0, batch, MAX_GRID_Z):  # one launch, unless the batch outgrows grid z
        q = min(batch, p + MAX_GRID_Z)
        launch(k_, (*grid, q - p), block, A[p:q], B[p:q], C[p:q], zero)

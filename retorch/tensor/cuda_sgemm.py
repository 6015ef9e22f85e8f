"""SGEMM as a ladder: float32 ``C = A @ B`` in six kernels, each one step from the last.

Chapter 4's ``bmm`` launches one of three kernels (``cuda_kernels.py``: naive, shared-memory
tiles, register tiles). cuBLAS, which ``torch.mm`` calls for float32 on a GPU
(``aten/src/ATen/native/cuda/Blas.cpp`` -> ``at::cuda::blas::gemm``), is closed source; the
steps between a naive kernel and it are the ones the CUDA sgemm tutorials climb (Simon Boehm,
"How to optimize a CUDA matmul kernel for cuBLAS-like performance", 2022). Each rung here is a
kernel of its own, named for what it adds, so a GPU run can time each against cuBLAS
(``bench/bench_matmul.py``'s GPU section) and ``make ptx`` prints each one's registers:

=============  ================================================================================
rung           what it adds
=============  ================================================================================
uncoalesced    one thread per output, neighbouring threads on neighbouring *rows*: a warp's
               loads of ``B`` are one word each, its loads of ``A`` and stores of ``C`` 32
               words 4*K (or 4*N) bytes apart
coalesced      neighbouring threads on neighbouring *columns*: a warp reads 32 consecutive
               words of ``B`` and writes 32 of ``C`` (``cuda_kernels.mm_naive_kernel``)
smem           16 x 16 tiles of ``A`` and ``B`` staged in shared memory: each global element
               loaded once per block (``cuda_kernels.mm_tiled_kernel``)
blocktile_1d   a thread computes TM1 = 8 outputs of a column: one shared read of ``B`` serves 8
               multiply-adds (:func:`sgemm_blocktile1d_kernel`)
blocktile_2d   a thread computes 8 x 8 outputs from registers, ``A``'s tile transposed, the next
               tiles fetched during the arithmetic (``cuda_kernels.mm_regtile_kernel``)
vectorized     the 2-D kernel with 16-byte loads of ``A`` and ``B`` and 16-byte stores of ``C``
               (``cuda_ptr.load4``/``store4``: ``ld.global.v4.f32``), where K and N are
               multiples of 4 and the matrices 16-byte aligned (:func:`sgemm_vectorized_kernel`)
=============  ================================================================================

Every kernel bounds-checks its edges, so any M, N, K works (``vectorized`` needs K and N
multiples of 4: :func:`sgemm` falls back to ``blocktile_2d`` otherwise, as torch's vectorized
loops fall back to scalar ones). The inputs are 2-D, contiguous float32 Numba device arrays.
"""

from __future__ import annotations

from numba import cuda, float32, uint64

from .. import cuda as rcuda
from ..cuda_launch import launch
from ..cuda_ptr import aligned, load4, store4
from . import cuda_kernels as ck

F32_2D = "void(float32[:, :], float32[:, :], float32[:, :])"

#: Block edge of the one-thread-per-output rungs.
EDGE = 16


@rcuda.kernel(F32_2D)
def sgemm_uncoalesced_kernel(a, b, c):
    """Rung 1: ``x``, the index that varies fastest within a warp, picks the *row* of ``c``.
    The 32 threads of a warp read 32 different rows of ``a`` (32 transactions per load) and
    write a column of ``c``."""
    i, j = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


# -- rung 4: 1-D block tiling -----------------------------------------------------------------
#: A block computes a BM1 x BN1 tile of ``c`` in steps of BK1 along ``k``; each thread a
#: column of TM1 outputs.
BM1, BN1, BK1, TM1 = 64, 64, 8, 8
THREADS_1D = BM1 * BN1 // TM1  # 512: one element of each tile per thread per step


@rcuda.kernel(F32_2D)
def sgemm_blocktile1d_kernel(a, b, c):
    """Rung 4: each thread keeps TM1 accumulators, the outputs ``(ti * TM1 + u, tj)``. Per step
    of ``kk`` it reads one number of ``sb`` into a register and multiplies it with TM1 numbers
    of ``sa``: TM1 multiply-adds per read of ``sb``, where the ``smem`` rung does one.
    Launch with THREADS_1D threads, one block per BM1 x BN1 tile."""
    sa = cuda.shared.array((BM1, BK1), dtype=float32)  # sa[i, kk] = a[i0 + i, k + kk]
    # (each shared array on its own line: the simulator aliases two made on one line)
    sb = cuda.shared.array((BK1, BN1), dtype=float32)  # sb[kk, j] = b[k + kk, j0 + j]
    acc = cuda.local.array(TM1, dtype=float32)
    tid = cuda.threadIdx.x
    ti, tj = tid // BN1, tid % BN1
    ar, ak = tid // BK1, tid % BK1  # the element of a's tile this thread loads ...
    br, bj = tid // BN1, tid % BN1  # ... and of b's: consecutive threads, consecutive addresses
    i0, j0 = cuda.blockIdx.y * BM1, cuda.blockIdx.x * BN1
    m, n, kdim = c.shape[0], c.shape[1], a.shape[1]
    for u in range(TM1):
        acc[u] = 0
    for k in range(0, kdim, BK1):
        i, kk = i0 + ar, k + ak
        sa[ar, ak] = a[uint64(i), uint64(kk)] if i < m and kk < kdim else 0
        kk, j = k + br, j0 + bj
        sb[br, bj] = b[uint64(kk), uint64(j)] if kk < kdim and j < n else 0
        cuda.syncthreads()
        for kk in range(BK1):
            bv = sb[kk, tj]
            for u in range(TM1):
                acc[u] += sa[uint64(ti * TM1 + u), kk] * bv
        cuda.syncthreads()
    for u in range(TM1):
        i, j = i0 + ti * TM1 + u, j0 + tj
        if i < m and j < n:
            c[i, j] = acc[u]


# -- rung 6: 2-D block tiling with 16-byte global accesses -----------------------------------
BM, BN, BK, TM, TN = ck.BM, ck.BN, ck.BK, ck.TM, ck.TN  # 128, 128, 8, 8, 8
THREADS_2D = ck.MM_THREADS  # 256
#: A thread's TN = 8 columns are two quads, ``4 * tj .. + 3`` and ``QUAD_GAP`` further, so
#: that each can be stored to ``c`` in one 16-byte store.
QUAD_GAP = BN // 2
SA_ROW = ck.SA_ROW  # BM + 4: ``sa`` rows padded, as in the 2-D rung


@rcuda.kernel(
    "void(float32[:], float32[:], float32[:], int64, int64, int64)",
)
def sgemm_vectorized_kernel(a, b, c, m, n, kdim):
    """Rung 6: ``a`` (m x kdim), ``b`` (kdim x n) and ``c`` (m x n), row-major, as flat
    arrays (what a raw pointer gives: :func:`retorch.cuda_ptr.array_at`). Each of the 256
    threads loads one quad of ``a``'s 128 x 8 tile (a row's four consecutive ``k``) and one
    quad of ``b``'s 8 x 128 tile in 16-byte loads, stores ``a``'s quad transposed into ``sa``
    (so a thread's TM numbers of a column are consecutive), and writes its 8 x 8 outputs as 16
    16-byte stores. kdim and n must be multiples of 4, so that a quad lies wholly inside a
    row or wholly outside the matrix, and every quad's address is a multiple of 16."""
    sa = cuda.shared.array((BK, SA_ROW), dtype=float32)  # sa[kk, i] = a[i0 + i, k + kk]
    # (each shared array on its own line: the simulator aliases two made on one line)
    sb = cuda.shared.array((BK, BN), dtype=float32)  # sb[kk, j] = b[k + kk, j0 + j]
    acc = cuda.local.array((TM, TN), dtype=float32)
    ra = cuda.local.array(TM, dtype=float32)
    rb = cuda.local.array(TN, dtype=float32)
    tid = cuda.threadIdx.x
    ti, tj = tid // (BN // TN), tid % (BN // TN)  # rows ti*TM + u; columns 4*tj + w (+ 64)
    ar, aq = tid // (BK // 4), tid % (BK // 4)  # a's tile: row ar, quad aq (k = 4*aq .. + 3)
    br, bq = tid // (BN // 4), tid % (BN // 4)  # b's tile: row br, quad bq (j = 4*bq .. + 3)
    i0, j0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    for u in range(TM):
        for v in range(TN):
            acc[u, v] = 0
    for k in range(0, kdim, BK):
        i, kk = i0 + ar, k + 4 * aq
        x0 = x1 = x2 = x3 = float32(0)
        if i < m and kk < kdim:
            x0, x1, x2, x3 = load4(a, i * kdim + kk)
        sa[4 * aq + 0, ar] = x0
        sa[4 * aq + 1, ar] = x1
        sa[4 * aq + 2, ar] = x2
        sa[4 * aq + 3, ar] = x3
        kk, j = k + br, j0 + 4 * bq
        y0 = y1 = y2 = y3 = float32(0)
        if kk < kdim and j < n:
            y0, y1, y2, y3 = load4(b, kk * n + j)
        sb[br, 4 * bq + 0] = y0
        sb[br, 4 * bq + 1] = y1
        sb[br, 4 * bq + 2] = y2
        sb[br, 4 * bq + 3] = y3
        cuda.syncthreads()
        for kk in range(BK):
            for u in range(TM):
                ra[u] = sa[kk, ti * TM + u]
            for w in range(4):
                rb[w] = sb[kk, 4 * tj + w]
                rb[4 + w] = sb[kk, QUAD_GAP + 4 * tj + w]
            for u in range(TM):
                for v in range(TN):
                    acc[u, v] += ra[u] * rb[v]
        cuda.syncthreads()
    for u in range(TM):
        i = i0 + ti * TM + u
        for half in range(2):
            j = j0 + half * QUAD_GAP + 4 * tj
            if i < m and j < n:
                store4(c, i * n + j, acc[u, 4 * half], acc[u, 4 * half + 1],
                       acc[u, 4 * half + 2], acc[u, 4 * half + 3])  # fmt: skip


# -- the ladder -------------------------------------------------------------------------------
RUNGS = ("uncoalesced", "coalesced", "smem", "blocktile_1d", "blocktile_2d", "vectorized")


def vectorizable(a, b, c) -> bool:
    """Whether the ``vectorized`` rung may run: K and N multiples of 4, every base address a
    multiple of 16 (``can_vectorize_up_to``'s test, ``MemoryAccess.cuh``)."""
    k, n = a.shape[1], b.shape[1]
    return k % 4 == 0 and n % 4 == 0 and all(aligned(_address(x)) for x in (a, b, c))


def _address(array) -> int:
    """A device array's address (under the simulator, its host memory's)."""
    if hasattr(array, "__cuda_array_interface__"):
        return array.__cuda_array_interface__["data"][0]
    return array._ary.__array_interface__["data"][0]  # the simulator's wrapped NumPy array


def resolved(rung: str, a, b, c) -> str:
    """The rung that runs: ``vectorized`` only where :func:`vectorizable`, else
    ``blocktile_2d``."""
    return "blocktile_2d" if rung == "vectorized" and not vectorizable(a, b, c) else rung


def sgemm(a, b, rung: str, c=None):
    """``a @ b`` (float32, 2-D, contiguous device arrays) with the ladder's ``rung``; into
    ``c`` if given. ``vectorized`` falls back to ``blocktile_2d`` where it may not run."""
    if rung not in RUNGS:
        raise ValueError(f"unknown sgemm rung {rung!r}: expected one of {', '.join(RUNGS)}")
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({m}x{k} and {k2}x{n})")
    if c is None:
        c = cuda.device_array((m, n), dtype=a.dtype)
    if m == 0 or n == 0:
        return c
    rung = resolved(rung, a, b, c)
    zero = a.dtype.type(0)
    if rung == "uncoalesced":
        launch(sgemm_uncoalesced_kernel, (-(-m // EDGE), -(-n // EDGE)), (EDGE, EDGE), a, b, c)
    elif rung in ("coalesced", "smem"):
        kernel = ck.mm_naive_kernel if rung == "coalesced" else ck.mm_tiled_kernel
        grid = (-(-n // ck.TILE), -(-m // ck.TILE), 1)
        launch(kernel, grid, (ck.TILE, ck.TILE), a.reshape(1, m, k), b.reshape(1, k, n),
               c.reshape(1, m, n), zero)  # fmt: skip
    elif rung == "blocktile_1d":
        launch(sgemm_blocktile1d_kernel, (-(-n // BN1), -(-m // BM1)), THREADS_1D, a, b, c)
    elif rung == "blocktile_2d":
        grid = (-(-n // BN), -(-m // BM), 1)
        launch(ck.mm_regtile_kernel, grid, THREADS_2D, a.reshape(1, m, k), b.reshape(1, k, n),
               c.reshape(1, m, n), zero)  # fmt: skip
    else:
        launch(sgemm_vectorized_kernel, (-(-n // BN), -(-m // BM)), THREADS_2D,
               a.reshape(-1), b.reshape(-1), c.reshape(-1), m, n, k)  # fmt: skip
    return c

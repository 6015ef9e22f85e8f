"""CPU kernels: Numba ``@njit(parallel=True)`` loops over a TensorIterator's operands.

Mirrors ``aten/src/ATen/native/cpu/Loops.h`` (``cpu_kernel``: a "2-d loop" whose inner
dimension is the iterator's fastest dim, run in parallel chunks by ``at::parallel_for``) and
the kernels registered to the op stubs in ``aten/src/ATen/native/cpu/BinaryOpsKernel.cpp``,
``UnaryOpsKernel.cpp``, ``ReduceOpsKernel.cpp``, ``ScatterGatherKernel.cpp`` and, for
matmul, the blocked loop of ``aten/src/ATen/native/cpu/BlasKernel.cpp``.

Every loop takes each operand as (typed storage array, storage offset) and the iteration as
``shape`` (dim 0 fastest, after coalescing) with ``strides[operand, dim]`` in elements. A
1-d iteration (the common case: coalescing turns any contiguous op into one dim) is split
across threads directly; otherwise threads take whole inner rows.
"""

from __future__ import annotations

import types as pytypes
import warnings

import numpy as np
from numba import njit, prange, types
from numba.core import errors
from numba.extending import intrinsic, overload

from . import scalar_ops as S

_jit = dict(cache=True, error_model="numpy")
# Inlining the op switch into the loops (inline="always") lets LLVM hoist the switch out of
# the loop (2x faster add); Numba's pedantic SSA check then warns about a variable of the
# inlined function, harmlessly: keep that one warning out of notebooks and test logs.
warnings.filterwarnings(
    "ignore", message="variable '.*' is not in scope", category=errors.NumbaIRAssumptionWarning
)
compare = njit(inline="always", **_jit)(S.compare)


def vector_width(bits: int):
    """An intrinsic that compiles the function calling it (a whole kernel, or the thread body
    of a ``prange`` loop, which Numba compiles as a function of its own) for vectors of at
    most ``bits`` bits: LLVM's function attribute ``"prefer-vector-width"``, which its loop
    vectoriser obeys. (llvmlite lets only keyword attributes into a function's attribute set,
    so this string attribute goes in with ``set.add``.)"""

    @intrinsic
    def prefer_vector_width(typingctx):
        def codegen(context, builder, sig, args):
            set.add(builder.function.attributes, f'"prefer-vector-width"="{bits}"')
            return context.get_dummy_value()

        return types.none(), codegen

    return prefer_vector_width


#: The vector width of retorch's elementwise loops on contiguous rows (``binary_loop``).
#: torch compiles each CPU kernel for DEFAULT, AVX2 and AVX512, but ``REGISTER_DISPATCH``
#: leaves the AVX512 slot empty (``aten/src/ATen/native/DispatchStub.h``; only kernels
#: registered with ``ALSO_REGISTER_AVX512_DISPATCH`` get one, copy among them, add not), so
#: on an AVX-512 CPU add runs its AVX2 build: two 256-bit vectors, 64 bytes of each operand,
#: per pass of ``vectorized_loop`` (``native/cpu/Loops.h``). Which width streams best is for
#: measurement: ``make bench`` times 128, 256 and 512 bits against torch, and chapter 4 reads
#: the verdict from it. A cap above a CPU's widest register changes nothing.
STREAM_VECTOR_BITS = 128
stream_width = vector_width(STREAM_VECTOR_BITS)


def binary_scalar(op, a, b, alpha):
    """Typing stub: Numba picks S.binary_float or S.binary_int by the element type."""


def unary_scalar(op, x):
    """Typing stub: Numba picks S.unary_float or S.unary_int by the element type."""


@overload(binary_scalar, inline="always")
def _binary_scalar(op, a, b, alpha):
    return S.binary_float if isinstance(a, types.Float) else S.binary_int


@overload(unary_scalar, inline="always")
def _unary_scalar(op, x):
    return S.unary_float if isinstance(x, types.Float) else S.unary_int


#: Elements per parallel task: a task is one chunk of one inner row, so a 1-d (coalesced)
#: iteration and a many-row one both split into enough pieces for every thread.
GRAIN = 1 << 14


@njit(**_jit)
def _row_start(outer, shape, strides, k):
    """Element offset of operand ``k`` at the start of inner row ``outer``."""
    off = 0
    rem = outer
    for d in range(1, shape.shape[0]):
        idx = rem % shape[d]
        rem //= shape[d]
        off += idx * strides[k, d]
    return off


@njit(**_jit)
def _tasks(shape):
    """(number of tasks, chunks per row) for an iteration ``shape`` (dim 0 is the row)."""
    nouter = 1
    for d in range(1, shape.shape[0]):
        nouter *= shape[d]
    nchunks = max(1, (shape[0] + GRAIN - 1) // GRAIN)
    return nouter * nchunks, nchunks


@njit(**_jit)
def _task_range(task, nchunks, inner):
    """(row, first, last) of one task: a chunk of ``GRAIN`` elements of one row."""
    row = task // nchunks
    first = (task % nchunks) * GRAIN
    return row, first, min(inner, first + GRAIN)


@njit(inline="always", **_jit)
def _binary_row_vector(op, o_, a_, b_, alpha):
    """One contiguous row, as a plain loop over 0-based slices (no negative-index wraparound
    to check). Called with ``op`` a constant, LLVM drops the op switch and vectorises the
    loop (vectors of at most :data:`STREAM_VECTOR_BITS` bits), after checking at run time
    that ``o_`` does not overlap ``a_`` or ``b_``."""
    for j in range(o_.shape[0]):
        o_[j] = binary_scalar(op, a_[j], b_[j], alpha)


@njit(parallel=True, **_jit)
def binary_loop(op, out, oo, a, ao, b, bo, shape, strides, alpha):
    """``out = a (op) b`` elementwise; the ``cpu_kernel`` of BinaryOpsKernel.cpp's ops."""
    ntasks, nchunks = _tasks(shape)
    so, sa, sb = strides[0, 0], strides[1, 0], strides[2, 0]
    for t in prange(ntasks):
        stream_width()
        row, j0, j1 = _task_range(np.int64(t), nchunks, shape[0])
        po = oo + _row_start(row, shape, strides, 0)
        pa = ao + _row_start(row, shape, strides, 1)
        pb = bo + _row_start(row, shape, strides, 2)
        if so == 1 and sa == 1 and sb == 1:
            o_, a_, b_ = out[po + j0 : po + j1], a[pa + j0 : pa + j1], b[pb + j0 : pb + j1]
            # one row loop per op, the op a constant: LLVM drops the switch and vectorises
            # each loop, as torch's cpu_kernel_vec compiles a vectorized_loop for every op
            if op == S.ADD:
                _binary_row_vector(S.ADD, o_, a_, b_, alpha)
            elif op == S.SUB:
                _binary_row_vector(S.SUB, o_, a_, b_, alpha)
            elif op == S.MUL:
                _binary_row_vector(S.MUL, o_, a_, b_, alpha)
            elif op == S.DIV:
                _binary_row_vector(S.DIV, o_, a_, b_, alpha)
            elif op == S.POW:
                _binary_row_vector(S.POW, o_, a_, b_, alpha)
            elif op == S.MAXIMUM:
                _binary_row_vector(S.MAXIMUM, o_, a_, b_, alpha)
            elif op == S.MINIMUM:
                _binary_row_vector(S.MINIMUM, o_, a_, b_, alpha)
            else:
                _binary_row_vector(S.ADD_ALPHA, o_, a_, b_, alpha)
        else:
            for j in range(j0, j1):
                out[po + j * so] = binary_scalar(op, a[pa + j * sa], b[pb + j * sb], alpha)


@njit(parallel=True, **_jit)
def compare_loop(op, out, oo, a, ao, b, bo, shape, strides):
    ntasks, nchunks = _tasks(shape)
    so, sa, sb = strides[0, 0], strides[1, 0], strides[2, 0]
    for t in prange(ntasks):
        row, j0, j1 = _task_range(np.int64(t), nchunks, shape[0])
        po = oo + _row_start(row, shape, strides, 0)
        pa = ao + _row_start(row, shape, strides, 1)
        pb = bo + _row_start(row, shape, strides, 2)
        for j in range(j0, j1):
            out[po + j * so] = compare(op, a[pa + j * sa], b[pb + j * sb])


@njit(parallel=True, **_jit)
def unary_loop(op, out, oo, a, ao, shape, strides):
    ntasks, nchunks = _tasks(shape)
    so, sa = strides[0, 0], strides[1, 0]
    for t in prange(ntasks):
        row, j0, j1 = _task_range(np.int64(t), nchunks, shape[0])
        po = oo + _row_start(row, shape, strides, 0)
        pa = ao + _row_start(row, shape, strides, 1)
        for j in range(j0, j1):
            out[po + j * so] = unary_scalar(op, a[pa + j * sa])


@njit(parallel=True, **_jit)
def copy_loop(out, oo, a, ao, shape, strides):
    """``copy_`` with a cast: Numba converts on store (float to int truncates, as C++ does)."""
    ntasks, nchunks = _tasks(shape)
    so, sa = strides[0, 0], strides[1, 0]
    for t in prange(ntasks):
        row, j0, j1 = _task_range(np.int64(t), nchunks, shape[0])
        po = oo + _row_start(row, shape, strides, 0)
        pa = ao + _row_start(row, shape, strides, 1)
        if so == 1 and sa == 1:
            o_, a_ = out[po + j0 : po + j1], a[pa + j0 : pa + j1]
            for j in range(j1 - j0):
                o_[j] = a_[j]
        else:
            for j in range(j0, j1):
                out[po + j * so] = a[pa + j * sa]


@njit(parallel=True, **_jit)
def where_loop(out, oo, c, co, a, ao, b, bo, shape, strides):
    ntasks, nchunks = _tasks(shape)
    so, sc, sa, sb = strides[0, 0], strides[1, 0], strides[2, 0], strides[3, 0]
    for t in prange(ntasks):
        row, j0, j1 = _task_range(np.int64(t), nchunks, shape[0])
        po = oo + _row_start(row, shape, strides, 0)
        pc = co + _row_start(row, shape, strides, 1)
        pa = ao + _row_start(row, shape, strides, 2)
        pb = bo + _row_start(row, shape, strides, 3)
        for j in range(j0, j1):
            out[po + j * so] = a[pa + j * sa] if c[pc + j * sc] else b[pb + j * sb]


@njit(parallel=True, **_jit)
def gather_loop(out, oo, src, so_, idx, io, shape, strides, dim_stride):
    """``out = src[... idx ...]`` along one dim: src is restrided so that dim has stride 0
    and the index supplies ``idx * dim_stride`` (``restride_dim`` in ScatterGatherKernel)."""
    ntasks, nchunks = _tasks(shape)
    s0, s1, s2 = strides[0, 0], strides[1, 0], strides[2, 0]
    for t in prange(ntasks):
        row, j0, j1 = _task_range(np.int64(t), nchunks, shape[0])
        po = oo + _row_start(row, shape, strides, 0)
        ps = so_ + _row_start(row, shape, strides, 1)
        pi = io + _row_start(row, shape, strides, 2)
        for j in range(j0, j1):
            out[po + j * s0] = src[ps + j * s1 + idx[pi + j * s2] * dim_stride]


@njit(**_jit)
def scatter_loop(add, out, oo, src, so_, idx, io, shape, strides, dim_stride):
    """``out[... idx ...] = src`` (or ``+=`` when ``add``): the mirror image of
    :func:`gather_loop`. Serial, because two indices may name the same element."""
    ntasks, nchunks = _tasks(shape)
    s0, s1, s2 = strides[0, 0], strides[1, 0], strides[2, 0]
    for t in range(ntasks):
        row, j0, j1 = _task_range(t, nchunks, shape[0])
        po = oo + _row_start(row, shape, strides, 0)
        ps = so_ + _row_start(row, shape, strides, 1)
        pi = io + _row_start(row, shape, strides, 2)
        for j in range(j0, j1):
            k = po + j * s0 + idx[pi + j * s2] * dim_stride
            if add:
                out[k] += src[ps + j * s1]
            else:
                out[k] = src[ps + j * s1]


# ---- reductions ---------------------------------------------------------------------------------
# ``fastmath={"reassoc"}`` lets LLVM reorder the additions: without it, a sum is one long
# dependency chain (each add waits for the previous one) and cannot use vector lanes or
# several accumulators; with it, the loop keeps e.g. 16 partial sums in a vector register.
# Only reassociation is allowed: "nnan"/"ninf" would let LLVM assume no NaN or inf.
_CHUNK = 1 << 14


@njit(fastmath={"reassoc", "contract"}, **_jit)
def _sum_range(x, start, stop, acc):
    xs = x[start:stop]
    for i in range(xs.shape[0]):
        acc += xs[i]
    return acc


@njit(fastmath={"reassoc", "contract"}, **_jit)
def _sum_strided(x, start, n, stride, acc):
    for i in range(n):
        acc += x[start + i * stride]
    return acc


@njit(fastmath={"reassoc", "contract"}, **_jit)
def _add_rows(acc, x):
    """``acc += x``, elementwise: one step of an outer reduction, vectorised across rows."""
    for j in range(acc.shape[0]):
        acc[j] += x[j]


@njit(**_jit)
def _offset(idx, shape, strides, k, d0, d1):
    """Element offset of operand ``k`` at linear index ``idx`` of dims ``d0 .. d1 - 1``
    (``d0`` fastest)."""
    off = 0
    for d in range(d0, d1):
        off += (idx % shape[d]) * strides[k, d]
        idx //= shape[d]
    return off


@njit(parallel=True, **_jit)
def sum_all(out, oo, x, xo, shape, strides, zero):
    """Every dim reduced: the rows of dim 0 cut into chunks of ``_CHUNK``, each chunk summed
    by one task into ``partial``, then the partial sums added (``two_pass_reduction`` of
    ``parallel_reduce`` in ``TensorIteratorReduce.cpp``). The order of the additions depends
    on the shape only, never on the number of threads."""
    inner, s0, ndim = shape[0], strides[1, 0], shape.shape[0]
    rows = 1
    for d in range(1, ndim):
        rows *= shape[d]
    nchunks = (inner + _CHUNK - 1) // _CHUNK
    partial = np.empty(rows * nchunks, dtype=out.dtype)
    for t_ in prange(rows * nchunks):
        t = np.int64(t_)
        p = xo + _offset(t // nchunks, shape, strides, 1, 1, ndim)
        j0 = (t % nchunks) * _CHUNK
        j1 = min(inner, j0 + _CHUNK)
        if s0 == 1:
            partial[t] = _sum_range(x, p + j0, p + j1, zero)
        else:
            partial[t] = _sum_strided(x, p + j0 * s0, j1 - j0, s0, zero)
    out[oo] = _sum_range(partial, 0, partial.shape[0], zero)


@njit(parallel=True, **_jit)
def sum_inner(out, oo, x, xo, shape, strides, nred, zero):
    """The reduced dims are innermost and the fastest of them has input stride 1 (an *inner*
    reduction, ``x.sum(-1)`` of a contiguous ``x``): each output sums contiguous rows."""
    ndim = shape.shape[0]
    nkept, rows = 1, 1
    for d in range(nred, ndim):
        nkept *= shape[d]
    for d in range(1, nred):
        rows *= shape[d]
    for k_ in prange(nkept):
        k = np.int64(k_)
        po = oo + _offset(k, shape, strides, 0, nred, ndim)
        pk = xo + _offset(k, shape, strides, 1, nred, ndim)
        acc = zero
        for r in range(rows):
            p = pk + _offset(r, shape, strides, 1, 1, nred)
            acc = _sum_range(x, p, p + shape[0], acc)
        out[po] = acc


@njit(parallel=True, **_jit)
def sum_outer(out, oo, x, xo, shape, strides, nred, zero):
    """The reduced dims are strided in the input (an *outer* reduction, ``x.sum(0)``, or
    ``x.t().sum(1)``): tasks take chunks of the fastest kept dim, and add the input's rows
    into them one reduced index after another, vectorised across the row where both strides
    are 1, as ``cascade_sum``'s outer loop in ``SumKernel.cpp`` does."""
    ndim = shape.shape[0]
    n, so, sx = shape[nred], strides[0, nred], strides[1, nred]
    nouter, nr = 1, 1
    for d in range(nred + 1, ndim):
        nouter *= shape[d]
    for d in range(nred):
        nr *= shape[d]
    nchunks = (n + GRAIN - 1) // GRAIN
    for t_ in prange(nouter * nchunks):
        t = np.int64(t_)
        po = oo + _offset(t // nchunks, shape, strides, 0, nred + 1, ndim)
        pk = xo + _offset(t // nchunks, shape, strides, 1, nred + 1, ndim)
        j0 = (t % nchunks) * GRAIN
        j1 = min(n, j0 + GRAIN)
        for j in range(j0, j1):
            out[po + j * so] = zero
        for r in range(nr):
            p = pk + _offset(r, shape, strides, 1, 0, nred)
            if so == 1 and sx == 1:
                _add_rows(out[po + j0 : po + j1], x[p + j0 : p + j1])
            else:
                for j in range(j0, j1):
                    out[po + j * so] += x[p + j * sx]


@njit(parallel=True, **_jit)
def max_rows(x, out, indices, outer, inner):
    """Max of each row and the index of its first occurrence; NaN wins (torch.max)."""
    for r_ in prange(outer):
        r = np.int64(r_)
        base = r * inner
        best = x[base]
        at = 0
        for j in range(1, inner):
            v = x[base + j]
            if best != best:
                break
            if v > best or v != v:
                best = v
                at = j
        out[r] = best
        indices[r] = at


@njit(parallel=True, **_jit)
def max_strided(x, xo, out, indices, kshape, kstrides, rshape, rstrides):
    """``max_rows`` reading ``x`` where it lies: output ``r`` (row-major over the kept dims
    ``kshape``) walks the reduced dims ``rshape`` in row-major order at the input's own
    strides, as torch's ``compare_base_kernel`` (``ReduceOpsKernel.cpp``) walks ``dim`` at
    ``self_dim_stride``; the index is the position in that order. Nothing is copied."""
    nk, nr = kshape.shape[0], rshape.shape[0]
    outer, inner = 1, 1
    for d in range(nk):
        outer *= kshape[d]
    for d in range(nr):
        inner *= rshape[d]
    for r_ in prange(outer):
        r = np.int64(r_)
        base, q = xo, r
        for d in range(nk - 1, -1, -1):
            base += (q % kshape[d]) * kstrides[d]
            q //= kshape[d]
        best = x[base + _row_major_offset(0, rshape, rstrides)]
        at = 0
        for j in range(1, inner):
            if best != best:
                break
            v = x[base + _row_major_offset(j, rshape, rstrides)]
            if v > best or v != v:
                best = v
                at = j
        out[r] = best
        indices[r] = at


@njit(**_jit)
def _row_major_offset(j, shape, strides):
    """Element offset of linear index ``j`` over ``shape`` (last dim fastest)."""
    off = 0
    for d in range(shape.shape[0] - 1, -1, -1):
        off += (j % shape[d]) * strides[d]
        j //= shape[d]
    return off


# ---- matmul ---------------------------------------------------------------------------------
_BLOCK = 64  # rows of ``a`` per parallel task, and columns of the output per tile
_R = 4  # the register block: _R rows of ``a`` times _R rows of ``bt``


@njit(fastmath={"reassoc", "contract"}, **_jit)
def _dot(a, ia, b, ib, n, acc):
    sa, sb = a[ia : ia + n], b[ib : ib + n]  # slices: 4x faster than a[ia + k] here
    for k in range(n):
        acc += sa[k] * sb[k]
    return acc


@njit(fastmath={"reassoc", "contract"}, **_jit)
def _dot4x4(a, ia, b, ib, n, acc):
    """The 16 dot products of rows ``ia .. ia+3`` of ``a`` with rows ``ib .. ib+3`` of ``b``
    (rows of length ``n``, starting at those element offsets, one row every ``n``): the
    register block. Each pass of the loop loads 4 + 4 numbers and does 16 multiply-adds, and
    LLVM turns each of the 16 sums into a vector of partial sums held in a register, so a
    number loaded from memory is used 4 times instead of once (``_dot`` uses it once)."""
    a0, a1 = a[ia : ia + n], a[ia + n : ia + 2 * n]  # the 4 rows of a
    a2, a3 = a[ia + 2 * n : ia + 3 * n], a[ia + 3 * n : ia + 4 * n]
    b0, b1 = b[ib : ib + n], b[ib + n : ib + 2 * n]  # 4 rows of b (bt: 4 columns of the
    # original right-hand side)
    b2, b3 = b[ib + 2 * n : ib + 3 * n], b[ib + 3 * n : ib + 4 * n]
    c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = acc
    c20 = c21 = c22 = c23 = c30 = c31 = c32 = c33 = acc
    for k in range(n):
        x0, x1, x2, x3 = a0[k], a1[k], a2[k], a3[k]
        y0, y1, y2, y3 = b0[k], b1[k], b2[k], b3[k]
        c00 += x0 * y0
        c01 += x0 * y1
        c02 += x0 * y2
        c03 += x0 * y3
        c10 += x1 * y0
        c11 += x1 * y1
        c12 += x1 * y2
        c13 += x1 * y3
        c20 += x2 * y0
        c21 += x2 * y1
        c22 += x2 * y2
        c23 += x2 * y3
        c30 += x3 * y0
        c31 += x3 * y1
        c32 += x3 * y2
        c33 += x3 * y3
    return ((c00, c01, c02, c03), (c10, c11, c12, c13),
            (c20, c21, c22, c23), (c30, c31, c32, c33))  # fmt: skip


@njit(parallel=True, **_jit)
def bmm_blocked(a, bt, out, batch, m, n, k, zero):
    """``out[p] = a[p] @ bt[p].T`` with ``a`` (batch, m, k) and ``bt`` (batch, n, k), both
    row-major: every output element is a dot product of two contiguous rows. Threads take
    64-row blocks of ``a``; inside, 64-column tiles of the output keep their 64 rows of ``bt``
    in cache while the rows of ``a`` pass over them, 4 at a time against 4 rows of ``bt``
    (``_dot4x4``). Rows and columns left over past a multiple of 4 use ``_dot``."""
    mblocks = (m + _BLOCK - 1) // _BLOCK
    for task_ in prange(batch * mblocks):
        task = np.int64(task_)
        p = task // mblocks
        i0 = (task % mblocks) * _BLOCK
        i1 = min(m, i0 + _BLOCK)
        i4 = i0 + (i1 - i0) // _R * _R  # rows i0 .. i4 go 4 at a time
        for j0 in range(0, n, _BLOCK):
            j1 = min(n, j0 + _BLOCK)
            j4 = j0 + (j1 - j0) // _R * _R
            for i in range(i0, i4, _R):
                for j in range(j0, j4, _R):
                    c = _dot4x4(a, (p * m + i) * k, bt, (p * n + j) * k, k, zero)
                    for r in range(_R):
                        row = out[(p * m + i + r) * n + j : (p * m + i + r) * n + j + _R]
                        row[0], row[1], row[2], row[3] = c[r]
            for i in range(i0, i1):  # the leftovers: columns j4 .. j1 of every row, and
                js = j4 if i < i4 else j0  # every column of rows i4 .. i1
                for j in range(js, j1):
                    out[(p * m + i) * n + j] = _dot(
                        a, (p * m + i) * k, bt, (p * n + j) * k, k, zero
                    )


#: ``at::internal::GRAIN_SIZE``: ``at::parallel_for`` runs a range smaller than this on the
#: calling thread; starting the thread pool costs more than such a loop.
GRAIN_SIZE = 32768


def _serial(fn):
    """The same loop compiled without threads (its ``prange`` runs as ``range``), cached
    under its own name."""
    py = fn.py_func
    f = pytypes.FunctionType(py.__code__, py.__globals__, py.__name__ + "_serial", py.__defaults__)
    f.__qualname__ = py.__qualname__ + "_serial"
    f.__module__ = py.__module__
    f.__doc__ = py.__doc__
    return njit(**_jit)(f)


_SERIAL = {}


def _pick(loop, n):
    """``loop`` for ``n`` elements: threaded at GRAIN_SIZE and above, else its serial twin."""
    if n >= GRAIN_SIZE:
        return loop
    serial = _SERIAL.get(loop)
    if serial is None:
        serial = _SERIAL[loop] = _serial(loop)
    return serial


# ---- the CPU entries of the dispatch stubs ---------------------------------------------------
# Each takes a built TensorIterator (or contiguous tensors for reductions and matmul), as the
# functions ATen registers with REGISTER_DISPATCH(add_stub, &add_kernel) take a TensorIteratorBase.
from .dispatch_stub import stub  # noqa: E402


@stub("binary").register("cpu")
def binary_kernel(it, op, alpha):
    (out, a, b), (oo, ao, bo), shape, strides = it.kernel_args()
    # torch converts alpha to the op's dtype first
    dt = it.common_dtype
    alpha = (
        (1.0 if alpha == 1 else float(dt.np.type(alpha))) if dt.is_floating_point else int(alpha)
    )
    _pick(binary_loop, it.numel())(op, out, oo, a, ao, b, bo, shape, strides, alpha)


@stub("compare").register("cpu")
def compare_kernel(it, op):
    (out, a, b), (oo, ao, bo), shape, strides = it.kernel_args()
    _pick(compare_loop, it.numel())(op, out, oo, a, ao, b, bo, shape, strides)


@stub("unary").register("cpu")
def unary_kernel(it, op):
    (out, a), (oo, ao), shape, strides = it.kernel_args()
    _pick(unary_loop, it.numel())(op, out, oo, a, ao, shape, strides)


@stub("copy").register("cpu")
def copy_kernel(it):
    (out, a), (oo, ao), shape, strides = it.kernel_args()
    _pick(copy_loop, it.numel())(out, oo, a, ao, shape, strides)


@stub("where").register("cpu")
def where_kernel(it):
    (out, c, a, b), (oo, co, ao, bo), shape, strides = it.kernel_args()
    _pick(where_loop, it.numel())(out, oo, c, co, a, ao, b, bo, shape, strides)


@stub("gather").register("cpu")
def gather_kernel(it, dim_stride):
    (out, src, idx), (oo, so, io), shape, strides = it.kernel_args()
    _pick(gather_loop, it.numel())(out, oo, src, so, idx, io, shape, strides, dim_stride)


@stub("scatter").register("cpu")
def scatter_kernel(it, dim_stride, add):
    (out, src, idx), (oo, so, io), shape, strides = it.kernel_args()
    scatter_loop(add, out, oo, src, so, idx, io, shape, strides, dim_stride)


@stub("sum").register("cpu")
def sum_kernel(it):
    """``sum_stub``'s CPU kernel for a reduction TensorIterator (``reduce_op``): after
    ``reorder_dimensions`` the reduced dims (output stride 0) come first, innermost. Three
    loops, as ``cascade_sum`` in ``SumKernel.cpp`` has: everything reduced, an inner
    reduction (contiguous rows) and an outer one (strided rows, vectorised across them)."""
    (out, x), (oo, xo), shape, strides = it.kernel_args()
    nred = 0
    while nred < len(shape) and strides[0, nred] == 0:
        nred += 1
    zero = it.output().dtype.np.type(0)
    n = it.numel()
    if nred == len(shape):
        _pick(sum_all, n)(out, oo, x, xo, shape, strides, zero)
    elif nred > 0 and strides[1, 0] == 1:
        _pick(sum_inner, n)(out, oo, x, xo, shape, strides, nred, zero)
    else:
        _pick(sum_outer, n)(out, oo, x, xo, shape, strides, nred, zero)


@stub("max").register("cpu")
def max_kernel(x, values, indices, outer, inner):
    _pick(max_rows, x.numel())(_flat(x), _flat(values), _flat(indices), outer, inner)


@stub("max_strided").register("cpu")
def max_strided_kernel(x, values, indices, kept, gone):
    """``values``/``indices`` (contiguous, one element per kept index) of ``x`` reduced over
    the dims ``gone``, read at ``x``'s own strides."""
    impl = x._impl
    arr = impl.storage.typed(impl.dtype.np)
    shape, strides = list(x.shape) or [1], list(x.stride()) or [1]

    def arrays(dims):
        return (np.array([shape[d] for d in dims], dtype=np.int64),
                np.array([strides[d] for d in dims], dtype=np.int64))  # fmt: skip

    (ks, kst), (rs, rst) = arrays(kept), arrays(gone)
    loop = _pick(max_strided, x.numel())
    loop(arr, impl.storage_offset, _flat(values), _flat(indices), ks, kst, rs, rst)


@stub("bmm").register("cpu")
def bmm_kernel(a, b, out):
    """``a`` (batch, m, k) and ``b`` (batch, k, n), at any strides, -> ``out`` (batch, m, n),
    contiguous. ``bmm_blocked`` reads rows: ``a``'s rows and ``b``'s columns (the rows of
    ``b`` transposed). Where they already lie that way in memory (``a`` row-major; ``b`` the
    transpose of a row-major matrix, as ``x @ w.T`` gives) they are read in place; otherwise
    they are packed into a row-major buffer first, as a BLAS packs its panels (torch's CPU
    ``mm`` hands the strides to BLAS, whose gemm packs them). Packing copies values, so the
    products are the same bits either way."""
    batch, m, k = a.shape
    n = b.shape[2]
    rows_a = _packed(a, 0, 1, 2)
    rows_bt = _packed(b, 0, 2, 1)  # b's columns as rows
    loop = _pick(bmm_blocked, batch * m * n * k)
    loop(rows_a, rows_bt, _flat(out), batch, m, n, k, a.dtype.np.type(0))


def _packed(t, d0, d1, d2):
    """The elements of 3-d ``t`` in the order of its dims ``d0, d1, d2``, as a flat row-major
    array: a slice of its storage when they lie that way already, else a packed copy."""
    impl = t._impl
    sizes, strides = impl.sizes, impl.strides
    n0, n1, n2 = sizes[d0], sizes[d1], sizes[d2]
    s0, s1, s2 = strides[d0], strides[d1], strides[d2]
    arr, off = impl.storage.typed(impl.dtype.np), impl.storage_offset
    if (n2 == 1 or s2 == 1) and (n1 == 1 or s1 == n2) and (n0 == 1 or s0 == n1 * n2):
        return arr[off : off + n0 * n1 * n2]
    dst = np.empty(n0 * n1 * n2, dtype=arr.dtype)
    pack_3d(arr, off, n0, n1, n2, s0, s1, s2, dst)
    return dst


@njit(**_jit)
def pack_3d(x, off, n0, n1, n2, s0, s1, s2, dst):
    """``dst`` (row-major ``n0 x n1 x n2``) = the elements of ``x`` at ``off`` and strides
    ``s0, s1, s2``."""
    q = 0
    for p in range(n0):
        for i in range(n1):
            base = off + p * s0 + i * s1
            for j in range(n2):
                dst[q] = x[base + j * s2]
                q += 1


def _flat(t):
    """The elements of a contiguous tensor as a 1-d array over its storage (no copy)."""
    impl = t._impl
    arr, n = impl.storage.typed(impl.dtype.np), t.numel()
    if impl.storage_offset == 0 and arr.shape[0] == n:  # the whole storage: no slice to make
        return arr
    return arr[impl.storage_offset : impl.storage_offset + n]


# ---- softmax over the last dim ----------------------------------------------------------------
@njit(**_jit)
def softmax_lastdim(x, xo, out, rows, n, log, zero):
    """torch's ``_vec_softmax_lastdim`` / ``_vec_log_softmax_lastdim``
    (``aten/src/ATen/native/cpu/SoftMaxKernel.cpp``), one pass per step over each contiguous
    row: its max, the sum of ``exp(x - max)``, then ``exp(x - max) * (1 / sum)`` for softmax
    or ``x - max - log(sum)`` for log_softmax ("it's necessary to keep the order of the
    operations"). A NaN in a row makes its max NaN, as ``vec::maximum`` propagates it."""
    for r in range(rows):
        base = xo + r * n
        m = x[base]
        for j in range(1, n):
            v = x[base + j]
            if v > m or v != v:
                m = v
        s = zero
        for j in range(n):
            s += np.exp(x[base + j] - m)
        o = r * n
        if log:
            ls = np.log(s)
            for j in range(n):
                out[o + j] = x[base + j] - m - ls
        else:
            inv = 1 / s
            for j in range(n):
                out[o + j] = np.exp(x[base + j] - m) * inv


@stub("softmax_lastdim").register("cpu")
def softmax_lastdim_kernel(x, out, log):
    """``softmax_lastdim_kernel`` / ``log_softmax_lastdim_kernel``: ``x`` and ``out``
    contiguous, of one floating dtype."""
    n = x.shape[-1]
    impl = x._impl
    arr = impl.storage.typed(impl.dtype.np)
    softmax_lastdim(arr, impl.storage_offset, _flat(out), x.numel() // n, n, log,
                    impl.dtype.np.type(0))  # fmt: skip

"""Fused attention: ``softmax(q @ k^T * scale) @ v`` and its backward in one kernel per device.

Mirrors torch's CPU flash attention, ``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``:
``cpu_flash_attention`` (the forward) and ``cpu_flash_attention_backward``, registered to the
``flash_attention_kernel`` / ``flash_attention_backward_kernel`` dispatch stubs (declared in
``aten/src/ATen/native/transformers/attention.h``) that
``_scaled_dot_product_flash_attention_cpu`` calls (``aten/src/ATen/native/transformers/
attention.cpp``). Here the stubs are ``stub("flash_attention")`` and
``stub("flash_attention_backward")``, with a CPU kernel (Numba) and a CUDA kernel (Numba-CUDA).

The forward never holds the (T_q, T_k) matrix of probabilities. It takes the queries in blocks
of ``q_split`` rows and, for each, the keys in blocks of ``kv_split``: the block's scores
``scale * q @ k^T``, their row max, and the *online softmax*: with ``m`` the running max and
``l`` the running sum of ``exp(s - m)``, a new block with max ``m'`` rescales the partial
output and ``l`` by ``exp(m - m')`` before adding its own ``exp(s - m')`` terms. At the end
the output is divided by ``l`` and ``lse = m + log(l)`` (the row's logsumexp) is saved for
the backward, which recomputes each probability as ``exp(s - lse)`` instead of storing it:

    dV = P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dO * O)),   dQ = dS K s,   dK = dS^T Q s

Inputs are raw ``retorch.tensor`` tensors of shape (N, T, D) (N = batch * heads), float32 or
float64, on one device. They may be views: dims 0 and 1 are read at their own strides (as
torch's kernel reads ``qStrideB``, ``qStrideM``); a tensor whose last dim is not contiguous
is copied first (torch's gemm needs unit stride there too). Outputs are contiguous; the
logsumexp has the inputs' dtype (torch's ``accum_t``: float for float, double for double).
``D`` of ``v`` may differ from that of ``q`` and ``k`` (torch's flash kernel requires them
equal and SDPA then falls back to its math backend; the kernels here just take both sizes).

CPU (:func:`cpu_flash_attention`, :func:`cpu_flash_attention_backward`): torch's loops, its
split sizes (``q_split`` 32, 64 or 256 by T_q; ``kv_split`` 512) and its per-thread scratch
buffer (one slice of ``buf`` per thread, indexed by ``numba.get_thread_id()`` as torch indexes
by ``at::get_thread_num()``). The forward runs its (n, query block) tasks in parallel, the
backward its n's (each n accumulates dK and dV over every query block). The gemms
(``cpublas::gemm`` in torch) are loops LLVM vectorises: ``q @ k^T`` in 4 x 4 register blocks
(:func:`_gemm_nt`), the accumulating products four rows at a time (:func:`_axpy_rows`). The
forward's exp is torch's: ``exp_u20``, a degree-5 polynomial, for float32
(:func:`exp_reduce_sum`; torch takes ``std::exp`` for the few elements past its last full
vector, here every element takes ``exp_u20``), ``exp`` for float64; the backward's is
``exp`` for both, as torch's.

CUDA (:func:`flash_attention_kernel`, :func:`flash_attention_backward_dq_kernel`,
:func:`flash_attention_backward_dkdv_kernel`): one block of :data:`ATTN_THREADS` threads per
(n, query row) for the forward and dQ, per (n, key row) for dK and dV. The block walks the keys
(or queries) in tiles of ``blockDim.x``: thread ``t`` computes the score of the tile's
``t``-th key (a dot product over D), a tree in shared memory gives the tile's max and sum
(the online softmax, one tile at a time), and then thread ``t`` updates the output dims
``t, t + blockDim.x, ...`` from the tile's probabilities in shared memory, reading rows of
``v`` (or ``k``, ``q``, ``dO``) coalesced. Why this shape: a row's softmax needs a reduction
across keys, which one block does in shared memory without atomics or a second pass; one
row per block suits the course's small D (16 to 64) and T; the output row itself is the
accumulator (each thread owns its dims), so no per-thread array of D values is needed and
nothing lives in local memory, whatever D. The backward is two kernels so that every output
element is written by one thread (no atomics: deterministic, as torch's CPU backward is):
the first computes ``delta = rowsum(dO * O)`` and dQ row by row, the second dK and dV key by
key, recomputing the probabilities from ``lse`` (as FlashAttention-2 does).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import cuda, njit, prange, types
from numba.extending import overload

from .. import cuda as rcuda
from ..cuda_launch import launch
from .cpu_kernels import _dot, _jit, _pick
from .dispatch_stub import stub
from .dtype import int32
from .ops import _c_name
from .tensor_factories import empty, zeros
from .tensor_shape import contiguous

FLOATS = ("float32", "float64")

#: ``kv_split_size`` of ``flash_attention_kernel_impl``: keys per block.
KV_SPLIT = 512


def q_split_size(q_size: int) -> int:
    """``q_split_size`` as ``flash_attention_kernel_impl`` picks it from the query length."""
    return 256 if q_size >= 768 else 64 if q_size >= 192 else 32


# ---- CPU ------------------------------------------------------------------------------------------
# torch's ``Vectorized<float>::exp_u20`` (``aten/src/ATen/cpu/vec/vec256/vec256_float.h``, the
# same in vec512): exp(x) = 2^n exp(r) with n = floor(x log2(e) + 1/2), r = x - n ln(2), exp(r)
# a degree-5 polynomial, 2^(n-1) built in the exponent bits, x below ln(FLT_MIN) giving 0.
_FACTORIALS = tuple(np.float32(c) for c in (0.999999701, 0.499991506, 0.166676521,
                                            0.0418978221, 0.00828929059))  # fmt: skip
_F1, _F2, _F3, _F4, _F5 = _FACTORIALS
_LOG2E = np.uint32(0x3FB8AA3B).view(np.float32)
_LN2 = np.uint32(0x3F317218).view(np.float32)
_LN_FLT_MIN = np.uint32(0xC2AEAC50).view(np.float32)
_LN_FLT_MAX = np.uint32(0x42B17218).view(np.float32)


def exp_reduce_sum(row, n, max_, bits, zero):
    """``_exp_reduce_sum_fusion_kernel``: ``row[:n] <- exp(row[:n] - max_)``, returning their
    sum; ``bits`` is int32 scratch of at least ``n``. Typing stub: Numba picks the float or
    the double version by the element type."""


def _exp_u20_reduce_sum(row, n, max_, bits, zero):
    pow2 = bits[:n]
    for c in range(n):  # exp_u20 as torch writes it, one lane per element
        x = row[c] - max_
        small = x < _LN_FLT_MIN
        x = max(min(x, _LN_FLT_MAX), _LN_FLT_MIN)
        fx = np.floor(x * _LOG2E + np.float32(0.5))
        r = x - fx * _LN2
        y = ((((r * _F5 + _F4) * r + _F3) * r + _F2) * r + _F1) * r + np.float32(1)
        row[c] = y
        pow2[c] = 0 if small else (np.int32(fx - np.float32(1)) + np.int32(127)) << np.int32(23)
    two_pow = pow2.view(np.float32)  # 2^(n-1): the bits as a float
    s = zero
    for c in range(n):
        e = row[c] * two_pow[c] * np.float32(2)
        row[c] = e
        s += e
    return s


def _exp_reduce_sum(row, n, max_, bits, zero):
    s = zero  # Vectorized<double>::exp_u20 is exp itself (Sleef's u10)
    for c in range(n):
        e = np.exp(row[c] - max_)
        row[c] = e
        s += e
    return s


@overload(exp_reduce_sum, fastmath={"reassoc", "contract"}, **_jit)
def _exp_reduce_sum_for(row, n, max_, bits, zero):
    return _exp_u20_reduce_sum if row.dtype == types.float32 else _exp_reduce_sum


@njit(fastmath={"reassoc", "contract"}, **_jit)
def _gemm_nt(a, ia, sa, b, ib, sb, rows, cols, n, out, zero):
    """``out[r * cols + c] = dot(a's row r, b's row c)`` (``a @ b.T``) for rows of length ``n``
    at ``ia + r * sa`` and ``ib + c * sb``: the ``cpublas::gemm`` calls of the kernels, in the
    4 x 4 register blocks of ``cpu_kernels._dot4x4`` (here at any row stride)."""
    r4, c4 = rows // 4 * 4, cols // 4 * 4
    for r in range(0, r4, 4):
        p = ia + r * sa
        a0, a1 = a[p : p + n], a[p + sa : p + sa + n]
        a2, a3 = a[p + 2 * sa : p + 2 * sa + n], a[p + 3 * sa : p + 3 * sa + n]
        for c in range(0, c4, 4):
            t = ib + c * sb
            b0, b1 = b[t : t + n], b[t + sb : t + sb + n]
            b2, b3 = b[t + 2 * sb : t + 2 * sb + n], b[t + 3 * sb : t + 3 * sb + n]
            c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = zero
            c20 = c21 = c22 = c23 = c30 = c31 = c32 = c33 = zero
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
            o = r * cols + c
            out[o], out[o + 1], out[o + 2], out[o + 3] = c00, c01, c02, c03
            o += cols
            out[o], out[o + 1], out[o + 2], out[o + 3] = c10, c11, c12, c13
            o += cols
            out[o], out[o + 1], out[o + 2], out[o + 3] = c20, c21, c22, c23
            o += cols
            out[o], out[o + 1], out[o + 2], out[o + 3] = c30, c31, c32, c33
    for r in range(rows):  # the leftovers: columns c4 .. of rows .. r4, every column after
        for c in range(c4 if r < r4 else 0, cols):
            out[r * cols + c] = _dot(a, ia + r * sa, b, ib + c * sb, n, zero)


@njit(fastmath={"reassoc", "contract"}, **_jit)
def _axpy_rows(dst, io, coef, ic, cs, src, js, ss, count, n, alpha):
    """``dst[io : io + n] += alpha * sum_j coef[ic + j * cs] * src's row j`` (rows of length
    ``n`` at ``js + j * ss``): one row of a ``cpublas::gemm`` that accumulates (beta = 1),
    four source rows per pass over the destination."""
    d_ = dst[io : io + n]
    j4 = count // 4 * 4
    for j in range(0, j4, 4):
        p0, p1 = alpha * coef[ic + j * cs], alpha * coef[ic + (j + 1) * cs]
        p2, p3 = alpha * coef[ic + (j + 2) * cs], alpha * coef[ic + (j + 3) * cs]
        t = js + j * ss
        s0, s1 = src[t : t + n], src[t + ss : t + ss + n]
        s2, s3 = src[t + 2 * ss : t + 2 * ss + n], src[t + 3 * ss : t + 3 * ss + n]
        for d in range(n):
            d_[d] += p0 * s0[d] + p1 * s1[d] + p2 * s2[d] + p3 * s3[d]
    for j in range(j4, count):
        p = alpha * coef[ic + j * cs]
        s_ = src[js + j * ss : js + j * ss + n]
        for d in range(n):
            d_[d] += p * s_[d]


@njit(parallel=True, **_jit)
def cpu_flash_attention(q, qo, qsb, qsm, k, ko, ksb, ksn, v, vo, vsb, vsn, out, lse,
                        batch, q_size, kv_size, head, vhead, is_causal, scale,
                        q_split, kv_split, buf, pow2_buf, zero):  # fmt: skip
    """``cpu_flash_attention``: ``out`` (batch, q_size, vhead) and ``lse`` (batch, q_size),
    both contiguous; ``q_split`` and ``kv_split`` already cut to the sizes."""
    ninf = zero - np.float32(np.inf)
    one = zero + np.float32(1)
    q_slice = (q_size + q_split - 1) // q_split
    per_thread = q_split * kv_split + 2 * q_split + q_split * vhead
    for z_ in prange(batch * q_slice):
        z = np.int64(z_)
        i = z // q_slice
        m = (z % q_slice) * q_split
        tid = numba.get_thread_id()
        b0 = tid * per_thread
        bits = pow2_buf[tid * kv_split : (tid + 1) * kv_split]  # exp_u20's 2^n, per thread
        qk = buf[b0 : b0 + q_split * kv_split]
        qk_max = buf[b0 + q_split * kv_split : b0 + q_split * kv_split + q_split]
        qk_sum = buf[b0 + q_split * kv_split + q_split : b0 + q_split * kv_split + 2 * q_split]
        dst = buf[b0 + q_split * kv_split + 2 * q_split : b0 + per_thread]
        q_block = min(q_split, q_size - m)
        for r in range(q_block):
            qk_max[r] = ninf
            qk_sum[r] = zero
            for d in range(vhead):
                dst[r * vhead + d] = zero
        num_keys = min(m + q_block, kv_size) if is_causal else kv_size
        for n in range(0, num_keys, kv_split):
            kv_block = min(kv_split, kv_size - n)
            # qk <- q @ k.T
            _gemm_nt(q, qo + i * qsb + m * qsm, qsm, k, ko + i * ksb + n * ksn, ksn,
                     q_block, kv_block, head, qk, zero)  # fmt: skip
            # apply the causal mask: -inf past each row's last key
            if is_causal and num_keys - n <= kv_split:
                for r in range(q_block):
                    for c in range(max(0, m + r - n + 1), kv_block):
                        qk[r * kv_block + c] = ninf
            # the online softmax, row by row
            for r in range(q_block):
                row = qk[r * kv_block : (r + 1) * kv_block]
                tmp_max = ninf  # _mul_reduce_max_fusion_kernel: qk <- qk * scale, and its max
                for c in range(kv_block):
                    x = row[c] * scale
                    row[c] = x
                    tmp_max = max(tmp_max, x)
                tmp_max = qk_max[r] if qk_max[r] > tmp_max else tmp_max
                if tmp_max == ninf:  # "to avoid `nan = exp2f(-inf - (-inf))`"
                    for c in range(kv_block):
                        row[c] = zero
                else:
                    tmp_sum = exp_reduce_sum(row, kv_block, tmp_max, bits, zero)
                    exp_tmp = np.exp(qk_max[r] - tmp_max)
                    qk_sum[r] = tmp_sum + exp_tmp * qk_sum[r]
                    qk_max[r] = tmp_max
                    if n > 0:
                        drow = dst[r * vhead : (r + 1) * vhead]
                        for d in range(vhead):
                            drow[d] = drow[d] * exp_tmp
            # dst <- dst + qk @ v
            for r in range(q_block):
                _axpy_rows(dst, r * vhead, qk, r * kv_block, 1, v, vo + i * vsb + n * vsn, vsn,
                           kv_block, vhead, one)  # fmt: skip
        # dst <- dst / sum; fully masked rows: max 0, sum 1 (output 0, not NaN)
        for r in range(q_block):
            if qk_max[r] == ninf:
                qk_max[r] = zero
            if qk_sum[r] == zero:
                qk_sum[r] = one
            reciprocal = one / qk_sum[r]
            o = (i * q_size + m + r) * vhead
            orow = out[o : o + vhead]
            for d in range(vhead):
                orow[d] = dst[r * vhead + d] * reciprocal
            lse[i * q_size + m + r] = qk_max[r] + np.log(qk_sum[r])


@njit(parallel=True, **_jit)
def cpu_flash_attention_backward(go, goo, gosb, gosm, q, qo, qsb, qsm, k, ko, ksb, ksn,
                                 v, vo, vsb, vsn, o, oo, osb, osm, lse, dq, dk, dv,
                                 batch, q_size, kv_size, head, vhead, is_causal, scale,
                                 q_split, kv_split, buf, zero):  # fmt: skip
    """``cpu_flash_attention_backward``: ``dq``, ``dk``, ``dv`` contiguous and zeroed, summed
    into block by block; one task per n (its dK and dV gather every query block)."""
    one = zero + np.float32(1)
    per_thread = 2 * q_split * kv_split + q_split
    for i_ in prange(batch):
        i = np.int64(i_)
        b0 = numba.get_thread_id() * per_thread
        attn = buf[b0 : b0 + q_split * kv_split]
        grad_attn = buf[b0 + q_split * kv_split : b0 + 2 * q_split * kv_split]
        dsum = buf[b0 + 2 * q_split * kv_split : b0 + per_thread]
        for m in range(0, q_size, q_split):
            q_block = min(q_split, q_size - m)
            for r in range(q_block):  # dsum <- rowsum(grad_out * out)
                dsum[r] = _dot(go, goo + i * gosb + (m + r) * gosm,
                               o, oo + i * osb + (m + r) * osm, vhead, zero)  # fmt: skip
            num_keys = min(m + q_block, kv_size) if is_causal else kv_size
            for n in range(0, num_keys, kv_split):
                kv_block = min(kv_split, kv_size - n)
                # attn <- exp(scale * q @ k.T - lse): the probabilities, restored
                _gemm_nt(q, qo + i * qsb + m * qsm, qsm, k, ko + i * ksb + n * ksn, ksn,
                         q_block, kv_block, head, attn, zero)  # fmt: skip
                for r in range(q_block):
                    normalizer = lse[i * q_size + m + r]
                    for c in range(kv_block):
                        x = r * kv_block + c
                        attn[x] = np.exp(scale * attn[x] - normalizer)
                if is_causal and num_keys - n <= kv_split:  # masked: 0
                    for r in range(q_block):
                        for c in range(max(0, m + r - n + 1), kv_block):
                            attn[r * kv_block + c] = zero
                go_m = goo + i * gosb + m * gosm  # grad_out's rows m ..
                # grad_v <- grad_v + attn.T @ grad_out
                for c in range(kv_block):
                    _axpy_rows(dv, (i * kv_size + n + c) * vhead, attn, c, kv_block, go, go_m,
                               gosm, q_block, vhead, one)  # fmt: skip
                # grad_attn <- attn * (grad_out @ v.T - dsum)
                _gemm_nt(go, go_m, gosm, v, vo + i * vsb + n * vsn, vsn, q_block, kv_block,
                         vhead, grad_attn, zero)  # fmt: skip
                for r in range(q_block):
                    for c in range(kv_block):
                        x = r * kv_block + c
                        grad_attn[x] = attn[x] * (grad_attn[x] - dsum[r])
                # grad_q <- grad_q + scale * grad_attn @ k
                for r in range(q_block):
                    _axpy_rows(dq, (i * q_size + m + r) * head, grad_attn, r * kv_block, 1, k,
                               ko + i * ksb + n * ksn, ksn, kv_block, head, scale)  # fmt: skip
                # grad_k <- grad_k + scale * grad_attn.T @ q
                for c in range(kv_block):
                    _axpy_rows(dk, (i * kv_size + n + c) * head, grad_attn, c, kv_block, q,
                               qo + i * qsb + m * qsm, qsm, q_block, head, scale)  # fmt: skip


# ---- CUDA -----------------------------------------------------------------------------------------
#: Threads per block (and keys per tile) of the CUDA kernels: one warp. Under the simulator,
#: which runs a Python thread per CUDA thread, :func:`attention_threads` uses 8.
ATTN_THREADS = 32


def attention_threads() -> int:
    return 8 if rcuda.simulator_enabled() else ATTN_THREADS


def _fwd_sig(t):
    x = f"{t}[:], int64, int64, int64"  # an operand: storage, offset, stride of n, of its row
    return (f"void({x}, {x}, {x}, {t}[:], {t}[:], int64, int64, int64, int64, boolean, "
            f"{t}, {t}, {t}, {t})")  # fmt: skip


@rcuda.kernel(*(_fwd_sig(t) for t in FLOATS))
def flash_attention_kernel(q, qo, qsb, qsm, k, ko, ksb, ksn, v, vo, vsb, vsn, out, lse,
                           q_size, kv_size, head, vhead, is_causal, scale, zero, one, ninf):  # fmt: skip
    """One block per (n, query row): the online softmax over tiles of ``blockDim.x`` keys;
    the row of ``out`` is the accumulator (thread ``t`` owns dims ``t, t + blockDim.x, ..``)."""
    p = cuda.shared.array(ATTN_THREADS, dtype=q.dtype)
    # (each shared array on its own line: the simulator aliases two made on one line)
    red = cuda.shared.array(ATTN_THREADS, dtype=q.dtype)
    t = cuda.threadIdx.x
    w = cuda.blockDim.x
    row = cuda.blockIdx.x
    i = row // q_size
    qi = row - i * q_size
    qrow = qo + i * qsb + qi * qsm
    orow = row * vhead
    for d in range(t, vhead, w):
        out[orow + d] = zero
    running_max = ninf
    running_sum = zero
    num_keys = min(qi + 1, kv_size) if is_causal else kv_size
    for j0 in range(0, num_keys, w):
        j = j0 + t
        s = ninf
        if j < num_keys:
            krow = ko + i * ksb + j * ksn
            acc = zero
            for d in range(head):
                acc += q[qrow + d] * k[krow + d]
            s = acc * scale
        red[t] = s
        cuda.syncthreads()
        h = w // 2
        while h > 0:  # the tile's max
            if t < h:
                red[t] = max(red[t], red[t + h])
            cuda.syncthreads()
            h //= 2
        new_max = max(running_max, red[0])
        cuda.syncthreads()
        e = zero
        if s != ninf:
            e = math.exp(s - new_max)
        p[t] = e
        red[t] = e
        cuda.syncthreads()
        h = w // 2
        while h > 0:  # the tile's sum of exp(s - max)
            if t < h:
                red[t] += red[t + h]
            cuda.syncthreads()
            h //= 2
        correction = one if new_max == ninf else math.exp(running_max - new_max)
        running_sum = running_sum * correction + red[0]
        running_max = new_max
        count = min(w, num_keys - j0)
        for d in range(t, vhead, w):
            a = out[orow + d] * correction
            for jj in range(count):
                a += p[jj] * v[vo + i * vsb + (j0 + jj) * vsn + d]
            out[orow + d] = a
        cuda.syncthreads()  # p and red are rewritten by the next tile
    if running_max == ninf:
        running_max = zero
    if running_sum == zero:
        running_sum = one
    reciprocal = one / running_sum
    for d in range(t, vhead, w):
        out[orow + d] = out[orow + d] * reciprocal
    if t == 0:
        lse[row] = running_max + math.log(running_sum)


def _bwd_sig(t, with_out):
    x = f"{t}[:], int64, int64, int64"
    tail = f"int64, int64, int64, int64, boolean, {t}, {t}"
    if with_out:  # dQ: grad_out, q, k, v, out, lse, delta, dq
        return f"void({x}, {x}, {x}, {x}, {x}, {t}[:], {t}[:], {t}[:], {tail})"
    return f"void({x}, {x}, {x}, {x}, {t}[:], {t}[:], {t}[:], {t}[:], {tail})"  # dK, dV


@rcuda.kernel(*(_bwd_sig(t, True) for t in FLOATS))
def flash_attention_backward_dq_kernel(go, goo, gosb, gosm, q, qo, qsb, qsm, k, ko, ksb, ksn,
                                       v, vo, vsb, vsn, o, oo, osb, osm, lse, delta, dq,
                                       q_size, kv_size, head, vhead, is_causal, scale, zero):  # fmt: skip
    """One block per (n, query row): ``delta = rowsum(dO * O)`` (saved for the dK/dV kernel),
    then ``dQ = scale * dS @ K`` over tiles of keys, the probabilities recomputed from lse."""
    ds = cuda.shared.array(ATTN_THREADS, dtype=q.dtype)
    # (each shared array on its own line: the simulator aliases two made on one line)
    red = cuda.shared.array(ATTN_THREADS, dtype=q.dtype)
    t = cuda.threadIdx.x
    w = cuda.blockDim.x
    row = cuda.blockIdx.x
    i = row // q_size
    qi = row - i * q_size
    qrow = qo + i * qsb + qi * qsm
    grow = goo + i * gosb + qi * gosm
    acc = zero
    for d in range(t, vhead, w):
        acc += go[grow + d] * o[oo + i * osb + qi * osm + d]
    red[t] = acc
    cuda.syncthreads()
    h = w // 2
    while h > 0:
        if t < h:
            red[t] += red[t + h]
        cuda.syncthreads()
        h //= 2
    dsum = red[0]
    if t == 0:
        delta[row] = dsum
    normalizer = lse[row]
    dqrow = row * head
    for d in range(t, head, w):
        dq[dqrow + d] = zero
    num_keys = min(qi + 1, kv_size) if is_causal else kv_size
    for j0 in range(0, num_keys, w):
        j = j0 + t
        g = zero
        if j < num_keys:
            krow = ko + i * ksb + j * ksn
            vrow = vo + i * vsb + j * vsn
            s = zero
            for d in range(head):
                s += q[qrow + d] * k[krow + d]
            prob = math.exp(scale * s - normalizer)
            dp = zero
            for d in range(vhead):
                dp += go[grow + d] * v[vrow + d]
            g = prob * (dp - dsum)
        ds[t] = g
        cuda.syncthreads()
        count = min(w, num_keys - j0)
        for d in range(t, head, w):
            a = zero
            for jj in range(count):
                a += ds[jj] * k[ko + i * ksb + (j0 + jj) * ksn + d]
            dq[dqrow + d] += scale * a
        cuda.syncthreads()


@rcuda.kernel(*(_bwd_sig(t, False) for t in FLOATS))
def flash_attention_backward_dkdv_kernel(go, goo, gosb, gosm, q, qo, qsb, qsm, k, ko, ksb, ksn,
                                         v, vo, vsb, vsn, lse, delta, dk, dv,
                                         q_size, kv_size, head, vhead, is_causal, scale, zero):  # fmt: skip
    """One block per (n, key row): ``dK = scale * dS^T @ Q`` and ``dV = P^T @ dO`` over tiles
    of queries (under the causal mask only the queries from this key's index on)."""
    p = cuda.shared.array(ATTN_THREADS, dtype=q.dtype)
    # (each shared array on its own line: the simulator aliases two made on one line)
    ds = cuda.shared.array(ATTN_THREADS, dtype=q.dtype)
    t = cuda.threadIdx.x
    w = cuda.blockDim.x
    row = cuda.blockIdx.x
    i = row // kv_size
    kj = row - i * kv_size
    krow = ko + i * ksb + kj * ksn
    vrow = vo + i * vsb + kj * vsn
    dkrow = row * head
    dvrow = row * vhead
    for d in range(t, head, w):
        dk[dkrow + d] = zero
    for d in range(t, vhead, w):
        dv[dvrow + d] = zero
    start = kj if is_causal else 0
    for i0 in range(start, q_size, w):
        qi = i0 + t
        prob = zero
        g = zero
        if qi < q_size:
            qrow = qo + i * qsb + qi * qsm
            grow = goo + i * gosb + qi * gosm
            s = zero
            for d in range(head):
                s += q[qrow + d] * k[krow + d]
            prob = math.exp(scale * s - lse[i * q_size + qi])
            dp = zero
            for d in range(vhead):
                dp += go[grow + d] * v[vrow + d]
            g = prob * (dp - delta[i * q_size + qi])
        p[t] = prob
        ds[t] = g
        cuda.syncthreads()
        count = min(w, q_size - i0)
        for d in range(t, head, w):
            a = zero
            for ii in range(count):
                a += ds[ii] * q[qo + i * qsb + (i0 + ii) * qsm + d]
            dk[dkrow + d] += scale * a
        for d in range(t, vhead, w):
            a = zero
            for ii in range(count):
                a += p[ii] * go[goo + i * gosb + (i0 + ii) * gosm + d]
            dv[dvrow + d] += a
        cuda.syncthreads()


# ---- the stubs' kernels and the entry points ------------------------------------------------------
def _operand(t):
    """(typed storage, offset, stride of dim 0, stride of dim 1) of a 3-d tensor, read in
    place when its last dim has unit stride, else from a contiguous copy."""
    if t.shape[2] > 1 and t.stride(2) != 1:
        t = contiguous(t)
    impl = t._impl
    return impl.storage.typed(impl.dtype.np), impl.storage_offset, t.stride(0), t.stride(1)


def _flat(t):
    """The elements of a contiguous tensor, as a 1-d (host or device) array."""
    impl = t._impl
    return impl.storage.typed(impl.dtype.np)[impl.storage_offset : impl.storage_offset + t.numel()]


def _splits(q_size, kv_size):
    """(qSplitSize, kvSplitSize): the split sizes cut to the lengths (at least 1)."""
    return max(1, min(q_split_size(q_size), q_size)), max(1, min(KV_SPLIT, kv_size))


@stub("flash_attention").register("cpu")
def flash_attention_cpu(out, lse, q, k, v, is_causal, scale):
    batch, q_size, head = q.shape
    kv_size, vhead = v.shape[1], v.shape[2]
    q_split, kv_split = _splits(q_size, kv_size)
    threads = numba.get_num_threads()
    per_thread = q_split * kv_split + 2 * q_split + q_split * vhead
    buf = empty(threads * per_thread, dtype=q.dtype)  # at::empty({num_thread, size_per_thread})
    pow2 = empty(threads * kv_split, dtype=int32)
    typ = q.dtype.np.type
    loop = _pick(cpu_flash_attention, batch * q_size * kv_size * max(head, vhead))
    loop(*_operand(q), *_operand(k), *_operand(v), _flat(out), _flat(lse), batch, q_size,
         kv_size, head, vhead, is_causal, typ(scale), q_split, kv_split, _flat(buf),
         _flat(pow2), typ(0))  # fmt: skip


@stub("flash_attention_backward").register("cpu")
def flash_attention_backward_cpu(dq, dk, dv, grad_out, q, k, v, out, lse, is_causal, scale):
    batch, q_size, head = q.shape
    kv_size, vhead = v.shape[1], v.shape[2]
    q_split, kv_split = _splits(q_size, kv_size)
    threads = numba.get_num_threads()
    buf = empty(threads * (2 * q_split * kv_split + q_split), dtype=q.dtype)
    typ = q.dtype.np.type
    loop = _pick(cpu_flash_attention_backward, batch * q_size * kv_size * max(head, vhead))
    loop(*_operand(grad_out), *_operand(q), *_operand(k), *_operand(v), *_operand(out),
         _flat(lse), _flat(dq), _flat(dk), _flat(dv), batch, q_size, kv_size, head, vhead,
         is_causal, typ(scale), q_split, kv_split, _flat(buf), typ(0))  # fmt: skip


@stub("flash_attention").register("cuda")
def flash_attention_cuda(out, lse, q, k, v, is_causal, scale):
    batch, q_size, head = q.shape
    kv_size, vhead = v.shape[1], v.shape[2]
    typ = q.dtype.np.type
    launch(flash_attention_kernel, batch * q_size, attention_threads(), *_operand(q),
           *_operand(k), *_operand(v), _flat(out), _flat(lse), q_size, kv_size, head, vhead,
           is_causal, typ(scale), typ(0), typ(1), typ(-np.inf))  # fmt: skip


@stub("flash_attention_backward").register("cuda")
def flash_attention_backward_cuda(dq, dk, dv, grad_out, q, k, v, out, lse, is_causal, scale):
    batch, q_size, head = q.shape
    kv_size, vhead = v.shape[1], v.shape[2]
    typ = q.dtype.np.type
    delta = empty(batch, q_size, dtype=q.dtype, device="cuda")  # rowsum(dO * O)
    go, qq, kk, vv = _operand(grad_out), _operand(q), _operand(k), _operand(v)
    tail = (q_size, kv_size, head, vhead, is_causal, typ(scale), typ(0))
    threads = attention_threads()
    launch(flash_attention_backward_dq_kernel, batch * q_size, threads, *go, *qq, *kk, *vv,
           *_operand(out), _flat(lse), _flat(delta), _flat(dq), *tail)  # fmt: skip
    if batch * kv_size:
        launch(flash_attention_backward_dkdv_kernel, batch * kv_size, threads, *go, *qq, *kk,
               *vv, _flat(lse), _flat(delta), _flat(dk), _flat(dv), *tail)  # fmt: skip


def _check(q, k, v, name):
    """The checks of ``sdp::check_for_...`` that apply here, with torch's exception types."""
    for t, what in ((q, "query"), (k, "key"), (v, "value")):
        if t.dim() != 3:
            raise RuntimeError(f"{name}: {what} must be a 3-d (N, T, D) tensor, got {t.dim()}-d")
    if not (q.dtype == k.dtype == v.dtype):
        raise RuntimeError(
            "Expected query, key, and value to have the same dtype, but got query.dtype: "
            f"{_c_name(q.dtype)} key.dtype: {_c_name(k.dtype)} and value.dtype: "
            f"{_c_name(v.dtype)} instead."
        )
    if not (q.device == k.device == v.device):
        raise RuntimeError(
            "Expected query, key, and value to have the same device type, but got query.device: "
            f"{q.device} key.device: {k.device} and value.device: {v.device} instead."
        )
    if q.dtype.name not in FLOATS:  # torch's kernel also takes BF16 and FP16; these do not
        raise RuntimeError(
            f"scaled_dot_product_attention_{name}: Expected data type in FP32, FP64, but got "
            f"{q.dtype.scalar_name} instead."
        )
    if not (q.shape[0] == k.shape[0] == v.shape[0]) or k.shape[1] != v.shape[1]:
        raise RuntimeError(
            f"{name}: query {list(q.shape)}, key {list(k.shape)} and value {list(v.shape)} "
            "must agree on N, and key and value on T"
        )
    if q.shape[2] != k.shape[2]:
        raise RuntimeError(f"{name}: query {list(q.shape)} and key {list(k.shape)} must agree on D")


def attention_forward(q, k, v, is_causal, scale):
    """``(out, lse)``: ``out = softmax(q @ k^T * scale [causal]) @ v`` of shape (N, T_q, D_v)
    and ``lse`` (N, T_q) the logsumexp of each row of scores (0 for a row with no key), as
    ``_scaled_dot_product_flash_attention_for_cpu`` returns them (its logsumexp is (B, H, L))."""
    _check(q, k, v, "flash_attention")
    n, q_size = q.shape[0], q.shape[1]
    out = empty(n, q_size, v.shape[2], dtype=q.dtype, device=q.device)
    lse = empty(n, q_size, dtype=q.dtype, device=q.device)
    if out.numel() or lse.numel():
        stub("flash_attention")(q.device, out, lse, q, k, v, bool(is_causal), float(scale))
    return out, lse


def attention_backward(grad_out, q, k, v, out, lse, is_causal, scale):
    """``(dq, dk, dv)`` of :func:`attention_forward`, given the output's gradient and the
    forward's ``out`` and ``lse`` (``_scaled_dot_product_flash_attention_cpu_backward``)."""
    _check(q, k, v, "flash_attention_backward")
    if tuple(grad_out.shape) != tuple(out.shape):
        raise RuntimeError(
            f"flash_attention_backward: grad_out {list(grad_out.shape)} must have the output's "
            f"shape {list(out.shape)}"
        )
    # torch zeroes the gradients (at::zeros) and its kernel sums into them; the CUDA kernels
    # write each element once, so there they start empty
    new = zeros if q.device == "cpu" else empty
    dq = new(*q.shape, dtype=q.dtype, device=q.device)
    dk = new(*k.shape, dtype=k.dtype, device=k.device)
    dv = new(*v.shape, dtype=v.dtype, device=v.device)
    if q.numel() and k.shape[1]:
        stub("flash_attention_backward")(
            q.device, dq, dk, dv, grad_out, q, k, v, out, lse, bool(is_causal), float(scale)
        )
    return dq, dk, dv

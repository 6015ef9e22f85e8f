"""The vectorized elementwise kernel of ``aten/src/ATen/native/cuda/CUDALoops.cuh``.

torch runs every elementwise op whose operands are contiguous (``iter.is_contiguous()``) through
``launch_vectorized_kernel``:

* ``vec_size``: the widest vector every data pointer allows, output first, then the inputs
  (``memory::can_vectorize_up_to`` in ``MemoryAccess.cuh``: a pointer aligned to 4 elements
  allows 4, to 2 elements 2, else 1), capped at 16 bytes (``16 / sizeof(result)``): float32
  takes 4, 2 or 1, float64 2 or 1 (:func:`vec_size`);
* 1: ``unrolled_elementwise_kernel``, scalar loads (here: ``cuda_kernels``' unrolled kernel,
  which takes 4 elements a thread, ``thread_work_size()``, where torch's takes 8);
* 2 or 4: ``vectorized_elementwise_kernel<vec_size>``, ``BINARY[vec_size]`` and
  ``UNARY[vec_size]`` below (``binary_vectorized4_kernel``, ..., one per template instance):
  ``num_threads()`` = 128 threads a block, ``elems_per_thread<io_size>()`` = 8 elements a thread
  (every float op here moves at least 8 bytes per element), one block per 1024 elements. In a
  full block thread ``t`` loads vectors ``t, t + 128, ..`` of each input (``vectorized`` policy:
  ``load_vector<vec_size>(from, thread_idx + i * num_threads())``), computes, then stores the
  same vectors; the last block, if partial, takes the ``unroll`` policy: elements
  ``t + k * 128``, each bounds-checked, every load before the first store.

The vectors are 16 bytes (``ld.global.v4.f32``, ``ld.global.v2.f64``) or, float32 aligned to 8
bytes only, 8 (``ld.global.v2.f32``): :mod:`retorch.cuda_ptr`'s ``load4``/``load2``, inline
PTX. Kernels take addresses (``char* data[]``), not arrays. This module is imported by the first
contiguous CUDA elementwise op, so nothing on the CPU loads it.
"""

from __future__ import annotations

from .. import cuda as rcuda
from ..cuda import cuda
from ..cuda_launch import launch
from ..cuda_ptr import array_at, load2, load4, store2, store4
from .cuda_kernels import FLOATS, binary_float, unary_float

#: torch's ``num_threads()`` on CUDA (``thread_constants.h``): four warps a block.
NUM_THREADS = 128
#: ``elems_per_thread<io_size>()`` for ``io_size`` > 1 on CUDA: 8 elements a thread.
ELEMS_PER_THREAD = 8
#: Threads a block under the simulator (a Python thread each; torch's 128 would be slow).
SIMULATED_THREADS = 8
#: Widest vector access in bytes (``launch_vectorized_kernel``'s ``16 / sizeof(cpp_type)``).
VECTOR_BYTES = 16


def vec_size(ptrs, itemsize: int) -> int:
    """``launch_vectorized_kernel``'s ``vec_size``: ``min(16 / itemsize,
    can_vectorize_up_to(data))``, where a pointer allows 4 if it is a multiple of 4 elements'
    bytes (``alignof(aligned_vector<scalar_t, 4>)``), 2 if of 2 elements' bytes, else 1."""
    vec = VECTOR_BYTES // itemsize
    for ptr in ptrs:
        allowed = 4 if ptr % (4 * itemsize) == 0 else 2 if ptr % (2 * itemsize) == 0 else 1
        vec = min(vec, allowed)
    return vec


def _named(name):
    def rename(fn):
        fn.__name__ = fn.__qualname__ = name
        return fn

    return rename


def _binary(vec: int, dtypes):
    """``vectorized_elementwise_kernel<vec>`` for a binary op (``vec`` is a compile-time
    constant of the kernel, as torch's template parameter), compiled for ``dtypes``."""
    loop_size = ELEMS_PER_THREAD // vec  # vectors per operand per thread

    @rcuda.kernel(*(f"void(int64, int64, int64, int64, float64, int64, {t})" for t in dtypes))
    @_named(f"binary_vectorized{vec}_kernel")
    def kernel(op, out_ptr, a_ptr, b_ptr, alpha, n, zero):
        out = array_at(out_ptr, n, zero)
        a = array_at(a_ptr, n, zero)
        b = array_at(b_ptr, n, zero)
        threads = cuda.blockDim.x
        start = cuda.blockIdx.x * (ELEMS_PER_THREAD * threads)
        tid = cuda.threadIdx.x
        x = cuda.local.array(ELEMS_PER_THREAD, dtype=a.dtype)
        y = cuda.local.array(ELEMS_PER_THREAD, dtype=a.dtype)
        if n - start >= ELEMS_PER_THREAD * threads:  # a full block: the vectorized policy
            for i in range(loop_size):
                at = start + (tid + i * threads) * vec
                if vec == 4:
                    x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3] = load4(a, at)
                    y[4 * i], y[4 * i + 1], y[4 * i + 2], y[4 * i + 3] = load4(b, at)
                else:
                    x[2 * i], x[2 * i + 1] = load2(a, at)
                    y[2 * i], y[2 * i + 1] = load2(b, at)
            for i in range(loop_size):
                at = start + (tid + i * threads) * vec
                k = vec * i
                if vec == 4:
                    store4(out, at, binary_float(op, x[k], y[k], alpha),
                           binary_float(op, x[k + 1], y[k + 1], alpha),
                           binary_float(op, x[k + 2], y[k + 2], alpha),
                           binary_float(op, x[k + 3], y[k + 3], alpha))  # fmt: skip
                else:
                    store2(out, at, binary_float(op, x[k], y[k], alpha),
                           binary_float(op, x[k + 1], y[k + 1], alpha))  # fmt: skip
            return
        for k in range(ELEMS_PER_THREAD):  # the last block: the unroll policy, loads first ...
            i = start + tid + k * threads
            if i < n:
                x[k] = a[i]
                y[k] = b[i]
        for k in range(ELEMS_PER_THREAD):  # ... then compute and store
            i = start + tid + k * threads
            if i < n:
                out[i] = binary_float(op, x[k], y[k], alpha)

    return kernel


def _unary(vec: int, dtypes):
    """:func:`_binary` with one input."""
    loop_size = ELEMS_PER_THREAD // vec

    @rcuda.kernel(*(f"void(int64, int64, int64, int64, {t})" for t in dtypes))
    @_named(f"unary_vectorized{vec}_kernel")
    def kernel(op, out_ptr, a_ptr, n, zero):
        out = array_at(out_ptr, n, zero)
        a = array_at(a_ptr, n, zero)
        threads = cuda.blockDim.x
        start = cuda.blockIdx.x * (ELEMS_PER_THREAD * threads)
        tid = cuda.threadIdx.x
        x = cuda.local.array(ELEMS_PER_THREAD, dtype=a.dtype)
        if n - start >= ELEMS_PER_THREAD * threads:
            for i in range(loop_size):
                at = start + (tid + i * threads) * vec
                if vec == 4:
                    x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3] = load4(a, at)
                else:
                    x[2 * i], x[2 * i + 1] = load2(a, at)
            for i in range(loop_size):
                at = start + (tid + i * threads) * vec
                k = vec * i
                if vec == 4:
                    store4(out, at, unary_float(op, x[k]), unary_float(op, x[k + 1]),
                           unary_float(op, x[k + 2]), unary_float(op, x[k + 3]))  # fmt: skip
                else:
                    store2(out, at, unary_float(op, x[k]), unary_float(op, x[k + 1]))
            return
        for k in range(ELEMS_PER_THREAD):
            i = start + tid + k * threads
            if i < n:
                x[k] = a[i]
        for k in range(ELEMS_PER_THREAD):
            i = start + tid + k * threads
            if i < n:
                out[i] = unary_float(op, x[k])

    return kernel


#: vec_size -> kernel: torch's ``switch (vec_size)`` over its template instances (4 only for
#: float32: 16 bytes is float64's 2).
BINARY = {4: _binary(4, ("float32",)), 2: _binary(2, FLOATS)}
UNARY = {4: _unary(4, ("float32",)), 2: _unary(2, FLOATS)}


def config(n: int) -> tuple[int, int]:
    """(blocks, threads): one block of ``NUM_THREADS`` per ``ELEMS_PER_THREAD * NUM_THREADS``
    elements (``io_block_work_size``); under the simulator, blocks of SIMULATED_THREADS."""
    threads = SIMULATED_THREADS if rcuda.simulator_enabled() else NUM_THREADS
    return -(-n // (ELEMS_PER_THREAD * threads)), threads


def _ptrs_and_vec(it):
    ptrs = [op.tensor.data_ptr() for op in it.operands]  # output first, as torch's data[]
    return ptrs, vec_size(ptrs, it.common_dtype.itemsize)


def binary(it, op: int, alpha: float, n: int) -> bool:
    """Launch the vectorized kernel for a contiguous binary op of ``n`` > 0 elements, as
    ``launch_vectorized_kernel`` does, and return True; False where ``vec_size`` is 1 (some
    pointer is not aligned to 2 elements): the caller launches the unrolled kernel."""
    ptrs, vec = _ptrs_and_vec(it)
    if vec == 1:
        return False
    zero = it.common_dtype.np.type(0)
    launch(BINARY[vec], *config(n), op, *ptrs, alpha, n, zero)
    return True


def unary(it, op: int, n: int) -> bool:
    """:func:`binary` with one input."""
    ptrs, vec = _ptrs_and_vec(it)
    if vec == 1:
        return False
    launch(UNARY[vec], *config(n), op, *ptrs, n, it.common_dtype.np.type(0))
    return True

"""Graders for lab 4 (solutions/04_tensor_lab.md): the student's layout rules against torch's.

Each ``check_*`` takes the comparisons object that :func:`retorch.testing.grading.check`
passes and the student's functions, runs them and torch (or chapter 4's allocator model, for
exercise 6) on the same inputs, and compares. The inputs are chosen so that the usual mistakes
show: dims of size 0 and 1 with their strides (which differ between layouts), negative dims,
transposed and sliced tensors with an offset, ranks other than the example's, a float where
an int is required, shapes that are not multiples of a tile, sizes exactly on a boundary,
and lists of blocks in an order where first fit is not best fit.
"""

from __future__ import annotations

import itertools
import numbers
import sys
import threading
import warnings
from collections import Counter

import numpy as np
import torch

MiB = 1 << 20


def check_int_tuple(cmp, got, what):
    """That a shape or strides is a tuple of ints, as torch's are."""
    cmp.equal(type(got).__name__, "tuple", f"the type of {what}",
              "return a tuple, as torch's .shape and .stride() are: a list is never equal to "
              "a tuple ([3, 1] != (3, 1))")  # fmt: skip
    cmp.equal([v for v in got if not isinstance(v, numbers.Integral)], [],
              f"the entries of {what} that are not ints",
              "every entry must be an int (torch.as_strided refuses a float): np.prod of an "
              "empty list is the float 1.0, math.prod the int 1, and a / b is a float")  # fmt: skip


def meta(t):
    return tuple(t.shape), t.stride(), t.storage_offset()


# ---- exercise 1 -------------------------------------------------------------------------------
def check_channels_last_strides(cmp, channels_last_strides):
    hint = (
        "memory order N, H, W, C (N, D, H, W, C for 5 dims): C has stride 1, then W steps "
        "over the C channels, H over W * C, N over H * W * C; sizes are multiplied as they "
        "are, 0 included (no max(n, 1) here, unlike contiguous strides)"
    )
    for sizes in [(2, 3, 4, 5), (2, 1, 4, 5), (2, 3, 0, 5), (2, 0, 3, 4), (1, 1, 1, 1),
                  (0, 3, 4, 5), (2, 3, 4, 5, 6), (1, 3, 1, 1, 2), (2, 0, 4, 5, 6)]:  # fmt: skip
        fmt = torch.channels_last if len(sizes) == 4 else torch.channels_last_3d
        got = cmp.call(lambda: channels_last_strides(sizes), f"channels_last_strides({sizes}) ran",
                       hint)  # fmt: skip
        cmp.equal(
            tuple(got),
            torch.empty(sizes, memory_format=fmt).stride(),
            f"strides of sizes {sizes} in {str(fmt).removeprefix('torch.')}",
            hint,
        )
        check_int_tuple(cmp, got, f"channels_last_strides({sizes})")
    for sizes in [(3, 4, 5), (2, 3, 4, 5, 6, 7)]:
        cmp.raises(
            lambda: channels_last_strides(sizes),
            RuntimeError,
            f"channels_last_strides({sizes}) (torch raises RuntimeError: channels_last "
            "needs 4 dims, channels_last_3d 5)",
            "raise RuntimeError for other ranks",
        )


# ---- exercise 2 -------------------------------------------------------------------------------
def check_unfold_diagonal(cmp, unfold_meta, diagonal_meta):
    base = torch.arange(240.0).view(4, 6, 10)[1:, ::2, 3:]  # sliced: offset and odd strides
    hint = (
        "unfold: dim's size becomes (size_d - size) // step + 1 (an int), its stride is "
        "multiplied by step, and a new last dim of `size` elements steps by dim's old "
        "stride; the offset does not move. Wrap negative dims with dim % ndim"
    )
    for dim, size, step in [(1, 2, 1), (2, 3, 2), (-1, 7, 7), (0, 1, 2), (-3, 3, 3), (2, 4, 3)]:
        got = cmp.call(
            lambda: unfold_meta(*meta(base), dim, size, step),
            f"unfold_meta(..., dim={dim}, size={size}, step={step}) ran",
            hint,
        )
        want = meta(base.unfold(dim, size, step))
        cmp.equal(
            got,
            want,
            f"unfold({dim}, {size}, {step}) of sizes {tuple(base.shape)}, "
            f"strides {base.stride()}, offset {base.storage_offset()}",
            hint,
        )
        check_int_tuple(cmp, got[0], f"the sizes unfold_meta returns for {(dim, size, step)}")
    for dim, size, step in [(1, 4, 1), (2, 2, 0)]:
        cmp.raises(
            lambda: unfold_meta(*meta(base), dim, size, step),
            RuntimeError,
            f"unfold({dim}, {size}, {step}) of sizes {tuple(base.shape)} (torch raises "
            "RuntimeError)",
            "a window larger than the dim, or a step <= 0, is an error",
        )
    hint = (
        "diagonal: drop dim1 and dim2 and append one dim of stride stride1 + stride2; its "
        "length is min(n1, n2 - offset) for offset >= 0, min(n1 + offset, n2) below, and "
        "never below 0; the start moves offset * stride2 (offset >= 0) or -offset * "
        "stride1, and not at all when the diagonal is empty"
    )
    square = torch.arange(300.0).view(5, 6, 10)[:, 1:, ::2].transpose(0, 2)  # (5, 5, 5)
    for t, cases in [
        (base, [(0, 0, 1), (1, 1, 2), (-2, -1, 1), (3, 0, 2), (0, 2, 0)]),
        (square, [(0, 0, 1), (2, 2, 0), (-4, 1, 2), (9, 0, 1), (-7, 0, 1)]),
    ]:
        for offset, d1, d2 in cases:
            what = (
                f"diagonal(offset={offset}, dim1={d1}, dim2={d2}) of sizes "
                f"{tuple(t.shape)}, strides {t.stride()}, offset {t.storage_offset()}"
            )
            got = cmp.call(lambda: diagonal_meta(*meta(t), offset, d1, d2), what + " ran", hint)
            cmp.equal(got, meta(t.diagonal(offset, d1, d2)), what, hint)
            check_int_tuple(cmp, got[1], f"the strides diagonal_meta returns for {what}")
    cmp.raises(
        lambda: diagonal_meta(*meta(base), 0, 1, -2),
        RuntimeError,
        "diagonal(0, 1, -2) (the same dim twice: torch raises RuntimeError)",
        "wrap both dims first; a diagonal needs two different dims",
    )


# ---- exercise 3 -------------------------------------------------------------------------------
def torch_view_strides(t, shape):
    try:
        return t.view(shape).stride()
    except RuntimeError:
        return None


def view_cases():
    base = torch.arange(720.0)
    yield base.view(6, 5, 4, 6), [(30, 24), (6, 5, 2, 2, 6), (720,), (6, 1, 5, 24)]
    yield base.view(4, 5, 6, 6).transpose(0, 1), [(5, 4, 36), (20, 36), (5, 4, 6, 6, 1)]
    yield base.view(12, 60).t(), [(60, 12), (6, 10, 12), (60, 3, 4), (720,), (10, 72)]
    yield base.view(8, 9, 10)[:, ::3], [(8, 30), (24, 10), (8, 3, 2, 5), (4, 2, 3, 10)]
    yield base.view(24, 30)[2:8, 5:25], [(6, 20), (3, 2, 20), (120,), (6, 4, 5), (6, 1, 20)]
    yield base.view(1, 720).expand(3, 720), [(3, 720), (3, 24, 30), (2160,)]
    # a dim of size 1 fits anywhere, whatever its stride
    yield base.as_strided((6, 1, 120), (120, 7, 1)), [(720,), (6, 120), (3, 2, 120, 1)]
    yield torch.tensor(7.0), [(), (1,), (1, 1)]  # 0-d: one element, no strides to start from


def check_view_strides(cmp, view_strides):
    hint = (
        "group old dims into chunks where strides[k-1] == sizes[k] * strides[k]; inside a "
        "chunk a new dim's stride is the chunk's innermost stride times the new sizes "
        "placed after it; return None when a new dim would cross a chunk boundary; a "
        "0-d tensor (sizes ()) views as dims of 1 with stride 1"
    )
    for t, shapes in view_cases():
        for shape in shapes:
            what = f"view{shape} of sizes {tuple(t.shape)}, strides {t.stride()}"
            got = cmp.call(lambda: view_strides(tuple(t.shape), t.stride(), shape),
                           f"view_strides for {what} ran", hint)  # fmt: skip
            cmp.equal(None if got is None else tuple(got), torch_view_strides(t, shape),
                      what + " (None: torch refuses the view)", hint)  # fmt: skip
            if got is not None:
                check_int_tuple(cmp, got, f"view_strides for {what}")


def view_dtype_cases():
    """(tensor, dtype to view it as): every rule of ``view_dtype`` (``TensorConversions.cpp``)
    on a layout where the usual mistakes give another answer."""
    b = torch.arange(240, dtype=torch.float32)
    f16, f64, i8, c128 = torch.float16, torch.float64, torch.int8, torch.complex128
    return [
        (b.view(4, 60), f16), (b.view(4, 60), f64), (b.view(4, 60)[:, 2:], f64),
        (b.view(6, 40)[::2, 4:10], i8), (b.view(6, 40)[1:, :6], f64),
        (b.view(6, 5, 8)[:, 1:3], f64), (b.view(60, 4)[:, :1], f16),
        (b.view(2, 120).expand(3, 2, 120), f16), (b.view(2, 120)[:, :0], f64),
        (b.view(3, 80).t()[:, 1:], torch.int32), (b[3], torch.int32),
        (b.view(6, 40)[1:5, 8:16], c128), (b.view(4, 60)[:, 1:3], torch.bfloat16),
        # refused: the last dim not contiguous, sizes, strides or offset not divisible, 0-d
        (b.view(4, 60).t(), f16), (b.view(8, 30)[:, ::2][:, :14], f64),
        (b.view(4, 60)[:, 1:], f64), (b.as_strided((4, 2), (60, 1), 3), f64),
        (torch.arange(244.0).view(4, 61)[:, :2], f64), (b.as_strided((4, 1), (60, 60)), f16),
        (b[3], f64), (b.view(5, 48)[:, 6:12].view(5, 3, 2), c128),
    ]  # fmt: skip


def check_view_dtype(cmp, view_dtype_meta):
    hint = (
        "same element size: nothing changes. Smaller (ratio r = old // new): the last dim "
        "must have stride 1; it gets r times the elements, every other stride and the "
        "offset are multiplied by r. Larger (r = new // old): the last stride must be 1, "
        "and the last size, every other stride and the offset must divide by r (else "
        "RuntimeError); then they are divided by r, with //. A 0-d tensor cannot change "
        "element size"
    )
    for t, dtype in view_dtype_cases():
        old, new = t.element_size(), torch.empty(0, dtype=dtype).element_size()
        what = (
            f"sizes {tuple(t.shape)}, strides {t.stride()}, offset {t.storage_offset()}, "
            f"{t.dtype} ({old} bytes) viewed as {dtype} ({new} bytes)"
        )
        try:
            want = meta(t.view(dtype))
        except RuntimeError:
            cmp.raises(
                lambda: view_dtype_meta(*meta(t), old, new),
                RuntimeError,
                what + " (torch raises RuntimeError)",
                hint,
            )
            continue
        got = cmp.call(lambda: view_dtype_meta(*meta(t), old, new), what + ": ran", hint)
        cmp.equal(got, want, what, hint)
        check_int_tuple(cmp, got[1], f"the strides view_dtype_meta returns for {what}")
        cmp.equal(
            type(got[2]).__name__,
            "int",
            f"the type of the offset for {what}",
            "the offset is an int: divide with //",
        )


# ---- exercise 4 -------------------------------------------------------------------------------
def strided_add(a, b, infer_size, broadcast_strides):
    """a + b by a loop that reads both operands through the student's broadcast_strides."""
    shape = infer_size(tuple(a.shape), tuple(b.shape))
    sa = broadcast_strides(tuple(a.shape), a.stride(), shape)
    sb = broadcast_strides(tuple(b.shape), b.stride(), shape)
    fa = a.as_strided((a.untyped_storage().nbytes() // 4,), (1,), 0)
    fb = b.as_strided((b.untyped_storage().nbytes() // 4,), (1,), 0)
    out = torch.empty(shape)
    for idx in itertools.product(*(range(n) for n in shape)):
        ia = a.storage_offset() + sum(i * s for i, s in zip(idx, sa))
        ib = b.storage_offset() + sum(i * s for i, s in zip(idx, sb))
        out[idx] = fa[ia] + fb[ib]
    return out


def check_broadcast(cmp, infer_size, broadcast_strides):
    hint = (
        "align shapes from the right, missing dims are 1; a dim of size 1 (or a missing "
        "one) reads with stride 0"
    )
    pairs = [((3, 1, 5), (4, 1)), ((2, 3), (3,)), ((1,), (2, 4)), ((5, 1), (1, 6)),
             ((), (2, 3)), ((2, 0, 3), (1, 3))]  # fmt: skip
    for sa, sb in pairs:
        got = cmp.call(lambda: infer_size(sa, sb), f"infer_size({sa}, {sb}) ran", hint)
        cmp.equal(tuple(got), tuple(torch.broadcast_shapes(sa, sb)), f"infer_size({sa}, {sb})",
                  hint)  # fmt: skip
        check_int_tuple(cmp, got, f"infer_size({sa}, {sb})")
    cmp.raises(
        lambda: infer_size((2, 3), (4, 3)),
        RuntimeError,
        "infer_size((2, 3), (4, 3)) (torch raises RuntimeError)",
        hint,
    )
    cmp.raises(
        lambda: infer_size((3, 1, 5), (4, 1, 1)),
        RuntimeError,
        "infer_size((3, 1, 5), (4, 1, 1)) (torch raises RuntimeError)",
        hint,
    )
    cmp.raises(
        lambda: infer_size((2, 0, 3), (2, 3)),
        RuntimeError,
        "infer_size((2, 0, 3), (2, 3)) (torch raises RuntimeError)",
        "only a size of 1 stretches: 0 is a size like any other, and 0 against 2 is an "
        "error (test x != 1 and y != 1, not x > 1 and y > 1)",
    )
    base = torch.arange(60.0)
    operands = [(base[:15].view(3, 1, 5), base[20:24].view(4, 1)),
                (base.view(5, 12).t()[2:5], base[:5] * 10),  # transposed (3, 5) and (5,)
                (base[40:42].view(2, 1, 1), base[:12].view(3, 4)[:, ::2].t())]  # fmt: skip
    for a, b in operands:
        what = f"{tuple(a.shape)} (strides {a.stride()}) + {tuple(b.shape)} (strides {b.stride()})"
        shape = tuple(torch.broadcast_shapes(a.shape, b.shape))
        for x in (a, b):
            call = f"broadcast_strides({tuple(x.shape)}, {x.stride()}, {shape})"
            got = cmp.call(lambda: broadcast_strides(tuple(x.shape), x.stride(), shape),
                           call + " ran", hint)  # fmt: skip
            check_int_tuple(cmp, got, call)
        got = cmp.call(lambda: strided_add(a, b, infer_size, broadcast_strides),
                       f"the strided loop over {what} ran", hint)  # fmt: skip
        cmp.equal(got, torch.add(a, b), f"{what}, read through your strides", hint)


# ---- exercise 5 -------------------------------------------------------------------------------
_LOCK = threading.Lock()


def _rules(tile):
    """What an access by thread (tx, ty) may touch, as the exercise lays the tiles out."""
    return {
        "a": lambda key, t, write: key[1] % tile == t.x,
        "b": lambda key, t, write: key[1] % tile == t.x,
        "c": lambda key, t, write: key[1] % tile == t.x,
        "sa": lambda key, t, write: key[0] == t.y and (not write or key[1] == t.x),
        "sb": lambda key, t, write: key[1] == t.x and (not write or key[0] == t.y),
    }


class Watched:
    """An array for the simulator (which runs each CUDA thread as a Python thread) that checks
    every access against the exercise's layout and counts each thread's stores."""

    def __init__(self, array, name, log, prefix=()):
        self.array, self.name, self.log, self.prefix = array, name, log, prefix
        self.shape = array.shape[len(prefix) :]

    def _access(self, key, write):
        key = self.prefix + (key if isinstance(key, tuple) else (key,))
        if len(key) < self.array.ndim:  # a[i] first, [j] next
            return Watched(self.array, self.name, self.log, key)
        t = threading.current_thread()
        with _LOCK:  # the simulated threads run at once
            if write:
                self.log["stores"][self.name, tuple(t.blockIdx), tuple(t.threadIdx)] += 1
            allowed = self.log["rules"][self.name](key, t.threadIdx, write)
            if not allowed and len(self.log["wrong"]) < 3:
                verb = "writes" if write else "reads"
                self.log["wrong"].append(f"thread (x={t.threadIdx.x}, y={t.threadIdx.y}) "
                                         f"{verb} {self.name}{list(key)}")  # fmt: skip
        return key

    def __getitem__(self, key):
        key = self._access(key, False)
        return key if isinstance(key, Watched) else self.array[key]

    def __setitem__(self, key, value):
        self.array[self._access(key, True)] = value


def watched_shared(log):
    """A stand-in for the simulator's cuda.shared.array that hands out Watched arrays: one per
    line of the kernel, as the simulator does, the first made named sa and the second sb."""
    made = {}

    def array(self, shape, dtype, alignment=None):
        caller = sys._getframe(1)
        key = (id(self), caller.f_code, caller.f_lineno)
        with _LOCK:
            if key not in made:
                made[key] = Watched(np.zeros(shape, dtype), ("sa", "sb")[len(made)], log)
            return made[key]

    return array


def launch(k, a, b, tile, log=None):
    from numba.core.errors import NumbaPerformanceWarning
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    c = np.full((a.shape[0], b.shape[1]), np.nan, dtype=np.float32)
    grid = ((b.shape[1] + tile - 1) // tile, (a.shape[0] + tile - 1) // tile)
    args, real = (a, b, c), FakeCUDAShared.array
    if log is not None:
        args = [Watched(x, name, log) for x, name in zip(args, "abc")]
        FakeCUDAShared.array = watched_shared(log)
    try:
        with warnings.catch_warnings():  # on a GPU: a small grid, host arrays copied (fine)
            warnings.simplefilter("ignore", NumbaPerformanceWarning)
            k[grid, (tile, tile)](*args)
    finally:
        FakeCUDAShared.array = real
    return torch.from_numpy(c)


def stores_per_tile(log, a, b, tile):
    """The first thread that did not store into sa and sb once per tile, or None."""
    tiles = (a.shape[1] + tile - 1) // tile
    blocks = [(x, y, 0) for y in range((a.shape[0] + tile - 1) // tile)
              for x in range((b.shape[1] + tile - 1) // tile)]  # fmt: skip
    for name in ("sa", "sb"):
        for block in blocks:
            for thread in [(x, y, 0) for y in range(tile) for x in range(tile)]:
                n = log["stores"][name, block, thread]
                if n != tiles:
                    times = "once" if n == 1 else f"{n} times"
                    return (
                        f"thread (x={thread[0]}, y={thread[1]}) of block {block[:2]} stored "
                        f"into {name} {times}, not once per tile ({tiles} tiles)"
                    )
    return None


def check_tiled_matmul(cmp, matmul_tiled, tile):
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    import retorch.cuda

    hint = (
        "i = blockIdx.y*TILE + ty, j = blockIdx.x*TILE + tx; for each of the "
        "(K + TILE - 1) // TILE tiles: sa[ty, tx] = a[i, k + tx] and sb[ty, tx] = "
        "b[k + ty, j] (0 when either index is past the end), syncthreads, add "
        "sa[ty, kk] * sb[kk, tx] for kk in range(TILE), syncthreads; then c[i, j] = acc "
        "only when i < M and j < N"
    )
    layout = (
        "x picks the column: thread (tx, ty) reads a[i, k + tx] and b[k + ty, j], "
        "writes c[i, j], stores sa[ty, tx] and sb[ty, tx], reads sa[ty, kk] and "
        "sb[kk, tx]; another layout makes a warp's threads touch different rows of a, b "
        "or c (not coalesced) or different words of one bank of sa or sb"
    )
    steps = (
        "loop over the (K + TILE - 1) // TILE tiles; in each, every thread, even one "
        "outside c, stores its element of both tiles once (no early return, no extra "
        "stores) and reaches both barriers; only the write of c is guarded"
    )
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(11, 13, generator=gen), torch.randn(13, 10, generator=gen)
    emulated = FakeCUDAKernel(matmul_tiled.py_func, device=False)
    log = {"wrong": [], "stores": Counter(), "rules": _rules(tile)}
    got = cmp.call(lambda: launch(emulated, a.numpy(), b.numpy(), tile, log),
                   "matmul_tiled emulated on (11, 13) @ (13, 10)", hint)  # fmt: skip
    cmp.equal(log["wrong"], [], "accesses that break the layout (the first 3)", layout)
    cmp.equal(stores_per_tile(log, a, b, tile), None, "stores into the shared tiles", steps)
    cmp.close(got, a @ b, "(11, 13) @ (13, 10), emulated", hint, rtol=1e-5, atol=1e-5)
    where = "GPU" if not retorch.cuda.simulator_enabled() else "simulator"
    for m, k, n in [(9, 17, 6), (8, 8, 16), (9, 70, 6)]:
        a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
        got = cmp.call(
            lambda: launch(matmul_tiled, a.numpy(), b.numpy(), tile),
            f"matmul_tiled on ({m}, {k}) @ ({k}, {n}) on the {where}",
            hint,
        )
        cmp.close(got, a @ b, f"({m}, {k}) @ ({k}, {n}) on the {where}", hint, rtol=1e-5,
                  atol=1e-5)  # fmt: skip


# ---- exercise 6 -------------------------------------------------------------------------------
def model_pick_block(small, large, size, max_split_size=None):
    """What chapter 4's allocator model does with a rounded request of ``size`` bytes, given
    the free blocks ``(size, address)`` cached in each pool: (pool, block or None, split)."""
    from retorch.tensor import allocator as A

    kwargs = {} if max_split_size is None else {"max_split_size": max_split_size}
    alloc = A.CUDACachingAllocator(64 * 2**30, **kwargs)
    for pool, blocks in [(alloc.small_blocks, small), (alloc.large_blocks, large)]:
        for nbytes, ptr in blocks:
            pool.insert_into_blocks(A.Block(0, nbytes, pool, ptr, None))
    pool = alloc.get_pool(size)
    params = A.AllocParams(size, 0, pool, A.get_allocation_size(size), (0,))
    if not alloc.get_free_block(params):
        return ("small" if pool.is_small else "large"), None, False
    block = params.block
    split = alloc.should_split(block, size)
    return ("small" if pool.is_small else "large"), (block.size, block.ptr), split


PICK_CASES = [  # (small pool, large pool, rounded request, max_split_size)
    ([(2 * MiB, 0x7000000), (4096, 0x5000000), (1024, 0x6000000)], [], 1024, None),
    ([(2 * MiB, 0x7000000), (4096, 0x5000000), (1024, 0x6000000)], [], 1536, None),
    ([(4096, 0x6200000), (4096, 0x6000000)], [(20 * MiB, 0x1000000)], 3584, None),
    ([(1024, 0x6000000)], [(20 * MiB, 0x1000000)], 1024, None),
    ([(2 * MiB, 0x7000000)], [(3 * MiB, 0x2000000)], MiB, None),
    ([(2 * MiB, 0x7000000)], [(3 * MiB, 0x2000000)], MiB + 512, None),
    ([], [(3 * MiB, 0x2000000), (20 * MiB, 0x1000000)], 2 * MiB, None),
    ([], [(20 * MiB, 0x1000000), (6 * MiB, 0x3000000), (6 * MiB, 0x2800000)], 5 * MiB, None),
    ([], [(20 * MiB, 0x1000000)], 5 * MiB, None),
    ([], [(4 * MiB, 0x1000000)], 4 * MiB, None),
    ([], [(64 * MiB, 0x1000000)], 5 * MiB, 40 * MiB),
    ([], [(64 * MiB, 0x1000000)], 50 * MiB, 40 * MiB),
    ([], [(80 * MiB, 0x1000000)], 50 * MiB, 40 * MiB),
    ([], [(30 * MiB, 0x1000000)], 5 * MiB, 40 * MiB),
    ([], [(40 * MiB, 0x1000000)], 5 * MiB, 40 * MiB),  # exactly max_split_size: oversize
    ([], [(70 * MiB, 0x1000000)], 50 * MiB, 40 * MiB),  # exactly 20 MiB larger: refused
    ([], [], 5 * MiB, None),
]


def check_pick_block(cmp, pick_block):
    hint = (
        "the pool: small for sizes up to and including 1 MiB; in it, the smallest free "
        "block that is large enough, the lower address first among equal sizes (not the "
        "first in the list); with a max_split_size, a request below it never takes a block "
        "of max_split_size or more, and one at or above it takes no block 20 MiB or more "
        "larger than itself; split the rest off when it is at least 512 bytes (small pool) "
        "or more than 1 MiB and the request is below max_split_size (large pool)"
    )
    for small, large, size, max_split in PICK_CASES:
        what = (
            f"pick_block(small={_blocks(small)}, large={_blocks(large)}, size={size}"
            + (f", max_split_size={max_split}" if max_split else "")
            + ")"
        )
        got = cmp.call(lambda: pick_block(list(small), list(large), size, max_split),
                       what + " ran", hint)  # fmt: skip
        cmp.equal(_norm(got), model_pick_block(small, large, size, max_split), what, hint)


def _blocks(blocks):
    return "[" + ", ".join(f"({n}, {hex(p)})" for n, p in blocks) + "]"


def _norm(got):
    """A tuple (pool, block or None, split) with the block as a tuple: lists compare equal."""
    if isinstance(got, (tuple, list)) and len(got) == 3:
        pool, block, split = got
        return pool, None if block is None else tuple(block), split
    return got

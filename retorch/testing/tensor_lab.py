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
def outcome(fn):
    """What ``fn()`` gives: its value, or ``"Type: message"`` for an exception it raises."""
    try:
        return fn()
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001  (which exception, and its message, is compared)
        return f"{type(e).__name__}: {e}"


def expand_cases():
    """(tensor, target sizes): every rule of ``inferExpandGeometry`` where a usual mistake
    gives another answer; the misuses last."""
    x = torch.arange(24.0).view(2, 3, 4)[:, ::2, 1:]  # (2, 2, 3), strides (12, 8, 1), offset 1
    y = torch.arange(6.0).view(3, 1, 2)  # a size-1 dim in the middle
    odd = torch.arange(10.0).as_strided((2, 1, 3), (5, 7, 1))  # a size-1 dim of stride 7
    col = torch.arange(12.0).view(3, 4).t()[:, :1]  # transposed: (4, 1), strides (1, 4)
    row = torch.arange(3.0).view(1, 3)
    empty = torch.empty(2, 0, 3)
    scalar = torch.tensor(3.0)
    return [
        (x, (5, 2, 2, 3)), (x, (1, 2, 2, 3)), (x, (3, 1, 2, 2, 3)), (x, (-1, -1, -1)),
        (x, (2, -1, 3)), (x, (0, 2, 2, 3)), (y, (3, 0, 2)), (y, (3, 5, 2)), (y, (4, 3, 5, 2)),
        (y, (3, -1, 2)), (y, (1, 3, 4, 2)), (odd, (2, 1, 3)), (odd, (1, 2, 1, 3)),
        (odd, (2, 2, 4, 3)), (col, (2, 4, 5)), (col, (1, 4, 1)), (row, (1, 4, 3)),
        (row, (2, 1, 1, 3)), (empty, (2, 0, 3)), (empty, (4, 2, 0, 3)), (empty, (1, 2, 0, 3)),
        (scalar, (2, 1)), (scalar, (1, 1, 3)), (scalar, ()),
        # misuse
        (x, (2, 4, 3)), (x, (1, 2, 2, 3, 1)), (x, (-1, 2, 2, 3)), (y, (2, 1, 2)),
        (x, (2, -2, 3)), (empty, (2, 5, 3)), (y, (5, -1, 3, 1, 2)), (x, (-1, 5, 2, 3)),
        (x, (2, 2)), (y, (2,)),
    ]  # fmt: skip


def check_expand(cmp, expand_geometry):
    hint = (
        "line the dims up from the right (view dim i is t's dim i - (len(target) - t.dim())); "
        "-1 keeps t's size; an equal size keeps the stride (a size-1 dim too); a size-1 dim "
        "that grows gets stride 0; a new leading dim starts as size 1 with stride "
        "out_sizes[i + 1] * out_strides[i + 1] of the view (after that dim was expanded); "
        "a 0-d tensor gets strides all 0; errors: RuntimeError with torch's message, dims "
        "counted in the view"
    )
    for t, target in expand_cases():
        what = (
            f"expand_geometry({tuple(t.shape)}, {t.stride()}, {target}), as "
            f"t.expand({', '.join(map(str, target))}) of sizes {tuple(t.shape)}, strides "
            f"{t.stride()}"
        )
        want = outcome(lambda: (tuple(t.expand(target).shape), t.expand(target).stride()))
        got = outcome(lambda: expand_geometry(tuple(t.shape), t.stride(), target))
        if isinstance(want, str) and "the number of sizes provided" in want:
            tail = want[want.index("the number of sizes provided") :]
            torch_says = want
            want = f"RuntimeError: {tail}"  # torch writes the tensor's type in front
            if isinstance(got, str) and got.startswith("RuntimeError: ") and got.endswith(tail):
                got = want
            what += f" (torch: {torch_says})"
        if isinstance(got, (tuple, list)) and len(got) == 2:
            check_int_tuple(cmp, got[0], f"the sizes of {what}")
            check_int_tuple(cmp, got[1], f"the strides of {what}")
            got = tuple(tuple(v) for v in got)
        cmp.equal(got, want, what, hint)
        if not isinstance(want, str):  # the values read through your strides are torch's
            seen = t.as_strided(*got, t.storage_offset())
            cmp.equal(seen.tolist(), t.expand(target).tolist(), what + ": values", hint)


# ---- exercise 5 -------------------------------------------------------------------------------
_LOCK = threading.Lock()


class Watched:
    """An array for the simulator (which runs each CUDA thread as a Python thread) that checks
    every access with ``log["rule"]`` and counts the accesses to each element."""

    def __init__(self, array, name, log, prefix=()):
        self.array, self.name, self.log, self.prefix = array, name, log, prefix
        self.shape, self.dtype = array.shape[len(prefix) :], array.dtype

    def _access(self, key, write):
        key = self.prefix + (key if isinstance(key, tuple) else (key,))
        if len(key) < self.array.ndim:  # a[i] first, [j] next
            return Watched(self.array, self.name, self.log, key)
        t = threading.current_thread()
        key = tuple(int(k) for k in key)
        with _LOCK:  # the simulated threads run at once
            self.log["count"][self.name, write, tuple(t.blockIdx), key] += 1
            barriers = self.log["barriers"][tuple(t.blockIdx), tuple(t.threadIdx)]
            wrong = self.log["rule"](self.name, key, t.threadIdx, write, barriers)
            if wrong and len(self.log["wrong"]) < 3:
                verb = "writes" if write else "reads"
                self.log["wrong"].append(f"thread (x={t.threadIdx.x}, y={t.threadIdx.y}) "
                                         f"{verb} {self.name}{list(key)}: {wrong}")  # fmt: skip
        return key

    def __getitem__(self, key):
        key = self._access(key, False)
        return key if isinstance(key, Watched) else self.array[key]

    def __setitem__(self, key, value):
        self.array[self._access(key, True)] = value


def _transpose_rule(tile):
    """What thread (tx, ty) may do to element ``key`` of ``name`` after ``barriers`` barriers:
    a reason why not, or ``""``."""

    def rule(name, key, t, write, barriers):
        if name == "a":
            if write:
                return "a is only read"
            return "" if key[1] % tile == t.x else f"not column {t.x} of a tile"
        if name == "out":
            if not write:
                return "out is only written"
            return "" if key[1] % tile == t.x else f"not column {t.x} of a tile"
        if key[0] != t.x and key[1] != t.x:
            return f"neither row nor column {t.x} of the tile"
        if write and barriers != 0:
            return "a store into the tile after the barrier"
        if not write and barriers != 1:
            return f"a load from the tile after {barriers} barriers (store, barrier, load)"
        return ""

    return rule


def watched_tile(log):
    """A stand-in for the simulator's cuda.shared.array that hands out one Watched array per
    kernel line, as the simulator does (one per block), filled with NaN, its shapes logged."""
    made = {}

    def array(self, shape, dtype, alignment=None):
        caller = sys._getframe(1)
        key = (id(self), caller.f_code, caller.f_lineno)
        with _LOCK:
            if key not in made:
                shape = tuple(shape) if isinstance(shape, tuple) else (shape,)
                log["tiles"].append((shape, np.dtype(dtype).name))
                made[key] = Watched(np.full(shape, np.nan, dtype), "tile", log)
            return made[key]

    return array


def launch_transpose(k, a, tile, rows, log=None):
    """``out = a.T`` by kernel ``k`` on a ``(ceil(N / tile), ceil(M / tile))`` grid of
    ``(tile, rows)`` blocks; with ``log``, under the simulator with every access watched."""
    from numba.core.errors import NumbaPerformanceWarning
    from numba.cuda.simulator.kernel import BlockThread
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    out = np.full((a.shape[1], a.shape[0]), np.nan, dtype=a.dtype)
    grid = ((a.shape[1] + tile - 1) // tile, (a.shape[0] + tile - 1) // tile)
    args, shared, sync = (a, out), FakeCUDAShared.array, BlockThread.syncthreads
    if log is not None:
        args = [Watched(x, name, log) for x, name in zip(args, ("a", "out"))]
        FakeCUDAShared.array = watched_tile(log)

        def counted(self):
            with _LOCK:
                log["barriers"][tuple(self.blockIdx), tuple(self.threadIdx)] += 1
            sync(self)

        BlockThread.syncthreads = counted
    try:
        with warnings.catch_warnings():  # on a GPU: a small grid, host arrays copied (fine)
            warnings.simplefilter("ignore", NumbaPerformanceWarning)
            k[grid, (tile, rows)](*args)
    finally:
        FakeCUDAShared.array, BlockThread.syncthreads = shared, sync
    return torch.from_numpy(out)


def _counts(log, a, tile, rows):
    """The first number of ``a`` not read once, of ``out`` not written once, or thread that
    did not reach the barrier once; or None."""
    m, n = a.shape
    reads, writes = Counter(), Counter()
    for (name, write, _, key), c in log["count"].items():
        if name == "a" and not write:
            reads[key] += c
        elif name == "out" and write:
            writes[key] += c
    for what, counts, shape in [("a[{}] was read", reads, (m, n)),
                                ("out[{}] was written", writes, (n, m))]:  # fmt: skip
        for key in itertools.product(*(range(s) for s in shape)):
            if counts[key] != 1:
                return what.format(", ".join(map(str, key))) + f" {counts[key]} times, not once"
    blocks = itertools.product(range((n + tile - 1) // tile), range((m + tile - 1) // tile))
    for bx, by in blocks:
        for tx, ty in itertools.product(range(tile), range(rows)):
            got = log["barriers"][(bx, by, 0), (tx, ty, 0)]
            if got != 1:
                return (f"thread (x={tx}, y={ty}) of block ({bx}, {by}) reached "
                        f"cuda.syncthreads() {got} times, not once")  # fmt: skip
    return None


def check_tiled_transpose(cmp, transpose_tiled, tile, rows):
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    import retorch.cuda

    hint = (
        "block (bx, by) copies a's rows by*TILE.. and columns bx*TILE..; thread (tx, ty) "
        "stores tile[r, tx] = a[by*TILE + r, bx*TILE + tx] for r in range(ty, TILE, ROWS) "
        "when both indices are inside a, syncthreads, then writes out[bx*TILE + r, by*TILE "
        "+ tx] = tile[tx, r] when both are inside out (N x M); the tile is "
        "(TILE, TILE_ROW) of a.dtype"
    )
    layout = (
        "x picks the column of every global access (thread tx reads column ...+tx of a and "
        "writes column ...+tx of out, coalesced); the tile is stored along a row and loaded "
        "along a column (or the other way round), stores before the one barrier, loads after"
    )
    steps = (
        "each thread copies the rows ty, ty + ROWS, ... of the tile (TILE // ROWS of them), "
        "skips only what is outside a or out, never returns before cuda.syncthreads(), "
        "and calls it once"
    )
    gen = torch.Generator().manual_seed(0)
    emulated = FakeCUDAKernel(transpose_tiled.py_func, device=False)
    for (m, n), dtype in [((11, 13), torch.float32), ((3, 17), torch.float64)]:
        a = torch.randn(m, n, generator=gen, dtype=dtype)
        what = f"transpose_tiled emulated on a ({m}, {n}) {str(dtype).removeprefix('torch.')}"
        log = {"wrong": [], "count": Counter(), "barriers": Counter(), "tiles": [],
               "rule": _transpose_rule(tile)}  # fmt: skip
        got = cmp.call(lambda: launch_transpose(emulated, a.numpy(), tile, rows, log),
                       what + " ran", hint)  # fmt: skip
        cmp.equal(log["tiles"], [((tile, tile + 1), a.numpy().dtype.name)],
                  f"the shared arrays {what} made (shape, dtype)",
                  "one tile, (TILE, TILE_ROW): a padded row puts each number of a column in "
                  "another bank; dtype=a.dtype")  # fmt: skip
        cmp.equal(log["wrong"], [], f"accesses that break the layout (the first 3), {what}",
                  layout)  # fmt: skip
        cmp.equal(_counts(log, a, tile, rows), None, f"reads, writes and barriers, {what}",
                  steps)  # fmt: skip
        cmp.equal(got, a.T.contiguous(), what, hint)
    where = "GPU" if not retorch.cuda.simulator_enabled() else "simulator"
    for (m, n), dtype in [((1, 9), torch.float32), ((9, 1), torch.float64),
                          ((16, 8), torch.float32), ((17, 3), torch.float64),
                          ((1, 1), torch.float32)]:  # fmt: skip
        a = torch.randn(m, n, generator=gen, dtype=dtype)
        what = f"transpose_tiled on a ({m}, {n}) {str(dtype).removeprefix('torch.')} on the {where}"
        got = cmp.call(lambda: launch_transpose(transpose_tiled, a.numpy(), tile, rows),
                       what + " ran", hint)  # fmt: skip
        cmp.equal(got, a.T.contiguous(), what, hint)


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

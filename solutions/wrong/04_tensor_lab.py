"""Wrong answers a student could plausibly write for lab 4; each must fail its graded check.

Used by ``tools/check_wrong_answers.py 04_tensor_lab``. Each entry replaces the BEGIN/END
SOLUTION region(s) of the exercise's solution cell (exercise 2's cell has two: unfold_meta,
diagonal_meta; exercise 4's two: infer_size, broadcast_strides).
"""

_CL = """\
if len(sizes) not in (4, 5):
    raise RuntimeError(f"channels_last needs 4 dims, channels_last_3d 5: got {len(sizes)}")
fastest_first = [1, *range(len(sizes) - 1, 1, -1), 0]  # C, W, H, (D), N
strides, step = [0] * len(sizes), 1
for d in fastest_first:
    strides[d] = step
    step *= sizes[d]
return tuple(strides)
"""

_UNFOLD = """\
dim %= len(sizes)
if size > sizes[dim] or step <= 0:
    raise RuntimeError(f"cannot unfold {size} elements with step {step} from dim {dim}")
new_sizes, new_strides = [*sizes, size], [*strides, strides[dim]]
new_sizes[dim] = (sizes[dim] - size) // step + 1
new_strides[dim] = strides[dim] * step
return tuple(new_sizes), tuple(new_strides), offset
"""

_DIAG = """\
n = len(sizes)
dim1, dim2 = dim1 % n, dim2 % n
if dim1 == dim2:
    raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
if diag >= 0:
    length, start = min(sizes[dim1], sizes[dim2] - diag), diag * strides[dim2]
else:
    length, start = min(sizes[dim1] + diag, sizes[dim2]), -diag * strides[dim1]
length = max(length, 0)
rest = [d for d in range(n) if d not in (dim1, dim2)]
new_sizes = tuple(sizes[d] for d in rest) + (length,)
new_strides = tuple(strides[d] for d in rest) + (strides[dim1] + strides[dim2],)
return new_sizes, new_strides, offset + start if length else offset
"""

_VD = """\
if itemsize == new_itemsize:
    return tuple(sizes), tuple(strides), offset
if len(sizes) == 0:
    raise RuntimeError("a 0-d tensor cannot be viewed with another element size")
if strides[-1] != 1:
    raise RuntimeError(f"the last dim must have stride 1, not {strides[-1]}")
if itemsize > new_itemsize:
    r = itemsize // new_itemsize
    new_sizes = (*sizes[:-1], sizes[-1] * r)
    new_strides = (*(s * r for s in strides[:-1]), 1)
    return new_sizes, new_strides, offset * r
r = new_itemsize // itemsize
if sizes[-1] % r or offset % r or any(s % r for s in strides[:-1]):
    raise RuntimeError(f"the last size, the offset and every stride must divide by {r}")
new_sizes = (*sizes[:-1], sizes[-1] // r)
new_strides = (*(s // r for s in strides[:-1]), 1)
return new_sizes, new_strides, offset // r
"""

_INFER = """\
n = max(len(a), len(b))
a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
out = []
for k, (x, y) in enumerate(zip(a, b)):
    if x != y and x != 1 and y != 1:
        raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b "
                           f"({y}) at non-singleton dimension {k}")
    out.append(y if x == 1 else x)
return tuple(out)
"""

_BSTRIDES = """\
lead = len(out_shape) - len(sizes)
return tuple(0 if k < lead or sizes[k - lead] == 1 else strides[k - lead]
             for k in range(len(out_shape)))
"""

_TILED = """\
tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
i = cuda.blockIdx.y * TILE + ty
j = cuda.blockIdx.x * TILE + tx
acc = np.float32(0)
for t in range((a.shape[1] + TILE - 1) // TILE):
    k = t * TILE
    sa[ty, tx] = a[i, k + tx] if i < a.shape[0] and k + tx < a.shape[1] else 0
    sb[ty, tx] = b[k + ty, j] if k + ty < b.shape[0] and j < b.shape[1] else 0
    cuda.syncthreads()
    for kk in range(TILE):
        acc += sa[ty, kk] * sb[kk, tx]
    cuda.syncthreads()
if i < c.shape[0] and j < c.shape[1]:
    c[i, j] = acc
"""
# The same kernel with the thread indices the other way round (rows from threadIdx.x): right
# values, but a warp's threads touch different rows, so its accesses are not coalesced.
_TILED_ROWS_FROM_X = (
    _TILED.replace("i = cuda.blockIdx.y * TILE + ty", "i = cuda.blockIdx.y * TILE + tx")
    .replace("j = cuda.blockIdx.x * TILE + tx", "j = cuda.blockIdx.x * TILE + ty")
    .replace(
        "sa[ty, tx] = a[i, k + tx] if i < a.shape[0] and k + tx",
        "sa[tx, ty] = a[i, k + ty] if i < a.shape[0] and k + ty",
    )
    .replace("sb[ty, tx] = b[k + ty, j] if k + ty", "sb[tx, ty] = b[k + tx, j] if k + tx")
    .replace("acc += sa[ty, kk] * sb[kk, tx]", "acc += sa[tx, kk] * sb[kk, ty]")
)


def _r(*pairs):
    """The solution of exercise 5 with each (old, new) replacement made (old must be there)."""
    s = _TILED
    for old, new in pairs:
        assert old in s, old
        s = s.replace(old, new)
    return s


_LOAD_A = "sa[ty, tx] = a[i, k + tx] if i < a.shape[0] and k + tx < a.shape[1] else 0"
_LOAD_B = "sb[ty, tx] = b[k + ty, j] if k + ty < b.shape[0] and j < b.shape[1] else 0"
_ACC = "acc += sa[ty, kk] * sb[kk, tx]"
_NTILES = "range((a.shape[1] + TILE - 1) // TILE)"
_STORE = "if i < c.shape[0] and j < c.shape[1]:\n    c[i, j] = acc"
_SYNC1 = "    cuda.syncthreads()\n    for kk"

_PICK = """\
limit = float("inf") if max_split_size is None else max_split_size
pool = "small" if size <= MiB else "large"
fits = sorted(b for b in (small if pool == "small" else large) if b[0] >= size)
if not fits:
    return pool, None, False
block = tuple(fits[0])
if size < limit <= block[0] or (size >= limit and block[0] >= size + 20 * MiB):
    return pool, None, False
rest = block[0] - size
split = rest >= 512 if pool == "small" else (size < limit and rest > MiB)
return pool, block, split
"""

WRONG = {
    "ex1_channels_last_strides": [
        (
            "contiguous strides (dim order N, C, H, W) copied from the chapter",
            """\
if len(sizes) not in (4, 5):
    raise RuntimeError("channels_last needs 4 or 5 dims")
strides, step = [], 1
for n in reversed(sizes):
    strides.append(step)
    step *= max(n, 1)
return tuple(reversed(strides))
""",
        ),
        (
            "size-0 and size-1 dims skipped with max(n, 1), as contiguous strides do",
            _CL.replace("step *= sizes[d]", "step *= max(sizes[d], 1)"),
        ),
        (
            "the 4-d order hard-coded (C, W, H, N), so a 5-d volume misses D",
            _CL.replace("[1, *range(len(sizes) - 1, 1, -1), 0]", "[1, 3, 2, 0]"),
        ),
        (
            "W and H swapped (C, H, W, N from fastest)",
            _CL.replace("[1, *range(len(sizes) - 1, 1, -1), 0]", "[1, *range(2, len(sizes)), 0]"),
        ),
        (
            "N's stride as numel / N: a float (and a 0 division for N = 0)",
            _CL.replace(
                "return tuple(strides)",
                "strides[0] = math.prod(sizes) / sizes[0] if sizes[0] else strides[0]\n"
                "return tuple(strides)",
            ).replace("if len(sizes)", "import math\nif len(sizes)"),
        ),
        (
            "no error for other ranks: a 3-d (C, H, W) gets strides too",
            _CL.replace("if len(sizes) not in (4, 5):", "if len(sizes) < 3:"),
        ),
        (
            "the strides of the example (2, 3, 4, 5) hard-coded",
            "return (60, 1, 15, 3) if len(sizes) == 4 else (360, 1, 90, 18, 3)\n",
        ),
        (
            "a list returned instead of a tuple",
            _CL.replace("return tuple(strides)", "return strides"),
        ),
    ],
    "ex2_view_meta": [
        (
            "unfold's window count divided with / (a float where an int is required)",
            [
                _UNFOLD.replace(
                    "(sizes[dim] - size) // step + 1", "(sizes[dim] - size) / step + 1"
                ),
                None,
            ],
        ),
        (
            "unfold's stride along dim not multiplied by step",
            [_UNFOLD.replace("new_strides[dim] = strides[dim] * step\n", ""), None],
        ),
        (
            "unfold's new dim given stride 1 (as if contiguous)",
            [_UNFOLD.replace("[*strides, strides[dim]]", "[*strides, 1]"), None],
        ),
        (
            "unfold's window count off by one ((n - size) // step)",
            [
                _UNFOLD.replace("(sizes[dim] - size) // step + 1", "(sizes[dim] - size) // step"),
                None,
            ],
        ),
        (
            "unfold accepts a window larger than the dim and a step of 0",
            [
                _UNFOLD.replace("if size > sizes[dim] or step <= 0:", "if False:").replace(
                    "// step + 1", "// max(step, 1) + 1"
                ),
                None,
            ],
        ),
        (
            "diagonal: negative dims not wrapped",
            [None, _DIAG.replace("dim1, dim2 = dim1 % n, dim2 % n\n", "")],
        ),
        (
            "diagonal: the storage offset never moves (the main diagonal's start for every diag)",
            [None, _DIAG.replace("offset + start if length else offset", "offset")],
        ),
        (
            "diagonal: the length not clamped at 0 when diag is past the edge",
            [None, _DIAG.replace("length = max(length, 0)\n", "")],
        ),
        (
            "diagonal: the start moved even when the diagonal is empty",
            [None, _DIAG.replace("offset + start if length else offset", "offset + start")],
        ),
        (
            "diagonal: the roles of dim1 and dim2 swapped for a positive diag",
            [None, _DIAG.replace("diag * strides[dim2]", "diag * strides[dim1]")],
        ),
        (
            "diagonal: the new dim steps by the larger stride only",
            [
                None,
                _DIAG.replace(
                    "(strides[dim1] + strides[dim2],)", "(max(strides[dim1], strides[dim2]),)"
                ),
            ],
        ),
        (
            "diagonal: the same dim twice accepted",
            [None, _DIAG.replace("if dim1 == dim2:", "if False:")],
        ),
    ],
    "ex3_view_dtype": [
        (
            "the offset kept as it was",
            _VD.replace("offset * r", "offset").replace("offset // r", "offset"),
        ),
        (
            "only the last dim rescaled: the other strides kept in old elements",
            _VD.replace("(*(s * r for s in strides[:-1]), 1)", "tuple(strides)").replace(
                "(*(s // r for s in strides[:-1]), 1)", "tuple(strides)"
            ),
        ),
        (
            "every stride rescaled, the last one too",
            _VD.replace("(*(s * r for s in strides[:-1]), 1)", "tuple(s * r for s in strides)"),
        ),
        (
            "no divisibility checks: sizes and strides floored",
            _VD.replace(
                "if sizes[-1] % r or offset % r or any(s % r for s in strides[:-1]):", "if False:"
            ),
        ),
        (
            "only the last size checked for divisibility (offset and strides not)",
            _VD.replace(" or offset % r or any(s % r for s in strides[:-1])", ""),
        ),
        (
            "divided with / (floats where ints are required)",
            _VD.replace("sizes[-1] // r", "sizes[-1] / r").replace("s // r", "s / r").replace(
                "offset // r", "offset / r"
            ),
        ),
        (
            "a 0-d tensor rescaled like any other (no error)",
            _VD.replace(
                'raise RuntimeError("a 0-d tensor cannot be viewed with another element size")',
                "return (), (), offset * itemsize // new_itemsize",
            ),
        ),
        (
            "the last stride not checked: a transposed tensor accepted",
            _VD.replace("if strides[-1] != 1:", "if False:"),
        ),
        (
            "the ratio of a smaller element hard-coded as 2 (float32 as float16 only)",
            _VD.replace("r = itemsize // new_itemsize", "r = 2"),
        ),
        (
            "sizes returned as a list",
            _VD.replace("new_sizes = (*sizes[:-1], sizes[-1] * r)",
                        "new_sizes = [*sizes[:-1], sizes[-1] * r]"),
        ),
    ],
    "ex4_broadcast": [
        (
            "shapes aligned from the left",
            [
                """\
n = max(len(a), len(b))
a, b = tuple(a) + (1,) * (n - len(a)), tuple(b) + (1,) * (n - len(b))
return tuple(y if x == 1 else x for x, y in zip(a, b))
""",
                None,
            ],
        ),
        (
            "no error for mismatched sizes (the larger one wins)",
            [
                """\
n = max(len(a), len(b))
a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
return tuple(max(x, y) for x, y in zip(a, b))
""",
                None,
            ],
        ),
        (
            "size-1 dims keep their stride instead of 0",
            [None, _BSTRIDES.replace("k < lead or sizes[k - lead] == 1", "k < lead")],
        ),
        (
            "new leading dims read with stride 1",
            [
                None,
                """\
lead = len(out_shape) - len(sizes)
return tuple(1 if k < lead else 0 if sizes[k - lead] == 1 else strides[k - lead]
             for k in range(len(out_shape)))
""",
            ],
        ),
        (
            "broadcast strides computed as if the tensor were contiguous",
            [
                None,
                """\
lead = len(out_shape) - len(sizes)
out, step = [], 1
for k in range(len(out_shape) - 1, -1, -1):
    size = 1 if k < lead else sizes[k - lead]
    out.append(0 if size == 1 else step)
    step *= size
return tuple(reversed(out))
""",
            ],
        ),
        (
            "'neither is 1' written as 'both > 1': a size-0 dim broadcasts against anything",
            [_INFER.replace("x != y and x != 1 and y != 1", "x != y and x > 1 and y > 1"), None],
        ),
        (
            "the larger size taken once the error check passes (0 against 1 gives 1)",
            [_INFER.replace("out.append(y if x == 1 else x)", "out.append(max(x, y))"), None],
        ),
        (
            "mismatched sizes raise ValueError, not RuntimeError",
            [_INFER.replace("raise RuntimeError(", "raise ValueError("), None],
        ),
        (
            "the broadcast shape returned as a list",
            [_INFER.replace("return tuple(out)", "return out"), None],
        ),
        (
            "the broadcast strides returned as a list",
            [None, _BSTRIDES.replace("return tuple(", "return list(")],
        ),
        (
            "strides only for the tensor's own dims: the new leading dims left out",
            [None, "return tuple(0 if n == 1 else s for n, s in zip(sizes, strides))"],
        ),
        (
            "sizes aligned from the right but strides from the left",
            [None, _BSTRIDES.replace("else strides[k - lead]", "else strides[k % len(strides)]")],
        ),
        (
            "stride 0 where the output size is 1, not where the input's is",
            [None, _BSTRIDES.replace("sizes[k - lead] == 1", "out_shape[k] == 1")],
        ),
        (
            "the innermost dim always read with stride 1, as if contiguous",
            [
                None,
                _BSTRIDES.replace(
                    "else strides[k - lead]",
                    "else 1 if k == len(out_shape) - 1 else strides[k - lead]",
                ),
            ],
        ),
    ],
    "ex5_tiled_matmul": [
        (
            "tiles counted with floor division (the last partial tile of K is dropped)",
            _TILED.replace("range((a.shape[1] + TILE - 1) // TILE)", "range(a.shape[1] // TILE)"),
        ),
        (
            "a's tile loaded transposed (row and column thread indices swapped)",
            _TILED.replace("sa[ty, tx] = a[i, k + tx]", "sa[ty, tx] = a[i, k + ty]"),
        ),
        (
            "no bounds check on the write: threads past the edge of c write too",
            _TILED.replace(
                "if i < c.shape[0] and j < c.shape[1]:\n    c[i, j] = acc",
                "if i < c.shape[0] + 1 and j < c.shape[1]:\n    c[min(i, c.shape[0] - 1), j] = acc",
            ),
        ),
        (
            "out-of-range elements of both tiles left as garbage (1) instead of 0",
            _TILED.replace(
                "if i < a.shape[0] and k + tx < a.shape[1] else 0",
                "if i < a.shape[0] and k + tx < a.shape[1] else 1",
            ).replace(
                "if k + ty < b.shape[0] and j < b.shape[1] else 0",
                "if k + ty < b.shape[0] and j < b.shape[1] else 1",
            ),
        ),
        (
            "no syncthreads after loading the tiles: a thread reads tile entries not yet loaded",
            _TILED.replace("    cuda.syncthreads()\n    for kk", "    for kk", 1),
        ),
        (
            "no syncthreads after accumulating: the next tile overwrites one still being read",
            _TILED.replace(
                "        acc += sa[ty, kk] * sb[kk, tx]\n    cuda.syncthreads()\n",
                "        acc += sa[ty, kk] * sb[kk, tx]\n",
            ),
        ),
        (
            "threads outside c return at once, before loading their share of the tiles",
            _TILED.replace(
                "acc = np.float32(0)\n",
                "acc = np.float32(0)\nif i >= c.shape[0] or j >= c.shape[1]:\n    return\n",
            ),
        ),
        (
            "rows taken from blockIdx.x and columns from blockIdx.y",
            _TILED.replace(
                "i = cuda.blockIdx.y * TILE + ty\nj = cuda.blockIdx.x * TILE + tx",
                "i = cuda.blockIdx.x * TILE + ty\nj = cuda.blockIdx.y * TILE + tx",
            ),
        ),
        (
            "the number of tiles counted from a's rows (M) instead of its columns (K)",
            _TILED.replace(
                "range((a.shape[1] + TILE - 1) // TILE)", "range((a.shape[0] + TILE - 1) // TILE)"
            ),
        ),
        (
            "the write's bounds check with c's dims swapped",
            _TILED.replace(
                "if i < c.shape[0] and j < c.shape[1]:", "if i < c.shape[1] and j < c.shape[0]:"
            ),
        ),
        (
            "rows from threadIdx.x and columns from threadIdx.y throughout (right values, but a "
            "warp's threads read and write different rows: not coalesced)",
            _TILED_ROWS_FROM_X,
        ),
        (
            "a's tile loaded by threads the other way round: sa[tx, ty] = a[row0 + tx, k + ty] "
            "(the same tile, but a warp reads 8 rows of a)",
            _TILED.replace(
                "sa[ty, tx] = a[i, k + tx] if i < a.shape[0] and k + tx < a.shape[1] else 0",
                "r = cuda.blockIdx.y * TILE + tx\n"
                "    sa[tx, ty] = a[r, k + ty] if r < a.shape[0] and k + ty < a.shape[1] else 0",
            ),
        ),
        (
            "the product written by threads the other way round: c[row0 + tx, col0 + ty] from "
            "sums over sa[tx, kk] * sb[kk, ty] (right values, writes not coalesced)",
            _TILED.replace(
                "acc += sa[ty, kk] * sb[kk, tx]", "acc += sa[tx, kk] * sb[kk, ty]"
            ).replace(
                "if i < c.shape[0] and j < c.shape[1]:\n    c[i, j] = acc",
                "r, q = i - ty + tx, j - tx + ty\n"
                "if r < c.shape[0] and q < c.shape[1]:\n    c[r, q] = acc",
            ),
        ),
        # more, found by a reviewer writing what a student would
        ("loops over TILE tiles instead of ceil(K / TILE)", _r((_NTILES, "range(TILE)"))),
        (
            "a's zero-fill column bound off by one (<=)",
            _r(("k + tx < a.shape[1]", "k + tx <= a.shape[1]")),
        ),
        (
            "a's zero-fill tests only the column, not the row",
            _r(("if i < a.shape[0] and k + tx", "if k + tx")),
        ),
        (
            "b's zero-fill compares the row with N (b.shape[1]) instead of K",
            _r(("k + ty < b.shape[0]", "k + ty < b.shape[1]")),
        ),
        (
            "zero-fill conditions joined with or",
            _r((" and k + tx <", " or k + tx <"), ("b.shape[0] and j", "b.shape[0] or j")),
        ),
        ("sb read as sb[tx, kk]", _r((_ACC, "acc += sa[ty, kk] * sb[tx, kk]"))),
        (
            "sa and sb indices mixed up: sa[kk, tx] * sb[ty, kk]",
            _r((_ACC, "acc += sa[kk, tx] * sb[ty, kk]")),
        ),
        (
            "sb stored transposed in shared memory, read consistently (sb[tx, ty], sb[tx, kk])",
            _r(
                ("sb[ty, tx] = b[k + ty, j]", "sb[tx, ty] = b[k + ty, j]"),
                (_ACC, "acc += sa[ty, kk] * sb[tx, kk]"),
            ),
        ),
        (
            "sa stored transposed in shared memory, read consistently (sa[tx, ty], sa[kk, ty])",
            _r(
                ("sa[ty, tx] = a[i, k + tx]", "sa[tx, ty] = a[i, k + tx]"),
                (_ACC, "acc += sa[kk, ty] * sb[kk, tx]"),
            ),
        ),
        (
            "the one syncthreads at the top of the loop, none after loading",
            _r(
                (_SYNC1, "    for kk"),
                ("    k = t * TILE\n", "    cuda.syncthreads()\n    k = t * TILE\n"),
                (
                    "        acc += sa[ty, kk] * sb[kk, tx]\n    cuda.syncthreads()\n",
                    "        acc += sa[ty, kk] * sb[kk, tx]\n",
                ),
            ),
        ),
        (
            "first syncthreads between the loads of sa and sb",
            _r((_SYNC1, "    for kk"), (_LOAD_A + "\n", _LOAD_A + "\n    cuda.syncthreads()\n")),
        ),
        (
            "c written unconditionally at clamped indices",
            _r((_STORE, "c[min(i, c.shape[0] - 1), min(j, c.shape[1] - 1)] = acc")),
        ),
        (
            "early return only for threads outside c in both row and column",
            _r(
                (
                    "acc = np.float32(0)\n",
                    "acc = np.float32(0)\nif i >= c.shape[0] and j >= c.shape[1]:\n    return\n",
                )
            ),
        ),
        (
            "early return for threads past c's last row",
            _r(("acc = np.float32(0)\n", "acc = np.float32(0)\nif i >= c.shape[0]:\n    return\n")),
        ),
        (
            "accumulator reset inside the tile loop",
            _r(
                (
                    "acc = np.float32(0)\nfor t in " + _NTILES + ":\n",
                    "for t in " + _NTILES + ":\n    acc = np.float32(0)\n",
                )
            ),
        ),
        ("tile offset k = t instead of t * TILE", _r(("k = t * TILE", "k = t"))),
        (
            "i, j = cuda.grid(2) (row from x)",
            _r(
                (
                    "i = cuda.blockIdx.y * TILE + ty\nj = cuda.blockIdx.x * TILE + tx",
                    "i, j = cuda.grid(2)",
                )
            ),
        ),
        ("c[i, j] += acc (c never zeroed)", _r(("c[i, j] = acc", "c[i, j] += acc"))),
        ("tile count from b's columns N", _r((_NTILES, "range((b.shape[1] + TILE - 1) // TILE)"))),
        (
            "inner loop range(TILE - 1)",
            _r(("for kk in range(TILE):", "for kk in range(TILE - 1):")),
        ),
        (
            "b's tile loaded by threads the other way round (sb[tx, ty] = b[k + tx, col0 + ty])",
            _r(
                (
                    _LOAD_B,
                    "q = cuda.blockIdx.x * TILE + ty\n    sb[tx, ty] = b[k + tx, q] if k + tx < b.shape[0] and q < b.shape[1] else 0",
                )
            ),
        ),
        (
            "b's tile loaded with k + tx as the row",
            _r(("b[k + ty, j] if k + ty", "b[k + tx, j] if k + tx")),
        ),
        (
            "write guard compares j with K (b.shape[0])",
            _r(("if i < c.shape[0] and j < c.shape[1]:", "if i < a.shape[0] and j < b.shape[0]:")),
        ),
        (
            "tile count rounded, not ceiled: round(K / TILE)",
            _r((_NTILES, "range(round(a.shape[1] / TILE))")),
        ),
        (
            "loops over K tiles (range(a.shape[1])): right values, K/TILE times the work",
            _r((_NTILES, "range(a.shape[1])")),
        ),
        (
            "syncthreads inside the kk loop (after each product) instead of before it",
            _r(
                (_SYNC1, "    for kk"),
                (
                    "        acc += sa[ty, kk] * sb[kk, tx]\n    cuda.syncthreads()\n",
                    "        acc += sa[ty, kk] * sb[kk, tx]\n        cuda.syncthreads()\n",
                ),
            ),
        ),
    ],
    "ex6_allocator_pick": [
        (
            "first fit: the first block of the list that is large enough",
            _PICK.replace("fits = sorted(b for b", "fits = list(b for b"),
        ),
        (
            "best fit ordered by address first, then size",
            _PICK.replace(
                'fits = sorted(b for b in (small if pool == "small" else large) if b[0] >= size)',
                'fits = sorted((b for b in (small if pool == "small" else large) '
                "if b[0] >= size), key=lambda b: (b[1], b[0]))",
            ),
        ),
        (
            "1 MiB exactly sent to the large pool (size < 1 MiB)",
            _PICK.replace("size <= MiB", "size < MiB"),
        ),
        (
            "both pools searched together",
            _PICK.replace('(small if pool == "small" else large)', "(small + large)"),
        ),
        (
            "the large pool split with the small pool's rule (a rest of 512 bytes or more)",
            _PICK.replace(
                'split = rest >= 512 if pool == "small" else (size < limit and rest > MiB)',
                "split = rest >= 512",
            ),
        ),
        (
            "the large pool splits a rest of exactly 1 MiB (>= instead of >)",
            _PICK.replace("rest > MiB", "rest >= MiB"),
        ),
        (
            "max_split_size ignored",
            _PICK.replace(
                'limit = float("inf") if max_split_size is None else max_split_size',
                'limit = float("inf")',
            ),
        ),
        (
            "a block of exactly max_split_size not counted as oversize (> instead of >=)",
            _PICK.replace("size < limit <= block[0]", "size < limit < block[0]"),
        ),
        (
            "a block exactly 20 MiB larger than a large request accepted (> instead of >=)",
            _PICK.replace("block[0] >= size + 20 * MiB", "block[0] > size + 20 * MiB"),
        ),
        (
            "the oversize rounding limit taken as 2 MiB (kRoundLarge) instead of 20 MiB",
            _PICK.replace("size + 20 * MiB", "size + 2 * MiB"),
        ),
        (
            "no block in the pool: split True, as a new 2 MiB segment would be split",
            _PICK.replace(
                "if not fits:\n    return pool, None, False",
                "if not fits:\n    return pool, None, True",
            ),
        ),
    ],
}

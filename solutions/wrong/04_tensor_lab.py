"""Wrong answers a student could plausibly write for lab 4; each must fail its graded check.

Used by ``tools/check_wrong_answers.py 04_tensor_lab``. Each entry replaces the BEGIN/END
SOLUTION region(s) of the exercise's solution cell (exercise 2's cell has two: unfold_meta,
diagonal_meta; exercise 4's one: expand_geometry).
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

_EX = """\
ndim, tdim = len(target), len(sizes)
if ndim < tdim:
    raise RuntimeError(f"the number of sizes provided ({ndim}) must be greater or equal to "
                       f"the number of dimensions in the tensor ({tdim})")
if tdim == 0:
    return tuple(target), (0,) * ndim
out_sizes, out_strides = [0] * ndim, [0] * ndim
for i in range(ndim - 1, -1, -1):
    d = i - (ndim - tdim)  # t's dim under the view's dim i (< 0: a new leading dim)
    size = sizes[d] if d >= 0 else 1
    stride = strides[d] if d >= 0 else out_sizes[i + 1] * out_strides[i + 1]
    want = target[i]
    if want == -1:
        if d < 0:
            raise RuntimeError(f"The expanded size of the tensor (-1) isn't allowed in a "
                               f"leading, non-existing dimension {i}")
        want = size
    if size != want:
        if size != 1:
            raise RuntimeError(
                f"The expanded size of the tensor ({want}) must match the existing size "
                f"({size}) at non-singleton dimension {i}.  Target sizes: {list(target)}.  "
                f"Tensor sizes: {list(sizes)}")
        size, stride = want, 0
    out_sizes[i], out_strides[i] = size, stride
return tuple(out_sizes), tuple(out_strides)
"""


def _ex(*pairs):
    """The solution of exercise 4 with each (old, new) replacement made (old must be there)."""
    s = _EX
    for old, new in pairs:
        assert old in s, old
        s = s.replace(old, new)
    return s


_NEW_STRIDE = "else out_sizes[i + 1] * out_strides[i + 1]"

_TR = """\
tile = cuda.shared.array((TILE, TILE_ROW), dtype=a.dtype)
tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
row0, col0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE  # the tile's corner in a
for r in range(ty, TILE, ROWS):
    if row0 + r < a.shape[0] and col0 + tx < a.shape[1]:
        tile[r, tx] = a[row0 + r, col0 + tx]
cuda.syncthreads()
for r in range(ty, TILE, ROWS):  # out's row col0 + r holds a's column col0 + r
    if col0 + r < out.shape[0] and row0 + tx < out.shape[1]:
        out[col0 + r, row0 + tx] = tile[tx, r]
"""


def _tr(*pairs):
    """The solution of exercise 5 with each (old, new) replacement made (old must be there)."""
    s = _TR
    for old, new in pairs:
        assert old in s, old
        s = s.replace(old, new)
    return s


_LOAD = "        tile[r, tx] = a[row0 + r, col0 + tx]"
_STORE = "        out[col0 + r, row0 + tx] = tile[tx, r]"
_IN_A = "if row0 + r < a.shape[0] and col0 + tx < a.shape[1]:"
_IN_OUT = "if col0 + r < out.shape[0] and row0 + tx < out.shape[1]:"

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
            _VD.replace("sizes[-1] // r", "sizes[-1] / r")
            .replace("s // r", "s / r")
            .replace("offset // r", "offset / r"),
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
            _VD.replace(
                "new_sizes = (*sizes[:-1], sizes[-1] * r)",
                "new_sizes = [*sizes[:-1], sizes[-1] * r]",
            ),
        ),
    ],
    "ex4_expand": [
        (
            "every new leading dim given stride 0, even one of size 1",
            _ex((_NEW_STRIDE, "else 0")),
        ),
        (
            "a new leading dim's stride from t's outermost dim, not from the expanded view",
            _ex((_NEW_STRIDE, "else sizes[0] * strides[0]")),
        ),
        (
            "sizes aligned from the left (new dims at the end)",
            _ex(("d = i - (ndim - tdim)", "d = i if i < tdim else -1")),
        ),
        (
            "a size-1 dim that grows keeps its stride (no stride 0)",
            _ex(("size, stride = want, 0", "size = want")),
        ),
        (
            "every dim of size 1 given stride 0, even where the target keeps it",
            _ex(("= size, stride\n", "= size, 0 if size == 1 else stride\n")),
        ),
        (
            "-1 accepted in a new leading dim (taken as 1)",
            _ex(("if d < 0:", "if False:")),
        ),
        (
            "'not 1' written as '> 1': a dim of size 0 stretches like one of size 1",
            _ex(("if size != 1:", "if size > 1:")),
        ),
        (
            "the dim in the message counted in t, not in the view",
            _ex(("non-singleton dimension {i}", "non-singleton dimension {d}")),
        ),
        (
            "the sizes in the message written as tuples, not lists",
            _ex(("{list(target)}", "{tuple(target)}"), ("{list(sizes)}", "{tuple(sizes)}")),
        ),
        (
            "misuse raises ValueError, not RuntimeError",
            _EX.replace("raise RuntimeError(", "raise ValueError("),
        ),
        (
            "no check of the number of sizes (fewer sizes than dims are lined up anyway)",
            _ex(("if ndim < tdim:", "if False:")),
        ),
        (
            "a 0-d tensor sent through the loop, the innermost new dim given stride 1",
            _ex(
                ("if tdim == 0:\n    return tuple(target), (0,) * ndim\n", ""),
                (
                    _NEW_STRIDE,
                    "else (out_sizes[i + 1] * out_strides[i + 1] if i + 1 < ndim else 1)",
                ),
            ),
        ),
        (
            "the dims walked left to right: a new dim reads the next one before it is made",
            _ex(("range(ndim - 1, -1, -1)", "range(ndim)")),
        ),
        (
            "sizes and strides returned as lists",
            _ex(("return tuple(out_sizes), tuple(out_strides)", "return out_sizes, out_strides")),
        ),
    ],
    "ex5_tiled_transpose": [
        (
            "no padding: a tile of TILE x TILE (a column of it is in 4 banks, not 8)",
            _tr(("(TILE, TILE_ROW)", "(TILE, TILE)")),
        ),
        (
            "the tile always float32 (float64 numbers rounded)",
            _tr(("dtype=a.dtype", "dtype=np.float32")),
        ),
        (
            "no barrier between the stores into the tile and the loads from it",
            _tr(("cuda.syncthreads()\n", "")),
        ),
        (
            "a thread outside a returns before the barrier (and skips its writes of out)",
            _tr(
                (
                    "tx, ty = cuda.threadIdx.x, cuda.threadIdx.y\n",
                    "tx, ty = cuda.threadIdx.x, cuda.threadIdx.y\n"
                    "if cuda.blockIdx.y * TILE + ty >= a.shape[0]"
                    " or cuda.blockIdx.x * TILE + tx >= a.shape[1]:\n    return\n",
                )
            ),
        ),
        (
            "the naive transpose: out written straight from a (its writes not coalesced)",
            """\
tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
row0, col0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
for r in range(ty, TILE, ROWS):
    if row0 + r < a.shape[0] and col0 + tx < a.shape[1]:
        out[col0 + tx, row0 + r] = a[row0 + r, col0 + tx]
""",
        ),
        (
            "a read down a column of a (x picks a's row): right values, reads not coalesced",
            _tr(
                (_LOAD, "        tile[tx, r] = a[row0 + tx, col0 + r]"),
                (_IN_A, "if row0 + tx < a.shape[0] and col0 + r < a.shape[1]:"),
            ),
        ),
        (
            "out's bounds taken from a's shape (rows of out against M)",
            _tr((_IN_OUT, "if col0 + r < a.shape[0] and row0 + tx < a.shape[1]:")),
        ),
        (
            "no bounds on the reads of a (only the writes of out are guarded)",
            _tr((_IN_A, "if True:")),
        ),
        (
            "each thread copies TILE // ROWS neighbouring rows from its own (ty + r)",
            _TR.replace("range(ty, TILE, ROWS)", "range(ty, ty + TILE // ROWS)"),
        ),
        (
            "the tile loaded along the row it was stored: a copy of the tile, not its transpose",
            _tr((_STORE, "        out[col0 + r, row0 + tx] = tile[r, tx]")),
        ),
        (
            "out's row and column from the same corner as a's (out[row0 + r, col0 + tx])",
            _tr(
                (_STORE, "        out[row0 + r, col0 + tx] = tile[tx, r]"),
                (_IN_OUT, "if row0 + r < out.shape[0] and col0 + tx < out.shape[1]:"),
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

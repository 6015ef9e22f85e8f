"""Wrong answers a student could plausibly write for lab 4; each must fail its graded check.

Used by ``tools/check_wrong_answers.py 04_tensor_lab``. Each entry replaces the BEGIN/END
SOLUTION region(s) of the exercise's solution cell (exercise 2's cell has two: transpose,
expand; exercise 4's two: infer_size, broadcast_strides; exercise 6's two: round_size,
allocation_size).
"""

_STRIDES = """\
strides, step = [], 1
for n in reversed(sizes):
    strides.append(step)
    step *= max(n, 1)
return tuple(reversed(strides))
"""

_TRANSPOSE = """\
n = len(sizes)
dim0, dim1 = dim0 % n, dim1 % n
sizes, strides = list(sizes), list(strides)
sizes[dim0], sizes[dim1] = sizes[dim1], sizes[dim0]
strides[dim0], strides[dim1] = strides[dim1], strides[dim0]
return tuple(sizes), tuple(strides), offset
"""

_EXPAND = """\
lead = len(new_sizes) - len(sizes)
out_sizes, out_strides = [0] * len(new_sizes), [0] * len(new_sizes)
for k in range(len(new_sizes) - 1, -1, -1):
    want = new_sizes[k]
    if k < lead:  # a new dim: size 1, stride as if contiguous with the dim after it
        have = 1
        stride = out_sizes[k + 1] * out_strides[k + 1] if k + 1 < len(new_sizes) else 1
    else:
        have, stride = sizes[k - lead], strides[k - lead]
    if want == -1:
        want = have
    if want != have:
        if have != 1:
            raise RuntimeError(f"cannot expand size {have} to {want} at dim {k}")
        stride = 0
    out_sizes[k], out_strides[k] = want, stride
return tuple(out_sizes), tuple(out_strides), offset
"""

_VIEW = """\
if len(sizes) == 0:
    return (1,) * len(new_shape)
new_strides = [0] * len(new_shape)
view_d = len(new_shape) - 1
chunk_base_stride = strides[-1]
tensor_numel = view_numel = 1
for d in range(len(sizes) - 1, -1, -1):
    tensor_numel *= sizes[d]
    if d == 0 or (sizes[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk_base_stride):
        while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
            new_strides[view_d] = view_numel * chunk_base_stride
            view_numel *= new_shape[view_d]
            view_d -= 1
        if view_numel != tensor_numel:
            return None
        if d > 0:
            chunk_base_stride = strides[d - 1]
            tensor_numel = view_numel = 1
return tuple(new_strides) if view_d == -1 else None
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
i = cuda.blockIdx.x * TILE + tx
j = cuda.blockIdx.y * TILE + ty
acc = np.float32(0)
for t in range((a.shape[1] + TILE - 1) // TILE):
    k = t * TILE
    sa[tx, ty] = a[i, k + ty] if i < a.shape[0] and k + ty < a.shape[1] else 0
    sb[tx, ty] = b[k + tx, j] if k + tx < b.shape[0] and j < b.shape[1] else 0
    cuda.syncthreads()
    for kk in range(TILE):
        acc += sa[tx, kk] * sb[kk, ty]
    cuda.syncthreads()
if i < c.shape[0] and j < c.shape[1]:
    c[i, j] = acc
"""

_ROUND = """\
if nbytes < 512:
    return 512
return 512 * ((nbytes + 511) // 512)
"""

_ALLOC = """\
if size <= 1 * MiB:
    return 2 * MiB
if size < 10 * MiB:
    return 20 * MiB
return 2 * MiB * ((size + 2 * MiB - 1) // (2 * MiB))
"""

WRONG = {
    "ex1_contiguous_strides": [
        (
            "column-major (Fortran) order: strides grow from the first dim",
            """\
strides, step = [], 1
for n in sizes:
    strides.append(step)
    step *= max(n, 1)
return tuple(strides)
""",
        ),
        (
            "size-0 dims multiplied in as they are (every stride before them becomes 0)",
            _STRIDES.replace("step *= max(n, 1)", "step *= n"),
        ),
        (
            "each stride includes its own dim's size (off by one dim)",
            """\
strides, step = [], 1
for n in reversed(sizes):
    step *= max(n, 1)
    strides.append(step)
return tuple(reversed(strides))
""",
        ),
    ],
    "ex2_view_meta": [
        (
            "transpose swaps the sizes but not the strides",
            [
                _TRANSPOSE.replace(
                    "strides[dim0], strides[dim1] = strides[dim1], strides[dim0]\n", ""
                ),
                None,
            ],
        ),
        (
            "negative dims not wrapped (Python's list indexing wraps -1, but not -2 with 4 dims "
            "the same way after the swap)",
            [
                _TRANSPOSE.replace(
                    "dim0, dim1 = dim0 % n, dim1 % n", "dim0, dim1 = abs(dim0), abs(dim1)"
                ),
                None,
            ],
        ),
        (
            "a dim of size 1 that grows keeps its stride",
            [None, _EXPAND.replace("        stride = 0\n", "")],
        ),
        (
            "every new leading dim gets stride 0, also one that stays of size 1",
            [
                None,
                _EXPAND.replace(
                    "stride = out_sizes[k + 1] * out_strides[k + 1] if k + 1 < len(new_sizes) else 1",
                    "stride = 0",
                ),
            ],
        ),
        (
            "-1 taken literally as a size (never matches, so it raises or grows)",
            [None, _EXPAND.replace("    if want == -1:\n        want = have\n", "")],
        ),
    ],
    "ex3_view_strides": [
        (
            "only contiguous tensors can be viewed (None for anything else)",
            """\
expect, step = [], 1
for n in reversed(sizes):
    expect.append(step)
    step *= n
if tuple(reversed(expect)) != tuple(strides):
    return None
out, step = [], 1
for n in reversed(new_shape):
    out.append(step)
    step *= n
return tuple(reversed(out))
""",
        ),
        (
            "always contiguous strides for the new shape, never None",
            """\
out, step = [], 1
for n in reversed(new_shape):
    out.append(step)
    step *= n
return tuple(reversed(out))
""",
        ),
        (
            "chunks split wherever a stride differs, ignoring that size-1 dims fit anywhere",
            _VIEW.replace(
                "(sizes[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk_base_stride)",
                "strides[d - 1] != tensor_numel * chunk_base_stride",
            ),
        ),
        (
            "a new dim's stride from the old dim's stride only, not the chunk's base",
            _VIEW.replace(
                "new_strides[view_d] = view_numel * chunk_base_stride",
                "new_strides[view_d] = view_numel * strides[d]",
            ),
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
    ],
    "ex5_tiled_matmul": [
        (
            "tiles counted with floor division (the last partial tile of K is dropped)",
            _TILED.replace("range((a.shape[1] + TILE - 1) // TILE)", "range(a.shape[1] // TILE)"),
        ),
        (
            "a's tile loaded transposed (row and column thread indices swapped)",
            _TILED.replace("sa[tx, ty] = a[i, k + ty]", "sa[tx, ty] = a[i, k + tx]"),
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
                "if i < a.shape[0] and k + ty < a.shape[1] else 0",
                "if i < a.shape[0] and k + ty < a.shape[1] else 1",
            ).replace(
                "if k + tx < b.shape[0] and j < b.shape[1] else 0",
                "if k + tx < b.shape[0] and j < b.shape[1] else 1",
            ),
        ),
    ],
    "ex6_allocator_rounding": [
        (
            "rounded to the next power of two",
            [
                """\
size = 512
while size < nbytes:
    size *= 2
return size
""",
                None,
            ],
        ),
        (
            "an exact multiple of 512 rounded up once more",
            [_ROUND.replace("(nbytes + 511) // 512", "nbytes // 512 + 1"), None],
        ),
        (
            "1 MiB exactly treated as a large request",
            [None, _ALLOC.replace("size <= 1 * MiB", "size < 1 * MiB")],
        ),
        (
            "10 MiB exactly given a 20 MiB segment",
            [None, _ALLOC.replace("size < 10 * MiB", "size <= 10 * MiB")],
        ),
        (
            "large requests get exactly their size",
            [
                None,
                _ALLOC.replace(
                    "return 2 * MiB * ((size + 2 * MiB - 1) // (2 * MiB))", "return size"
                ),
            ],
        ),
    ],
}

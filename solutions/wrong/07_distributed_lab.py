"""Wrong answers a student could plausibly write for lab 7; each must fail its graded check.

Used by ``tools/check_wrong_answers.py 07_distributed_lab``. Each entry replaces the BEGIN/END
SOLUTION region(s) of the exercise's solution cell (exercise 4's cell has two:
``flatten_and_shard``, ``unflatten``).
"""

_SCHEDULE = """\
steps = []
for s in range(n - 1):  # reduce-scatter: chunk r completes on rank r at the last step
    steps.append(((rank - s - 1) % n, (rank - s - 2) % n))
for s in range(n - 1):  # all-gather: pass on the chunk that is complete
    steps.append(((rank - s) % n, (rank - s - 1) % n))
return steps
"""

_BUCKETS = """\
buckets, current, filled = [], [], 0
limit = first_cap_bytes if first_cap_bytes < cap_bytes else cap_bytes
for i, size in enumerate(sizes_in_bytes):
    current.append(i)
    filled += size
    if filled >= limit:
        buckets.append(current)
        current, filled, limit = [], 0, cap_bytes
if current:
    buckets.append(current)
return buckets[::-1]
"""

_REDUCE_SCATTER = """\
size = math.ceil(x.numel() / n)
chunks = list(torch.cat([x, x.new_zeros(n * size - x.numel())]).view(n, size).clone())
for s in range(n - 1):
    send(chunks[(rank - s - 1) % n])
    into = (rank - s - 2) % n
    chunks[into] = chunks[into] + recv()
return chunks[rank]
"""

_SHARD = """\
flat = torch.cat([p.detach().reshape(-1) for p in params])
size = math.ceil(flat.numel() / world)
flat = torch.cat([flat, flat.new_zeros(size * world - flat.numel())])
meta = [(p.numel(), tuple(p.shape)) for p in params]
return flat[rank * size: (rank + 1) * size].clone(), meta
"""

_UNFLATTEN = """\
params, start = [], 0
for numel, shape in meta:
    params.append(full_flat[start: start + numel].view(shape))
    start += numel
return params
"""


def _sub(text: str, old: str, new: str) -> str:
    assert old in text, old  # a wrong answer must change the solution where it says
    return text.replace(old, new)


WRONG = {
    "ex1_ring_schedule": [
        (
            "the textbook ring: step s sends chunk rank - s, so rank r finishes chunk r + 1 "
            "(a correct all-reduce, but not reduce_scatter's ownership)",
            """\
steps = []
for s in range(n - 1):
    steps.append(((rank - s) % n, (rank - s - 1) % n))
for s in range(n - 1):
    steps.append(((rank - s + 1) % n, (rank - s) % n))
return steps
""",
        ),
        (
            "each rank receives the same chunk it sends",
            _sub(_SCHEDULE, "(rank - s - 2) % n))\nfor", "(rank - s - 1) % n))\nfor"),
        ),
        (
            "the all-gather repeats the reduce-scatter's chunks (sends chunks not yet complete)",
            _sub(_SCHEDULE, "steps.append(((rank - s) % n, (rank - s - 1) % n))",
                 "steps.append(((rank - s - 1) % n, (rank - s - 2) % n))"),
        ),
        (
            "chunks walk the ring the other way (rank + s), against the direction of sends",
            """\
steps = []
for s in range(n - 1):
    steps.append(((rank + s + 1) % n, (rank + s + 2) % n))
for s in range(n - 1):
    steps.append(((rank + s) % n, (rank + s + 1) % n))
return steps
""",
        ),
        (
            "only the reduce-scatter half (n - 1 steps)",
            _sub(_SCHEDULE, "for s in range(n - 1):  # all-gather: pass",
                 "for s in range(0):  # all-gather: pass"),
        ),
        (
            "memoised by rank only: a cache kept between calls returns another n's schedule",
            """\
cache = ring_schedule.__dict__.setdefault("cache", {})
if rank not in cache:
    steps = []
    for s in range(n - 1):
        steps.append(((rank - s - 1) % n, (rank - s - 2) % n))
    for s in range(n - 1):
        steps.append(((rank - s) % n, (rank - s - 1) % n))
    cache[rank] = steps
return cache[rank]
""",
        ),
        (
            "chunk numbers without % n (negative numbers index a Python list from the end)",
            """\
steps = []
for s in range(n - 1):
    steps.append((rank - s - 1, rank - s - 2))
for s in range(n - 1):
    steps.append((rank - s, rank - s - 1))
return steps
""",
        ),
        (
            "the all-gather sends the rank's own chunk at every step (right for n = 2 only)",
            _sub(_SCHEDULE, "steps.append(((rank - s) % n, (rank - s - 1) % n))",
                 "steps.append((rank, (rank - 1) % n))"),
        ),
        (
            "n steps per phase (range(n)): one step too many in each",
            _sub(_SCHEDULE, "for s in range(n - 1):  # all-gather", "for s in range(n):  # all-gather")
            .replace("for s in range(n - 1):  # reduce", "for s in range(n):  # reduce"),
        ),
        (
            "the two phases in the wrong order (all-gather steps first)",
            """\
steps = []
for s in range(n - 1):
    steps.append(((rank - s) % n, (rank - s - 1) % n))
for s in range(n - 1):
    steps.append(((rank - s - 1) % n, (rank - s - 2) % n))
return steps
""",
        ),
        (
            "each phase's steps listed last to first",
            """\
rs = [((rank - s - 1) % n, (rank - s - 2) % n) for s in range(n - 1)]
ag = [((rank - s) % n, (rank - s - 1) % n) for s in range(n - 1)]
return rs[::-1] + ag[::-1]
""",
        ),
    ],
    "ex2_assign_buckets": [
        (
            "buckets left in registration order (not reversed for backward)",
            _sub(_BUCKETS, "return buckets[::-1]", "return buckets"),
        ),
        (
            "parameters walked from the last one (filled in reverse registration order)",
            """\
buckets, current, filled = [], [], 0
limit = first_cap_bytes if first_cap_bytes < cap_bytes else cap_bytes
for i in reversed(range(len(sizes_in_bytes))):
    current.append(i)
    filled += sizes_in_bytes[i]
    if filled >= limit:
        buckets.append(sorted(current))
        current, filled, limit = [], 0, cap_bytes
if current:
    buckets.append(sorted(current))
return buckets
""",
        ),
        (
            "a new bucket opened before the limit would be passed (a bucket never overshoots)",
            """\
buckets, current, filled = [], [], 0
limit = first_cap_bytes if first_cap_bytes < cap_bytes else cap_bytes
for i, size in enumerate(sizes_in_bytes):
    if current and filled + size > limit:
        buckets.append(current)
        current, filled, limit = [], 0, cap_bytes
    current.append(i)
    filled += size
if current:
    buckets.append(current)
return buckets[::-1]
""",
        ),
        (
            "a bucket closes only once its bytes pass the limit (> instead of >=)",
            _sub(_BUCKETS, "if filled >= limit:", "if filled > limit:"),
        ),
        (
            "the small first bucket forgotten (cap_bytes everywhere)",
            _sub(_BUCKETS, "limit = first_cap_bytes if first_cap_bytes < cap_bytes else cap_bytes",
                 "limit = cap_bytes"),
        ),
        (
            "first_cap_bytes used for the first bucket even when larger than cap_bytes",
            _sub(_BUCKETS, "limit = first_cap_bytes if first_cap_bytes < cap_bytes else cap_bytes",
                 "limit = first_cap_bytes"),
        ),
        (
            "the last bucket appended even when empty (the last parameter closed it)",
            _sub(_BUCKETS, "if current:\n    buckets.append(current)", "buckets.append(current)"),
        ),
        (
            "the overshoot carried into the next bucket (filled -= limit instead of 0)",
            _sub(_BUCKETS, "current, filled, limit = [], 0, cap_bytes",
                 "current, filled, limit = [], filled - limit, cap_bytes"),
        ),
        (
            "the limit never switched to cap_bytes after the first bucket",
            _sub(_BUCKETS, "current, filled, limit = [], 0, cap_bytes", "current, filled = [], 0"),
        ),
        (
            "the indices reversed inside each bucket too (everything reversed)",
            _sub(_BUCKETS, "return buckets[::-1]", "return [b[::-1] for b in buckets[::-1]]"),
        ),
        (
            "a bucket closed when one parameter alone reaches the limit (size, not filled)",
            _sub(_BUCKETS, "if filled >= limit:", "if size >= limit:"),
        ),
        (
            "the sizes consumed with pop(0) (the caller's list emptied)",
            """\
buckets, current, filled, i = [], [], 0, 0
limit = first_cap_bytes if first_cap_bytes < cap_bytes else cap_bytes
while sizes_in_bytes:
    size = sizes_in_bytes.pop(0)
    current.append(i)
    filled += size
    i += 1
    if filled >= limit:
        buckets.append(current)
        current, filled, limit = [], 0, cap_bytes
if current:
    buckets.append(current)
return buckets[::-1]
""",
        ),
    ],
    "ex3_reduce_scatter": [
        (
            "chunks cut with tensor_split, without padding (sizes differ by one)",
            """\
chunks = [c.clone() for c in x.tensor_split(n)]
for s in range(n - 1):
    send(chunks[(rank - s - 1) % n])
    into = (rank - s - 2) % n
    chunks[into] = chunks[into] + recv()
return chunks[rank]
""",
        ),
        (
            "the whole running sum passed round the ring, then sliced (n - 1 full messages)",
            """\
size = math.ceil(x.numel() / n)
total = torch.cat([x, x.new_zeros(n * size - x.numel())])
own = total.clone()
for s in range(n - 1):
    send(own)
    own = recv()
    total = total + own
return total.view(n, size)[rank]
""",
        ),
        (
            "the textbook schedule: rank r ends with chunk r + 1",
            _sub(
                _sub(
                    _sub(_REDUCE_SCATTER, "send(chunks[(rank - s - 1) % n])",
                         "send(chunks[(rank - s) % n])"),
                    "into = (rank - s - 2) % n", "into = (rank - s - 1) % n",
                ),
                "return chunks[rank]",
                "return chunks[(rank + 1) % n]",
            ),
        ),
        (
            "the received chunk replaces the own one instead of being added to it",
            _sub(_REDUCE_SCATTER, "chunks[into] = chunks[into] + recv()", "chunks[into] = recv()"),
        ),
        (
            "the zero padding put in front of the elements",
            _sub(
                _REDUCE_SCATTER,
                "torch.cat([x, x.new_zeros(n * size - x.numel())])",
                "torch.cat([x.new_zeros(n * size - x.numel()), x])",
            ),
        ),
        (
            "receive before sending: every rank waits for its neighbour (a deadlock)",
            """\
size = math.ceil(x.numel() / n)
chunks = list(torch.cat([x, x.new_zeros(n * size - x.numel())]).view(n, size).clone())
for s in range(n - 1):
    incoming = recv()
    send(chunks[(rank - s - 1) % n])
    into = (rank - s - 2) % n
    chunks[into] = chunks[into] + incoming
return chunks[rank]
""",
        ),
        (
            "the last step skipped (range(n - 2)): the shard misses one rank's chunk",
            _sub(_REDUCE_SCATTER, "for s in range(n - 1):", "for s in range(max(n - 2, 1)):"),
        ),
        (
            "the padding trimmed off the shard (only the real elements returned)",
            _sub(_REDUCE_SCATTER, "return chunks[rank]",
                 "return chunks[rank][: max(0, min(size, x.numel() - rank * size))]"),
        ),
        (
            "n - N % n zeros of padding (a whole extra chunk's worth when n divides N)",
            _sub(_REDUCE_SCATTER,
                 "chunks = list(torch.cat([x, x.new_zeros(n * size - x.numel())]).view(n, size).clone())",
                 "chunks = list(torch.cat([x, x.new_zeros(n - x.numel() % n)]).view(n, -1).clone())"),
        ),
        (
            "floor(N / n) elements per chunk, the remainder dropped",
            _sub(_REDUCE_SCATTER,
                 "size = math.ceil(x.numel() / n)\n"
                 "chunks = list(torch.cat([x, x.new_zeros(n * size - x.numel())]).view(n, size).clone())",
                 "size = x.numel() // n\nchunks = list(x[: n * size].view(n, size).clone())"),
        ),
        (
            "send the next chunk, add into your own at every step (right for n = 2 only)",
            """\
size = math.ceil(x.numel() / n)
chunks = list(torch.cat([x, x.new_zeros(n * size - x.numel())]).view(n, size).clone())
for s in range(n - 1):
    send(chunks[(rank + 1) % n])
    chunks[rank] = chunks[rank] + recv()
return chunks[rank]
""",
        ),
        (
            "the received chunk forwarded as it came, not the running sum",
            """\
size = math.ceil(x.numel() / n)
chunks = list(torch.cat([x, x.new_zeros(n * size - x.numel())]).view(n, size).clone())
outgoing = chunks[(rank - 1) % n]
for s in range(n - 1):
    send(outgoing)
    into = (rank - s - 2) % n
    outgoing = recv()
    chunks[into] = chunks[into] + outgoing
return chunks[rank]
""",
        ),
        (
            "chunks cut with split(1): every chunk, and the shard, a (1, size) row",
            _sub(_REDUCE_SCATTER, ".view(n, size).clone())", ".view(n, size).clone().split(1))"),
        ),
    ],
    "ex4_flat_param": [
        (
            "no padding: torch.chunk's pieces as they come (the last ranks' are shorter)",
            [
                """\
flat = torch.cat([p.detach().reshape(-1) for p in params])
chunks = flat.chunk(world)
meta = [(p.numel(), tuple(p.shape)) for p in params]
shard = chunks[rank].clone() if rank < len(chunks) else flat.new_zeros(0)
return shard, meta
""",
                None,
            ],
        ),
        (
            "floor(total / world) per rank, the remainder on the last rank",
            [
                """\
flat = torch.cat([p.detach().reshape(-1) for p in params])
size = flat.numel() // world
end = flat.numel() if rank == world - 1 else (rank + 1) * size
meta = [(p.numel(), tuple(p.shape)) for p in params]
return flat[rank * size: end].clone(), meta
""",
                None,
            ],
        ),
        (
            "each parameter padded and sharded on its own (FSDP2's per-parameter sharding)",
            [
                """\
pieces = []
for p in params:
    f = p.detach().reshape(-1)
    size = math.ceil(f.numel() / world)
    f = torch.cat([f, f.new_zeros(size * world - f.numel())])
    pieces.append(f[rank * size: (rank + 1) * size])
meta = [(p.numel(), tuple(p.shape)) for p in params]
return torch.cat(pieces), meta
""",
                None,
            ],
        ),
        (
            "the padding put in front of the flat parameter",
            [
                _sub(
                    _SHARD,
                    "torch.cat([flat, flat.new_zeros(size * world - flat.numel())])",
                    "torch.cat([flat.new_zeros(size * world - flat.numel()), flat])",
                ),
                _sub(_UNFLATTEN, "params, start = [], 0",
                     "params, start = [], full_flat.numel() - sum(n for n, _ in meta)"),
            ],
        ),
        (
            "unflatten copies the pieces (the parameters are no longer views)",
            [None, _sub(_UNFLATTEN, ".view(shape))", ".reshape(shape).clone())")],
        ),
        (
            "unflatten keeps the pieces flat (shapes not restored)",
            [None, _sub(_UNFLATTEN, ".view(shape))", ")")],
        ),
        (
            "meta a zip iterator: unflatten works once, the next time it finds no parameters",
            [
                _sub(_SHARD, "meta = [(p.numel(), tuple(p.shape)) for p in params]",
                     "meta = zip([p.numel() for p in params], [tuple(p.shape) for p in params])"),
                None,
            ],
        ),
        (
            "the shapes kept in a global by flatten_and_shard; unflatten ignores meta",
            [
                """\
global _last_shapes
_last_shapes = [tuple(p.shape) for p in params]
flat = torch.cat([p.detach().reshape(-1) for p in params])
size = math.ceil(flat.numel() / world)
flat = torch.cat([flat, flat.new_zeros(size * world - flat.numel())])
return flat[rank * size: (rank + 1) * size].clone(), len(params)
""",
                """\
params, start = [], 0
for shape in _last_shapes:
    numel = math.prod(shape)
    params.append(full_flat[start: start + numel].view(shape))
    start += numel
return params
""",
            ],
        ),
        (
            "the shard a view of the padded flat tensor (no clone: every rank keeps the whole)",
            [_sub(_SHARD, "(rank + 1) * size].clone(), meta", "(rank + 1) * size], meta"), None],
        ),
        (
            "total // world + 1 elements per shard (one too many when world divides the total)",
            [_sub(_SHARD, "size = math.ceil(flat.numel() / world)",
                  "size = flat.numel() // world + 1"), None],
        ),
        (
            "the shard a strided slice flat[rank::world] (round-robin, not contiguous pieces)",
            [_sub(_SHARD, "flat[rank * size: (rank + 1) * size].clone()",
                  "flat[rank::world].clone()"), None],
        ),
        (
            "unflatten with .view(*shape): a 0-d parameter's empty shape calls view()",
            [None, _sub(_UNFLATTEN, ".view(shape))", ".view(*shape))")],
        ),
    ],
}

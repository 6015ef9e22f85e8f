"""Wrong answers a student could plausibly write for lab 7; each must fail its graded check.

Used by ``tools/check_wrong_answers.py 07_distributed_lab``. Each entry replaces the BEGIN/END
SOLUTION region(s) of the exercise's solution cell (exercise 4's cell has two:
``flatten_and_shard``, ``unflatten``).
"""

_SCHEDULE = """\
n, p = len(ring), ring.index(rank)  # rank's position on the ring
steps = []
for s in range(n - 1):  # reduce-scatter
    steps.append((ring[(p - s - 1) % n], ring[(p - s - 2) % n]))
for s in range(n - 1):  # all-gather
    steps.append((ring[(p - s) % n], ring[(p - s - 1) % n]))
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
n, p = len(ring), ring.index(rank)
flat = x.reshape(-1)  # a copy when x is a strided view
size = math.ceil(flat.numel() / n)
chunks = list(torch.cat([flat, flat.new_zeros(n * size - flat.numel())]).view(n, size))
for s in range(n - 1):
    send(chunks[ring[(p - s - 1) % n]])
    into = ring[(p - s - 2) % n]
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
            "chapter 7's formulas copied: ranks taken for ring positions (right only when "
            "ring = [0, 1, ..., n-1])",
            """\
n = len(ring)
steps = []
for s in range(n - 1):
    steps.append(((rank - s - 1) % n, (rank - s - 2) % n))
for s in range(n - 1):
    steps.append(((rank - s) % n, (rank - s - 1) % n))
return steps
""",
        ),
        (
            "positions returned instead of the chunks (ranks) at those positions",
            """\
n, p = len(ring), ring.index(rank)
steps = []
for s in range(n - 1):
    steps.append(((p - s - 1) % n, (p - s - 2) % n))
for s in range(n - 1):
    steps.append(((p - s) % n, (p - s - 1) % n))
return steps
""",
        ),
        (
            "the ring's position looked up as ring[rank] instead of ring.index(rank)",
            _sub(_SCHEDULE, "p = len(ring), ring.index(rank)", "p = len(ring), ring[rank]"),
        ),
        (
            "the textbook ring: rank ring[p] finishes the chunk of ring[p + 1] (a correct "
            "all-reduce, but not reduce_scatter's ownership)",
            """\
n, p = len(ring), ring.index(rank)
steps = []
for s in range(n - 1):
    steps.append((ring[(p - s) % n], ring[(p - s - 1) % n]))
for s in range(n - 1):
    steps.append((ring[(p - s + 1) % n], ring[(p - s) % n]))
return steps
""",
        ),
        (
            "chunks walk the ring the other way, against the direction of sends",
            """\
n, p = len(ring), ring.index(rank)
steps = []
for s in range(n - 1):
    steps.append((ring[(p + s + 1) % n], ring[(p + s + 2) % n]))
for s in range(n - 1):
    steps.append((ring[(p + s) % n], ring[(p + s + 1) % n]))
return steps
""",
        ),
        (
            "the ring sorted in place to find the position (changes the caller's list)",
            _sub(_SCHEDULE, "n, p = len(ring), ring.index(rank)",
                 "ring.sort()\nn, p = len(ring), ring.index(rank)"),
        ),
        (
            "n hard-coded to 4, the size of the chapter's figure",
            _sub(_SCHEDULE, "n, p = len(ring), ring.index(rank)", "n, p = 4, ring.index(rank)"),
        ),
        (
            "each rank receives the same chunk it sends",
            _sub(_SCHEDULE, "ring[(p - s - 2) % n]))", "ring[(p - s - 1) % n]))"),
        ),
        (
            "the all-gather repeats the reduce-scatter's chunks (sends chunks not yet complete)",
            _sub(_SCHEDULE, "steps.append((ring[(p - s) % n], ring[(p - s - 1) % n]))",
                 "steps.append((ring[(p - s - 1) % n], ring[(p - s - 2) % n]))"),
        ),
        (
            "only the reduce-scatter half (n - 1 steps)",
            _sub(_SCHEDULE, "for s in range(n - 1):  # all-gather", "for s in range(0):"),
        ),
        (
            "at least one step, even for a ring of one rank (which has nothing to send)",
            _sub(_SCHEDULE, "for s in range(n - 1):  # reduce-scatter",
                 "for s in range(max(n - 1, 1)):"),
        ),
        (
            "each pair written (received, sent) instead of (sent, received)",
            """\
n, p = len(ring), ring.index(rank)
steps = []
for s in range(n - 1):
    steps.append((ring[(p - s - 2) % n], ring[(p - s - 1) % n]))
for s in range(n - 1):
    steps.append((ring[(p - s - 1) % n], ring[(p - s) % n]))
return steps
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
            "wrong dtype: zeros of the default dtype (float32) as padding, so an int64 or "
            "bfloat16 input gives a float32 shard",
            _sub(_REDUCE_SCATTER, "flat.new_zeros(n * size - flat.numel())",
                 "torch.zeros(n * size - flat.numel())"),
        ),
        (
            "wrong dtype: the sums accumulated in float32 for precision, and returned so",
            _sub(_REDUCE_SCATTER, "chunks[into] = chunks[into] + recv()",
                 "chunks[into] = chunks[into].float() + recv().float()"),
        ),
        (
            "non-contiguous input: x.view(-1), which fails on a transposed or strided view",
            _sub(_REDUCE_SCATTER, "flat = x.reshape(-1)  # a copy when x is a strided view",
                 "flat = x.view(-1)"),
        ),
        (
            "non-contiguous input: the memory from x's first element read as if contiguous "
            "(as_strided; what torch 2.13's gloo all_reduce does to a strided view)",
            _sub(_REDUCE_SCATTER, "flat = x.reshape(-1)  # a copy when x is a strided view",
                 "flat = x.as_strided((x.numel(),), (1,))"),
        ),
        (
            "size-0 input: chunks of at least one element (max(1, ...)), so an empty tensor "
            "gives a shard of one zero",
            _sub(_REDUCE_SCATTER, "size = math.ceil(flat.numel() / n)",
                 "size = max(1, math.ceil(flat.numel() / n))"),
        ),
        (
            "N // n + 1 elements per chunk: one too many when n divides N",
            _sub(_REDUCE_SCATTER, "size = math.ceil(flat.numel() / n)",
                 "size = flat.numel() // n + 1"),
        ),
        (
            "one rank: x returned as it is (its shape and layout), not the flat shard",
            _sub(_REDUCE_SCATTER, "n, p = len(ring), ring.index(rank)\n",
                 "n, p = len(ring), ring.index(rank)\nif n == 1:\n    return x\n"),
        ),
        (
            "chapter 7's formulas copied: ranks taken for ring positions",
            _sub(_sub(_REDUCE_SCATTER, "send(chunks[ring[(p - s - 1) % n]])",
                      "send(chunks[(rank - s - 1) % n])"),
                 "into = ring[(p - s - 2) % n]", "into = (rank - s - 2) % n"),
        ),
        (
            "the received chunk written over the own one instead of added to it",
            _sub(_REDUCE_SCATTER, "chunks[into] = chunks[into] + recv()", "chunks[into] = recv()"),
        ),
        (
            "the sums added in place into the chunks, which are views of the caller's x when "
            "no padding is needed",
            _sub(_sub(_REDUCE_SCATTER,
                      "chunks = list(torch.cat([flat, flat.new_zeros(n * size - flat.numel())])"
                      ".view(n, size))",
                      "padded = flat if n * size == flat.numel() else torch.cat(\n"
                      "    [flat, flat.new_zeros(n * size - flat.numel())])\n"
                      "chunks = list(padded.view(n, size))"),
                 "chunks[into] = chunks[into] + recv()", "chunks[into] += recv()"),
        ),
        (
            "chunks cut with tensor_split, without padding (sizes differ by one)",
            _sub(_REDUCE_SCATTER,
                 "chunks = list(torch.cat([flat, flat.new_zeros(n * size - flat.numel())])"
                 ".view(n, size))",
                 "chunks = [c.clone() for c in flat.tensor_split(n)]"),
        ),
        (
            "the zero padding put in front of the elements",
            _sub(_REDUCE_SCATTER, "torch.cat([flat, flat.new_zeros(n * size - flat.numel())])",
                 "torch.cat([flat.new_zeros(n * size - flat.numel()), flat])"),
        ),
        (
            "receive before sending: every rank waits for its neighbour (a deadlock)",
            _sub(_sub(_REDUCE_SCATTER, "    send(chunks[ring[(p - s - 1) % n]])\n",
                      "    incoming = recv()\n    send(chunks[ring[(p - s - 1) % n]])\n"),
                 "chunks[into] = chunks[into] + recv()", "chunks[into] = chunks[into] + incoming"),
        ),
        (
            "the whole running sum passed round the ring, then sliced (n - 1 full messages)",
            """\
n = len(ring)
flat = x.reshape(-1)
size = math.ceil(flat.numel() / n)
total = torch.cat([flat, flat.new_zeros(n * size - flat.numel())])
own = total.clone()
for s in range(n - 1):
    send(own)
    own = recv()
    total = total + own
return total.view(n, size)[rank]
""",
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

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
limits = [first_cap_bytes, cap_bytes] if first_cap_bytes < cap_bytes else [cap_bytes]
done, open_buckets = [], {}  # (dtype, device) -> [indices, bytes, buckets closed]
for i, p in enumerate(params):
    if sparse[i]:
        done.append([i])
        continue
    key = (p.dtype, p.device)
    b = open_buckets.setdefault(key, [[], 0, 0])
    b[0].append(i)
    b[1] += p.numel() * p.element_size()
    if b[1] >= limits[min(b[2], len(limits) - 1)]:
        done.append(b[0])
        open_buckets[key] = [[], 0, b[2] + 1]
done += [b[0] for b in open_buckets.values() if b[0]]
done.sort(key=min)
return done[::-1]
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

_REDISTRIBUTE = """\
names = {"PR": "all_reduce", "PS": "reduce_scatter_tensor",
         "SR": "all_gather_into_tensor", "SS": "shard_dim_alltoall", "RS": "chunk"}
current, steps = list(src), []

def kind(p):
    return "P" if p.is_partial() else "S" if p.is_shard() else "R"

def move(d, target):
    if current[d] != target and mesh_shape[d] > 1:
        steps.append((d, names[kind(current[d]) + kind(target)]))
    current[d] = target

if math.prod(n for n, p in zip(mesh_shape, src) if p.is_shard()) > 1:
    for d in reversed(range(len(src))):  # last to first: undo nested sharding
        target = dst[d]
        if target.is_shard():
            now = [i for i in range(d) if current[i].is_shard(target.dim)]
            then = [i for i in range(d) if dst[i].is_shard(target.dim)]
            target = target if now == then else Replicate()
        move(d, target)
for d in range(len(src)):  # first to last: the rest
    move(d, dst[d])
return steps
"""

_SHARD_SIZES = """\
chunk = math.ceil(size / world)
sizes = [max(0, min(size, (r + 1) * chunk) - r * chunk) for r in range(world)]
return [(s, chunk - s) for s in sizes]
"""

_MM = """\
R = Replicate()
strategies = [(R, R, R)]
if pa.is_shard() or pb.is_shard():
    strategies += [(Partial(), Shard(1), Shard(0)), (Shard(0), Shard(0), R),
                   (Shard(1), R, Shard(1))]
for op in ("sum", "avg"):
    strategies += [(Partial(op), Partial(op), R), (Partial(op), R, Partial(op))]

def fits(shape, p):
    return not p.is_shard() or shape[p.dim] >= world

best, best_cost = None, float("inf")
for out, wa, wb in strategies:
    if not (fits(a_shape, wa) and fits(b_shape, wb)):
        continue
    c = cost(0, wa) + cost(1, wb)
    if c < best_cost:  # the first of the cheapest
        best, best_cost = (out, wa, wb), c
return best
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
            _sub(
                _SCHEDULE,
                "n, p = len(ring), ring.index(rank)",
                "ring.sort()\nn, p = len(ring), ring.index(rank)",
            ),
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
            _sub(
                _SCHEDULE,
                "steps.append((ring[(p - s) % n], ring[(p - s - 1) % n]))",
                "steps.append((ring[(p - s - 1) % n], ring[(p - s - 2) % n]))",
            ),
        ),
        (
            "only the reduce-scatter half (n - 1 steps)",
            _sub(_SCHEDULE, "for s in range(n - 1):  # all-gather", "for s in range(0):"),
        ),
        (
            "at least one step, even for a ring of one rank (which has nothing to send)",
            _sub(
                _SCHEDULE,
                "for s in range(n - 1):  # reduce-scatter",
                "for s in range(max(n - 1, 1)):",
            ),
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
            "buckets left in sorted order (not reversed for backward)",
            _sub(_BUCKETS, "return done[::-1]", "return done"),
        ),
        (
            "one bucket for every dtype (no grouping by (dtype, device))",
            _sub(_BUCKETS, "key = (p.dtype, p.device)", "key = 0"),
        ),
        (
            "a sparse parameter bucketed like the dense ones (not alone)",
            _sub(_BUCKETS, "if sparse[i]:", "if False:"),
        ),
        (
            "one limit counter shared by all dtypes (the first limit for the first bucket only)",
            """\
limits = [first_cap_bytes, cap_bytes] if first_cap_bytes < cap_bytes else [cap_bytes]
done, open_buckets, closed = [], {}, 0
for i, p in enumerate(params):
    if sparse[i]:
        done.append([i])
        continue
    b = open_buckets.setdefault((p.dtype, p.device), [[], 0])
    b[0].append(i)
    b[1] += p.numel() * p.element_size()
    if b[1] >= limits[min(closed, len(limits) - 1)]:
        done.append(b[0])
        b[:] = [[], 0]
        closed += 1
done += [b[0] for b in open_buckets.values() if b[0]]
done.sort(key=min)
return done[::-1]
""",
        ),
        (
            "buckets not sorted by their smallest index (closed ones first, leftovers last)",
            _sub(_BUCKETS, "done.sort(key=min)\n", ""),
        ),
        (
            "the first limit used even when larger than the cap",
            _sub(_BUCKETS, "if first_cap_bytes < cap_bytes else [cap_bytes]", ""),
        ),
        (
            "a bucket closes only once its bytes pass the limit (> instead of >=)",
            _sub(_BUCKETS, "if b[1] >= limits", "if b[1] > limits"),
        ),
        (
            "a parameter's numel counted instead of its bytes",
            _sub(_BUCKETS, "b[1] += p.numel() * p.element_size()", "b[1] += p.numel()"),
        ),
        (
            "sorted by the largest index instead of the smallest",
            _sub(_BUCKETS, "done.sort(key=min)", "done.sort(key=max)"),
        ),
    ],
    "ex3_reduce_scatter": [
        (
            "wrong dtype: zeros of the default dtype (float32) as padding, so an int64 or "
            "bfloat16 input gives a float32 shard",
            _sub(
                _REDUCE_SCATTER,
                "flat.new_zeros(n * size - flat.numel())",
                "torch.zeros(n * size - flat.numel())",
            ),
        ),
        (
            "wrong dtype: the sums accumulated in float32 for precision, and returned so",
            _sub(
                _REDUCE_SCATTER,
                "chunks[into] = chunks[into] + recv()",
                "chunks[into] = chunks[into].float() + recv().float()",
            ),
        ),
        (
            "non-contiguous input: x.view(-1), which fails on a transposed or strided view",
            _sub(
                _REDUCE_SCATTER,
                "flat = x.reshape(-1)  # a copy when x is a strided view",
                "flat = x.view(-1)",
            ),
        ),
        (
            "non-contiguous input: the memory from x's first element read as if contiguous "
            "(as_strided; what torch 2.13's gloo all_reduce does to a strided view)",
            _sub(
                _REDUCE_SCATTER,
                "flat = x.reshape(-1)  # a copy when x is a strided view",
                "flat = x.as_strided((x.numel(),), (1,))",
            ),
        ),
        (
            "size-0 input: chunks of at least one element (max(1, ...)), so an empty tensor "
            "gives a shard of one zero",
            _sub(
                _REDUCE_SCATTER,
                "size = math.ceil(flat.numel() / n)",
                "size = max(1, math.ceil(flat.numel() / n))",
            ),
        ),
        (
            "N // n + 1 elements per chunk: one too many when n divides N",
            _sub(
                _REDUCE_SCATTER,
                "size = math.ceil(flat.numel() / n)",
                "size = flat.numel() // n + 1",
            ),
        ),
        (
            "one rank: x returned as it is (its shape and layout), not the flat shard",
            _sub(
                _REDUCE_SCATTER,
                "n, p = len(ring), ring.index(rank)\n",
                "n, p = len(ring), ring.index(rank)\nif n == 1:\n    return x\n",
            ),
        ),
        (
            "chapter 7's formulas copied: ranks taken for ring positions",
            _sub(
                _sub(
                    _REDUCE_SCATTER,
                    "send(chunks[ring[(p - s - 1) % n]])",
                    "send(chunks[(rank - s - 1) % n])",
                ),
                "into = ring[(p - s - 2) % n]",
                "into = (rank - s - 2) % n",
            ),
        ),
        (
            "the received chunk written over the own one instead of added to it",
            _sub(_REDUCE_SCATTER, "chunks[into] = chunks[into] + recv()", "chunks[into] = recv()"),
        ),
        (
            "the sums added in place into the chunks, which are views of the caller's x when "
            "no padding is needed",
            _sub(
                _sub(
                    _REDUCE_SCATTER,
                    "chunks = list(torch.cat([flat, flat.new_zeros(n * size - flat.numel())])"
                    ".view(n, size))",
                    "padded = flat if n * size == flat.numel() else torch.cat(\n"
                    "    [flat, flat.new_zeros(n * size - flat.numel())])\n"
                    "chunks = list(padded.view(n, size))",
                ),
                "chunks[into] = chunks[into] + recv()",
                "chunks[into] += recv()",
            ),
        ),
        (
            "chunks cut with tensor_split, without padding (sizes differ by one)",
            _sub(
                _REDUCE_SCATTER,
                "chunks = list(torch.cat([flat, flat.new_zeros(n * size - flat.numel())])"
                ".view(n, size))",
                "chunks = [c.clone() for c in flat.tensor_split(n)]",
            ),
        ),
        (
            "the zero padding put in front of the elements",
            _sub(
                _REDUCE_SCATTER,
                "torch.cat([flat, flat.new_zeros(n * size - flat.numel())])",
                "torch.cat([flat.new_zeros(n * size - flat.numel()), flat])",
            ),
        ),
        (
            "receive before sending: every rank waits for its neighbour (a deadlock)",
            _sub(
                _sub(
                    _REDUCE_SCATTER,
                    "    send(chunks[ring[(p - s - 1) % n]])\n",
                    "    incoming = recv()\n    send(chunks[ring[(p - s - 1) % n]])\n",
                ),
                "chunks[into] = chunks[into] + recv()",
                "chunks[into] = chunks[into] + incoming",
            ),
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
                _sub(
                    _UNFLATTEN,
                    "params, start = [], 0",
                    "params, start = [], full_flat.numel() - sum(n for n, _ in meta)",
                ),
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
                _sub(
                    _SHARD,
                    "meta = [(p.numel(), tuple(p.shape)) for p in params]",
                    "meta = zip([p.numel() for p in params], [tuple(p.shape) for p in params])",
                ),
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
            [
                _sub(
                    _SHARD,
                    "size = math.ceil(flat.numel() / world)",
                    "size = flat.numel() // world + 1",
                ),
                None,
            ],
        ),
        (
            "the shard a strided slice flat[rank::world] (round-robin, not contiguous pieces)",
            [
                _sub(
                    _SHARD,
                    "flat[rank * size: (rank + 1) * size].clone()",
                    "flat[rank::world].clone()",
                ),
                None,
            ],
        ),
        (
            "unflatten with .view(*shape): a 0-d parameter's empty shape calls view()",
            [None, _sub(_UNFLATTEN, ".view(shape))", ".view(*shape))")],
        ),
    ],
    "ex5_redistribute_steps": [
        (
            "all_reduce for Partial -> Shard (every rank gets the whole sum, then cuts it)",
            _sub(_REDISTRIBUTE, '"PS": "reduce_scatter_tensor"', '"PS": "all_reduce"'),
        ),
        (
            "Shard(i) -> Shard(j) named all_gather (chapter 7's CPU fallback; torch's DTensor "
            "issues its all-to-all here)",
            _sub(_REDISTRIBUTE, '"SS": "shard_dim_alltoall"', '"SS": "all_gather_into_tensor"'),
        ),
        (
            "nested sharding ignored: every mesh dim moved straight to its target, first to last",
            _sub(
                _REDISTRIBUTE,
                "if math.prod(n for n, p in zip(mesh_shape, src) if p.is_shard()) > 1:",
                "if False:",
            ),
        ),
        (
            "the nested-sharding pass walked first to last instead of last to first",
            _sub(_REDISTRIBUTE, "for d in reversed(range(len(src))):", "for d in range(len(src)):"),
        ),
        (
            "the last-to-first pass run even when the source holds no shards",
            _sub(
                _REDISTRIBUTE,
                "if math.prod(n for n, p in zip(mesh_shape, src) if p.is_shard()) > 1:",
                "if True:",
            ),
        ),
        (
            "steps on mesh dims of size 1 listed (torch does nothing there)",
            _sub(
                _REDISTRIBUTE,
                "if current[d] != target and mesh_shape[d] > 1:",
                "if current[d] != target:",
            ),
        ),
        (
            "nested sharding compared by how many mesh dims shard the tensor dim, not which",
            _sub(
                _REDISTRIBUTE, "target if now == then else", "target if len(now) == len(then) else"
            ),
        ),
    ],
    "ex6_shard_sizes": [
        (
            "torch.tensor_split's pieces (sizes differ by at most one) instead of torch.chunk's",
            """\
chunk = math.ceil(size / world)
sizes = [size // world + (r < size % world) for r in range(world)]
return [(s, chunk - s) for s in sizes]
""",
        ),
        (
            "no padding: the pieces go to the collective as they are",
            _sub(
                _SHARD_SIZES,
                "return [(s, chunk - s) for s in sizes]",
                "return [(s, 0) for s in sizes]",
            ),
        ),
        (
            "floor(size / world) per rank, the remainder on the last rank",
            """\
base = size // world
sizes = [base] * (world - 1) + [size - base * (world - 1)]
return [(s, max(sizes) - s) for s in sizes]
""",
        ),
        (
            "size // world + 1 elements per piece (one too many when world divides size)",
            _sub(_SHARD_SIZES, "chunk = math.ceil(size / world)", "chunk = size // world + 1"),
        ),
        (
            "no max(0, ...): a rank past the end gets a negative size",
            _sub(
                _SHARD_SIZES,
                "max(0, min(size, (r + 1) * chunk) - r * chunk)",
                "min(size, (r + 1) * chunk) - r * chunk",
            ),
        ),
        (
            "the padding counted to the total (chunk * world - size) on the last rank only",
            """\
chunk = math.ceil(size / world)
sizes = [max(0, min(size, (r + 1) * chunk) - r * chunk) for r in range(world)]
return [(s, chunk * world - size if r == world - 1 else 0) for r, s in enumerate(sizes)]
""",
        ),
    ],
    "ex7_mm_placement": [
        (
            "the first strategy that fits, whatever it costs",
            _sub(_MM, "    c = cost(0, wa) + cost(1, wb)\n", "    return out, wa, wb\n"),
        ),
        (
            "no shardability filter: a dim shorter than the world is sharded anyway",
            _sub(_MM, "return not p.is_shard() or shape[p.dim] >= world", "return True"),
        ),
        (
            "the Partial strategies left out (matmul's linearity in each input)",
            _sub(_MM, 'for op in ("sum", "avg"):', "for op in ():"),
        ),
        (
            "ties broken by the last cheapest strategy instead of the first",
            _sub(_MM, "if c < best_cost:  # the first of the cheapest", "if c <= best_cost:"),
        ),
        (
            "k sharded as A Shard(0), B Shard(1) (the contracted dims mixed up)",
            _sub(_MM, "(Partial(), Shard(1), Shard(0))", "(Partial(), Shard(0), Shard(1))"),
        ),
        (
            "the costs of the two inputs multiplied instead of added",
            _sub(_MM, "c = cost(0, wa) + cost(1, wb)", "c = cost(0, wa) * cost(1, wb)"),
        ),
    ],
}

"""Graders for lab 7 (solutions/07_distributed_lab.md): rings, buckets and shards against torch.

Each ``check_*`` takes the comparisons object that :func:`retorch.testing.grading.check` passes
and the student's function(s), runs them on simulated ranks (no process group: a Python list
of tensors per rank, or one thread per rank in :class:`Ring`) and compares with torch's result
or with chapter 7's ``retorch.distributed`` (itself tested against torch.distributed).

The inputs are chosen where the usual mistakes show: rings that visit the ranks in an order
other than 0, 1, ..., n-1 (chapter 7 prints only that one), a ring of one rank, world sizes
that do not divide the number of elements, more ranks than elements, empty tensors, integer,
bfloat16 and float64 tensors, transposed and strided (non-contiguous) inputs, buckets that
reach their limit exactly, a first bucket limit above the others, parameters of several
dtypes, sparse gradients and parameters larger than the cap.
"""

from __future__ import annotations

import math
import threading
import types
from unittest import mock

import torch
import torch.distributed as dist

from ..distributed import collectives

__all__ = [
    "Ring",
    "check_assign_buckets",
    "check_flat_param",
    "check_reduce_scatter",
    "check_ring_schedule",
    "rank_inputs",
]


def rank_inputs(n: int, numel: int, seed: int, dtype=torch.float32) -> list[torch.Tensor]:
    """n ranks' tensors of small integers: float sums are exact in any order."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(-9, 10, (numel,), generator=gen).to(dtype) for _ in range(n)]


# ---- exercise 1: the chunk schedule of a ring in topology order ------------------------------
# Rings the check runs: rank order (chapter 7's case), and orders a topology would give.
RINGS = [
    [0],
    [0, 1],
    [1, 0],
    [0, 1, 2],
    [2, 0, 1],
    [0, 1, 2, 3],
    [0, 2, 1, 3],
    [3, 1, 0, 2],
    [4, 2, 0, 3, 1],
    [0, 1, 2, 3, 4],
    [5, 0, 3, 6, 1, 4, 2],
]


def retorch_schedule(n: int, rank: int) -> list[tuple[int, int]]:
    """(sent, received) chunk of each step on ``rank``, as retorch's ring (in rank order) runs
    them: recorded by running ``collectives``' two rings with a transport that only notes which
    chunk moves."""
    steps = []

    def exchange(send, dst, recv, src, group):  # chunk i has i + 1 elements
        steps.append((send.numel() - 1, recv.numel() - 1))

    fake = types.SimpleNamespace(get_world_size=lambda group: n, get_rank=lambda group: rank)
    chunks = [torch.zeros(i + 1) for i in range(n)]
    with (
        mock.patch.object(collectives, "dist", fake),
        mock.patch.object(collectives, "_exchange", exchange),
    ):
        collectives._reduce_scatter_ring(chunks, None)
        collectives._all_gather_ring(chunks, None)
    return steps


def run_ring(ring: list[int], plans: dict, xs: list[torch.Tensor]):
    """Every rank follows its plan on the ring ``ring``; returns (each rank's chunks after the
    reduce-scatter, each rank's final tensor, the first mismatch or None)."""
    n = len(ring)
    data = [list(x.clone().tensor_split(n)) for x in xs]
    after_rs = [list(d) for d in data]
    for step in range(2 * (n - 1)):
        sent = {r: (plans[r][step][0], data[r][plans[r][step][0]].clone()) for r in ring}
        for p, r in enumerate(ring):
            left = ring[(p - 1) % n]
            want, (got, payload) = plans[r][step][1], sent[left]
            if want != got:
                return (
                    None,
                    None,
                    (
                        f"step {step}: rank {r} expects chunk {want}, its left neighbour on the "
                        f"ring, rank {left}, sends chunk {got}"
                    ),
                )
            data[r][want] = data[r][want] + payload if step < n - 1 else payload
        if step == n - 2:
            after_rs = [list(d) for d in data]
    return after_rs, [torch.cat(d) for d in data], None


def check_ring_schedule(cmp, ring_schedule) -> None:
    hint = (
        "rank r sits at position p = ring.index(r) and sends to ring[p + 1]; chunk c must "
        "complete on rank c, so in the reduce-scatter a chunk starts at the position just "
        "after its owner's and travels n - 1 hops; the all-gather then sends the chunk that "
        "has just completed. (Chapter 7's formulas are the case ring = [0, 1, ..., n-1].)"
    )
    for ring in RINGS:
        n = len(ring)
        plans = {}
        for r in range(n):
            given = list(ring)
            got = cmp.call(
                lambda: [tuple(int(c) for c in p) for p in ring_schedule(given, r)],
                f"ring_schedule({ring}, {r}) ran (a list of (sent, received) pairs)",
                hint,
            )
            cmp.equal(given, ring, f"the ring after ring_schedule({ring}, {r}) (left as given)",
                      "do not reorder or change the caller's list")  # fmt: skip
            cmp.equal(len(got), 2 * (n - 1), f"number of steps of ring_schedule({ring}, {r})",
                      hint)  # fmt: skip
            bad = [c for p in got for c in p if not 0 <= c < n]
            cmp.equal(bad, [], f"chunk numbers out of range 0..{n - 1} (ring {ring}, rank {r})",
                      hint)  # fmt: skip
            plans[r] = got
        xs = rank_inputs(n, 2 * n + 1, seed=n + sum(p * r for p, r in enumerate(ring)))
        after_rs, finals, mismatch = run_ring(ring, plans, xs)
        cmp.equal(mismatch, None, f"the plans of the {n} ranks on ring {ring} fit together", hint)
        total = torch.stack(xs).sum(0)  # what dist.all_reduce(SUM) leaves on every rank
        chunks = list(total.tensor_split(n))
        for r in range(n):
            cmp.equal(after_rs[r][r], chunks[r],
                      f"chunk {r} on rank {r} after the reduce-scatter (ring {ring}): "
                      "reduce_scatter_tensor's contract", hint)  # fmt: skip
        for r in range(n):
            cmp.equal(finals[r], total, f"rank {r}'s tensor after your ring {ring}", hint)
        if ring == list(range(n)):
            for r in range(n):
                cmp.equal(plans[r], retorch_schedule(n, r),
                          f"rank {r}'s schedule on ring {ring}, against retorch's ring", hint)  # fmt: skip


# ---- exercise 2: DDP's buckets at construction, several dtypes and sparse gradients -----------
def torch_buckets(params, sparse, cap: int, first: int) -> list[list[int]]:
    """torch 2.13 DDP's buckets at construction with find_unused_parameters=True, in the order
    it reduces them: its C++ ``compute_bucket_assignment_by_size``, reversed."""
    limits = [first, cap] if first < cap else [cap]
    indices, _ = dist._compute_bucket_assignment_by_size(params, limits, sparse)
    return [list(b) for b in reversed(indices)]


BUCKET_DTYPES = [torch.float32, torch.float16, torch.float64, torch.bfloat16]
KiB, MiB = 1 << 10, 1 << 20
# (numel and dtype of each parameter (f: float32, h: float16, d: float64, b: bfloat16),
#  indices of the sparse ones, cap_bytes, first_cap_bytes)
BUCKET_CASES = [
    ([(25, "f"), (50, "f"), (10, "h"), (100, "f"), (40, "h"), (60, "h"), (5, "f")], [], 400, 100),
    ([(100, "f"), (100, "h"), (100, "f"), (100, "h"), (100, "f")], [], 200, 400),  # exact hits
    ([(1000, "d"), (10, "f"), (10, "d"), (10, "f")], [0], 64, 16),  # sparse, then a big one
    ([(300, "f"), (20, "b"), (20, "b"), (300, "b"), (3, "f")], [4], 1000, 100),  # over the cap
    (
        [(4 * MiB // 4, "f"), (1024, "f"), (512 * KiB, "h"), (512, "h"), (64 * KiB, "f")],
        [],
        25 * MiB,
        1 * MiB,
    ),  # DDP's defaults  # fmt: skip
    ([(10, "h"), (20, "h"), (30, "h")], [], 1000, 100),  # nothing closes: one bucket
]


def random_bucket_cases(n_cases: int, seed: int):
    """Random parameter lists: 1 to 12 parameters of the four dtypes, about one in six
    sparse, caps of 64 to 2048 bytes with a first cap below or above them."""
    gen = torch.Generator().manual_seed(seed)

    def draw(lo, hi):
        return int(torch.randint(lo, hi, (1,), generator=gen))

    for _ in range(n_cases):
        n = draw(1, 13)
        params = [(draw(1, 300), "fhdb"[draw(0, 4)]) for _ in range(n)]
        sparse = [i for i in range(n) if draw(0, 6) == 0]
        yield params, sparse, draw(64, 2049), draw(16, 2049)


def check_assign_buckets(cmp, assign_buckets) -> None:
    hint = (
        "sparse parameters alone; the others fill one open bucket per (dtype, device), in "
        "registration order, closing it once its bytes are >= its limit (the parameter that "
        "gets there stays in); each (dtype, device) starts at the first limit and moves on to "
        "the next after each bucket it closes; keep the open leftovers, sort every bucket by "
        "its smallest index, then reverse"
    )
    dtype_of = dict(zip("fhdb", BUCKET_DTYPES, strict=True))
    for spec, sparse_at, cap, first in [*BUCKET_CASES, *random_bucket_cases(40, seed=7)]:
        params = [torch.zeros(n, dtype=dtype_of[d]) for n, d in spec]
        sparse = [i in sparse_at for i in range(len(spec))]
        given, given_sparse = list(params), list(sparse)
        what = (f"assign_buckets(params of {[f'{n}{d}' for n, d in spec]}, sparse at "
                f"{sparse_at}, {cap}, {first})")  # fmt: skip
        want = torch_buckets(params, sparse, cap, first)
        got = cmp.call(
            lambda: [[int(i) for i in b] for b in assign_buckets(params, sparse, cap, first)],
            what + " ran",
            hint,
        )
        same = len(params) == len(given) and all(a is b for a, b in zip(params, given))
        cmp.equal([same, sparse == given_sparse], [True, True],
                  f"params and sparse after {what} (left as they were given)",
                  "do not change the caller's lists (no pop, sort or reverse on them)")  # fmt: skip
        cmp.equal(got, want, what, hint + "; never add an empty bucket")


# ---- exercise 3: a reduce-scatter on a ring in topology order ---------------------------------
class Ring:
    """Ranks on threads, standing in the order ``ring``: rank ``ring[p]``'s send() reaches
    rank ``ring[p + 1]``'s recv(), in order. Stops with an error on a deadlock."""

    def __init__(self, ring: list[int]):
        self.ring, self.n = list(ring), len(ring)
        self.cv, self.error = threading.Condition(), None
        self.inbox = [[] for _ in range(self.n)]
        self.sent = [[] for _ in range(self.n)]  # elements of each message a rank sent
        self.waiting, self.running = set(), set(range(self.n))

    def right(self, rank: int) -> int:
        return self.ring[(self.ring.index(rank) + 1) % self.n]

    def send(self, rank: int, t: torch.Tensor) -> None:
        with self.cv:
            self.inbox[self.right(rank)].append(t.detach().clone())
            self.sent[rank].append(t.numel())
            self.cv.notify_all()

    def recv(self, rank: int) -> torch.Tensor:
        with self.cv:
            self.waiting.add(rank)
            while not self.inbox[rank] and self.error is None:
                if self.waiting >= self.running and not any(self.inbox[r] for r in self.running):
                    self.error = RuntimeError(
                        f"deadlock: ranks {sorted(self.waiting)} wait in recv() and no message "
                        "is on its way (a rank returned or received too early)"
                    )
                    self.cv.notify_all()
                else:
                    self.cv.wait(timeout=10)
            self.waiting.discard(rank)
            if self.error is not None:
                raise self.error
            return self.inbox[rank].pop(0)

    def run(self, program, xs: list[torch.Tensor]) -> list:
        """``program(rank, ring, xs[rank], send, recv)`` on one thread per rank; the results.
        ``xs`` are passed as they are (views stay views)."""
        results = [None] * self.n

        def rank_main(r):
            try:
                results[r] = program(r, list(self.ring), xs[r], lambda t: self.send(r, t),
                                     lambda: self.recv(r))  # fmt: skip
            except BaseException as e:  # noqa: BLE001  (handed to the check)
                with self.cv:
                    self.error = self.error or e
            finally:
                with self.cv:
                    self.running.discard(r)
                    self.cv.notify_all()

        threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.error is not None:
            raise self.error
        return results


def expected_shards(xs: list[torch.Tensor]) -> tuple[list[torch.Tensor], int]:
    """Rank r's shard: chunk r of the zero-padded flattened sum (``reduce_scatter_tensor`` on
    tensors padded to n * ceil(N / n)), in the inputs' dtype."""
    n, numel = len(xs), xs[0].numel()
    size = math.ceil(numel / n)
    total = torch.stack([x.reshape(-1) for x in xs]).sum(0, dtype=xs[0].dtype)
    padded = torch.cat([total, total.new_zeros(n * size - numel)])
    return [c.clone() for c in padded.view(n, size)], size


def _layouts():
    """(ring, dtype, shape, view, what): the inputs of the check, each rank's tensor a view."""
    t = lambda x: x.t()  # noqa: E731
    yield [0, 1], torch.float32, (7,), None, "7 elements"
    yield [2, 0, 1], torch.float32, (10,), None, "10 elements"
    yield [0, 2, 1, 3], torch.int64, (13,), None, "13 int64 elements"
    yield [3, 1, 0, 2], torch.float32, (4,), None, "4 elements"
    yield [1, 0], torch.float64, (3, 4), t, "a transposed (4, 3) float64 view"
    yield [0, 3, 1, 4, 2], torch.float32, (3,), None, "3 elements on 5 ranks"
    yield [2, 0, 1], torch.int32, (5, 6), lambda x: x[:, ::2], "a strided (5, 3) int32 view"
    yield [1, 0], torch.bfloat16, (9,), None, "9 bfloat16 elements"
    yield [0, 2, 1], torch.float32, (0,), None, "0 elements"
    yield [0], torch.int64, (2, 3), t, "one rank, a transposed (3, 2) view"
    yield [5, 0, 3, 1, 4, 2], torch.float32, (4, 5), lambda x: x[1:, 2], "a (3,) column"


def check_reduce_scatter(cmp, reduce_scatter_rank) -> None:
    hint = (
        "flatten in row-major order (reshape: the input may be a strided view), pad with zeros "
        "of the input's dtype at the end to n * ceil(N / n), cut n chunks of ceil(N / n); for "
        "n - 1 steps send one chunk to your right neighbour on the ring and add the one that "
        "arrives into your own copy; chunk `rank` must be the one complete after the last "
        "step (exercise 1's schedule, on this ring)"
    )
    for seed, (ring, dtype, shape, view, what) in enumerate(_layouts()):
        n = len(ring)
        bases = rank_inputs(n, math.prod(shape), seed=100 + seed, dtype=dtype)
        xs = [b.reshape(shape) for b in bases]
        xs = [view(x) if view else x for x in xs]
        originals = [x.clone() for x in xs]
        net = Ring(ring)
        what = f"ring {ring}, {what}"
        got = cmp.call(lambda: net.run(reduce_scatter_rank, xs), f"your ring on {what} ran",
                       hint)  # fmt: skip
        want, size = expected_shards(originals)
        for r in range(n):
            cmp.equal(got[r], want[r], f"rank {r}'s shard ({what})", hint)
        for r in range(n):
            cmp.equal(xs[r], originals[r], f"rank {r}'s input after the reduce-scatter ({what})",
                      "leave the input as it was: add into copies of the chunks")  # fmt: skip
            cmp.equal(net.sent[r], [size] * (n - 1),
                      f"elements in each message rank {r} sent ({what})",
                      "n - 1 messages of one chunk each: never the whole tensor")  # fmt: skip


# ---- exercise 4: FSDP's flat parameter and its shards -----------------------------------------
def param_lists():
    gen = torch.Generator().manual_seed(7)
    for shapes in [[(3, 4), (4,), (2, 3), ()], [(5,), (1, 1)], [(2, 2, 2), (7,), (1,)]]:
        yield [torch.randn(s, generator=gen) for s in shapes]


def check_flat_param(cmp, flatten_and_shard, unflatten) -> None:
    from torch.distributed.fsdp._flat_param import FlatParamHandle

    hint = (
        "flatten and concatenate in order; pad with zeros at the end to world * "
        "ceil(total / world); the shard is piece `rank`; unflatten with .view over the "
        "offsets of the real elements, never a copy"
    )
    sharded = []  # every list is sharded before any is unflattened
    for params in param_lists():
        shapes = [tuple(p.shape) for p in params]
        flat = torch.cat([p.reshape(-1) for p in params])
        for world in [2, 3, 4, 8]:
            what = f"world {world}, shapes {shapes}"
            outs = [
                cmp.call(
                    lambda: flatten_and_shard(params, r, world),
                    f"flatten_and_shard(params, {r}, {world}) ran",
                    hint,
                )  # fmt: skip
                for r in range(world)
            ]
            for r, (shard, _) in enumerate(outs):
                want = FlatParamHandle._get_shard(flat, r, world)[0]
                cmp.equal(shard, want, f"rank {r}'s shard ({what})", hint)
                owned = shard.untyped_storage().nbytes() == shard.numel() * shard.element_size()
                cmp.equal(owned, True, f"rank {r}'s shard owns only its own elements ({what})",
                          "clone the piece: a slice of the flat tensor is a view that keeps "
                          "the whole flat parameter alive on every rank")  # fmt: skip
            sharded.append((params, what, outs))
    reuse = (
        "unflatten may use only full_flat and meta (other lists were sharded since), and the "
        "same meta serves every call: keep it a list, not an iterator such as zip; " + hint
    )
    for params, what, outs in sharded:
        full = torch.cat([shard for shard, _ in outs])
        for r, (_, meta) in enumerate(outs):
            for call in ["first", "second"]:
                where = f"rank {r}'s meta, {call} call ({what})"
                got = cmp.call(lambda: list(unflatten(full, meta)),
                               f"unflatten with {where} ran", reuse)  # fmt: skip
                cmp.equal(len(got), len(params), f"number of parameters from {where}", reuse)
                for i, (g, p) in enumerate(zip(got, params)):
                    cmp.equal(g, p, f"parameter {i} from {where}", reuse)
                    view = g.untyped_storage().data_ptr() == full.untyped_storage().data_ptr()
                    cmp.equal(view, True, f"parameter {i} is a view of the flat tensor", hint)

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

import contextlib
import logging
import math
import threading
import types
import warnings
from unittest import mock

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from ..distributed import collectives

__all__ = [
    "Ring",
    "check_assign_buckets",
    "check_flat_param",
    "check_mm_placement",
    "check_redistribute_steps",
    "check_reduce_scatter",
    "check_ring_schedule",
    "check_shard_sizes",
    "fake_world",
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


# ---- exercises 5 to 7: torch's DTensor on a fake process group, every rank in this process ----
# torch 2.13's "fake" backend (torch/testing/_internal/distributed/fake_pg.py) accepts every
# collective without sending anything, and its LocalTensorMode (torch/distributed/_local_tensor)
# holds every rank's piece in one tensor and runs each collective on all of them: so torch's
# own DTensor runs here on any world size, without processes, and the checks read what it
# issues (the collectives, recorded from the dispatcher as CommDebugMode counts them), its
# local shapes and its sharding propagation.
@contextlib.contextmanager
def fake_world(n: int):
    """torch's DTensor on ``n`` simulated ranks; the fake process group is gone afterwards."""
    try:
        from torch.distributed._local_tensor import LocalTensorMode
        from torch.testing._internal.distributed.fake_pg import FakeStore
    except ImportError as e:
        raise RuntimeError(
            f"exercises 5 to 7 run torch's DTensor under its LocalTensorMode, which torch "
            f"{torch.__version__} lacks ({e}); the course's torch is 2.13"
        ) from e

    if dist.is_initialized():
        if dist.get_backend() != "fake":
            raise RuntimeError(
                f"fake_world({n}) needs this process's default process group, and a "
                f"{dist.get_backend()!r} one is initialized: run the check in a fresh process"
            )
        dist.destroy_process_group()  # left by an earlier fake_world that was interrupted
    quiet = [logging.getLogger(n) for n in ("torch.distributed", "torch._logging")]
    levels = [q.level for q in quiet]
    for q in quiet:  # torch's advice on flattening meshes, its "falling back" notes
        q.setLevel(logging.ERROR)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=n)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with LocalTensorMode(n):
                yield
    finally:
        dist.destroy_process_group()
        for q, level in zip(quiet, levels):
            q.setLevel(level)


class _Collectives(TorchDispatchMode):
    """The collectives DTensor issues, in order: (op name, process group name)."""

    def __init__(self):
        super().__init__()
        self.issued, self.inputs = [], []  # and each one's input tensor

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        namespace, _, name = func._schema.name.partition("::")
        if namespace in ("_c10d_functional", "_dtensor") and name not in (
            "wait_tensor",
            "_wrap_tensor_autograd",
        ):
            self.issued.append((name, [a for a in args if isinstance(a, str)][-1]))  # its group
            self.inputs.append(args[0])
        return func(*args, **(kwargs or {}))


def _dtensor(x: torch.Tensor, mesh, placements):
    """``x`` as a DTensor lying as ``placements`` (a Partial dim holds a replica as its term)."""
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

    plain = [Replicate() if p.is_partial() else p for p in placements]
    d = distribute_tensor(x, mesh, plain)
    return DTensor.from_local(d.to_local(), mesh, placements, run_check=False, shape=x.shape,
                              stride=x.stride())  # fmt: skip


# ---- exercise 5: the collectives of a placement change ---------------------------------------
def torch_redistribute_steps(mesh_shape, src, dst, shape=(12, 10)) -> list[tuple[int, str]]:
    """What torch's ``DTensor.redistribute`` issues from ``src`` to ``dst``: (mesh dim, name)
    per step, a collective's name as the dispatcher sees it (what CommDebugMode counts), and
    ``"chunk"`` for a step of torch's plan (``_gen_transform_infos``) that cuts locally.
    Call inside ``fake_world(prod(mesh_shape))``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor._redistribute import _gen_transform_infos

    mesh = init_device_mesh("cpu", tuple(mesh_shape))
    groups = {mesh.get_group(d).group_name: d for d in range(mesh.ndim)}
    x = _dtensor(torch.arange(float(math.prod(shape))).reshape(shape), mesh, src)
    target = _dtensor(torch.zeros(shape), mesh, dst)._spec
    with _Collectives() as rec:
        x.redistribute(mesh, dst)
    issued = iter(rec.issued)
    steps = []
    for info in _gen_transform_infos(x._spec, target):
        current, want = info.src_dst_placements
        if mesh.size(info.mesh_dim) == 1:
            continue  # torch's short cut: one piece, nothing to do
        if current.is_replicate() and want.is_shard():
            steps.append((info.mesh_dim, "chunk"))
        else:
            name, group = next(issued)
            steps.append((groups[group], name))
    leftover = list(issued)
    if leftover:
        raise AssertionError(f"torch issued collectives its plan does not list: {leftover}")
    return steps


# (mesh shape, source placements, target placements); s0, s1: Shard(0), Shard(1); p: Partial()
REDISTRIBUTE_CASES = [
    ((2, 2), "s0 s0", "r r"),  # nested sharding gathered, inner dim first
    ((2, 2), "s0 s0", "r s0"),  # the inner Shard(0) is nested: it must be redone
    ((2, 2), "s0 s1", "s1 s0"),  # both dims swap
    ((2, 3), "p s1", "s0 s0"),
    ((2, 2), "p p", "s0 r"),
    ((2, 2), "r s0", "s0 s0"),
    ((3, 2), "s1 r", "s0 s1"),  # Shard(1) -> Shard(0): an all-to-all
    ((2, 2), "s0 r", "s1 r"),
    ((1, 4), "s0 p", "r s1"),  # a mesh dim of size 1: nothing to do there
    ((4,), "p", "s1"),
    ((4,), "s0", "s1"),
    ((2, 2, 2), "s0 s0 s1", "s1 r s0"),
    ((2, 2), "r r", "s1 s1"),
    ((2, 2), "s1 p", "s1 s1"),
]


def _placement(code: str):
    from torch.distributed.tensor import Partial, Replicate, Shard

    return {"r": Replicate(), "p": Partial(), "s0": Shard(0), "s1": Shard(1)}[code]


def random_redistribute_cases(n_cases: int, seed: int):
    """Random 2-D (and some 3-D) meshes; sources may hold Partial, targets never do."""
    gen = torch.Generator().manual_seed(seed)

    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    for _ in range(n_cases):
        mesh_shape = pick([(2, 2), (2, 3), (3, 2), (1, 2), (2, 1, 2)])
        src = " ".join(pick(["r", "p", "s0", "s1"]) for _ in mesh_shape)
        dst = " ".join(pick(["r", "s0", "s1"]) for _ in mesh_shape)
        yield mesh_shape, src, dst


def check_redistribute_steps(cmp, redistribute_steps) -> None:
    hint = (
        "per mesh dim: Partial -> Replicate all_reduce, Partial -> Shard reduce_scatter_tensor, "
        "Shard -> Replicate all_gather_into_tensor, Shard(i) -> Shard(j) shard_dim_alltoall, "
        "Replicate -> Shard a local chunk, nothing on a mesh dim of size 1. When the source "
        "holds shards, torch first walks the mesh dims inner to outer, sending a target "
        "Shard(d) to Replicate instead when the mesh dims before it do not shard tensor dim d "
        "as the target's do (nested sharding); then outer to inner to what is left"
    )
    cases = [*REDISTRIBUTE_CASES, *random_redistribute_cases(20, seed=5)]
    by_world = {}
    for mesh_shape, src, dst in cases:
        by_world.setdefault(math.prod(mesh_shape), []).append((mesh_shape, src, dst))
    for world, group in sorted(by_world.items()):
        with fake_world(world):
            wants = [torch_redistribute_steps(m, [_placement(c) for c in s.split()],
                                              [_placement(c) for c in d.split()])
                     for m, s, d in group]  # fmt: skip
        for (mesh_shape, src, dst), want in zip(group, wants):
            s = tuple(_placement(c) for c in src.split())
            d = tuple(_placement(c) for c in dst.split())
            what = f"redistribute_steps({mesh_shape}, {s}, {d})"
            got = cmp.call(lambda: [(int(m), str(n)) for m, n in redistribute_steps(
                mesh_shape, s, d)], what + " ran", hint)  # fmt: skip
            cmp.equal(got, want, what + ", against what torch's DTensor issues", hint)


# ---- exercise 6: uneven shards and their padding ---------------------------------------------
def torch_shard_sizes(size: int, world: int) -> list[tuple[int, int]]:
    """(local size, padding for the all-gather) per rank of a dim of ``size`` sharded on
    ``world`` ranks: the local sizes from every rank's piece of torch's ``distribute_tensor``,
    the padding from what each rank hands the all-gather of ``full_tensor()`` (its rows
    minus the piece's), checked against ``Shard._split_tensor(with_padding=True)``'s pad
    sizes. Call inside ``fake_world(world)``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    x = distribute_tensor(torch.zeros(size, 2), mesh, [Shard(0)])
    sizes = [x.to_local()._local_tensors[r].shape[0] for r in range(world)]
    _, pads = Shard(0)._split_tensor(torch.zeros(size, 2), world, with_padding=True)
    with _Collectives() as rec:
        x.full_tensor()
    if world > 1:  # one rank: torch's short cut, no collective
        (sent,) = rec.inputs  # the all-gather's input on every rank
        sent = [sent._local_tensors[r].shape[0] - n for r, n in enumerate(sizes)]
        if sent != pads:
            raise AssertionError(f"the all-gather's padding {sent}, _split_tensor's {pads}")
    return list(zip(sizes, pads, strict=True))


SHARD_SIZE_CASES = [(size, world) for world in (1, 2, 3, 4, 5, 8)
                    for size in sorted({0, 1, world - 1, world, world + 1, 2 * world - 1,
                                        2 * world + 1, 3 * world - 2, 13})]  # fmt: skip


def check_shard_sizes(cmp, shard_sizes) -> None:
    hint = (
        "torch.chunk's pieces: ceil(size / world) elements each while they last, so the last "
        "ranks can get fewer, or 0; every piece is padded at the end to ceil(size / world) for "
        "the all-gather, padding = that minus the rank's size"
    )
    by_world = {}
    for size, world in SHARD_SIZE_CASES:
        by_world.setdefault(world, []).append(size)
    for world, sizes in sorted(by_world.items()):
        with fake_world(world):
            wants = [torch_shard_sizes(size, world) for size in sizes]
        for size, want in zip(sizes, wants):
            what = f"shard_sizes({size}, {world})"
            got = cmp.call(lambda: [(int(a), int(b)) for a, b in shard_sizes(size, world)],
                           what + " ran (a list of (local size, padding))", hint)  # fmt: skip
            cmp.equal(got, want, what + ", against torch's DTensor", hint)


# ---- exercise 7: the output placement of mm --------------------------------------------------
def _mm_candidates():
    from torch.distributed.tensor import Partial, Replicate, Shard

    return [Replicate(), Shard(0), Shard(1), Partial("sum"), Partial("avg")]


def torch_mm_placement(a_shape, pa, b_shape, pb, world):
    """torch's choice for ``torch.mm(A, B)`` of DTensors lying as ``pa``, ``pb`` on a 1-D mesh
    of ``world`` ranks: (output placement, A's placement for the op, B's), read from its
    sharding propagation (``propagate_op_sharding``) and checked against the output of
    ``torch.mm`` itself; and torch's ``redistribute_cost`` from each input to each candidate
    placement, {(input, placement): microseconds}. Call inside ``fake_world(world)``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._collective_utils import redistribute_cost
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from torch.distributed.tensor._op_schema import OpSchema

    mesh = init_device_mesh("cpu", (world,))
    a = _dtensor(torch.ones(a_shape), mesh, [pa])
    b = _dtensor(torch.ones(b_shape), mesh, [pb])
    schema = OpSchema(torch.ops.aten.mm.default, (a._spec, b._spec), {})
    chosen = DTensor._op_dispatcher.sharding_propagator.propagate_op_sharding(schema)
    out = chosen.output_spec.placements[0]
    args = chosen.redistribute_schema.args_schema if chosen.redistribute_schema else [a, b]
    wants = [s.placements[0] for s in args]
    ran = torch.mm(a, b).placements[0]
    if ran != out:
        raise AssertionError(f"torch.mm gave {ran}, its sharding propagation said {out}")
    costs = {}
    for i, x in enumerate((a, b)):
        for p in _mm_candidates():
            target = DTensorSpec(mesh, (p,), tensor_meta=x._spec.tensor_meta)
            costs[i, p] = float(redistribute_cost(x._spec, target))
    return (out, *wants), costs


def mm_cases(n_cases: int, seed: int):
    """(A's shape, its placement, B's shape, its placement, world): world 2 to 5, shapes from
    1 to 40 (some dims shorter than the world: those can't be sharded), inputs Replicate,
    Shard(0), Shard(1) or Partial("sum"), placed where they are shardable."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    gen = torch.Generator().manual_seed(seed)

    def draw(lo, hi):
        return int(torch.randint(lo, hi, (1,), generator=gen))

    options = [Replicate(), Shard(0), Shard(1), Partial()]
    for _ in range(n_cases):
        world = draw(2, 6)
        m, k, n = (draw(1, 41) if draw(0, 4) else draw(1, world + 1) for _ in range(3))
        pa, pb = options[draw(0, 4)], options[draw(0, 4)]
        pa = Replicate() if pa.is_shard() and (m, k)[pa.dim] < world else pa
        pb = Replicate() if pb.is_shard() and (k, n)[pb.dim] < world else pb
        yield (m, k), pa, (k, n), pb, world


def mm_fixed_cases():
    """Chosen cases: each strategy wins once; a dim of 2 on 4 ranks cannot be sharded;
    Partial inputs; everything replicated on more ranks than rows."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    R = Replicate()
    return [((8, 6), Shard(0), (6, 4), Shard(0), 2), ((8, 6), R, (6, 4), Shard(0), 4),
            ((8, 6), Shard(1), (6, 4), R, 3), ((8, 2), Shard(1), (2, 4), Shard(0), 4),
            ((8, 6), Shard(1), (6, 4), Shard(1), 2), ((8, 6), Partial(), (6, 4), Shard(1), 2),
            ((3, 6), Shard(1), (6, 16), Partial(), 4), ((2, 6), R, (6, 3), R, 4)]  # fmt: skip


def check_mm_placement(cmp, mm_placement) -> None:
    hint = (
        "torch's strategies for mm, in its order: all Replicate; k sharded in both (A Shard(1), "
        "B Shard(0)) -> Partial(sum); A's rows (A Shard(0), B Replicate) -> Shard(0); B's "
        "columns (A Replicate, B Shard(1)) -> Shard(1); then for reduce op sum, then avg: "
        "(A Partial, B Replicate) and (A Replicate, B Partial) -> Partial; the three Shard "
        "strategies only when A or B is sharded. Drop a strategy "
        "that shards a dim shorter than the world; of the others take the cheapest, "
        "cost(0, A's placement) + cost(1, B's placement), the first of them on a tie"
    )
    by_world = {}
    for case in [*mm_fixed_cases(), *mm_cases(24, seed=3)]:
        by_world.setdefault(case[-1], []).append(case)
    for world, cases in sorted(by_world.items()):
        with fake_world(world):
            wants = [torch_mm_placement(*case) for case in cases]
        for (a_shape, pa, b_shape, pb, _), (want, costs) in zip(cases, wants):
            what = f"mm_placement({a_shape}, {pa}, {b_shape}, {pb}, {world}, cost)"

            def cost(i, placement, costs=costs):
                return costs[int(i), placement]

            got = cmp.call(lambda: tuple(mm_placement(a_shape, pa, b_shape, pb, world, cost)),
                           what + " ran (a triple of placements)", hint)  # fmt: skip
            cmp.equal(got, want, what + ", against torch's DTensor", hint)

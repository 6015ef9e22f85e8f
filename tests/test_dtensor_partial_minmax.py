"""Partial("max") and Partial("min") against torch's DTensor, on gloo with 2 and 4 ranks.

``amax``, ``amin``, ``max()`` and ``min()`` of a DTensor sharded on a reduced dim give a
``Partial("max")``/``Partial("min")`` (torch/distributed/tensor/_ops/_math_ops.py); leaving
it all-reduces (to Replicate) or reduce-scatters (to Shard) by MAX/MIN. Every case runs both
libraries in the same processes on the same data and compares, per rank: the output's
placements and shape, the collectives issued (torch's ``CommDebugMode`` beside retorch's), the
local piece, then the same after each redistribution that follows (or the exception's type and
first line where torch raises). A maximum is exact in any order and the values are integers in
float32 (sums exact too), so pieces are compared exactly (``torch.equal``).
"""

from __future__ import annotations

import pytest
import torch

from retorch.distributed.launch import launch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _libs():
    import torch.distributed.tensor as tdt
    from torch.distributed.device_mesh import init_device_mesh as t_init
    from torch.distributed.tensor.debug import CommDebugMode as TComm

    import retorch.distributed.tensor as rdt
    from retorch.distributed.device_mesh import init_device_mesh as r_init
    from retorch.distributed.tensor.debug import CommDebugMode as RComm

    return {"torch": (tdt, t_init, TComm), "retorch": (rdt, r_init, RComm)}


def _placements(lib, names):
    """("S0", "R", "Pmax") -> the library's placement objects."""
    return [lib.Replicate() if n == "R" else lib.Shard(int(n[1:])) if n[0] == "S"
            else lib.Partial(n[1:]) for n in names]  # fmt: skip


def _make(lib, mesh, x, names, rank, transposed=False):
    """A DTensor of ``x`` laid out as ``names``; a Partial holds rank-dependent terms (whose
    max is not any one rank's). ``transposed``: the local piece is a non-contiguous view."""
    if not any(n[0] == "P" for n in names):
        return lib.distribute_tensor(x.clone(), mesh, _placements(lib, names))
    local = x * (rank % 3 + 1) - 4 * rank
    for i, n in enumerate(names):
        if n[0] == "S":
            pieces = torch.chunk(local, mesh.size(i), dim=int(n[1:]))
            me = mesh.get_coordinate()[i]
            local = pieces[me] if me < len(pieces) else local.narrow(int(n[1:]), 0, 0)
    local = local.t().contiguous().t() if transposed else local.contiguous()
    return lib.DTensor.from_local(local, mesh, _placements(lib, names), shape=x.shape,
                                  stride=x.stride())  # fmt: skip


#: the op of a case: (torch's call, retorch's call); retorch's DTensor has the same methods,
#: and neg/relu are functions of its ``_pointwise_ops``
def _op(name):
    def pw(fn):
        def call(x):
            from retorch.distributed.tensor import _pointwise_ops

            return getattr(_pointwise_ops, fn)(x)

        return call

    ops = {
        "amax 0": lambda x: x.amax(0),
        "amin 0 keepdim": lambda x: x.amin(0, keepdim=True),
        "amax 1": lambda x: x.amax(1),
        "amax (0, 1)": lambda x: x.amax((0, 1)),
        "amin -1": lambda x: x.amin(-1),
        "max": lambda x: x.max(),
        "min": lambda x: x.min(),
        "max 0": lambda x: x.max(0),
        "min 1 keepdim": lambda x: x.min(1, keepdim=True),
        "sum": lambda x: x.sum(),
        "amax -3": lambda x: x.amax(-3),
        "amax 2": lambda x: x.amax(2),
        "same": lambda x: x,
    }
    if name in ("neg", "relu"):
        return (lambda x: -x if name == "neg" else torch.relu(x)), pw(name)
    return ops[name], ops[name]


def _counts(mode) -> dict[str, int]:
    return {str(k): v for k, v in mode.get_comm_counts().items()}


def _record(y):
    """Placements, shape and piece; for ``max(dim)`` the values' and the indices'."""
    if isinstance(y, tuple):
        return [_record(y[0]), _record(y[1])]
    return ([str(p) for p in y.placements], tuple(y.shape), y.to_local().clone())


def _error(e: Exception):
    return (type(e).__name__, str(e).split("\n")[0])


def _minmax_cases(rank: int, world: int, mesh_shape, cases) -> list:
    """Each case (op, shape, seed, input placements, [targets], transposed) in both libraries:
    the op's record and collectives, then each target's (``"full"``: ``full_tensor()``)."""
    libs, records = _libs(), []
    meshes = {name: init("cpu", mesh_shape) for name, (_, init, _) in libs.items()}
    for op, shape, seed, names, targets, transposed in cases:
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(-50, 50, shape, generator=g).float()
        rec = {}
        for name, (lib, _, Comm) in libs.items():
            mesh, steps = meshes[name], []
            d = _make(lib, mesh, x, names, rank, transposed)
            try:
                with Comm() as mode:
                    y = _op(op)[name == "retorch"](d)
                steps.append((op, _counts(mode), _record(y)))
            except Exception as e:  # noqa: BLE001 - the error is what is compared
                steps.append((op, _error(e)))
                rec[name] = steps
                continue
            y = y[0] if isinstance(y, tuple) else y
            for t in targets:
                try:
                    with Comm() as mode:
                        z = y.full_tensor() if t == "full" else y.redistribute(
                            mesh, _placements(lib, t))  # fmt: skip
                    got = z.clone() if t == "full" else _record(z)
                    steps.append((t, _counts(mode), got))
                except Exception as e:  # noqa: BLE001
                    steps.append((t, _error(e)))
            rec[name] = steps
        records.append((op, shape, names, rec))
    return records


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return (isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(_equal(x, y) for x, y in zip(a, b)))  # fmt: skip
    return a == b


def _assert_same(results) -> int:
    """Every step of every case equal on every rank; returns the number of steps compared."""
    n = 0
    for rank, records in enumerate(results):
        for op, shape, names, rec in records:
            ours, theirs = rec["retorch"], rec["torch"]
            assert len(ours) == len(theirs), (rank, op, names, ours, theirs)
            for a, b in zip(ours, theirs, strict=True):
                assert _equal(a, b), (rank, op, shape, names, a, b)
                n += 1
    return n


def _steps(cases) -> int:
    """The steps each rank compares: the op, then each target (none follow an error)."""
    return sum(1 + len(targets) for _, _, _, _, targets, _ in cases)


#: no piece is empty here, 7 and 10 on 4 ranks being cut 2, 2, 2, 1 and 3, 3, 3, 1 (torch's
#: local op would raise on one rank only, and the others would wait in the next collective)
ONE_D = [
    # (op, shape, seed, input placements, targets, transposed local)
    ("amax 0", (7, 3), 0, ("S0",), [("R",), ("S0",), ("S1",), "full"], False),
    ("amin 0 keepdim", (7, 3), 1, ("S0",), [("R",), ("S0",), ("S1",)], False),
    ("amax 1", (7, 3), 2, ("S0",), [("R",), "full"], False),  # a kept dim: stays Shard
    ("amin -1", (3, 10), 3, ("S1",), [("S0",), "full"], False),
    ("amax (0, 1)", (6, 7), 4, ("S1",), ["full"], False),
    ("max", (7, 3), 5, ("S0",), ["full"], False),
    ("min", (3, 7), 6, ("S1",), ["full"], False),
    ("amax 0", (7, 3), 7, ("R",), ["full"], False),  # nothing sharded: Replicate, no message
    ("amax 0", (7, 3), 8, ("Pmax",), [("R",), ("S0",)], False),  # P(max) kept
    ("amin 0 keepdim", (7, 3), 9, ("Pmax",), ["full"], False),  # another op: reduced first
    ("amax 0", (7, 3), 10, ("Psum",), ["full"], False),  # a pending sum: all-reduced first
    ("sum", (7, 3), 11, ("Pmax",), ["full"], False),
    ("same", (7, 3), 12, ("Pmax",), [("S0",), ("S1",), ("R",)], True),  # non-contiguous
    ("same", (7, 3), 13, ("Pmin",), [("S1",), ("R",)], True),
    ("same", (7, 3), 14, ("Pmax",), [("Pmin",), ("Psum",)], False),  # torch refuses
    ("neg", (7, 3), 15, ("Pmax",), ["full"], False),  # P(max) -> P(min), then MIN
    ("relu", (7, 3), 16, ("Pmin",), ["full"], False),
    ("max 0", (7, 3), 17, ("S0",), [("S0",)], False),  # indices: gathered, Replicate
    ("min 1 keepdim", (7, 3), 18, ("S0",), ["full"], False),  # kept dim sharded: no message
    ("max 0", (7, 3), 19, ("Pmax",), [], False),
    ("amax -3", (7, 3), 20, ("S0",), [], False),  # RuntimeError from propagation
    ("amax 2", (7, 3), 21, ("S0",), [], False),
]

#: 5 rows on 4 ranks: the fourth piece is empty, and torch's local amax raises there (only)
EMPTY = [
    ("amax 0", (5, 3), 30, ("S0",), [], False),
    ("max", (5, 3), 31, ("S0",), [], False),
    ("amin -1", (3, 9), 34, ("S1",), [], False),  # the error names the dim as written
    ("amin -1", (5, 3), 32, ("S0",), ["full"], False),  # a kept dim: the empty piece is fine
    ("amin 0 keepdim", (5, 3), 33, ("Pmin",), [("S0",), ("S1",)], False),  # empty outputs
]


def _ring_cases(rank: int, world: int) -> list:
    """retorch's MAX/MIN ring beside torch's gloo all-reduce and reduce-scatter: floats, ints,
    fewer elements than ranks (empty chunks), a non-contiguous tensor."""
    import torch.distributed as dist

    from retorch.distributed import reduce_ops

    out = []
    for i, (shape, dtype) in enumerate([((6, 5), torch.float32), ((3,), torch.int64),
                                        ((1,), torch.float64), ((4, 4), torch.float32)]):  # fmt: skip
        g = torch.Generator().manual_seed(100 * i + rank)
        x = torch.randn(shape, generator=g).mul(100).to(dtype)
        if i == 3:
            x = x.t()
        for op, t_op in (("max", dist.ReduceOp.MAX), ("min", dist.ReduceOp.MIN)):
            ours, theirs = reduce_ops.all_reduce_op(x.clone(), op), x.clone()
            dist.all_reduce(theirs, t_op)
            out.append((f"all_reduce {op} {shape}", ours, theirs))
            if shape[0] % world == 0:
                flat = x.reshape(-1).contiguous()
                a, b = flat.new_empty(flat.numel() // world), flat.new_empty(flat.numel() // world)
                reduce_ops.reduce_scatter_op(a, flat, op)
                dist.reduce_scatter_tensor(b, flat, t_op)
                out.append((f"reduce_scatter {op} {shape}", a, b))
    return out


def _one_d(rank: int, world: int, cases) -> list:
    return [_minmax_cases(rank, world, (world,), cases), _ring_cases(rank, world)]


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_partial_max_and_min_on_a_1d_mesh_match_torch(world):
    """22 cases (uneven 7 rows on 2 and 4 ranks) plus, on 4 ranks, 4 with an empty piece;
    and the MAX/MIN ring against gloo's own all-reduce and reduce-scatter, exactly."""
    cases = ONE_D + (EMPTY if world == 4 else [])
    results = launch(_one_d, world, cases, timeout=150)
    assert _assert_same([r[0] for r in results]) == world * _steps(cases)
    for rank, (_, ring) in enumerate(results):
        for name, ours, theirs in ring:
            assert ours.dtype == theirs.dtype and torch.equal(ours, theirs), (rank, name)


TWO_D = [
    ("amax 0", (7, 6), 0, ("S0", "S0"), [("R", "R"), ("S0", "R"), ("R", "S0")], False),
    ("amax 0", (7, 6), 1, ("S0", "S1"), [("R", "S0"), ("S0", "S0"), "full"], False),
    ("amin -1", (5, 6), 2, ("S1", "Psum"), ["full"], False),  # the sum all-reduced first
    ("max", (5, 6), 3, ("S1", "S0"), ["full"], False),
    ("amax 1", (5, 6), 4, ("Pmax", "S1"), [("R", "R"), ("S0", "R")], False),
    ("same", (5, 6), 5, ("Pmax", "Pmax"), [("S1", "S0"), ("R", "R")], True),
    ("max 0", (5, 6), 6, ("S0", "S1"), ["full"], False),
]


@pytest.mark.slow
def test_partial_max_and_min_on_a_2x2_mesh_match_torch():
    """Nested sharding reduced to (P(max), P(max)), mixed Partials and Shards, on 4 ranks."""
    results = launch(_minmax_cases, 4, (2, 2), TWO_D, timeout=150)
    assert _assert_same(results) == 4 * _steps(TWO_D)

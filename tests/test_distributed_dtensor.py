"""retorch.distributed's DeviceMesh and DTensor against torch's, on gloo with 2 and 4 ranks.

Every case runs both libraries in the same processes on the same data and compares, per
rank: the mesh's groups and coordinates; after each redistribution the placements, the local
piece (shape and values) and the collectives issued (torch's ``CommDebugMode`` counts beside
retorch's). The values are small integers in float32, so every sum is exact in any order and
the pieces are compared exactly.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from retorch.distributed.launch import WorkerFailed, launch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _libs():
    import torch.distributed.tensor as tdt
    from torch.distributed.device_mesh import init_device_mesh as t_init
    from torch.distributed.tensor.debug import CommDebugMode as TComm

    import retorch.distributed.tensor as rdt
    from retorch.distributed.device_mesh import init_device_mesh as r_init
    from retorch.distributed.tensor.debug import CommDebugMode as RComm

    return {"torch": (tdt, t_init, TComm), "retorch": (rdt, r_init, RComm)}


#: hypothesis settings for a test that launches ranks per example: two examples, no shrinking
#: (a shrink relaunches every rank for each candidate: minutes; a failure prints its cases)
_LAUNCHING = settings(
    max_examples=2,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],
)


def _placements(lib, names):
    """("S0", "R", "Psum") -> the library's placement objects."""
    out = []
    for n in names:
        if n == "R":
            out.append(lib.Replicate())
        elif n.startswith("S"):
            out.append(lib.Shard(int(n[1:])))
        else:
            out.append(lib.Partial(n[1:]))
    return out


def _piece(x: torch.Tensor, n: int, dim: int, i: int) -> torch.Tensor:
    """Piece ``i`` of ``n`` as ``torch.chunk`` cuts (empty past the last piece)."""
    pieces = torch.chunk(x, n, dim=dim)
    return pieces[i] if i < len(pieces) else x.narrow(dim, x.size(dim), 0)


def _counts(mode) -> dict[str, int]:
    return {str(k): v for k, v in mode.get_comm_counts().items()}


def _run_chains(rank: int, world: int, mesh_shape, chains) -> list:
    """For each chain (shape, seed, src, [dst, ...]): both libraries' records, step by step."""
    records = []
    libs = _libs()
    meshes = {name: init("cpu", mesh_shape) for name, (_, init, _) in libs.items()}
    for shape, seed, src, dsts in chains:
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(-8, 8, shape, generator=g).float()
        chain = {}
        for name, (lib, _, Comm) in libs.items():
            mesh, steps = meshes[name], []
            with Comm() as mode:
                d = _make(lib, mesh, x, src, rank)
            steps.append((src, _counts(mode), d.to_local().clone()))
            for dst in dsts:
                try:
                    with Comm() as mode:
                        d = d.redistribute(mesh, _placements(lib, dst))
                    steps.append((dst, _counts(mode), d.to_local().clone()))
                except Exception as e:  # noqa: BLE001 - the error is what is compared
                    steps.append((dst, type(e).__name__, str(e)))
                    break
            steps.append(("placements", [str(p) for p in d.placements], tuple(d.shape)))
            chain[name] = steps
        records.append(chain)
    return records


def _assert_same(results) -> int:
    compared = 0
    for rank, records in enumerate(results):
        for chain in records:
            ours, theirs = chain["retorch"], chain["torch"]
            assert len(ours) == len(theirs), (rank, ours, theirs)
            for a, b in zip(ours, theirs, strict=True):
                assert a[0] == b[0] and a[1] == b[1], (rank, a[:2], b[:2])
                if isinstance(a[2], torch.Tensor):
                    assert a[2].shape == b[2].shape, (rank, a[0], a[2].shape, b[2].shape)
                    assert torch.equal(a[2], b[2]), (rank, a[0], a[2], b[2])
                else:
                    assert a[2] == b[2], (rank, a, b)
                compared += 1
    return compared


ONE_D = [
    # every pair of placements on a 1-D mesh, even and uneven pieces (5 rows on 2 and 4 ranks)
    ((5, 3), 0, ("S0",), [("S1",), ("R",), ("S0",), ("S1",)]),
    ((4, 6), 1, ("S1",), [("S0",), ("R",), ("S1",)]),
    ((5, 3), 2, ("R",), [("S0",), ("R",), ("S1",), ("R",)]),
    ((5, 3), 3, ("Psum",), [("S0",)]),
    ((3, 5), 4, ("Psum",), [("S1",)]),
    ((5, 3), 5, ("Psum",), [("R",)]),
    ((5, 3), 6, ("Pavg",), [("R",)]),
    ((5, 3), 7, ("R",), [("Psum",)]),  # torch refuses: Partial is for internal use
    ((5, 3), 8, ("S0",), [("Psum",)]),
    ((1, 3), 9, ("S0",), [("R",), ("S1",)]),  # more ranks than rows: empty pieces
]


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_every_placement_change_on_a_1d_mesh_matches_torch(world):
    results = launch(_run_chains, world, (world,), ONE_D, timeout=120)
    assert _assert_same(results) >= world * 30


TWO_D = [
    ((5, 6), 0, ("S0", "S0"), [("R", "S0"), ("S0", "S1"), ("R", "R")]),  # nested sharding
    ((5, 6), 1, ("S0", "S1"), [("S1", "S0"), ("R", "R")]),
    ((4, 4), 2, ("R", "S0"), [("S0", "S0"), ("S0", "R")]),
    ((5, 6), 3, ("Psum", "S1"), [("R", "S1"), ("R", "R")]),
    ((5, 6), 4, ("S1", "Psum"), [("S1", "S0"), ("S1", "R")]),
]


@pytest.mark.slow
def test_placement_changes_on_a_2x2_mesh_match_torch():
    results = launch(_run_chains, 4, (2, 2), TWO_D, timeout=150)
    assert _assert_same(results) >= 4 * 15


def _placement_names(ndim: int):
    return st.sampled_from([f"S{d}" for d in range(ndim)] + ["R", "Psum"])


@st.composite
def _chain(draw, mesh_ndim: int):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    names = _placement_names(len(shape))
    src = tuple(draw(names) for _ in range(mesh_ndim))
    plain = st.sampled_from([f"S{d}" for d in range(len(shape))] + ["R"])
    dsts = [tuple(draw(plain) for _ in range(mesh_ndim)) for _ in range(draw(st.integers(1, 3)))]
    return shape, draw(st.integers(0, 2**16)), src, dsts


@pytest.mark.slow
@_LAUNCHING
@given(chains=st.lists(_chain(2), min_size=8, max_size=8))
def test_random_redistribution_chains_on_a_2x2_mesh_match_torch(chains):
    results = launch(_run_chains, 4, (2, 2), chains, timeout=150)
    assert _assert_same(results) >= 4 * 8 * 3


def _mesh_facts(rank: int, world: int, shape, names) -> dict:
    import torch.distributed as dist

    facts = {}
    for name, (_, init, _) in _libs().items():
        mesh = init("cpu", shape, mesh_dim_names=names)
        facts[name] = {
            "repr": repr(mesh),
            "coordinate": tuple(mesh.get_coordinate()),
            "local ranks": [mesh.get_local_rank(n) for n in names],
            "groups": [dist.get_process_group_ranks(mesh.get_group(n)) for n in names],
            "slices": {n: (repr(mesh[n]), mesh[n].mesh.tolist()) for n in names},
            "shape": (mesh.ndim, tuple(mesh.shape), mesh.size()),
        }
    return facts


@pytest.mark.slow
@pytest.mark.parametrize(("world", "shape", "names"),
                         [(2, (2,), ("dp",)), (4, (4,), ("dp",)),
                          (4, (2, 2), ("dp", "tp"))])  # fmt: skip
def test_device_mesh_groups_and_slices_match_torch(world, shape, names):
    for facts in launch(_mesh_facts, world, shape, names, timeout=90):
        assert facts["retorch"] == facts["torch"]


def _grads(rank: int, world: int) -> dict:
    """A weighted sum of a redistributed DTensor, backward: the gradient of each rank's piece."""
    out = {}
    w = torch.arange(15.0).reshape(5, 3)
    for name, (lib, init, Comm) in _libs().items():
        mesh = init("cpu", (world,))
        grads = {}
        for src, dst in [("S0", "R"), ("R", "S1"), ("S0", "S1"), ("Psum", "R"), ("Psum", "S0")]:
            piece = torch.ones(5, 3) if src != "S0" else torch.chunk(torch.ones(5, 3), world)[rank]
            piece = (piece * (rank + 1)).requires_grad_()
            d = lib.DTensor.from_local(piece, mesh, _placements(lib, (src,)), shape=(5, 3),
                                       stride=(3, 1))  # fmt: skip
            e = d.redistribute(mesh, _placements(lib, (dst,)))
            full_w = w if dst == "R" else torch.chunk(w, world, int(dst[1]))[rank]
            (e.to_local() * full_w).sum().backward()
            grads[(src, dst)] = piece.grad
        with Comm() as mode:  # distribute_tensor to Partial: a broadcast, then terms x/n
            part = lib.distribute_tensor(w.clone(), mesh, [lib.Partial()])
        grads["distribute to Partial"] = (part.to_local(), _counts(mode))
        out[name] = grads
    return out


@pytest.mark.slow
def test_gradients_flow_back_through_redistribution_as_torch_s():
    for rank, g in enumerate(launch(_grads, 2, timeout=90)):
        ours, theirs = (
            g["retorch"].pop("distribute to Partial"),
            g["torch"].pop("distribute to Partial"),
        )
        assert torch.equal(ours[0], theirs[0]) and ours[1] == theirs[1], (rank, ours, theirs)
        for key, theirs in g["torch"].items():
            assert torch.equal(g["retorch"][key], theirs), (rank, key)


def _fail_in_redistribute(rank: int, world: int) -> None:
    from retorch.distributed.device_mesh import init_device_mesh
    from retorch.distributed.tensor import Partial, Replicate, distribute_tensor

    d = distribute_tensor(torch.ones(4), init_device_mesh("cpu", (world,)), [Replicate()])
    d.redistribute(placements=[Partial()])


@pytest.mark.slow
def test_a_rank_that_fails_fails_the_launch_quickly():
    with pytest.raises(WorkerFailed, match="redistributing to Partial is for internal use"):
        launch(_fail_in_redistribute, 2, timeout=60)


def _mm_cases(rank: int, world: int, mesh_shape, cases) -> list:
    """torch.mm of two DTensors in each library: output placements, collectives, pieces."""
    from retorch.distributed.tensor._ops import mm

    libs, records = _libs(), []
    meshes = {name: init("cpu", mesh_shape) for name, (_, init, _) in libs.items()}
    for (m, k, n), seed, pa, pb in cases:
        g = torch.Generator().manual_seed(seed)
        a = torch.randint(-4, 4, (m, k), generator=g).float()
        b = torch.randint(-4, 4, (k, n), generator=g).float()
        rec = {}
        for name, (lib, _, Comm) in libs.items():
            mesh = meshes[name]
            A, B = (_make(lib, mesh, x, p, rank) for x, p in ((a, pa), (b, pb)))
            with Comm() as mode:
                C = torch.mm(A, B) if name == "torch" else mm(A, B)
            rec[name] = ([str(p) for p in C.placements], _counts(mode), C.to_local().clone())
        records.append(rec)
    return records


def _make(lib, mesh, x, names, rank):
    """A DTensor of ``x`` with these placements; Partial holds rank-dependent terms."""
    if not any(p.startswith("P") for p in names):
        return lib.distribute_tensor(x.clone(), mesh, _placements(lib, names))
    local = x * (rank + 1)
    for i, p in enumerate(names):
        if p.startswith("S"):
            local = _piece(local, mesh.size(i), int(p[1:]), mesh.get_coordinate()[i])
    return lib.DTensor.from_local(local.contiguous(), mesh, _placements(lib, names),
                                  shape=x.shape, stride=x.stride())  # fmt: skip


def _assert_same_mm(results) -> int:
    n = 0
    for rank, records in enumerate(results):
        for rec in records:
            (po, co, lo), (pt, ct, lt) = rec["retorch"], rec["torch"]
            assert (po, co) == (pt, ct), (rank, rec["retorch"][:2], rec["torch"][:2])
            assert lo.shape == lt.shape and torch.equal(lo, lt), (rank, po, lo, lt)
            n += 1
    return n


ALL_1D = ["S0", "S1", "R", "Psum"]


@pytest.mark.slow
@pytest.mark.parametrize("mkn", [(4, 6, 8), (5, 3, 7), (4, 4, 4)])  # (4, 4, 4): ties
def test_mm_chooses_torch_s_strategy_for_every_pair_of_placements(mkn):
    cases = [(mkn, i, (pa,), (pb,)) for i, (pa, pb) in enumerate(
        itertools.product(ALL_1D, ALL_1D))]  # fmt: skip
    assert _assert_same_mm(launch(_mm_cases, 2, (2,), cases, timeout=120)) == 2 * 16


@pytest.mark.slow
@_LAUNCHING
@given(data=st.data())
def test_mm_on_a_2x2_mesh_chooses_torch_s_strategy(data):
    names = st.sampled_from(ALL_1D)
    cases = [((data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6)),
               data.draw(st.integers(1, 6))), i, (data.draw(names), data.draw(names)),
              (data.draw(names), data.draw(names))) for i in range(10)]  # fmt: skip
    assert _assert_same_mm(launch(_mm_cases, 4, (2, 2), cases, timeout=150)) == 4 * 10


def _tensor_parallel_mlp(rank: int, world: int, steps: int) -> dict:
    """Megatron's MLP block (Colwise then Rowwise) in both libraries: outputs, collectives
    per forward, and each rank's weight pieces after SGD steps."""
    from torch import nn

    libs = {
        "torch": "torch.distributed.tensor.parallel",
        "retorch": "retorch.distributed.tensor.parallel",
    }
    out = {}
    for name, (_, init, Comm) in _libs().items():
        par = __import__(libs[name], fromlist=["parallelize_module"])
        torch.manual_seed(0)
        mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 6))
        mesh = init("cpu", (world,))
        par.parallelize_module(mlp, mesh, {"0": par.ColwiseParallel(),
                                           "2": par.RowwiseParallel()})  # fmt: skip
        opt = torch.optim.SGD(mlp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        rec = {"y": [], "comms": []}
        for _ in range(steps):
            x = torch.randn(4, 8, generator=g)
            with Comm() as mode:
                y = mlp(x)
            rec["y"].append(y.detach().clone())
            rec["comms"].append(_counts(mode))
            opt.zero_grad()
            (y * y).sum().backward()
            opt.step()
        rec["pieces"] = [
            (p.to_local() if hasattr(p, "to_local") else p).detach().clone()
            for p in mlp.parameters()
        ]
        out[name] = rec
    return out


@pytest.mark.slow
def test_tensor_parallel_mlp_trains_as_torch_s():
    for rank, r in enumerate(launch(_tensor_parallel_mlp, 2, 3, timeout=120)):
        ours, theirs = r["retorch"], r["torch"]
        assert ours["comms"] == theirs["comms"] == [{"c10d_functional.all_reduce": 1}] * 3
        for a, b in zip(ours["y"] + ours["pieces"], theirs["y"] + theirs["pieces"], strict=True):
            assert a.shape == b.shape
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6), rank


def _fsdp2_side_by_side(rank: int, world: int, steps: int) -> dict:
    """torch's fully_shard and ours on the same MLP (each layer, then the root), SGD with
    momentum: gradient pieces and parameter pieces after every step (step 1 accumulates two
    backwards), collectives per forward and per backward."""
    from torch import nn
    from torch.distributed.fsdp import fully_shard as torch_fully_shard

    from retorch.distributed.fully_shard import fully_shard as our_fully_shard

    out = {}
    for name, (_, init, Comm) in _libs().items():
        shard = torch_fully_shard if name == "torch" else our_fully_shard
        torch.manual_seed(0)
        mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5), nn.ReLU(),
                            nn.Linear(5, 3))  # fmt: skip
        mesh = init("cpu", (world,))
        for layer in (mlp[0], mlp[2], mlp[4], mlp):
            shard(layer, mesh=mesh)
        opt = torch.optim.SGD(mlp.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(rank)
        rec = {"comms": [], "pieces": []}
        for step in range(steps):
            for _ in range(2 if step == 1 else 1):  # step 1 accumulates two micro-batches
                x = torch.randn(4, 8, generator=g)
                with Comm() as fwd:
                    y = mlp(x)
                with Comm() as bwd:
                    (y * y).sum().backward()
            rec["pieces"].append([
                (p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad).clone()
                for p in mlp.parameters()
            ])  # fmt: skip
            opt.step()
            opt.zero_grad()
            rec["comms"].append((_counts(fwd), _counts(bwd)))
            rec["pieces"].append([
                (p.to_local() if hasattr(p, "to_local") else p).detach().clone()
                for p in mlp.parameters()
            ])  # fmt: skip
        out[name] = rec
    return out


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_fully_shard_trains_as_torch_s(world):
    for rank, r in enumerate(launch(_fsdp2_side_by_side, world, 3, timeout=150)):
        ours, theirs = r["retorch"], r["torch"]
        assert ours["comms"] == theirs["comms"], (rank, ours["comms"], theirs["comms"])
        for a_step, b_step in zip(ours["pieces"], theirs["pieces"], strict=True):
            for a, b in zip(a_step, b_step, strict=True):
                assert a.shape == b.shape, (rank, a.shape, b.shape)
                torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


# ---- sharding propagation of pointwise ops and sum (torch's _pointwise_ops.py, _math_ops.py) --

#: name -> (torch's call on DTensors, retorch's); "b" is a second DTensor, numbers are scalars
_OPS = {
    "add": (lambda a, b: a + b, "add", True),
    "sub": (lambda a, b: a - b, "sub", True),
    "mul": (lambda a, b: a * b, "mul", True),
    "add 2": (lambda a, b: a + 2, "add", 2),
    "sub 1.5": (lambda a, b: a - 1.5, "sub", 1.5),
    "mul 3": (lambda a, b: a * 3, "mul", 3),
    "div 2": (lambda a, b: a / 2, "div", 2),
    "neg": (lambda a, b: -a, "neg", None),
    "relu": (lambda a, b: torch.relu(a), "relu", None),
    "gelu": (lambda a, b: torch.nn.functional.gelu(a), "gelu", None),
    "sum": (lambda a, b: a.sum(), "sum", ()),
    "sum 0": (lambda a, b: a.sum(0), "sum", (0,)),
    "sum -1 keepdim": (lambda a, b: a.sum(-1, keepdim=True), "sum", (-1, True)),
    "sum (0, 1)": (lambda a, b: a.sum((0, 1)), "sum", ((0, 1),)),
}


def _call_ours(name, a, b):
    """retorch's DTensor has torch's operators and ``sum`` method; relu and gelu are
    functions of ``_pointwise_ops`` (torch reaches them through ``__torch_dispatch__``)."""
    from retorch.distributed.tensor import _pointwise_ops as ops

    _, fn, arg = _OPS[name]
    if fn not in ("relu", "gelu", "div"):
        return _OPS[name][0](a, b)
    if arg is True:
        return getattr(ops, fn)(a, b)
    if arg is None:
        return getattr(ops, fn)(a)
    if isinstance(arg, tuple):
        return ops.sum(a, *arg)
    return getattr(ops, fn)(a, arg)


def _op_cases(rank: int, world: int, mesh_shape, cases) -> list:
    """Each case (op, shape of a, shape of b, seed, placements of a, of b) in both libraries:
    the output's placements and shape, the collectives issued, this rank's piece."""
    libs, records = _libs(), []
    meshes = {name: init("cpu", mesh_shape) for name, (_, init, _) in libs.items()}
    for op, sa, sb, seed, pa, pb in cases:
        g = torch.Generator().manual_seed(seed)
        a = torch.randint(-4, 5, sa, generator=g).float()
        b = torch.randint(-4, 5, sb, generator=g).float()
        rec = {}
        for name, (lib, _, Comm) in libs.items():
            A, B = (_make(lib, meshes[name], x, p, rank) for x, p in ((a, pa), (b, pb)))
            try:
                with Comm() as mode:
                    C = _OPS[op][0](A, B) if name == "torch" else _call_ours(op, A, B)
                rec[name] = ([str(p) for p in C.placements], tuple(C.shape), _counts(mode),
                             C.to_local().clone())  # fmt: skip
            except Exception as e:  # noqa: BLE001 - the error is what is compared
                rec[name] = (type(e).__name__,)
        records.append((op, sa, sb, pa, pb, rec))
    return records


def _assert_same_ops(results) -> int:
    n = 0
    for rank, records in enumerate(results):
        for *case, rec in records:
            ours, theirs = rec["retorch"], rec["torch"]
            assert ours[:3] == theirs[:3], (rank, case, ours[:3], theirs[:3])
            if len(ours) > 3:
                assert ours[3].shape == theirs[3].shape, (rank, case)
                torch.testing.assert_close(ours[3], theirs[3], atol=1e-6, rtol=1e-6)
            n += 1
    return n


#: the placements every op here meets; Partial("max") only in the unary cases below (its
#: reductions and redistributions are compared in tests/test_dtensor_partial_minmax.py)
_P1 = ["S0", "S1", "R", "Psum", "Pavg"]


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_pointwise_ops_and_sum_propagate_as_torch_s_on_a_1d_mesh(world):
    """Every pair of placements for add/sub/mul of two DTensors (5 rows: uneven on 2 and 4
    ranks), every placement for the unary and scalar ops and sum; a (3,) operand broadcasts."""
    pairs = ["S0", "S1", "R", "Psum", "Pavg"]
    cases = [(op, (5, 3), (5, 3), i, (pa,), (pb,)) for i, (op, pa, pb) in
             enumerate(itertools.product(["add", "sub", "mul"], pairs, pairs))]  # fmt: skip
    cases += [(op, (5, 3), (5, 3), 100 + i, (pa,), ("R",)) for i, (op, pa) in enumerate(
        itertools.product([o for o in _OPS if _OPS[o][2] is not True], _P1))]  # fmt: skip
    cases += [(op, (5, 3), (5, 3), 200, ("Pmax",), ("R",)) for op in ("relu", "neg")]
    cases += [("sum (0, 1)", (5,), (5,), 201, (pa,), ("R",)) for pa in ("S0", "Psum")]  # raises
    cases += [(op, (5, 3), (3,), 300 + i, (pa,), (pb,)) for i, (op, pa, pb) in enumerate(
        itertools.product(["add", "mul"], ["S0", "S1", "Psum"], ["S0", "R", "Psum"]))]  # fmt: skip
    assert _assert_same_ops(launch(_op_cases, world, (world,), cases, timeout=150)) == world * (
        len(cases)
    )


@pytest.mark.slow
@_LAUNCHING
@given(data=st.data())
def test_pointwise_ops_and_sum_on_a_2x2_mesh_propagate_as_torch_s(data):
    """Random ops, shapes (1 to 5 per dim: uneven and empty pieces) and placements, a
    broadcast second operand sometimes; 24 cases per launch of 4 ranks."""
    names = st.sampled_from(_P1[:4])
    cases = []
    for i in range(24):
        op = data.draw(st.sampled_from(list(_OPS)))
        sa = tuple(data.draw(st.lists(st.integers(1, 5), min_size=2, max_size=3)))
        sb = sa[data.draw(st.integers(0, len(sa) - 1)) :] if _OPS[op][2] is True else sa
        pa, pb = (tuple(data.draw(names) for _ in range(2)) for _ in range(2))
        pa = tuple("R" if p.startswith("S") and int(p[1]) >= len(sa) else p for p in pa)
        pb = tuple("R" if p.startswith("S") and int(p[1]) >= len(sb) else p for p in pb)
        cases.append((op, sa, sb, i, pa, pb if _OPS[op][2] is True else ("R", "R")))
    assert _assert_same_ops(launch(_op_cases, 4, (2, 2), cases, timeout=150)) == 4 * 24


@pytest.mark.slow
def test_mm_of_unsharded_inputs_on_a_2x2_mesh_keeps_torch_s_choice():
    """No input sharded: torch's single-dim strategies have no Shard rule to offer, so mm of
    (R, P) by (R, P) all-reduces one input rather than cutting both first (which the cost
    model alone would prefer, by a hair: the bytes of the all-reduce halve). Found by the
    random mm test."""
    cases = [((2, 4, 2), 0, ("R", "Psum"), ("R", "Psum")),
             ((5, 3, 4), 1, ("R", "Psum"), ("R", "Psum")),
             ((4, 4, 4), 2, ("Psum", "R"), ("Psum", "Psum")),
             ((3, 5, 2), 3, ("Psum", "Psum"), ("R", "R"))]  # fmt: skip
    assert _assert_same_mm(launch(_mm_cases, 4, (2, 2), cases, timeout=120)) == 4 * 4


@pytest.mark.slow
def test_the_chapter_s_pointwise_table_agrees_with_torch():
    """``demos.pointwise_placements``, the rows chapter 7 can print: retorch's output
    placement and collectives equal torch's, and the pieces, on every rank."""
    from retorch.distributed.demos import POINTWISE_CASES, pointwise_placements

    for rows in launch(pointwise_placements, 2, timeout=90):
        assert len(rows) == len(POINTWISE_CASES)
        for expr, _, _, t_out, t_comm, r_out, r_comm, same in rows:
            assert (r_out, r_comm, same) == (t_out, t_comm, True), expr

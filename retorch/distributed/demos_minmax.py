"""Chapter 7's two side-by-side cells for ``Partial("max")`` and ``_StridedShard``.

Run in ranks by ``launch`` (each function is ``fn(rank, world)``); the tests that check the
same things case by case are tests/test_dtensor_partial_minmax.py and tests/test_strided_shard.py.
"""

from __future__ import annotations

import torch

from .demos import _dtensor_libs, _quiet, _short

__all__ = ["minmax_placements", "strided_shard_pieces"]

#: (expression, input placement, the op): a (5, 3) tensor, cut 3 + 2 rows on 2 ranks
MINMAX_CASES = [
    ("x.amax(0)", "S0", lambda lib, mesh, x: x.amax(0)),
    (
        "x.amax(0).redistribute(R)",
        "S0",
        lambda lib, mesh, x: x.amax(0).redistribute(mesh, [lib.Replicate()]),
    ),
    (
        "x.amin(0).redistribute(S0)",
        "S0",
        lambda lib, mesh, x: x.amin(0).redistribute(mesh, [lib.Shard(0)]),
    ),
    ("x.max()", "S1", lambda lib, mesh, x: x.max()),
    ("x.amax(1)", "S0", lambda lib, mesh, x: x.amax(1)),
    ("x.max(0).values", "S0", lambda lib, mesh, x: x.max(0)[0]),
    ("x.amax(0)", "P(sum)", lambda lib, mesh, x: x.amax(0)),
]


def minmax_placements(rank: int, world: int) -> list[tuple]:
    """Each of ``MINMAX_CASES`` in both libraries: (expression, input placement, torch's
    output placement and collectives, retorch's, whether the pieces are equal)."""
    x0 = (torch.arange(15.0).reshape(5, 3) * 7) % 11 - 5
    rows = []
    with _quiet():
        libs = _dtensor_libs()
        meshes = {name: init("cpu", (world,)) for name, (_, init, _) in libs.items()}
        for expr, where, fn in MINMAX_CASES:
            rec = {}
            for name, (lib, _, Comm) in libs.items():
                mesh = meshes[name]
                if where == "P(sum)":
                    x = lib.DTensor.from_local(x0 * (rank + 1), mesh, [lib.Partial()])
                else:
                    x = lib.distribute_tensor(x0.clone(), mesh, [lib.Shard(int(where[1]))])
                with Comm() as mode:
                    out = fn(lib, mesh, x)
                rec[name] = (str(out.placements[0]), _short(mode), out.to_local().clone())
            same = torch.equal(rec["torch"][2], rec["retorch"][2])
            rows.append((expr, where, *rec["torch"][:2], *rec["retorch"][:2], same))
    return rows


def strided_shard_pieces(rank: int, world: int) -> list[tuple]:
    """torch's 2-D recipe on a 2x2 mesh (an MLP 8 -> 16 -> 8, Colwise then Rowwise over "tp",
    ``fully_shard`` over "dp"): per parameter, torch's placements, and whether retorch's
    ``distribute_tensor`` with them gives this rank torch's piece and ``full_tensor`` the
    whole parameter."""
    from torch import nn

    from .device_mesh import init_device_mesh as r_init
    from .tensor import Replicate, Shard, distribute_tensor
    from .tensor._strided_shard import _StridedShard

    with _quiet():
        from torch.distributed.device_mesh import init_device_mesh as t_init
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import Shard as TShard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )
        from torch.distributed.tensor.placement_types import _StridedShard as TStrided

        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        whole = {n: p.detach().clone() for n, p in model.named_parameters()}
        t_mesh = t_init("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        r_mesh = r_init("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        parallelize_module(model, t_mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=t_mesh["dp"])
        fully_shard(model, mesh=t_mesh["dp"])
        rows = []
        for name, p in model.named_parameters():
            ours = [_StridedShard(q.dim, split_factor=q.split_factor) if isinstance(q, TStrided)
                    else Shard(q.dim) if isinstance(q, TShard) else Replicate()
                    for q in p.placements]  # fmt: skip
            d = distribute_tensor(whole[name], r_mesh, ours)
            same = torch.equal(d.to_local(), p.to_local().detach())
            rows.append((name, ", ".join(map(str, p.placements)), same,
                         torch.equal(d.full_tensor(), whole[name])))  # fmt: skip
    return rows

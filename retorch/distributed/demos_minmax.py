"""Chapter 7's side-by-side cell for ``Partial("max")`` (the ``_StridedShard`` cell's demo is
``demos_fsdp2_two_d``).

Run in ranks by ``launch`` (each function is ``fn(rank, world)``); the tests that check the
same things case by case are tests/test_dtensor_partial_minmax.py.
"""

from __future__ import annotations

import torch

from .demos import _dtensor_libs, _quiet, _short

__all__ = ["minmax_placements"]

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

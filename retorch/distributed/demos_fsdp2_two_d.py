"""torch's 2-D recipe in both libraries: each parameter's placements, piece and full tensor.

On a 2x2 mesh ("dp", "tp"), an MLP block Colwise then Rowwise over ``mesh["tp"]``, then
``fully_shard`` per Linear and at the root over ``mesh["dp"]``: torch's sharded DTensor
parameters (``_fsdp_param.py``'s ``_init_sharding_spec_tp``) beside retorch's
(``fully_shard.sharded_dtensors``). Also ``_StridedShard`` on an outer mesh dim with uneven
pieces, redistributed to Replicate in each library (``_redistribute.transform_infos``).
"""

from __future__ import annotations

import contextlib
import logging

import torch

__all__ = ["MODELS", "STRIDED", "two_d_fsdp_params"]

#: (hidden rows of the Colwise Linear, rows of the Rowwise one)
MODELS = [(16, 8), (10, 5)]

#: (shape, placements) on the 2x2 mesh, cut by every rank itself (src_data_rank=None); the
#: first three catch a plain-Shard sizing of the outer dim (dp rank 0 holds 4, 6, 8 rows where
#: a plain Shard says 3, 5, 7), the last two (sized alike either way) the other placements
STRIDED = [((6, 3), ("S2", "S0")), ((10, 2), ("S2", "S0")), ((14, 2), ("S2", "S0")),
           ((9, 4), ("S2", "S1")), ((7, 3), ("S2", "R"))]  # fmt: skip


def _placements(lib: str, names) -> list:
    if lib == "torch":
        import torch.distributed.tensor as m
        from torch.distributed.tensor.placement_types import _StridedShard
    else:
        from . import tensor as m
        from .tensor._strided_shard import _StridedShard
    table = {"S2": lambda: _StridedShard(0, split_factor=2), "S0": lambda: m.Shard(0),
             "S1": lambda: m.Shard(1), "R": m.Replicate}  # fmt: skip
    return [table[n]() for n in names]


@contextlib.contextmanager
def _no_merge_notice():
    """Without torch's notice that gathering ``(_S(0, 2), S(0))`` takes two all-gathers it
    cannot merge (``_redistribute.py``): stated in the chapter; the workers' stderr reaches
    the page with a timestamp."""
    logger = logging.getLogger("torch.distributed.tensor._redistribute")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def two_d_fsdp_params(rank: int, world: int) -> dict:
    """``{"models": [per model {lib: {name: (mesh ranks, placements, piece, collectives of
    full_tensor, full_tensor, the whole parameter)}}], "strided": [(shape, placements,
    {lib: (piece, collectives, full_tensor)}, the tensor)]}`` on this rank."""
    from torch import nn

    from .demos import _comm_counts, _quiet
    from .device_mesh import init_device_mesh as r_init
    from .fully_shard import fully_shard as r_shard
    from .fully_shard import sharded_dtensors
    from .tensor import distribute_tensor as r_distribute
    from .tensor import parallel as r_par
    from .tensor.debug import CommDebugMode as RComm

    with _quiet(), _no_merge_notice():
        from torch.distributed.device_mesh import init_device_mesh as t_init
        from torch.distributed.fsdp import fully_shard as t_shard
        from torch.distributed.tensor import distribute_tensor as t_distribute
        from torch.distributed.tensor import parallel as t_par
        from torch.distributed.tensor.debug import CommDebugMode as TComm

        libs = {
            "torch": (t_init, t_shard, t_par, TComm),
            "retorch": (r_init, r_shard, r_par, RComm),
        }
        meshes = {lib: init("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
                  for lib, (init, *_) in libs.items()}  # fmt: skip
        out = {"models": [], "strided": []}
        for hidden, rows in MODELS:
            per_lib = {}
            for lib, (_, shard, par, Comm) in libs.items():
                mesh = meshes[lib]
                torch.manual_seed(0)
                mlp = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, rows))
                with torch.no_grad():
                    for p in mlp.parameters():
                        p.copy_(torch.randint(-9, 10, p.shape))
                whole = {n: p.detach().clone() for n, p in mlp.named_parameters()}
                par.parallelize_module(mlp, mesh["tp"], {"0": par.ColwiseParallel(),
                                                         "2": par.RowwiseParallel()})  # fmt: skip
                for layer in (mlp[0], mlp[2], mlp):
                    shard(layer, mesh=mesh["dp"])
                params = dict(mlp.named_parameters()) if lib == "torch" else sharded_dtensors(mlp)
                rec = {}
                for name, p in params.items():
                    with Comm() as mode:
                        full = p.full_tensor()
                    rec[name] = (str(p.device_mesh.mesh.tolist()), [str(q) for q in p.placements],
                                 p.to_local().detach().clone(), _comm_counts(mode),
                                 full.detach().clone(), whole[name])  # fmt: skip
                per_lib[lib] = rec
            out["models"].append(per_lib)
        distribute = {"torch": t_distribute, "retorch": r_distribute}
        for shape, names in STRIDED:
            x = torch.arange(shape[0] * shape[1], dtype=torch.float32).view(shape)
            per_lib = {}
            for lib, (*_, Comm) in libs.items():
                d = distribute[lib](x, meshes[lib], _placements(lib, names), src_data_rank=None)
                with Comm() as mode:
                    full = d.full_tensor()
                per_lib[lib] = (d.to_local().clone(), _comm_counts(mode), full.clone())
            out["strided"].append((shape, names, per_lib, x))
        return out

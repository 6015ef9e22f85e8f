"""``fully_shard`` over ``mesh["dp"]`` of tensor-parallel parameters, against torch 2.13's.

On gloo with 4 ranks, a 2x2 mesh ("dp", "tp"): an MLP block Colwise then Rowwise over
``mesh["tp"]``, then ``fully_shard`` per Linear and at the root over ``mesh["dp"]`` (torch's
2-D recipe), in each library. For every parameter (weights and biases of both Linears): the
placements on the 2-D mesh equal torch's (``_fsdp_param.py``'s ``_init_sharding_spec_tp``:
``(_S(0, 2), S(0))`` for the Colwise weight and bias, ``(S(0), S(1))`` and ``(S(0), R)`` for
the Rowwise ones), this rank's piece equals torch's, and ``full_tensor()`` over the 2-D mesh
gives back the whole parameter, with the collectives torch's issues. Two models: 16 rows
(even) and 10 rows, whose tp pieces of 5 rows are cut 3 and 2 over dp (uneven: dp rank 0
holds 6 of the 10 rows where a plain Shard would say 5).

The same launch checks ``_redistribute.transform_infos`` on a ``_StridedShard`` of an outer
mesh dim with uneven pieces (6, 10 and 14 rows as ``(_S(0, 2), S(0))``, the cases that catch
it; 9 rows as ``(_S(0, 2), S(1))`` and 7 as ``(_S(0, 2), R)`` for the other placements): before
the fix it sized the inner dim's pieces as a plain Shard, and ``full_tensor`` came back with
rows missing.

Values are integers in float32: compared exactly.
"""

from __future__ import annotations

import pytest
import torch

from retorch.distributed.demos_fsdp2_two_d import MODELS, two_d_fsdp_params
from retorch.distributed.launch import launch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def ranks():
    return launch(two_d_fsdp_params, 4, timeout=150)


@pytest.mark.slow  # one launch of 4 processes (~15 s), shared by the tests of this file
def test_fully_shard_over_tp_gives_torch_s_2d_placements_pieces_and_full_tensors(ranks):
    seen = set()
    for rank, res in enumerate(ranks):
        for (hidden, _rows), per_lib in zip(MODELS, res["models"], strict=True):
            assert list(per_lib["retorch"]) == list(per_lib["torch"])  # the same 4 parameters
            assert len(per_lib["torch"]) == 4
            for name, theirs in per_lib["torch"].items():
                mesh, placements, local, comms, full, whole = per_lib["retorch"][name]
                case = (rank, hidden, name)
                assert (mesh, placements) == theirs[:2], (case, placements, theirs[:2])
                assert torch.equal(local, theirs[2]), (case, local, theirs[2])
                assert comms == theirs[3], (case, comms, theirs[3])
                assert torch.equal(theirs[4], whole) and torch.equal(full, whole), case
                seen.add((name, tuple(placements)))
            if hidden == 10:  # dp rank 0 holds 3 of each tp piece's 5 rows, dp rank 1 2
                assert per_lib["retorch"]["0.weight"][2].shape[0] == (3 if rank < 2 else 2)
    assert seen == {("0.weight", ("_S(0, 2)", "S(0)")), ("0.bias", ("_S(0, 2)", "S(0)")),
                    ("2.weight", ("S(0)", "S(1)")), ("2.bias", ("S(0)", "R"))}  # fmt: skip


@pytest.mark.slow
def test_uneven_strided_shard_on_an_outer_mesh_dim_gathers_as_torch_s(ranks):
    for rank, res in enumerate(ranks):
        for shape, names, per_lib, x in res["strided"]:
            (t_local, t_comm, t_full), (r_local, r_comm, r_full) = per_lib.values()
            case = (rank, shape, names)
            assert torch.equal(r_local, t_local), (case, r_local, t_local)
            assert r_comm == t_comm, (case, r_comm, t_comm)
            assert torch.equal(t_full, x) and torch.equal(r_full, x), (case, r_full)


def test_misuse_raises_torch_s_errors():
    """torch's ``_init_sharding_spec_tp`` raises NotImplementedError for more than 2 tp
    placements, ``DeviceMesh._concatenate`` RuntimeError for overlapping meshes; no launch."""
    import types

    from retorch.distributed import fully_shard as fs
    from retorch.distributed.tensor.placement_types import Replicate, Shard

    tp = types.SimpleNamespace(placements=(Shard(0), Shard(1), Replicate()))
    module = types.SimpleNamespace(_dtensor_specs={"weight": tp})
    param = types.SimpleNamespace(module=module, name="weight")
    with pytest.raises(NotImplementedError, match="FSDP only supports 1D TP/EP or 2D EP\\+TP"):
        fs._spmd_spec(param, None)

    class _Mesh:
        device_type, mesh_dim_names = "cpu", ("dp",)

        def __init__(self, ranks):
            self.mesh = torch.tensor(ranks)

        def get_rank(self):
            return 0

    with pytest.raises(RuntimeError, match="Cannot concatenate overlapping meshes"):
        fs._concatenate(_Mesh([0, 1]), _Mesh([0, 1]))

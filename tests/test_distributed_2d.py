"""2-D parallelism against torch's recipe, on gloo with 4 ranks (a 2x2 mesh, "dp" x "tp").

torch's recipe (torch/distributed/tensor/parallel/ and torch/distributed/fsdp/_fully_shard/
``_fsdp_param.py``, whose ``_init_sharded_param`` takes a DTensor parameter on the TP mesh and
shards its local piece on dim 0 over the dp mesh: placements (Shard(0) on dp, the TP placement
on tp)): an MLP block parallelized Colwise then Rowwise over ``mesh["tp"]``, then
``fully_shard`` per Linear and at the root over ``mesh["dp"]``. Each dp group sees its own
batch; the two tp ranks of a group see the same one. Both libraries run in the same processes
on the same data; per rank compared: the collectives of each forward and backward (torch's
``CommDebugMode`` beside retorch's) and each parameter's local piece after every SGD step.
"""

from __future__ import annotations

import pytest
import torch

from retorch.distributed.demos import two_d_parallel
from retorch.distributed.launch import launch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.mark.slow
def test_fsdp_over_dp_and_tensor_parallel_over_tp_train_as_torch_s():
    results = launch(two_d_parallel, 4, 3, timeout=150)
    for rank, r in enumerate(results):
        ours, theirs = r["retorch"], r["torch"]
        assert ours["comms"] == theirs["comms"], (rank, ours["comms"], theirs["comms"])
        for step, (a_step, b_step) in enumerate(zip(ours["pieces"], theirs["pieces"], strict=True)):
            for a, b in zip(a_step, b_step, strict=True):
                assert a.shape == b.shape, (rank, step, a.shape, b.shape)
                torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    # per step, both: forward gathers the two Linears over dp (the root holds no parameter)
    # and all-reduces the Rowwise output over tp; backward gathers them again (resharded
    # after forward) and reduce-scatters their gradients over dp
    fwd = {"c10d._allgather_base_": 2, "c10d_functional.all_reduce": 1}
    bwd = {"c10d._allgather_base_": 2, "c10d._reduce_scatter_base_": 2}
    assert results[0]["torch"]["comms"] == [(fwd, bwd)] * 3


@pytest.mark.slow
def test_bytes_per_step_of_each_design_match_torch_s_collectives():
    """DDP, FlatParameter sharding, FSDP2 and TP on one model (484 float32 parameters) on 4
    ranks: retorch's bytes on the wire per step equal torch's collectives priced by the ring
    model; DDP all-reduces every parameter once (2 (n-1)/n of them), FSDP2 and FlatParameter
    gather them twice and reduce-scatter them once ((n-1)/n each), TP all-reduces one
    activation. torch's FlatParameter design, FSDP1 (units m[0], m[2], the root), keeps the
    root gathered from forward to backward: 5 list all-gathers (each priced as the sum of its
    list of chunks) and 3 reduce-scatters, 1 root gather (68 parameters) fewer than retorch."""
    from retorch.distributed.demos import bytes_per_step, bytes_table

    rows = {r[0]: r[1:] for r in bytes_table(launch(bytes_per_step, 4, timeout=150))}
    params = 484 * 4
    assert rows["DDP"][:2] == (2 * 3 * params // 4,) * 2
    assert rows["FSDP2"][:2] == (3 * 3 * params // 4,) * 2
    units = {"m[0]": 8 * 16 + 16, "m[2]": 16 * 16 + 16, "root": 16 * 4 + 4}  # flat, unpadded
    fsdp1 = 2 * (units["m[0]"] + units["m[2]"]) + units["root"] + sum(units.values())
    assert rows["FlatParameter"] == (
        3 * 3 * params // 4,
        3 * fsdp1 * 4 // 4,
        "allgather_ x5, _reduce_scatter_base_ x3",
    )
    assert rows["TP"][:2] == (2 * 3 * 8 * 16 * 4 // 4,) * 2  # the (8, 16) activation

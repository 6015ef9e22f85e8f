"""FSDP2's memory per rank against torch 2.13's ``fully_shard``, phase by phase.

``demos_fsdp2_memory.fsdp2_memory`` counts, on each of 2 gloo ranks, the bytes of the distinct
storages each library's FSDP2 state holds, in four parts: parameters (sharded pieces, and
unsharded tensors while gathered), gradients (sharded and unsharded), an all-gather's output
not yet copied out, and the buffers the shared communication context holds (torch's
``FSDPCommContext``: the last forward all-gather's output, the last reduce-scatter's input);
after init, at the peak of forward and of backward (sampled after every op but the profiler's
range ops), after forward, after backward, after ``opt.step()``, after ``zero_grad()``; with
``reshard_after_forward`` True and False. Byte counts are exact (storage sizes, no allocator
involved).

- Chapter 7's MLP (8 -> 16 -> 16 -> 4: every row count divides by 2): equal part by part in
  every phase, peaks included; at backward's peak both hold the second layer's reduce-scatter
  input (1088 B) while the first layer is gathered.
- 8 -> 16 -> 5 -> 3 (5 and 3 rows do not divide by 2): torch keeps each sharded piece padded to
  ``ceil(rows / 2)`` rows (``_sharded_param_data``), its unsharded tensors are views of the
  padded all-gather outputs, its sharded gradients views of the padded reduce-scatter output;
  retorch keeps the rows alone. torch's count exceeds retorch's by exactly that padding, in
  every phase, peaks included: the sharded padding S (rank 1: one row of 17 and one of 6
  floats, 92 B; rank 0: none) once per sharded set of tensors alive (pieces; gradients), and
  the unsharded padding of the layers gathered (U = 92 B on each rank for the three; 68 B
  for the first two, at forward's peak without resharding, while the third is gathered but
  not yet copied out). The gathered and held parts are equal (both libraries pad those).
"""

from __future__ import annotations

import pytest

from retorch.distributed import demos_fsdp2_memory as mem
from retorch.distributed.launch import launch

EVEN, UNEVEN = (8, 16, 16, 4), (8, 16, 5, 3)


@pytest.fixture(scope="module")
def ranks():
    return launch(mem.fsdp2_memory, 2, [EVEN, UNEVEN], timeout=150)


@pytest.mark.slow  # one launch of 2 processes (~10 s), shared by the tests of this file
def test_even_rows_hold_torch_s_bytes_part_by_part_in_every_phase(ranks):
    for rank, res in enumerate(ranks):
        for phase, reshard, theirs, ours in mem.memory_table(res, EVEN):
            assert theirs == ours, (rank, phase, reshard, theirs, ours)
        sharded = (16 * 9 + 16 * 17 + 4 * 17) * 4 // 2  # each rank half of every Linear
        retorch = {r: res[(EVEN, "retorch", r)] for r in (True, False)}
        assert retorch[True]["after init"] == (sharded, 0, 0, 0)
        assert retorch[False]["after forward"] == (3 * sharded, 0, 0, 0)
        # backward's peak: the second layer's reduce-scatter input (16x16 + 16 floats) is held
        # while the first layer (16x8 + 16 floats) is gathered, not yet copied out
        for reshard in (True, False):
            assert retorch[reshard]["backward peak"][3] == (16 * 16 + 16) * 4
        assert retorch[True]["backward peak"][2] == (16 * 8 + 16) * 4
        # the most either holds: the second layer's all-gather output, kept after its copy-out
        # while that layer runs (forward), its reduce-scatter input (backward)
        for reshard in (True, False):
            for phase in ("forward, most held", "backward, most held"):
                theirs, ours = res[(EVEN, "torch", reshard)][phase], retorch[reshard][phase]
                assert theirs == ours, (rank, phase, reshard, theirs, ours)
                assert ours[3] == (16 * 16 + 16) * 4, (rank, phase, reshard, ours)


@pytest.mark.slow
def test_uneven_rows_torch_holds_exactly_its_padding_more(ranks):
    # phase -> (times S, unsharded padding over how many of the Linears)
    extra = {"after init": (1, 0), "forward peak": (1, 0), "after forward": (1, 0),
             "backward peak": (2, 0), "after backward": (2, 0), "after step": (2, 0),
             "after zero_grad": (1, 0)}  # fmt: skip
    no_reshard = {"forward peak": (1, 2), "after forward": (1, 3)}
    for rank, res in enumerate(ranks):
        s, u = mem.padding_bytes(UNEVEN, 2, rank)
        assert (s, u) == ((0, 92) if rank == 0 else (92, 92))
        for phase, reshard, theirs, ours in mem.memory_table(res, UNEVEN):
            times_s, layers = extra[phase] if reshard else no_reshard.get(phase, extra[phase])
            padding = times_s * s + mem.padding_bytes(UNEVEN[: layers + 1], 2, rank)[1]
            case = (rank, phase, reshard, theirs, ours)
            assert sum(theirs) - sum(ours) == padding, case
            assert theirs[2:] == ours[2:], case

"""FSDP2's memory per rank against torch 2.13's ``fully_shard``, phase by phase.

``demos_fsdp2_memory.fsdp2_memory`` counts, on each of 2 gloo ranks, the bytes of the distinct
storages each library's FSDP2 state holds: parameters (sharded pieces, and unsharded tensors
while gathered), gradients (sharded and unsharded), and an all-gather's output held before it
is copied out; after init, at the peak of forward (sampled after every aten op), after
forward, at the peak of backward, after backward, after ``opt.step()``, after ``zero_grad()``;
with ``reshard_after_forward`` True and False. Byte counts are exact (storage sizes, no
allocator involved).

- Chapter 7's MLP (8 -> 16 -> 16 -> 4: every row count divides by 2): the designs agree, and
  so do the counts, in every phase, part by part, but one: at the peak of backward with
  resharding, torch holds the prefetched first layer (576 B: its 16x8 weight and 16 biases in
  float32) in the all-gather's output, waiting for its backward to copy it out
  (``wait_for_unshard``), where retorch copied it out into the parameters when it prefetched;
  the totals are equal.
- 8 -> 16 -> 5 -> 3 (5 and 3 rows do not divide by 2): torch keeps each sharded piece padded to
  ``ceil(rows / 2)`` rows (``_sharded_param_data``), its unsharded tensors are views of the
  padded all-gather output, and its sharded gradients views of the padded reduce-scatter
  output; retorch keeps the rows alone. Outside the peaks torch's count exceeds retorch's by
  exactly that padding, per phase: the sharded padding S (rank 1: one row of 17 and one of 6
  floats, 92 B; rank 0: none) once per sharded set of tensors alive, and the unsharded
  padding U (92 B on each rank) while the gathered parameters stay (``reshard_after_forward``
  False).
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
def test_even_rows_hold_torch_s_bytes_in_every_phase(ranks):
    for rank, res in enumerate(ranks):
        for phase, reshard, theirs, ours in mem.memory_table(res, EVEN):
            case = (rank, phase, reshard, theirs, ours)
            assert sum(theirs) == sum(ours), case
            if (phase, reshard) == ("backward peak", True):
                # the prefetched layer 0: in torch's all-gather output, in retorch's params
                assert theirs[2] == ours[0] - theirs[0] == (16 * 8 + 16) * 4, case
                assert ours[2] == 0 and theirs[1] == ours[1], case
            else:
                assert theirs == ours, case
        sharded = (16 * 9 + 16 * 17 + 4 * 17) * 4 // 2  # each rank half of every Linear
        assert res[(EVEN, "retorch", True)]["after init"] == (sharded, 0, 0)
        assert res[(EVEN, "retorch", False)]["after forward"] == (3 * sharded, 0, 0)


@pytest.mark.slow
def test_uneven_rows_torch_holds_exactly_its_padding_more(ranks):
    extra = {
        "after init": (1, 0),
        "after backward": (2, 0),
        "after step": (2, 0),
        "after zero_grad": (1, 0),
    }  # fmt: skip  phase -> (times S, times U)
    for rank, res in enumerate(ranks):
        s, u = mem.padding_bytes(UNEVEN, 2, rank)
        assert (s, u) == ((0, 92) if rank == 0 else (92, 92))
        for phase, reshard, theirs, ours in mem.memory_table(res, UNEVEN):
            want = {**extra, "after forward": (1, 0 if reshard else 1)}.get(phase)
            if want is not None:  # the peaks: compared in the chapter, not here
                assert sum(theirs) - sum(ours) == want[0] * s + want[1] * u, (rank, phase)
                assert theirs[2] == ours[2] == 0, (rank, phase)

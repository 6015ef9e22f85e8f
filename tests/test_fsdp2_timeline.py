"""FSDP2's phases, as each library's profiler records them in one training step.

``retorch.distributed.fully_shard`` opens the ranges torch's ``_fsdp_param_group.py`` opens
(``FSDP::pre_forward``, ``FSDP::all_gather``, ..., named after the module). On 2 gloo ranks,
one step of chapter 7's MLP: both libraries open the same ranges in the same order, each
all-gather lies inside the phase that asked for it (a pre-forward, a pre-backward, or the
backward prefetch of the layer backward reaches next), and the prefetch of layer ``i - 1``
starts before layer ``i``'s gradients are reduce-scattered.
"""

from __future__ import annotations

import pytest

from retorch.distributed import demos
from retorch.distributed.launch import launch


@pytest.fixture(scope="module")
def timelines():
    return launch(demos.fsdp2_timeline, 2, timeout=180)


def _inside(inner, outer) -> bool:
    return outer[1] <= inner[1] and inner[2] <= outer[2]


@pytest.mark.slow  # one 2-rank launch (~15 s)
def test_both_libraries_open_the_same_ranges_in_order(timelines):
    for rank in timelines:
        names = {lib: [n for n, *_ in spans] for lib, spans in rank.items()}
        assert names["retorch"] == names["torch"]
        assert len(names["torch"]) == 20  # 3 layers: 9 forward, 11 backward ranges
    assert [n for n, *_ in timelines[0]["retorch"]] == [n for n, *_ in timelines[1]["retorch"]]


@pytest.mark.slow
def test_each_all_gather_lies_in_the_phase_that_asked_for_it(timelines):
    for lib, spans in timelines[0].items():
        for i, span in enumerate(spans):
            if span[0].startswith("FSDP::all_gather"):
                asker = spans[i - 1]
                assert asker[0].split(" ")[0] in (
                    "FSDP::pre_forward", "FSDP::pre_backward", "FSDP::backward_prefetch"
                ), (lib, asker)  # fmt: skip
                assert _inside(span, asker), (lib, span, asker)
        prefetch = {n.split(" for ")[1]: b for n, b, _ in spans if "prefetch" in n}
        reduce = {n.split("(")[1].rstrip(")"): b for n, b, _ in spans if "reduce" in n}
        assert prefetch.keys() == {"0", "2"}, (lib, prefetch)
        for earlier, later in (("0", "2"), ("2", "4")):
            assert prefetch[earlier] < reduce[later], (lib, earlier, later)

"""The ring schedule chapter 7 draws is the one ``collectives`` runs."""

from __future__ import annotations

import pytest

from retorch.distributed import demos


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_ring_steps_reduce_scatter_then_all_gather(n):
    steps = demos.ring_steps(n)
    assert len(steps) == 1 + 2 * (n - 1)
    held = steps[n - 1]  # after the reduce-scatter: chunk r is complete on rank r, and only there
    for r in range(n):
        for c in range(n):
            assert (held[r * n + c] == set(range(n))) == (c == r), (r, c)
    assert all(cell == set(range(n)) for cell in steps[-1])  # after the all-gather: everywhere
    for before, after in zip(steps, steps[1:]):  # a step never loses a contribution
        assert all(a >= b for a, b in zip(after, before))


def test_figures_draw():
    fig = demos.draw_ring(3)
    assert len([ax for ax in fig.axes if ax.axison]) == 5  # start, 2 + 2 steps; a blank
    events = [("grad", 1, 0.001), ("allreduce", 0, 0.0015), ("grad", 0, 0.002)]
    fig = demos.draw_bucket_timeline({"a": events, "b": events}, n_params=2)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["a", "b"]

"""Timing GPU work with CUDA events: shared by the GPU sections of bench_tensor and
bench_matmul (a module of its own, so that changing it stales only their stored results)."""

from __future__ import annotations

import torch


def event_ms_per_call(impls: dict, turns: int, number: int) -> dict[str, list[float]]:
    """Milliseconds per call of each implementation, timed with CUDA events around blocks of
    ``number`` calls, the implementations taking turns (each block after one untimed call).

    Within a block the host queues each launch while the GPU still runs the previous ones, as
    in a training loop: a fixed cost per call on the host (Python, the launch) is hidden
    while it is shorter than the kernel, and shows when it is longer. Only the first call of a
    block starts on an idle GPU, and the block spreads that over ``number`` calls.
    """
    from numba import cuda

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples: dict[str, list[float]] = {name: [] for name in impls}
    for fn in impls.values():
        fn()
    for _ in range(turns):
        for name, fn in impls.items():
            fn()
            torch.cuda.synchronize()
            cuda.synchronize()
            start.record()
            for _ in range(number):
                fn()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) / number)
    return samples

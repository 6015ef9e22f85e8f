"""Where the GPU sections of the benchmarks can run: shared by every bench/bench_*.py."""

from __future__ import annotations

import torch


def gpu_skip_reason() -> str | None:
    """Why a GPU section cannot run here, or None when it can."""
    from retorch.cuda import simulator_enabled

    if not torch.cuda.is_available():
        return "no GPU on this machine (torch.cuda.is_available() is False)"
    if simulator_enabled():
        return "the CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1): kernels would not run on the GPU"
    return None

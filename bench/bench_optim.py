"""Chapter 2: one Adam step, for 1M and 10M float32 parameters split into 10 or 100 tensors.

Six implementations of the same step on the same parameters: torch's loop, foreach and fused
Adam, and retorch's. Adam is memory-bound: the loop and foreach versions make one pass over
memory per operation of the formula (about ten, each reading and writing whole tensors), the
fused ones a single pass that reads param, grad and both moments and writes three of them.
retorch's fused step is one parallel Numba kernel over the whole tensor list (chunks of 64K
elements spread over the cores); with 100 tensors its Python-side cost (a table of addresses
and per-tensor constants) starts to show next to the kernel itself.

On a machine with a GPU (and the CUDA simulator off), a GPU section times one step of torch's
fused and foreach Adam and retorch's CUDA path (one launch per group over flat buffers) for
the three cases of issue 8, with CUDA events, and stores them with the device's name. Where
there is no GPU it stores why it was skipped, and no numbers.
"""

from __future__ import annotations

import statistics
import time

import torch

import retorch.optim as ro
from bench.gpu import gpu_skip_reason

IMPLS = {
    "torch loop": (torch.optim.Adam, dict(foreach=False)),
    "torch foreach": (torch.optim.Adam, dict(foreach=True)),
    "torch fused": (torch.optim.Adam, dict(fused=True)),
    "retorch loop": (ro.Adam, dict(foreach=False)),
    "retorch foreach": (ro.Adam, dict(foreach=True)),
    "retorch fused (numba)": (ro.Adam, dict(fused=True)),
}


def _params(total: int, count: int) -> list[torch.Tensor]:
    torch.manual_seed(0)
    params = [torch.randn(total // count, requires_grad=True) for _ in range(count)]
    for p in params:
        p.grad = torch.randn_like(p)
    return params


class PointerTableAdam:
    """Adam through retorch's multi-tensor kernel on pointer tables
    (``retorch/optim/_multi_tensor_apply.py``), called as ``torch.optim.adam._fused_adam``
    calls ``torch._fused_adam_``: the step counts raised by one foreach add, then one launch."""

    def __init__(self, params, lr):
        from retorch.optim import _multi_tensor_apply

        self.fused_adam_ = _multi_tensor_apply.fused_adam_
        self.params, self.lr = list(params), lr
        self.exp_avgs = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p) for p in self.params]
        self.steps = [torch.zeros((), device=p.device) for p in self.params]

    def step(self):
        torch._foreach_add_(self.steps, 1)
        self.fused_adam_(self.params, [p.grad for p in self.params], self.exp_avgs,
                         self.exp_avg_sqs, [], self.steps, lr=self.lr, beta1=0.9, beta2=0.999,
                         weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)  # fmt: skip


GPU_IMPLS = {
    "torch fused": (torch.optim.Adam, dict(fused=True)),
    "torch foreach": (torch.optim.Adam, dict(foreach=True)),
    "retorch fused (numba-cuda)": (ro.Adam, dict(fused=True)),
    "retorch multi-tensor (pointer tables)": (PointerTableAdam, {}),
}


def run_gpu(quick: bool = False) -> dict:
    """One Adam step on the GPU, in ms (CUDA events, median), or why it was skipped."""
    reason = gpu_skip_reason()
    if reason:
        return {"skipped": reason}
    cases = [(1_000_000, 10)] if quick else [(10_000_000, 10), (10_000_000, 100), (100_000_000, 10)]
    rows = []
    for total, count in cases:
        torch.manual_seed(0)
        params = [
            torch.randn(total // count, device="cuda", requires_grad=True) for _ in range(count)
        ]
        for p in params:
            p.grad = torch.randn_like(p)
        opts = {name: cls(params, lr=1e-3, **kw) for name, (cls, kw) in GPU_IMPLS.items()}
        for opt in opts.values():
            opt.step()
            opt.step()
        samples: dict[str, list[float]] = {name: [] for name in opts}
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(5 if quick else 25):
            for name, opt in opts.items():
                torch.cuda.synchronize()
                start.record()
                opt.step()
                end.record()
                end.synchronize()
                samples[name].append(start.elapsed_time(end))
        rows += [
            {"case": f"{total / 1e6:g}M params in {count} tensors", "impl": name,
             "value": statistics.median(times)}
            for name, times in samples.items()
        ]  # fmt: skip
        del opts, params
        torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(), "unit": "ms", "rows": rows}


def run(quick: bool = False) -> dict:
    cases = (
        [(100_000, 10)]
        if quick
        else [(1_000_000, 10), (1_000_000, 100), (10_000_000, 10), (10_000_000, 100)]
    )
    rows = []
    for total, count in cases:
        params = _params(total, count)
        opts = {name: cls(params, lr=1e-3, **kw) for name, (cls, kw) in IMPLS.items()}
        for opt in opts.values():  # warm up: state allocation, Numba compilation or cache load
            opt.step()
            opt.step()
        samples: dict[str, list[float]] = {name: [] for name in opts}
        for _ in range(3 if quick else 15):
            for name, opt in opts.items():  # interleaved, so drifts hit every implementation
                t0 = time.perf_counter()
                opt.step()
                samples[name].append(time.perf_counter() - t0)
        rows += [
            {
                "case": f"{total / 1e6:g}M params in {count} tensors",
                "impl": name,
                "value": statistics.median(times) * 1e3,
            }
            for name, times in samples.items()
        ]
    return {
        "name": "optim",
        "title": "One Adam step on CPU (ms, lower is better)",
        "unit": "ms",
        "rows": rows,
        "notes": " ".join(__doc__.split("\n\n")[1].split()),
        "gpu": run_gpu(quick),
    }

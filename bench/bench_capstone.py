"""Chapter 9: one training step of the capstone's Transformer, in tokens per second.

The sort task's GPT (2 layers, 2 heads, width 32, 26K parameters) on batches of 64 sequences of
11 tokens, one AdamW step (forward, loss, backward, step): torch eager, the same model through
``torch.compile`` (Inductor's C++ backend), the model on the rebuilt stack (chapter 5's
``retorch.Tensor``) with the math attention and with the fused attention kernels, and the
unmodified torch model on the retorch device (torch's PrivateUse1 key carrying chapter 4's
kernels). At this size every implementation is bound by its cost per operator, not by
arithmetic: torch's is microseconds per op, the rebuilt stack's tens of microseconds (chapter
5's dispatcher in Python), and the device's more (each op crosses torch's dispatcher into
Python and back).

Each row also stores ``peak_bytes``: the most bytes one training step held at once above what
was held when it began, each measured from just after ``zero_grad()`` (so parameters and
AdamW's state, already allocated, are not counted, the last step's gradients are already freed,
and the step's activations, temporaries and new gradients are counted), each taken by that
implementation's own instrument. Torch on the CPU has no allocator statistics (``c10``'s CPU
allocator keeps none; ``torch.cuda.memory_stats`` is CUDA's): its bytes are
``torch.profiler``'s ``[memory]`` events (``profile_memory=True``), summed in order. The
rebuilt stack's CPU tensors are chapter 4's storages, which no caching allocator serves: their
bytes are the same events of retorch's profiler. The retorch device's come from its caching
allocator's counters, ``requested_bytes.all.peak`` after ``reset_peak_memory_stats``, as
``torch.cuda.max_memory_allocated`` reads a GPU's.
"""

from __future__ import annotations

import statistics
import time

import torch

BATCH, STEPS = 64, 30
#: torch's PrivateUse1 is set up before the process's first backward: a process of its own
FRESH_PROCESS = True


def _batch():
    from retorch.models import compare

    return compare.sort_batches(1, BATCH, seed=0)[0]


def _timed_steps(steps: dict, repeats: int) -> dict:
    """Median seconds of each ``step()`` over ``repeats`` calls, after 2 warm-up calls each;
    the calls interleaved, so that a drift of the machine hits every implementation."""
    for step in steps.values():
        step()
        step()
    times: dict = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def _torch_step(model, x, y):
    from retorch.models.compare import sort_step_loss

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        sort_step_loss(model, x, y).backward()
        opt.step()

    step.zero_grad = opt.zero_grad  # (``_peak_bytes`` measures from after it)
    return step


def _retorch_step(backend: str):
    import retorch.optim
    from retorch.dispatch import from_torch
    from retorch.models import attention, compare

    _, rm = compare.sort_models()
    x, y = _batch()
    rx, ry = from_torch(x), from_torch(y)
    opt = retorch.optim.AdamW(list(rm.parameters()), lr=1e-3)

    def step():
        saved = attention.BACKEND[0]
        attention.BACKEND[0] = backend
        try:
            opt.zero_grad()
            compare.sort_step_loss(rm, rx, ry).backward()
            opt.step()
        finally:
            attention.BACKEND[0] = saved

    step.zero_grad = opt.zero_grad
    return step


def _device_step():
    from retorch.dispatch import privateuse1_device as pd
    from retorch.models import build_gpt, compare

    torch.manual_seed(0)
    model = pd.to_device(build_gpt(compare.SORT_CONFIG, torch.nn))
    x, y = (t.to(pd.NAME) for t in _batch())
    return _torch_step(model, x, y)


def _peak_bytes(name: str, step, device) -> int:
    """The most bytes one ``step()`` held at once above those held when it began, from just
    after ``zero_grad()`` (see above): its own ``zero_grad()`` then frees nothing, so no
    instrument sees a free of bytes allocated before it started."""
    from retorch.utils.checkpoint_memory import memory_totals

    step.zero_grad()

    if name == "torch on the retorch device":
        allocator = device.allocator
        before = allocator.memory_stats()["requested_bytes.all.current"]
        allocator.caching.reset_peak_memory_stats()
        step()
        return int(allocator.memory_stats()["requested_bytes.all.peak"] - before)
    return int(max(memory_totals("retorch" if name.startswith("retorch") else "torch", step)))


def run(quick: bool = False) -> dict:
    from retorch.dispatch import privateuse1_device as pd
    from retorch.models import build_gpt, compare

    device = pd.install()  # (PrivateUse1 is set up before the process's first backward)
    repeats = 3 if quick else STEPS
    x, y = _batch()
    tokens = x.numel()
    config = compare.SORT_CONFIG
    steps = {}
    torch.manual_seed(0)
    steps["torch eager"] = _torch_step(build_gpt(config, torch.nn), x, y)
    torch.manual_seed(0)
    compiled = torch.compile(build_gpt(config, torch.nn))
    steps["torch.compile (Inductor)"] = _torch_step(compiled, x, y)
    steps["retorch stack, math attention"] = _retorch_step("math")
    steps["retorch stack, fused attention"] = _retorch_step("fused")
    steps["torch on the retorch device"] = _device_step()
    seconds = _timed_steps(steps, repeats)
    rows = [
        {
            "case": f"training step, batch {BATCH} x {x.shape[1]} tokens",
            "impl": name,
            "value": tokens / seconds[name],
            "peak_bytes": _peak_bytes(name, step, device),
        }
        for name, step in steps.items()
    ]
    return {
        "name": "capstone",
        "title": "The capstone's training step on CPU (tokens/s, higher is better)",
        "unit": "tokens/s",
        "rows": rows,
        "notes": " ".join(" ".join(__doc__.split("\n\n")[1:3]).split()),
    }

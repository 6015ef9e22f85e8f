"""Chapter 5: what a call through the rebuilt dispatcher costs, beside torch's C++ dispatcher.

Per-call overhead on the smallest work there is, the add of two 1-element float32 tensors, in
µs per call: torch.add against retorch.Tensor's add through the dispatcher (key extraction,
the fallthrough walk, the AutogradCPU kernel, its redispatch, the CPU kernel), the same with
requires_grad (a graph node recorded), and the kernel alone (torch: the CPU kernel reached by
redispatching aten::add.Tensor straight to the CPU key; retorch: retorch.tensor's add).
Samples are interleaved (each round times every implementation) and the median is stored.
Where retorch's time goes is measured with time.perf_counter around each piece of one call,
run alone in a loop: computing the key set (schema binding, TLS sets), selecting the kernel
(highest key, table row, fallthroughs skipped), the AutogradCPU kernel with its redispatch,
and the CPU kernel; it is stored under "breakdown" (µs). The last case is one step of the
2-layer MLP of tests/test_dispatch_training.py (float64, batch 16, SGD with momentum: forward,
cross-entropy, zero_grad, backward, step) on retorch alone against torch, in ms per step.

On a machine with a GPU (and the CUDA simulator off), a GPU section times torch.add and
retorch's add on 1-element CUDA tensors, with CUDA events, and the same MLP step with the model
and batches on the GPU (torch's and retorch's CUDA tensors, float64). Where there is no GPU it
stores why it was skipped, and no numbers.
"""

from __future__ import annotations

import copy
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from bench.gpu import gpu_skip_reason


def _median_us(samples: list[float], per: int) -> float:
    return statistics.median(samples) / per * 1e6


def _interleaved(fns: dict, rounds: int, per: int) -> dict[str, float]:
    """µs per call of each function: ``rounds`` samples of ``per`` calls, interleaved."""
    for fn in fns.values():  # warm up
        for _ in range(per):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(per):
                fn()
            samples[name].append(time.perf_counter() - t0)
    return {name: _median_us(s, per) for name, s in samples.items()}


def _call_rows(quick: bool) -> list[dict]:
    from retorch.dispatch import tensor as rtensor
    from retorch.tensor import ops as _o

    rounds, per = (5, 200) if quick else (25, 2000)
    ta, tb = torch.ones(1), torch.ones(1)
    ra, rb = rtensor([1.0]), rtensor([1.0])
    ga, gb = torch.ones(1, requires_grad=True), torch.ones(1)
    rga, rgb = rtensor([1.0], requires_grad=True), rtensor([1.0])
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    add = torch.ops.aten.add.Tensor
    cases = {
        "add of 1-element tensors (µs per call)": {
            "torch": lambda: torch.add(ta, tb),
            "retorch": lambda: ra + rb,
        },
        "the same with requires_grad (µs per call)": {
            "torch": lambda: torch.add(ga, gb),
            "retorch": lambda: rga + rgb,
        },
        "the CPU kernel alone, no dispatch (µs per call)": {
            "torch": lambda: add.redispatch(cpu, ta, tb),
            "retorch": lambda: _o.add(ra.data, rb.data),
        },
    }
    rows = []
    for case, fns in cases.items():
        for impl, value in _interleaved(fns, rounds, per).items():
            rows.append({"case": case, "impl": impl, "value": value})
    return rows


def _breakdown(quick: bool) -> list[dict]:
    """µs of each piece of one retorch add (no grad), each run alone in a loop."""
    from retorch.dispatch import aten
    from retorch.dispatch import tensor as rtensor
    from retorch.dispatch.dispatcher import get_dispatcher
    from retorch.dispatch.native_functions import BACKEND
    from retorch.tensor import ops as _o

    d, op = get_dispatcher(), aten.add.Tensor
    a, b = rtensor([1.0]), rtensor([1.0])
    args, kwargs = (a, b), {}
    ks = d.compute_dispatch_key_set(op, args, kwargs)
    kernel, selected = d._select(op, ks)
    cpu_kernel = BACKEND["add.Tensor"]
    pieces = {
        "whole call: a + b": lambda: a + b,
        "op call: aten.add.Tensor(a, b)": lambda: op(a, b),
        "1. key set (schema bind, tensors' keys, TLS sets)": lambda: d.compute_dispatch_key_set(
            op, args, kwargs
        ),
        "2. kernel selection (highest key, row, fallthroughs)": lambda: d._select(op, ks),
        "3. AutogradCPU kernel, with its redispatch to CPU": lambda: kernel.call(
            op, selected, args, kwargs
        ),
        "4. CPU kernel (unwrap, retorch.tensor add, wrap)": lambda: cpu_kernel(a, b),
        "5. retorch.tensor add alone": lambda: _o.add(a.data, b.data),
    }
    rounds, per = (5, 200) if quick else (25, 2000)
    times = _interleaved(pieces, rounds, per)
    return [{"piece": name, "value": value} for name, value in times.items()]


def _mlp_rows(quick: bool, device: str = "cpu") -> list[dict]:
    """ms per MLP training step on ``device``, torch against retorch, interleaved; on CUDA
    each step ends with a device synchronize (``torch.cuda.synchronize`` waits for Numba's
    launches too), so the time is the step's, not its launches'."""
    from retorch import nn
    from retorch.dispatch import Tensor, to_retorch
    from retorch.optim import SGD

    rng = np.random.default_rng(0)
    steps = 8 if quick else 40
    x = rng.standard_normal((steps * 16, 10))
    y = np.argmax(x @ rng.standard_normal((10, 4)), axis=1)
    torch.manual_seed(0)
    tmodel = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 4)).double()
    rmodel = to_retorch(copy.deepcopy(tmodel), device=device)
    tmodel = tmodel.to(device)
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.1, momentum=0.9, foreach=False)
    ropt = SGD(rmodel.parameters(), lr=0.1, momentum=0.9, foreach=False)
    tb = [(torch.from_numpy(x[i * 16 : (i + 1) * 16]), torch.from_numpy(y[i * 16 : (i + 1) * 16]))
          for i in range(steps)]  # fmt: skip
    rb = [(Tensor.from_numpy(xb.numpy()).to(device), Tensor.from_numpy(yb.numpy()).to(device))
          for xb, yb in tb]  # fmt: skip
    tb = [(xb.to(device), yb.to(device)) for xb, yb in tb]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step(model, opt, xb, yb):
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sync()

    warm = 3
    samples: dict[str, list[float]] = {"torch": [], "retorch": []}
    for i in range(steps):
        for name, model, opt, batches in (
            ("torch", tmodel, topt, tb),
            ("retorch", rmodel, ropt, rb),
        ):
            sync()
            t0 = time.perf_counter()
            step(model, opt, *batches[i])
            if i >= warm:
                samples[name].append(time.perf_counter() - t0)
    where = " on CUDA tensors" if device == "cuda" else ""
    case = f"MLP training step, batch 16{where} (ms per step)"
    return [
        {"case": case, "impl": n, "value": statistics.median(s) * 1e3} for n, s in samples.items()
    ]


def run_gpu(quick: bool = False) -> dict:
    """torch.add and retorch's add on 1-element CUDA tensors, in µs (CUDA events), and the MLP
    step on CUDA tensors, in ms; or why not."""
    reason = gpu_skip_reason()
    if reason:
        return {"skipped": reason}
    from retorch.dispatch import tensor as rtensor

    ta, tb = torch.ones(1, device="cuda"), torch.ones(1, device="cuda")
    ra, rb = rtensor([1.0], device="cuda"), rtensor([1.0], device="cuda")
    fns = {"torch": lambda: torch.add(ta, tb), "retorch": lambda: ra + rb}
    per = 100 if quick else 1000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(5 if quick else 15):
        for name, fn in fns.items():
            torch.cuda.synchronize()
            start.record()
            for _ in range(per):
                fn()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) * 1e3 / per)
    rows = [{"case": "add of 1-element CUDA tensors (µs per call)", "impl": name,
             "value": statistics.median(s)} for name, s in samples.items()]  # fmt: skip
    rows += _mlp_rows(quick, device="cuda")
    return {"device": torch.cuda.get_device_name(), "unit": "as each case says: µs per call, "
            "ms per MLP step", "rows": rows}  # fmt: skip


def run(quick: bool = False) -> dict:
    rows = _call_rows(quick) + _mlp_rows(quick)
    return {
        "name": "dispatch",
        "title": "A call through the dispatcher and an MLP step on CPU (lower is better)",
        "unit": "as each case says: µs per call, ms per MLP step",
        "rows": rows,
        "breakdown": _breakdown(quick),
        "notes": " ".join(" ".join(__doc__.split("\n\n")[1:3]).split()),
        "gpu": run_gpu(quick),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1, ensure_ascii=False))

"""Chapter 8b: what the profiler itself costs per op, retorch's beside torch's.

Host time per op (CPU time, ``time.process_time``) of the add of two 1-element float32 tensors,
with no profiler and inside a profile (``torch.profiler.profile()`` and
``retorch.profiler.profile()``, CPU activity, no shapes, no memory), each sample a block of
``per`` adds inside one profile, so the profile's start and stop (and torch's Kineto trace
processing at exit) are shared by all its ops and counted in. The difference of the two cases
is the profiler's overhead per op: for retorch, the RecordFunction slow path of
``Dispatcher.call`` (a range opened and closed around the kernel); for torch, its
``RecordFunction`` callbacks and Kineto's event buffer. The last case is one training step of
the 2-layer MLP of chapter 5 (float64, batch 16, SGD with momentum) with and without a profile,
in ms per step. Samples are interleaved and the median is stored.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time

import torch
import torch.nn.functional as F


def _median(fns: dict, rounds: int, per: int, scale: float) -> dict[str, float]:
    """Per call of each function, in seconds x ``scale``: ``rounds`` interleaved samples of
    ``per`` calls, each sample one call of ``fn(per)``."""
    for fn in fns.values():
        fn(per)  # warm up
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.process_time()
            fn(per)
            samples[name].append(time.process_time() - t0)
    return {name: statistics.median(s) / per * scale for name, s in samples.items()}


def _loop(op, profile):
    def run(per):
        with profile():
            for _ in range(per):
                op()

    return run


def _add_rows(quick: bool) -> list[dict]:
    import retorch.profiler as rp
    from retorch.dispatch import tensor as rtensor
    from retorch.profiler.compare import quiet_stderr

    ta, tb = torch.ones(1), torch.ones(1)
    ra, rb = rtensor([1.0]), rtensor([1.0])
    rounds, per = (3, 200) if quick else (15, 2000)
    cases = {
        "add of 1-element tensors, no profiler (µs per op)": contextlib.nullcontext,
        "the same inside a profile (µs per op)": None,
    }
    rows = []
    with quiet_stderr():  # Kineto's start and stop lines
        for case, profile in cases.items():
            fns = {
                "torch": _loop(lambda: torch.add(ta, tb), profile or torch.profiler.profile),
                "retorch": _loop(lambda: ra + rb, profile or rp.profile),
            }
            for impl, value in _median(fns, rounds, per, 1e6).items():
                rows.append({"case": case, "impl": impl, "value": value})
    return rows


def _mlp_rows(quick: bool) -> list[dict]:
    import retorch.optim
    import retorch.profiler as rp
    from retorch.dispatch import Tensor, to_retorch
    from retorch.profiler.compare import quiet_stderr

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    model = model.double()
    ours = to_retorch(copy.deepcopy(model))
    x, y = torch.randn(16, 10, dtype=torch.float64), torch.randint(0, 4, (16,))
    rx, ry = Tensor.from_numpy(x.numpy()), Tensor.from_numpy(y.numpy())
    opts = {"torch": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False),
            "retorch": retorch.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9, foreach=False)}  # fmt: skip

    def steps(m, opt, a, b, profile):
        def run(per):
            with profile():
                for _ in range(per):
                    opt.zero_grad()
                    F.cross_entropy(m(a), b).backward()
                    opt.step()

        return run

    rounds, per = (3, 2) if quick else (9, 20)
    rows = []
    with quiet_stderr():
        for case, profiled in (("MLP step, no profiler (ms)", False),
                               ("MLP step inside a profile (ms)", True)):  # fmt: skip
            fns = {
                "torch": steps(model, opts["torch"], x, y,
                               torch.profiler.profile if profiled else contextlib.nullcontext),
                "retorch": steps(ours, opts["retorch"], rx, ry,
                                 rp.profile if profiled else contextlib.nullcontext),
            }  # fmt: skip
            for impl, value in _median(fns, rounds, per, 1e3).items():
                rows.append({"case": case, "impl": impl, "value": value})
    return rows


def run(quick: bool = False) -> dict:
    return {
        "name": "profiler",
        "title": "The profiler's own cost: an op and an MLP step with and without a profile "
        "(CPU time, lower is better)",
        "unit": "as each case says: µs per op, ms per MLP step",
        "rows": _add_rows(quick) + _mlp_rows(quick),
        "notes": " ".join(" ".join(__doc__.split("\n\n")[1:2]).split()),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True), indent=1, ensure_ascii=False))

"""The capstone side by side: the same GPT, weights and batches on torch and on the rebuilt
stack, trained together and taken apart one layer at a time.

- :func:`sort_models`: a GPT for the sort task built on chapter 1's ``retorch.nn`` with torch
  tensors, and its copy on chapter 5's ``retorch.Tensor`` (``to_retorch``): same weights.
- :func:`train_both`: the same AdamW steps (warm-up and cosine schedule) on both, from the same
  batches; each library's own optimizer and scheduler (``torch.optim``, ``retorch.optim``).
- :func:`step_by_layer`: one training step of both, counted by each layer's own instrument:
  module calls (forward hooks), autograd nodes (the graph behind the loss), dispatched ops
  (each library's profiler, per phase), bytes (each profiler's memory events), and the
  optimizer's ops.
"""

from __future__ import annotations

import collections

import numpy as np
import torch
import torch.nn.functional as F

from .gpt import GPTConfig, build_gpt, to_retorch
from .tasks import sort_task
from .train import make_optimizer, sort_loss, train

#: The sort task's length and the model that learns it (tests/test_capstone.py uses the same).
N_SORT = 6
SORT_CONFIG = GPTConfig(vocab_size=10, block_size=2 * N_SORT - 1, n_layer=2, n_head=2, n_embd=32)


def sort_models(config: GPTConfig = SORT_CONFIG, seed: int = 0, dtype=torch.float32):
    """``(on_torch, on_retorch)``: one GPT (``torch.manual_seed(seed)``), and its copy on
    ``retorch.Tensor`` parameters."""
    torch.manual_seed(seed)
    model = build_gpt(config)
    model = model.double() if dtype == torch.float64 else model
    return model, to_retorch(model)


def sort_batches(steps: int, size: int, seed: int = 0):
    """``steps`` batches of ``size`` sort sequences, as torch tensors."""
    x, y = sort_task(steps * size, n=N_SORT, seed=seed)
    return [(x[i * size : (i + 1) * size], y[i * size : (i + 1) * size]) for i in range(steps)]


def to_retorch_batches(batches):
    from retorch.dispatch import from_torch

    return [(from_torch(x), from_torch(y)) for x, y in batches]


def sort_step_loss(model, x, y):
    return sort_loss(model, x, y, N_SORT)


def train_both(steps: int, size: int = 64, lr: float = 3e-3, dtype=torch.float32, seed=0):
    """Train both copies ``steps`` AdamW steps (warm-up over the first tenth) on the same
    batches. Returns ``{"torch": losses, "retorch": losses, "models": (on_torch, on_retorch)}``."""
    import retorch.optim

    tm, rm = sort_models(seed=seed, dtype=dtype)
    batches = sort_batches(steps, size, seed=seed)
    warmup = max(1, steps // 10)
    out = {}
    opt, sched = make_optimizer(torch.optim, tm.parameters(), lr, warmup, steps)
    out["torch"] = train(tm, opt, sched, batches, sort_step_loss)
    opt, sched = make_optimizer(retorch.optim, list(rm.parameters()), lr, warmup, steps)
    out["retorch"] = train(rm, opt, sched, to_retorch_batches(batches), sort_step_loss)
    out["models"] = (tm, rm)
    return out


def graph_nodes(loss) -> collections.Counter:
    """The nodes autograd recorded behind ``loss``, by class name, each once."""
    seen, names, stack = set(), collections.Counter(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        names[type(node).__name__] += 1
        stack += [f for f, _ in node.next_functions]
    return names


def _module_calls(model, fn) -> int:
    calls = [0]

    def hook(module, args, output):
        calls[0] += 1

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    try:
        fn()
    finally:
        for h in handles:
            h.remove()
    return calls[0]


def _ops(counts: collections.Counter) -> int:
    """Dispatched operators (``aten::``) in a profile's counts."""
    return sum(n for name, n in counts.items() if name.startswith("aten::"))


#: step_by_layer's rows: (key, what was counted)
LAYER_ROWS = [
    ("modules", "modules called (forward hooks)"),
    ("nodes", "autograd nodes recorded"),
    ("forward", "ops dispatched: forward and loss"),
    ("backward", "ops dispatched: backward"),
    ("step", "ops dispatched: AdamW step"),
    ("grads", "gradients accumulated"),
    ("allocated", "bytes allocated, forward + backward"),
    ("peak", "peak bytes, forward + backward"),
]


def step_by_layer(tm, rm, x, y):
    """One AdamW step of both copies (after one step that creates the optimizer's state),
    layer by layer. Returns ``(rows, counts)``: rows ``(key, what was counted, torch,
    retorch)`` (keys and labels in :data:`LAYER_ROWS`), and each library's profiler counts per
    phase, ``counts[lib][phase]`` a ``Counter`` of names (``counts[lib]["nodes"]``: the
    autograd nodes by class; ``counts[lib]["allocations"]``: the bytes of each allocation
    the forward and backward made, counted)."""
    import retorch.optim
    import retorch.profiler as rp
    from retorch.dispatch import from_torch
    from retorch.profiler.compare import profile_step
    from retorch.utils.checkpoint_memory import memory_totals

    rx, ry = from_torch(x), from_torch(y)

    def logits_loss(logits, targets):
        v = logits.shape[-1]
        part = torch.narrow(logits, 1, N_SORT - 1, N_SORT).reshape(-1, v)
        return F.cross_entropy(part, torch.narrow(targets, 1, N_SORT - 1, N_SORT).reshape(-1))

    got, counts = {}, {}
    for lib, model, optim, a, b, profile in (
        ("torch", tm, torch.optim, x, y, torch.profiler.profile),
        ("retorch", rm, retorch.optim, rx, ry, rp.profile),
    ):
        opt = optim.AdamW(list(model.parameters()), lr=1e-3)
        sort_step_loss(model, a, b).backward()
        opt.step()  # the first step creates exp_avg and exp_avg_sq
        row = {"modules": _module_calls(model, lambda: model(a))}
        nodes = graph_nodes(sort_step_loss(model, a, b))
        row["nodes"] = sum(nodes.values())
        counts[lib] = profile_step(model, opt, a, b, profile, logits_loss)
        counts[lib]["nodes"] = nodes
        for phase in ("forward", "backward", "step"):
            row[phase] = _ops(counts[lib][phase])
        row["grads"] = counts[lib]["backward"]["torch::autograd::AccumulateGrad"]

        def fwd_bwd(model=model, a=a, b=b):
            sort_step_loss(model, a, b).backward()

        totals = np.array(memory_totals(lib, fwd_bwd), dtype=np.int64)
        row["peak"] = int(totals.max())
        steps = np.diff(totals, prepend=0)
        row["allocated"] = int(steps[steps > 0].sum())
        counts[lib]["allocations"] = collections.Counter(steps[steps > 0].tolist())
        got[lib] = row
    rows = [(key, what, got["torch"][key], got["retorch"][key]) for key, what in LAYER_ROWS]
    return rows, counts


def float_gap(steps: int = 10, size: int = 16) -> dict:
    """The largest loss difference over ``steps`` steps in float32 and in float64: rounding,
    if the float64 gap is near float64's epsilon."""
    out = {}
    for dtype in (torch.float32, torch.float64):
        got = train_both(steps, size, dtype=dtype)
        out[str(dtype).removeprefix("torch.")] = float(
            np.abs(np.array(got["torch"]) - np.array(got["retorch"])).max()
        )
    return out


def ddp_ranks(rank: int, world: int, steps: int, size: int = 32) -> dict:
    """One rank of data-parallel training (``retorch.distributed.launch`` runs ``world`` of
    them on gloo): the GPT of :func:`sort_models` (same weights on every rank), wrapped in
    chapter 7's ``retorch.nn.parallel.DistributedDataParallel`` with chapter 2's AdamW, and its
    ``torch.nn`` twin in torch's DDP with torch's AdamW; each rank trains on its share of
    every batch of :func:`sort_batches` (``size`` sequences: rank ``r`` takes the ``r``-th
    slice). Returns each rank's losses and both models' final parameters."""
    import retorch.optim
    from retorch.nn.parallel import DistributedDataParallel as DDP

    ours, _ = sort_models()
    torch.manual_seed(0)
    twin = build_gpt(SORT_CONFIG, torch.nn)
    twin.load_state_dict(ours.state_dict())
    models = {
        "retorch": (DDP(ours), retorch.optim),
        "torch": (torch.nn.parallel.DistributedDataParallel(twin), torch.optim),
    }
    share = size // world
    batches = [(x[rank * share : (rank + 1) * share], y[rank * share : (rank + 1) * share])
               for x, y in sort_batches(steps, size)]  # fmt: skip
    out = {}
    for name, (model, optim) in models.items():
        opt, sched = make_optimizer(optim, list(model.parameters()), 3e-3, 2, steps)
        losses = train(model, opt, sched, batches, sort_step_loss)
        params = {k: v.detach().clone() for k, v in model.module.named_parameters()}
        out[name] = {"losses": losses, "params": params}
    return out


def one_process(steps: int, size: int = 32) -> dict:
    """The same training as :func:`ddp_ranks` in one process on whole batches (chapter 2's
    AdamW): losses and final parameters."""
    import retorch.optim

    model, _ = sort_models()
    opt, sched = make_optimizer(retorch.optim, list(model.parameters()), 3e-3, 2, steps)
    losses = train(model, opt, sched, sort_batches(steps, size), sort_step_loss)
    return {
        "losses": losses,
        "params": {k: v.detach().clone() for k, v in model.named_parameters()},
    }

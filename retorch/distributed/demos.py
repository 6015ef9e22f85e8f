"""What chapter 7 runs on several processes, and the figures it draws.

A notebook cell cannot host N processes itself, so each multi-process part of the chapter is a
function here, run by :func:`retorch.distributed.launch.launch` in N spawned workers (spawned
processes import their target by name, so it must live in a module). Each returns plain data
(verdicts against stated tolerances, byte counts, bucket indices, timelines) that the notebook
prints and plots. The comparisons are torch.distributed's own collectives, torch's
``DistributedDataParallel`` and torch's ``fully_shard`` on the same gloo group.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import collectives as C

ATOL, RTOL = 1e-6, 1e-5


# ---- the ring, simulated in one process (for the figure) --------------------------------------
def ring_steps(n: int) -> list[list[set[int]]]:
    """The contributions each rank holds in each chunk after every step of a ring all-reduce.

    ``steps[s][rank * n + chunk]`` is the set of ranks whose values are summed into that rank's
    copy of that chunk after step ``s`` (step 0: before the ring starts). The first n-1 steps
    are the reduce-scatter (add what arrives), the next n-1 the all-gather (copy it); the
    chunk indices are those of ``collectives._reduce_scatter_ring`` and ``_all_gather_ring``.
    """
    held = [[{r} for _ in range(n)] for r in range(n)]
    steps = [[set(c) for row in held for c in row]]
    for step in range(n - 1):
        sent = [(r, (r - step - 1) % n, set(held[r][(r - step - 1) % n])) for r in range(n)]
        for r, _, contributions in sent:
            right = (r + 1) % n
            held[right][(right - step - 2) % n] |= contributions
        steps.append([set(c) for row in held for c in row])
    for step in range(n - 1):
        sent = [(r, (r - step) % n, set(held[r][(r - step) % n])) for r in range(n)]
        for r, chunk, contributions in sent:
            held[(r + 1) % n][chunk] = contributions
        steps.append([set(c) for row in held for c in row])
    return steps


def draw_ring(n: int = 4):
    """One panel per step: ranks down, chunks across, shaded by how many ranks' values a
    chunk already sums (dark: all n)."""
    import matplotlib.pyplot as plt

    steps = ring_steps(n)
    fig, axes = plt.subplots(1, len(steps), figsize=(1.45 * len(steps) + 0.5, 2.2))
    for s, (ax, held) in enumerate(zip(axes, steps)):
        counts = [[len(held[r * n + c]) for c in range(n)] for r in range(n)]
        ax.imshow(counts, cmap="Blues", vmin=0, vmax=n)
        for r in range(n):
            for c in range(n):
                ax.text(c, r, str(counts[r][c]), ha="center", va="center", fontsize=7,
                        color="white" if counts[r][c] == n else "black")  # fmt: skip
        phase = "start" if s == 0 else ("reduce-scatter" if s < n else "all-gather")
        ax.set_title(f"{phase}\nstep {s}" if s else phase, fontsize=7)
        ax.set_xticks(range(n), [f"c{c}" for c in range(n)], fontsize=6)
        ax.set_yticks(range(n), [f"rank {r}" for r in range(n)] if s == 0 else [], fontsize=6)
    fig.suptitle(f"ring all-reduce on {n} ranks: how many ranks each chunk sums", fontsize=8)
    fig.tight_layout()
    plt.close(fig)
    return fig


def draw_bucket_timeline(timelines: dict, n_params: int):
    """Gradients arriving and buckets' all-reduces starting, per DDP variant, in ms after
    the end of forward."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 2.6))
    for row, events in enumerate(timelines.values()):
        grads = [(t * 1e3, i) for kind, i, t in events if kind == "grad"]
        launches = [(t * 1e3, i) for kind, i, t in events if kind == "allreduce"]
        ax.scatter([t for t, _ in grads], [row] * len(grads), marker="|", s=300, color="0.3",
                   label="gradient ready" if row == 0 else None)  # fmt: skip
        ax.scatter([t for t, _ in launches], [row + 0.25] * len(launches), marker="v", s=60,
                   color="tab:red", label="bucket all-reduce starts" if row == 0 else None)  # fmt: skip
    ax.set_yticks(range(len(timelines)), list(timelines))
    ax.set_ylim(-0.6, len(timelines) - 0.3)
    ax.set_xlabel(f"ms after forward ended (one backward, {n_params} parameter tensors)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2, frameon=False,
              fontsize=8)  # fmt: skip
    fig.tight_layout()
    plt.close(fig)
    return fig


# ---- run on N processes by launch() -----------------------------------------------------------
# torch 2.13 names them *_single; older releases (2.11) have only the *_tensor names.
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def collectives_side_by_side(rank: int, world: int) -> dict:
    """Each rebuilt collective against torch.distributed's on integer data (exact), and the
    bytes this rank sent against the cost model."""
    x = torch.arange(10, dtype=torch.int64) * (rank + 1) + rank  # 10 does not split evenly
    big = torch.arange(10 * world, dtype=torch.int64) + 100 * rank
    rows = {}
    ours, theirs = C.ring_all_reduce(x.clone()), x.clone()
    dist.all_reduce(theirs)
    rows["all_reduce (ring)"] = torch.equal(ours, theirs)
    ours, theirs = torch.empty(10, dtype=torch.int64), torch.empty(10, dtype=torch.int64)
    C.reduce_scatter(ours, big)
    _reduce_scatter_single(theirs, big.clone())
    rows["reduce_scatter (ring)"] = torch.equal(ours, theirs)
    ours, theirs = torch.empty(10 * world, dtype=torch.int64), torch.empty(10 * world,
                                                                           dtype=torch.int64)  # fmt: skip
    C.all_gather(ours, x)
    _all_gather_single(theirs, x)
    rows["all_gather (ring)"] = torch.equal(ours, theirs)
    ours, theirs = x.clone(), x.clone()
    C.tree_broadcast(ours, src=world - 1)
    dist.broadcast(theirs, src=world - 1)
    rows[f"broadcast from rank {world - 1} (tree)"] = torch.equal(ours, theirs)
    data = torch.ones(1 << 18)  # 1 MiB of float32
    with C.count_bytes() as sent:
        C.ring_all_reduce(data)
    model = C.ring_all_reduce_bytes(data.numel() * 4, world)
    return {"equal": rows, "sent": sent.bytes, "model": model, "messages": sent.messages}


def _mlp(seed: int, nn):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 4))  # fmt: skip


def _batch(step: int, rank: int):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)


def _close(a, b) -> bool:
    return all(torch.allclose(p, q, atol=ATOL, rtol=RTOL)
               for p, q in zip(a.parameters(), b.parameters()))  # fmt: skip


def ddp_side_by_side(rank: int, world: int, steps: int, cap_mb: float) -> dict:
    """retorch's DDP (with and without overlap) beside torch's, from different inits on every
    rank, for ``steps`` SGD steps on each rank's own batches."""
    import retorch.nn as rn
    import retorch.optim as ro
    from retorch.nn.parallel import DistributedDataParallel as DDP

    ours = DDP(_mlp(rank, rn), bucket_cap_mb=cap_mb)
    late = DDP(_mlp(rank, rn), bucket_cap_mb=cap_mb, overlap=False)
    theirs = torch.nn.parallel.DistributedDataParallel(_mlp(rank, torch.nn),
                                                       bucket_cap_mb=cap_mb)  # fmt: skip
    started_equal = _close(ours, theirs)
    models = [(ours, ro.SGD(ours.parameters(), lr=0.05, momentum=0.9)),
              (late, ro.SGD(late.parameters(), lr=0.05, momentum=0.9)),
              (theirs, torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9))]  # fmt: skip
    agree = []
    for step in range(steps):
        x, y = _batch(step, rank)
        for model, opt in models:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        agree.append(_close(ours, theirs) and _close(late, theirs))
    return {"started_equal": started_equal, "agree": agree,
            "buckets": [list(b.param_indices) for b in ours.reducer.buckets],
            "timelines": {"overlap (as torch)": ours.timeline,
                          "overlap=False": late.timeline}}  # fmt: skip


def fsdp_side_by_side(rank: int, world: int, steps: int) -> dict:
    """Sharded training against one process on the whole batch and torch's ``fully_shard``,
    then the bytes a rank holds, sharded and with DDP (Adam state included)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import retorch.nn as rn
    import retorch.optim as ro
    from retorch.nn.parallel import DistributedDataParallel as DDP

    from . import fsdp

    ours, single, theirs = _mlp(rank, rn), _mlp(0, rn), _mlp(0, torch.nn)
    units = fsdp.fully_shard_units(ours, [ours[0], ours[2]])
    # A CPU mesh, as the gloo group is: without one, fully_shard picks the accelerator and
    # puts rank r on cuda:r, which fails where there are fewer GPUs than ranks.
    mesh = init_device_mesh("cpu", (world,))
    for layer in (theirs[0], theirs[2], theirs):
        fully_shard(layer, mesh=mesh)
    opts = [ro.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (ours, single)]
    opts.append(torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9))
    order = [0, 2, 4]  # fully_shard_units builds the units in this order, the root last
    agree = []
    for step in range(steps):
        batches = [_batch(step, r) for r in range(world)]
        torch.nn.functional.mse_loss(ours(batches[rank][0]), batches[rank][1]).backward()
        torch.nn.functional.mse_loss(theirs(batches[rank][0]), batches[rank][1]).backward()
        x, y = (torch.cat(t) for t in zip(*batches))
        torch.nn.functional.mse_loss(single(x), y).backward()
        for opt in opts:
            opt.step()
            opt.zero_grad()
        full = fsdp.full_parameters(units)
        ref = [p for i in order for p in single[i].parameters()]
        tref = [p.full_tensor() for i in order for p in theirs[i].parameters()]
        agree.append((all(torch.allclose(a, b, atol=ATOL, rtol=RTOL) for a, b in zip(full, ref)),
                      all(torch.allclose(a, b, atol=ATOL, rtol=RTOL)
                          for a, b in zip(full, tref))))  # fmt: skip
    held = {}
    for name, model in (("sharded", ours), ("DDP", DDP(_mlp(0, rn)))):
        opt = ro.Adam(model.parameters(), lr=1e-2)
        torch.nn.functional.mse_loss(model(_batch(0, rank)[0]), _batch(0, rank)[1]).backward()
        opt.step()
        params = list(model.parameters())
        state = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
        extra = [u.full for u in units] if name == "sharded" else [
            b.buffer for b in model.reducer.buckets]  # fmt: skip
        held[name] = {"parameters": fsdp.held_bytes(params),
                      "gradients": fsdp.held_bytes(p.grad for p in params),
                      "Adam state": fsdp.held_bytes(t for t in state if t.dim() > 0),
                      "buffers": fsdp.held_bytes(extra)}  # fmt: skip
    return {"agree": agree, "held": held}

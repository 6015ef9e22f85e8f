"""What chapter 7 runs on several processes, and the figures it draws.

A notebook cell cannot host N processes itself, so each multi-process part of the chapter is a
function here, run by :func:`retorch.distributed.launch.launch` in N spawned workers (spawned
processes import their target by name, so it must live in a module). Each returns plain data
(verdicts against stated tolerances, byte counts, bucket indices, timelines) that the notebook
prints and plots. The comparisons are torch.distributed's own collectives, torch's
``DistributedDataParallel`` and torch's ``fully_shard`` on the same gloo group.
"""

from __future__ import annotations

import contextlib
import logging
import warnings

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
    """One panel per step (reduce-scatter on the first row, all-gather on the second): ranks
    down, chunks across, shaded by how many ranks' values a chunk already sums (dark: all n)."""
    import matplotlib.pyplot as plt

    steps = ring_steps(n)
    cols = n  # the start and the n-1 reduce-scatter steps; then the n-1 all-gather steps
    fig, grid = plt.subplots(2, cols, figsize=(1.25 * cols + 0.4, 5.0))
    panels = list(grid[0]) + list(grid[1][: n - 1])
    for ax in grid[1][n - 1 :]:
        ax.axis("off")
    for s, (ax, held) in enumerate(zip(panels, steps)):
        counts = [[len(held[r * n + c]) for c in range(n)] for r in range(n)]
        ax.imshow(counts, cmap="Blues", vmin=0, vmax=n)
        for r in range(n):
            for c in range(n):
                ax.text(c, r, str(counts[r][c]), ha="center", va="center", fontsize=11,
                        color="white" if counts[r][c] == n else "black")  # fmt: skip
        phase = "start" if s == 0 else ("reduce-scatter" if s < n else "all-gather")
        ax.set_title(f"{phase}\nstep {s}" if s else "\nstart", fontsize=11)
        ax.set_xticks(range(n), [f"c{c}" for c in range(n)], fontsize=11)
        first = s in (0, n)
        ax.set_yticks(range(n), [f"r{r}" for r in range(n)] if first else [], fontsize=11)
    fig.suptitle(f"ring all-reduce, {n} ranks (r), {n} chunks (c):\nhow many ranks each "
                 "chunk sums", fontsize=12)  # fmt: skip
    fig.tight_layout()
    plt.close(fig)
    return fig


def draw_bucket_timeline(timelines: dict, n_params: int):
    """Gradients arriving and buckets' all-reduces starting, per DDP variant, in ms after
    the end of forward."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.4, 3.0))
    for row, events in enumerate(timelines.values()):
        grads = [(t * 1e3, i) for kind, i, t in events if kind == "grad"]
        launches = [(t * 1e3, i) for kind, i, t in events if kind == "allreduce"]
        ax.scatter([t for t, _ in grads], [row] * len(grads), marker="|", s=300, color="0.3",
                   label="gradient ready" if row == 0 else None)  # fmt: skip
        ax.scatter([t for t, _ in launches], [row + 0.25] * len(launches), marker="v", s=60,
                   color="tab:red", label="bucket all-reduce starts" if row == 0 else None)  # fmt: skip
    ax.set_yticks(range(len(timelines)), [name.replace(" (", "\n(") for name in timelines],
                  fontsize=11)  # fmt: skip
    ax.tick_params(axis="x", labelsize=11)
    ax.set_ylim(-0.6, len(timelines) - 0.3)
    ax.set_xlabel(f"ms after forward ended\n(one backward, {n_params} parameter tensors)",
                  fontsize=11)  # fmt: skip
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False,
              fontsize=11)  # fmt: skip
    fig.tight_layout()
    plt.close(fig)
    return fig


def draw_bus_bandwidth(data: dict):
    """The stored all-reduce benchmark: bus bandwidth against size, one panel per process
    count, one line per implementation (log-log; higher is better)."""
    import matplotlib.pyplot as plt

    rows = data["rows"]
    worlds = list(dict.fromkeys(r["case"].split(" x ")[1] for r in rows))
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    fig, axes = plt.subplots(1, len(worlds), figsize=(5.4, 4.0), sharey=True)
    for ax, world in zip(axes, worlds):
        for impl, marker in zip(impls, "os^"):
            pts = [(r["case"].split(" x ")[0], r["value"]) for r in rows
                   if r["impl"] == impl and r["case"].endswith(world)]  # fmt: skip
            ax.plot(range(len(pts)), [v for _, v in pts], marker=marker, label=impl)
        ax.set_xticks(range(len(pts)), [k.replace(" ", "") for k, _ in pts], rotation=90,
                      fontsize=11)  # fmt: skip
        ax.set_yscale("log")
        ax.set_title(world, fontsize=11)
        ax.tick_params(axis="y", labelsize=11)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("bus bandwidth, GB/s", fontsize=11)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="upper center", ncol=1,
               fontsize=11, frameon=False)  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 0.86))
    plt.close(fig)
    return fig


# ---- run on N processes by launch() -----------------------------------------------------------
# torch 2.13 names them *_single; older releases (2.11) have only the *_tensor names.
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def collectives_side_by_side(rank: int, world: int) -> dict:
    """Each rebuilt collective and torch.distributed's on the same integer data (so equal
    means bit for bit): both results, per op; and the bytes this rank sent against the cost
    model."""
    x = torch.arange(10, dtype=torch.int64) * (rank + 1) + rank  # 10 does not split evenly
    big = torch.arange(10 * world, dtype=torch.int64) + 100 * rank
    rows = {}
    ours, theirs = C.ring_all_reduce(x.clone()), x.clone()
    dist.all_reduce(theirs)
    rows["all_reduce (ring)"] = (ours, theirs)
    ours, theirs = torch.empty(10, dtype=torch.int64), torch.empty(10, dtype=torch.int64)
    C.reduce_scatter(ours, big)
    _reduce_scatter_single(theirs, big.clone())
    rows["reduce_scatter (ring)"] = (ours, theirs)
    ours, theirs = torch.empty(10 * world, dtype=torch.int64), torch.empty(10 * world,
                                                                           dtype=torch.int64)  # fmt: skip
    C.all_gather(ours, x)
    _all_gather_single(theirs, x)
    rows["all_gather (ring)"] = (ours, theirs)
    ours, theirs = x.clone(), x.clone()
    C.tree_broadcast(ours, src=world - 1)
    dist.broadcast(theirs, src=world - 1)
    rows[f"broadcast from rank {world - 1} (tree)"] = (ours, theirs)
    data = torch.ones(1 << 18)  # 1 MiB of float32
    with C.count_bytes() as sent:
        C.ring_all_reduce(data)
    model = C.ring_all_reduce_bytes(data.numel() * 4, world)
    return {"results": rows, "sent": sent.bytes, "model": model, "messages": sent.messages}


def strided_all_reduce(rank: int, world: int) -> dict:
    """An all-reduce of a strided view, ``base[:, ::2]`` of a (3, 4) tensor holding rank + 1
    everywhere: the base afterwards, with our ring and with torch.distributed's."""
    ours, theirs = torch.full((3, 4), rank + 1), torch.full((3, 4), rank + 1)
    C.ring_all_reduce(ours[:, ::2])
    dist.all_reduce(theirs[:, ::2])
    return {"ours": ours, "theirs": theirs}


def brief(t: torch.Tensor) -> str:
    """A tensor's values in a narrow table cell: all of them up to 6, else the first three,
    the last and the sum."""
    v = t.tolist()
    if len(v) <= 6:
        return str(v)
    return f"[{v[0]}, {v[1]}, {v[2]}, ..., {v[-1]}] sum {sum(v)}"


def _mlp(seed: int, nn):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 4))  # fmt: skip


def _batch(step: int, rank: int):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)


def _close(a, b) -> bool:
    return all(torch.allclose(p, q, atol=ATOL, rtol=RTOL)
               for p, q in zip(a.parameters(), b.parameters(), strict=True))  # fmt: skip


def torch_buckets(model) -> list[list[int]]:
    """The buckets torch's DDP holds now, as parameter indices in launch order: read from its
    C++ reducer (``reducer._get_zeros_like_grad_buckets()``: one ``GradBucket`` per bucket,
    whose ``parameters()`` are the model's own tensors)."""
    index = {p.data_ptr(): i for i, p in enumerate(model.parameters())}
    return [[index[p.data_ptr()] for p in b.parameters()]
            for b in model.reducer._get_zeros_like_grad_buckets()]  # fmt: skip


LOGGED = ("bucket_sizes", "rebuilt_per_bucket_param_indices", "rebuilt_bucket_sizes")


def torch_ddp_buckets(rank: int, world: int, steps: int, cap_mb: float) -> dict:
    """torch's DDP alone: its buckets after each backward and its logging data at the end."""
    model = torch.nn.parallel.DistributedDataParallel(_mlp(rank, torch.nn), bucket_cap_mb=cap_mb)
    buckets = []
    for step in range(steps):
        x, y = _batch(step, rank)
        torch.nn.functional.mse_loss(model(x), y).backward()
        buckets.append(torch_buckets(model))
    log = model._get_ddp_logging_data()
    keys = ("prev_iteration_grad_ready_order_indices",) + LOGGED
    return {"buckets": buckets, "logged": {k: log.get(k) for k in keys}}


def _param_sum(model) -> float:
    return sum(p.detach().double().sum().item() for p in model.parameters())


def ddp_side_by_side(rank: int, world: int, steps: int, cap_mb: float) -> dict:
    """retorch's DDP (with and without overlap) beside torch's, from different inits on every
    rank, for ``steps`` SGD steps on each rank's own batches: parameters after every step,
    the buckets each reducer held after each backward, and their logging data."""
    import retorch.nn as rn
    import retorch.optim as ro
    from retorch.nn.parallel import DistributedDataParallel as DDP

    own_init = _param_sum(_mlp(rank, torch.nn))
    ours = DDP(_mlp(rank, rn), bucket_cap_mb=cap_mb)
    late = DDP(_mlp(rank, rn), bucket_cap_mb=cap_mb, overlap=False)
    theirs = torch.nn.parallel.DistributedDataParallel(_mlp(rank, torch.nn),
                                                       bucket_cap_mb=cap_mb)  # fmt: skip
    started = {"own init": own_init, "ours": _param_sum(ours), "theirs": _param_sum(theirs)}
    models = [(ours, ro.SGD(ours.parameters(), lr=0.05, momentum=0.9)),
              (late, ro.SGD(late.parameters(), lr=0.05, momentum=0.9)),
              (theirs, torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9))]  # fmt: skip
    agree, buckets = [], []
    for step in range(steps):
        x, y = _batch(step, rank)
        for model, opt in models:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        agree.append(_close(ours, theirs) and _close(late, theirs))
        buckets.append(([list(b.param_indices) for b in ours.reducer.buckets],
                        torch_buckets(theirs)))  # fmt: skip
    logs = ours._get_ddp_logging_data(), theirs._get_ddp_logging_data()
    return {"started": started, "agree": agree, "buckets": buckets,
            "final": (_param_sum(ours), _param_sum(late), _param_sum(theirs)),
            "logged": {k: tuple(log.get(k) for log in logs) for k in LOGGED},
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
        agree.append((all(torch.allclose(a, b, atol=ATOL, rtol=RTOL) for a, b in zip(full, ref, strict=True)),
                      all(torch.allclose(a, b, atol=ATOL, rtol=RTOL)
                          for a, b in zip(full, tref, strict=True))))  # fmt: skip
    final = [sum(t.detach().double().sum().item() for t in ts) for ts in (full, ref, tref)]
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
    # What each design keeps on this rank: torch's parameters are DTensors, each cut on dim 0;
    # ours, one flat 1-D shard per unit.
    layout = {
        "torch": [(name, tuple(p.shape), type(p).__name__, str(p.placements[0]),
                   tuple(p.to_local().shape)) for name, p in theirs.named_parameters()],
        "ours": [(type(u.flat_param).__name__, len(u.numels), sum(u.numels),
                  tuple(u.flat_param.shape)) for u in units],
    }  # fmt: skip
    return {"agree": agree, "final": final, "held": held, "layout": layout}


# ---- today's torch.distributed: DeviceMesh, DTensor, tensor parallelism, FSDP2 -----------------


@contextlib.contextmanager
def _quiet():
    """Without torch's notices that are not the point here: the warning that gloo has no
    all-to-all (the chapter prints the source that says so) and the backward-hook notes of
    ``parallelize_module`` and ``fully_shard``. Workers' stderr reaches the page."""
    logger = logging.getLogger("torch.distributed.tensor._collective_utils")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        logger.setLevel(level)


def _dtensor_libs() -> dict:
    """name -> (the DTensor module, init_device_mesh, CommDebugMode), torch's and ours."""
    import torch.distributed.tensor as tdt
    from torch.distributed.device_mesh import init_device_mesh as t_init
    from torch.distributed.tensor.debug import CommDebugMode as TComm

    from . import tensor as rdt
    from .device_mesh import init_device_mesh as r_init
    from .tensor.debug import CommDebugMode as RComm

    return {"torch": (tdt, t_init, TComm), "retorch": (rdt, r_init, RComm)}


def _short(mode) -> str:
    """A CommDebugMode's counts as 'all_gather_into_tensor x1' (or '-' for none)."""
    counts = {str(k).split(".")[-1]: v for k, v in mode.get_comm_counts().items()}
    return ", ".join(f"{k} x{v}" for k, v in counts.items()) or "-"


def _dtensor(lib, mesh, x: torch.Tensor, name: str, rank: int):
    """``x`` laid out as S0, S1, R, or P (each rank's term ``x * (rank + 1)``)."""
    if name == "P":
        return lib.DTensor.from_local(x * (rank + 1), mesh, [lib.Partial()])
    p = lib.Replicate() if name == "R" else lib.Shard(int(name[1]))
    return lib.distribute_tensor(x.clone(), mesh, [p])


def placement_changes(rank: int, world: int) -> dict:
    """Every change of placement of a (5, 3) tensor on a 1-D mesh: the collectives each
    library issued and this rank's piece's shape after it; and the pieces of Shard(0)."""
    with _quiet():
        out = {}
        x = torch.arange(15.0).reshape(5, 3)
        for name, (lib, init, Comm) in _dtensor_libs().items():
            mesh, rows = init("cpu", (world,)), {}
            for src in ("S0", "S1", "R", "P"):
                for dst in ("S0", "S1", "R"):
                    if src == dst:
                        continue
                    d = _dtensor(lib, mesh, x, src, rank)
                    p = lib.Replicate() if dst == "R" else lib.Shard(int(dst[1]))
                    with Comm() as mode:
                        e = d.redistribute(mesh, [p])
                    rows[(src, dst)] = (_short(mode), tuple(e.to_local().shape))
            out[name] = {"changes": rows,
                         "piece": tuple(_dtensor(lib, mesh, x, "S0", rank).to_local().shape)}  # fmt: skip
        return out


def mm_strategies(rank: int, world: int) -> dict:
    """torch.mm of a (4, 6) and a (6, 8) DTensor for every pair of placements: the output's
    placement and the collectives each library issued to get there."""
    with _quiet():
        from .tensor._ops import mm

        a, b, out = torch.ones(4, 6), torch.ones(6, 8), {}
        for name, (lib, init, Comm) in _dtensor_libs().items():
            mesh, rows = init("cpu", (world,)), {}
            for pa in ("S0", "S1", "R", "P"):
                for pb in ("S0", "S1", "R", "P"):
                    A, B = _dtensor(lib, mesh, a, pa, rank), _dtensor(lib, mesh, b, pb, rank)
                    with Comm() as mode:
                        C = torch.mm(A, B) if name == "torch" else mm(A, B)
                    rows[(pa, pb)] = f"{C.placements[0]}  ({_short(mode)})"
            out[name] = rows
        return out


def _parallel_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5),
                               torch.nn.ReLU(), torch.nn.Linear(5, 3))  # fmt: skip


def tp_and_fsdp2(rank: int, world: int, steps: int) -> dict:
    """The same MLP under tensor parallelism (column, row) and under FSDP2 in each library:
    collectives per forward / backward, this rank's pieces, and after ``steps`` SGD steps
    the largest difference between the libraries' pieces."""
    with _quiet():
        from torch.distributed.fsdp import fully_shard as t_shard
        from torch.distributed.tensor import parallel as t_tp

        from . import fully_shard as r_fsdp
        from .tensor import parallel as r_tp

        ways = {"torch": (t_tp, t_shard), "retorch": (r_tp, r_fsdp.fully_shard)}
        res: dict = {}
        for name, (_, init, Comm) in _dtensor_libs().items():
            tp, shard = ways[name]
            mesh = init("cpu", (world,))
            tp_mlp = tp.parallelize_module(_parallel_mlp(), mesh, {"0": tp.ColwiseParallel(),
                                                                   "2": tp.RowwiseParallel()})  # fmt: skip
            fs_mlp = _parallel_mlp()
            for layer in (fs_mlp[0], fs_mlp[2], fs_mlp[4], fs_mlp):
                shard(layer, mesh=mesh)
            rec = {}
            for design, model, head in (("TP", tp_mlp, 3), ("FSDP2", fs_mlp, 5)):
                opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
                g = torch.Generator().manual_seed(0 if design == "TP" else rank)
                for _ in range(steps):
                    x = torch.randn(4, 8, generator=g)
                    with Comm() as fwd:
                        y = model(x)[:, :head] if design == "TP" else model(x)
                    with Comm() as bwd:
                        (y * y).sum().backward()
                    opt.step()
                    opt.zero_grad()
                pieces = [(p.to_local() if hasattr(p, "to_local") else p).detach().clone()
                          for p in model.parameters()]  # fmt: skip
                rec[design] = {"forward": _short(fwd), "backward": _short(bwd), "pieces": pieces}
            res[name] = rec
        for design in ("TP", "FSDP2"):
            pairs = zip(
                res["retorch"][design]["pieces"], res["torch"][design]["pieces"], strict=True
            )
            res[design + " max diff"] = max((a - b).abs().max().item() if a.numel() else 0.0
                                            for a, b in pairs)  # fmt: skip
            res[design + " shapes"] = [tuple(p.shape) for p in res["retorch"][design]["pieces"]]
            res[design + " torch shapes"] = [tuple(p.shape) for p in res["torch"][design]["pieces"]]
        return res


# ---- bytes moved per rank per step: DDP, FlatParameter sharding, FSDP2, TP (issue 31) ---------


#: the ring's bytes sent per rank, as a fraction of the collective's whole tensor, per c10d op
#: name as torch's dispatcher shows it (all-reduce: a reduce-scatter then an all-gather)
_RING_SHARE = {
    "_allgather_base_": 1, "all_gather_into_tensor": 1, "allgather_": 1,
    "_reduce_scatter_base_": 1, "reduce_scatter_tensor": 1, "reduce_scatter_": 1,
    "allreduce_": 2, "all_reduce": 2,
}  # fmt: skip

#: the list collectives, whose whole tensor is a list of pieces, one per rank: the argument
#: that holds it (``allgather_(Tensor[][] output_tensors, Tensor[] input_tensors, ...)``,
#: ``reduce_scatter_(Tensor[] output_tensors, Tensor[][] input_tensors, ...)``)
_LIST_ARG = {"allgather_": 0, "reduce_scatter_": 1}


class _TorchCollectiveBytes(torch.utils._python_dispatch.TorchDispatchMode):
    """The c10d ops torch issues in a block, seen at the dispatcher (where ``CommDebugMode``
    looks too), each priced by the ring model: ``share * (n - 1) / n`` of its whole tensor (an
    all-gather's output, a reduce-scatter's input, an all-reduce's tensor). A list collective's
    whole is the sum of its list's pieces (:data:`_LIST_ARG`: FSDP1 on CPU all-gathers into a
    list of the flat parameter's n chunks, ``_all_gather_flat_param`` in ``_flat_param.py``);
    any other op's, its largest tensor."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.bytes, self.ops = n, 0.0, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        if name in _RING_SHARE:
            tensors = [a for a in torch.utils._pytree.tree_leaves(
                           (args[_LIST_ARG[name]],) if name in _LIST_ARG else (args, kwargs))
                       if isinstance(a, torch.Tensor)]  # fmt: skip
            sizes = [t.numel() * t.element_size() for t in tensors]
            whole = sum(sizes) if name in _LIST_ARG else max(sizes)
            self.bytes += _RING_SHARE[name] * (self.n - 1) / self.n * whole
            self.ops[name] = self.ops.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def _allreduce_hook_counted(state, bucket):
    """The built-in ``allreduce_hook`` (divide, then all-reduce the bucket) of torch's or
    retorch's DDP (``state["hook"]``), counting the bucket by the ring model: both reducers
    call gloo's all-reduce, torch's from C++, out of the dispatcher's sight."""
    state["bytes"] += 2 * (state["n"] - 1) / state["n"] * bucket.buffer().nbytes
    state["ops"] += 1
    return state["hook"](None, bucket)


def bytes_per_step(rank: int, world: int, steps: int = 2) -> dict:
    """One model (chapter 7's MLP, 8-16-16-4), one SGD step after ``steps - 1`` warm-up
    steps, under DDP, FlatParameter sharding (``fsdp.py``: a flat unit per Linear pair and the
    root), FSDP2 (``fully_shard`` per Linear and the root) and TP (Colwise, Rowwise, the head
    whole): the bytes this rank sent in the last step, counted on retorch's wire
    (``collectives.count_bytes``: chapter 7's rings) and, for torch, from the collectives it
    issued priced by the ring model; DDP (both libraries all-reduce through gloo) from its
    buckets, counted by a comm hook. FlatParameter sharding's torch column is torch's FSDP1
    (``FullyShardedDataParallel`` on m[0], m[2], then the root, ``device_id`` the CPU: one
    ``FlatParameter`` per unit, as ``fsdp.fully_shard_units``). Their bytes differ: FSDP1 keeps
    the root's parameters gathered from forward to backward (``_post_forward_reshard`` in
    torch/distributed/fsdp/_runtime_utils.py frees them only ``not state._is_root``), so it
    all-gathers 5 times a step where retorch's units, the root too, reshard after forward
    and gather 6 times; both reduce-scatter 3 times."""
    from torch.nn.parallel import DistributedDataParallel as torch_ddp

    import retorch.nn as rn
    from retorch.nn.parallel import DistributedDataParallel as DDP

    from . import fsdp
    from .device_mesh import init_device_mesh as r_init
    from .fully_shard import fully_shard as r_shard
    from .tensor import parallel as r_tp

    with _quiet():
        from torch.distributed.device_mesh import init_device_mesh as t_init
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP1
        from torch.distributed.fsdp import fully_shard as t_shard
        from torch.distributed.tensor import parallel as t_tp

        def tp(lib, init):
            plan = {"0": lib.ColwiseParallel(), "2": lib.RowwiseParallel()}
            return lib.parallelize_module(_mlp(0, torch.nn), init("cpu", (world,)), plan)

        def fsdp2(shard, init):
            model, mesh = _mlp(0, torch.nn), init("cpu", (world,))
            for layer in (model[0], model[2], model[4], model):
                shard(layer, mesh=mesh)
            return model

        flat = _mlp(0, rn)
        fsdp.fully_shard_units(flat, [flat[0], flat[2]])
        fsdp1, cpu = _mlp(0, torch.nn), torch.device("cpu")
        for i in (0, 2):
            fsdp1[i] = FSDP1(fsdp1[i], device_id=cpu)
        fsdp1 = FSDP1(fsdp1, device_id=cpu)  # the root last, as fully_shard_units
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as t_hooks

        from .algorithms.ddp_comm_hooks import default_hooks as r_hooks

        ddp, hooked = {}, {}
        for name, make, hooks in (("retorch", DDP, r_hooks), ("torch", torch_ddp, t_hooks)):
            ddp[name] = make(_mlp(0, rn if name == "retorch" else torch.nn))
            hooked[name] = {"n": world, "bytes": 0.0, "ops": 0, "hook": hooks.allreduce_hook}
            ddp[name].register_comm_hook(hooked[name], _allreduce_hook_counted)
        designs = {
            "DDP": (ddp["retorch"], ddp["torch"]),
            "FlatParameter": (flat, fsdp1),
            "FSDP2": (fsdp2(r_shard, r_init), fsdp2(t_shard, t_init)),
            "TP": (tp(r_tp, r_init), tp(t_tp, t_init)),
        }
        rows = {}
        for design, (ours, theirs) in designs.items():
            row = {}
            for name, model in (("retorch", ours), ("torch", theirs)):
                opt = torch.optim.SGD(model.parameters(), lr=0.05)
                for step in range(steps):
                    x, y = _batch(step, 0 if design == "TP" else rank)  # TP: one batch for all
                    for state in hooked.values():
                        state.update(bytes=0.0, ops=0)
                    with C.count_bytes() as sent, _TorchCollectiveBytes(world) as seen:
                        torch.nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                    opt.zero_grad()
                if design == "DDP":
                    state = hooked[name]
                    row[name] = {"bytes": state["bytes"], "ops": {"allreduce": state["ops"]}}
                elif name == "retorch":
                    row[name] = {"bytes": sent.bytes, "messages": sent.messages}
                else:
                    row[name] = {"bytes": seen.bytes, "ops": seen.ops}
            rows[design] = row
        return rows


def bytes_table(per_rank: list[dict]) -> list[tuple]:
    """``bytes_per_step``'s results (one dict per rank) as rows for a ``side_by_side`` table:
    (design, retorch's bytes per rank, torch's, torch's collectives), rank 0's; every rank
    moves the same bytes in these designs (the assertion says so)."""
    first = per_rank[0]
    assert all(r == first for r in per_rank), "ranks moved different bytes"
    rows = []
    for design, row in first.items():
        theirs = row["torch"]
        ops = ", ".join(f"{k} x{v}" for k, v in theirs["ops"].items())
        rows.append((design, int(row["retorch"]["bytes"]), int(theirs["bytes"]), ops))
    return rows


#: The ranges of FSDP2's phases, as torch's ``_fsdp_param_group.py`` names them (those the
#: rebuild opens; torch's others, such as ``FSDP::all_gather_copy_out``, are left out).
FSDP_RANGES = ("FSDP::pre_forward", "FSDP::all_gather", "FSDP::post_forward",
               "FSDP::pre_backward", "FSDP::backward_prefetch", "FSDP::post_backward_reduce")  # fmt: skip


def fsdp2_timeline(rank: int, world: int) -> dict:
    """One training step of chapter 7's MLP under each library's ``fully_shard`` (each Linear,
    then the root), profiled by each library's own profiler after a warm-up step: the FSDP2
    ranges (:data:`FSDP_RANGES`) as ``(name, start_us, end_us)`` from the step's start, in
    the order they opened, and the step's forward end."""
    import retorch.profiler as rp
    from retorch.profiler.compare import quiet_stderr

    from .device_mesh import init_device_mesh as r_init
    from .fully_shard import fully_shard as r_shard

    with _quiet():
        from torch.distributed.device_mesh import init_device_mesh as t_init
        from torch.distributed.fsdp import fully_shard as t_shard

        out = {}
        for lib, shard, init, profile in (
            ("retorch", r_shard, r_init, lambda: rp.profile()),
            ("torch", t_shard, t_init, torch.profiler.profile),
        ):
            model, mesh = _mlp(0, torch.nn), init("cpu", (world,))
            for layer in (model[0], model[2], model[4], model):
                shard(layer, mesh=mesh)
            for step in range(2):
                x, y = _batch(step, rank)
                with quiet_stderr(), profile() as prof:  # (Kineto writes to fd 2)
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    loss.backward()
                model.zero_grad()
            spans = []
            for e in prof.events():
                if e.name.split(" ")[0] in FSDP_RANGES:
                    begin, end = (e.start_us, e.end_us) if lib == "retorch" else (
                        e.time_range.start, e.time_range.end)  # fmt: skip
                    spans.append((e.name, begin, end))
            spans.sort(key=lambda s: s[1])
            t0 = spans[0][1]
            out[lib] = [(name, begin - t0, end - t0) for name, begin, end in spans]
        return out


def draw_fsdp2_timeline(spans: list, ax, title: str) -> None:
    """``fsdp2_timeline``'s spans of one library on ``ax``: a lane per kind of range, a bar
    per range, labelled with its layer."""
    lanes = ["all_gather", "pre/post_forward", "pre_backward", "backward_prefetch",
             "post_backward_reduce"]  # fmt: skip
    colors = dict(zip(lanes, ["tab:blue", "tab:gray", "tab:orange", "tab:cyan", "tab:red"]))
    for name, begin, end in spans:
        kind = name.split("::")[1].split(" ")[0]
        lane = "pre/post_forward" if kind in ("pre_forward", "post_forward") else kind
        y = lanes.index(lane)
        ax.barh(y, max(end - begin, 1.0) / 1e3, left=begin / 1e3, height=0.6, color=colors[lane])
        layer = name.split("(")[-1].rstrip(")") if "(" in name else name.split(" for ")[-1]
        if lane in ("all_gather", "post_backward_reduce"):
            ax.text(begin / 1e3, y + 0.32, layer, fontsize=8, va="top")  # under its bar
    ax.set_yticks(range(len(lanes)), lanes, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms from the step's first FSDP range (one run; times vary)")
    ax.set_title(title, fontsize=10)


def _relu(a):
    """torch's relu for torch's DTensor (a tensor subclass), ours for retorch's."""
    from .tensor import _pointwise_ops

    return torch.relu(a) if isinstance(a, torch.Tensor) else _pointwise_ops.relu(a)


def _gelu(a):
    from .tensor import _pointwise_ops

    f = torch.nn.functional.gelu if isinstance(a, torch.Tensor) else _pointwise_ops.gelu
    return f(a)


#: (what is computed, how, the placement of a, of b): pointwise ops and sum, on (4, 6)
#: tensors ``a`` and ``b``; P is each rank's term ``x * (rank + 1)`` of a Partial("sum")
POINTWISE_CASES = [
    ("a + b", lambda a, b: a + b, "P", "P"),
    ("a * b", lambda a, b: a * b, "P", "P"),
    ("a + b", lambda a, b: a + b, "R", "P"),
    ("a + b", lambda a, b: a + b, "S0", "S1"),
    ("a * 3", lambda a, b: a * 3, "P", None),
    ("a + 2", lambda a, b: a + 2, "P", None),
    ("relu(a)", lambda a, b: _relu(a), "P", None),
    ("gelu(a)", lambda a, b: _gelu(a), "S0", None),
    ("a.sum()", lambda a, b: a.sum(), "S0", None),
    ("a.sum(0)", lambda a, b: a.sum(0), "S1", None),
    ("a.sum(1, keepdim=True)", lambda a, b: a.sum(1, keepdim=True), "S1", None),
]


def pointwise_placements(rank: int, world: int) -> list[tuple]:
    """Each of ``POINTWISE_CASES`` in both libraries on a 1-D mesh: (case, a, b, torch's
    output placement and collectives, retorch's, whether the pieces are equal)."""
    a0 = torch.arange(24.0).reshape(4, 6) - 12
    b0 = torch.arange(24.0).reshape(4, 6).flip(0) / 4
    rows = []
    with _quiet():
        libs = _dtensor_libs()
        meshes = {name: init("cpu", (world,)) for name, (_, init, _) in libs.items()}
        for expr, fn, pa, pb in POINTWISE_CASES:
            rec = {}
            for name, (lib, _, Comm) in libs.items():
                a = _dtensor(lib, meshes[name], a0, pa, rank)
                b = _dtensor(lib, meshes[name], b0, pb or "R", rank)
                with Comm() as mode:
                    out = fn(a, b)
                rec[name] = (str(out.placements[0]), _short(mode), out.to_local())
            same = torch.allclose(rec["torch"][2], rec["retorch"][2], atol=ATOL, rtol=RTOL)
            rows.append((expr, pa, pb or "", *rec["torch"][:2], *rec["retorch"][:2], same))
    return rows


def _comm_counts(mode) -> dict[str, int]:
    return {str(k): v for k, v in mode.get_comm_counts().items()}


def two_d_parallel(rank: int, world: int, steps: int) -> dict:
    """2-D parallelism as torch's recipe, on a 2x2 mesh ("dp", "tp") of 4 ranks, in both
    libraries: an MLP block Colwise then Rowwise over ``mesh["tp"]``, then ``fully_shard`` per
    Linear and at the root over ``mesh["dp"]``; one batch per dp group. Per SGD step: the
    collectives of forward and of backward (each library's ``CommDebugMode``), and each
    parameter's local piece after the step."""
    from torch import nn

    from .device_mesh import init_device_mesh as r_init
    from .fully_shard import fully_shard as r_shard
    from .tensor import parallel as r_par
    from .tensor.debug import CommDebugMode as RComm

    with _quiet():
        from torch.distributed.device_mesh import init_device_mesh as t_init
        from torch.distributed.fsdp import fully_shard as t_shard
        from torch.distributed.tensor import parallel as t_par
        from torch.distributed.tensor.debug import CommDebugMode as TComm

        libs = {"torch": (t_init, t_shard, t_par, TComm),
                "retorch": (r_init, r_shard, r_par, RComm)}  # fmt: skip
        out = {}
        for name, (init, shard, par, Comm) in libs.items():
            mesh = init("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
            torch.manual_seed(0)
            mlp = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 6))  # 3 rows a rank
            par.parallelize_module(mlp, mesh["tp"], {"0": par.ColwiseParallel(),
                                                     "2": par.RowwiseParallel()})  # fmt: skip
            for layer in (mlp[0], mlp[2], mlp):
                shard(layer, mesh=mesh["dp"])
            opt = torch.optim.SGD(mlp.parameters(), lr=0.05)
            g = torch.Generator().manual_seed(mesh.get_coordinate()[0])  # a batch per dp group
            rec = {"comms": [], "pieces": []}
            for _ in range(steps):
                x = torch.randn(4, 8, generator=g)
                with Comm() as fwd:
                    y = mlp(x)
                with Comm() as bwd:
                    (y * y).sum().backward()
                opt.step()
                opt.zero_grad()
                rec["comms"].append((_comm_counts(fwd), _comm_counts(bwd)))
                rec["pieces"].append([
                    (p.to_local() if hasattr(p, "to_local") else p).detach().clone()
                    for p in mlp.parameters()
                ])  # fmt: skip
            out[name] = rec
        return out

"""Activation memory in practice: what checkpointing and CPU offload save, counted by each
library's own instruments.

The course's measuring harness for ``torch.utils.checkpoint`` (rebuilt in
``retorch/utils/checkpoint.py``) and ``torch.autograd.graph.save_on_cpu`` (rebuilt at the end of
``retorch/autograd/graph.py``): one deep MLP, ``(a @ w).relu()`` per layer, in either library,
its forward run plain, in checkpointed segments, or under ``save_on_cpu``; then the bytes
counted

* on the CPU by each library's profiler with ``profile_memory=True``: torch's ``[memory]``
  events (``torch/autograd/profiler.py`` reads them from ``kineto_results`` the same way) and
  retorch's (``retorch/profiler/record_function.py``: every storage allocated and freed);
* on retorch's (simulated) CUDA device by the caching allocator's counters
  (``memory_stats()["requested_bytes.all.peak"]`` after ``reset_peak_memory_stats``), as
  ``torch.cuda.max_memory_allocated`` counts on a GPU.

*kept* is what a forward leaves allocated (what autograd keeps for backward, and the output);
*peak* is the most allocated at any moment of forward and backward, both above what was
allocated before the forward.
"""

from __future__ import annotations

import gc
from contextlib import nullcontext

import numpy as np

MODES = ("plain", "checkpoint", "save_on_cpu")


def mlp_arrays(depth: int, batch: int, width: int, seed: int = 0):
    """The input (``batch`` x ``width``) and ``depth`` square weights, as float32 arrays."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, width)).astype(np.float32)
    ws = [(rng.standard_normal((width, width)) * 0.3).astype(np.float32) for _ in range(depth)]
    return x, ws


def layers(a, ws):
    """One segment of the MLP: ``(a @ w).relu()`` for each weight in turn."""
    for w in ws:
        a = (a @ w).relu()
    return a


def _library(lib: str, rng_state: bool = False):
    """(checkpoint, save_on_cpu) of ``lib``. torch's checkpoint stashes the RNG state for the
    recomputation unless ``preserve_rng_state=False``; retorch's has no stash (chapter 3's ops
    draw no random numbers), so torch's runs without it unless ``rng_state``."""
    if lib == "torch":
        import torch
        import torch.utils.checkpoint

        def ckpt(fn, *args):
            return torch.utils.checkpoint.checkpoint(
                fn, *args, use_reentrant=False, preserve_rng_state=rng_state
            )

        return ckpt, torch.autograd.graph.save_on_cpu
    from retorch.autograd.graph import save_on_cpu
    from retorch.utils.checkpoint import checkpoint

    return (lambda fn, *args: checkpoint(fn, *args, use_reentrant=False)), save_on_cpu


def forward(lib: str, x, ws, mode: str, segments: int = 4, rng_state: bool = False):
    """The MLP's output, ``mode`` one of :data:`MODES`; ``segments`` checkpoints of equal
    numbers of layers when checkpointing."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if len(ws) % segments:
        raise ValueError(f"{len(ws)} layers do not split into {segments} equal segments")
    ckpt, save_on_cpu = _library(lib, rng_state)
    if mode == "checkpoint":
        per = len(ws) // segments
        for s in range(segments):
            x = ckpt(layers, x, ws[s * per : (s + 1) * per])
        return x
    with save_on_cpu() if mode == "save_on_cpu" else nullcontext():
        return layers(x, ws)


def mlp_model(lib: str, depth: int, batch: int, width: int, device: str = "cpu", seed: int = 0):
    """``(x, ws)`` of :func:`mlp_arrays` as ``lib``'s tensors: torch's, or chapter 3's autograd
    tensors over ``retorch.tensor`` on ``device`` (the array backend must be "retorch")."""
    x, ws = mlp_arrays(depth, batch, width, seed)
    if lib == "torch":
        import torch

        return torch.tensor(x), [torch.tensor(w, requires_grad=True) for w in ws]
    import retorch.autograd as ra
    import retorch.tensor as rt

    def dev(a):
        return rt.tensor(a, device=device)

    return ra.tensor(dev(x)), [ra.tensor(dev(w), requires_grad=True) for w in ws]


def _backend(lib: str):
    """Chapter 3's array backend on "retorch" for retorch's model (torch's: left as it is)."""
    from retorch.autograd.backend import array_backend, get_array_backend

    return array_backend("retorch" if lib == "retorch" else get_array_backend())


def memory_totals(lib: str, fn) -> list[int]:
    """Run ``fn`` under ``lib``'s profiler with ``profile_memory=True``: the bytes allocated
    after each ``[memory]`` event, from 0 at the start, in the order of the events."""
    if lib == "torch":
        import torch

        from retorch.profiler.compare import quiet_stderr

        with quiet_stderr(), torch.profiler.profile(profile_memory=True) as prof:
            fn()
        events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
        nbytes = [e.nbytes() for e in sorted(events, key=lambda e: e.start_ns())]
        return list(np.cumsum(nbytes, dtype=np.int64).tolist()) if nbytes else [0]
    import retorch.profiler as rp

    with rp.profile(profile_memory=True) as prof:
        fn()
    return [total for _, _, total, _ in prof._memory] or [0]


def cpu_memory(
    lib: str,
    mode: str,
    depth: int = 8,
    batch: int = 32,
    width: int = 16,
    segments: int = 4,
    rng_state: bool = False,
) -> dict:
    """``{"kept": ..., "peak": ...}`` in bytes for one step of the MLP on the CPU, counted by
    ``lib``'s profiler: a forward alone (its last total is what it keeps), then forward and
    backward of ``output.sum()`` on a fresh model (the largest total is the peak)."""
    with _backend(lib):
        return _cpu_memory(lib, mode, depth, batch, width, segments, rng_state)


def _cpu_memory(lib, mode, depth, batch, width, segments, rng_state) -> dict:
    out = {}
    x, ws = mlp_model(lib, depth, batch, width)
    gc.collect()
    kept: list = []
    run = lambda: kept.append(forward(lib, x, ws, mode, segments, rng_state))  # noqa: E731
    out["kept"] = memory_totals(lib, run)[-1]
    kept.clear()  # the graph and output go: the next run starts from nothing kept
    x, ws = mlp_model(lib, depth, batch, width)
    gc.collect()
    step = lambda: forward(lib, x, ws, mode, segments, rng_state).sum().backward()  # noqa: E731
    out["peak"] = max(memory_totals(lib, step))
    return out


def cuda_memory(
    mode: str, depth: int = 8, batch: int = 32, width: int = 16, segments: int = 4
) -> dict:
    """``{"kept", "peak", "host"}`` in bytes for one step of retorch's MLP on its CUDA device
    (and ``"grads"``, the weights' gradients as NumPy arrays):
    device bytes from the caching allocator's ``requested_bytes`` counters (exact sizes, before
    its rounding to 512-byte blocks), and ``host``, the CPU bytes that hold the saved tensors
    after the forward."""
    with _backend("retorch"):
        return _cuda_memory(mode, depth, batch, width, segments)


def _cuda_memory(mode, depth, batch, width, segments) -> dict:
    from retorch.tensor import allocator

    x, ws = mlp_model("retorch", depth, batch, width, device="cuda")
    gc.collect()
    allocator.reset_peak_memory_stats()
    base = allocator.memory_stats()["requested_bytes.all.current"]
    y = forward("retorch", x, ws, mode, segments)
    host = _host_bytes_saved(y)
    kept = allocator.memory_stats()["requested_bytes.all.current"] - base
    y.sum().backward()
    del y
    peak = allocator.memory_stats()["requested_bytes.all.peak"] - base
    grads = [w.grad.data.cpu().numpy() for w in ws]
    return {"kept": kept, "peak": peak, "host": host, "grads": grads}


def _host_bytes_saved(y) -> int:
    """The bytes of the CPU arrays that ``save_on_cpu`` packed in the graph ending in ``y``."""
    from retorch.autograd.graph import SavedVariable

    seen, total, stack = set(), 0, [y.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for saved in vars(node).values():
            packed = saved.data if isinstance(saved, SavedVariable) else None
            if isinstance(packed, tuple) and packed[1].device == "cpu":
                total += packed[1].numel() * packed[1].element_size()
        stack.extend(edge[0] for edge in node.next_functions)
    return total


def bytes_packed(lib: str, depth: int = 8, batch: int = 32, width: int = 16) -> list[int]:
    """The bytes of each tensor that ``lib``'s own ``save_on_cpu`` pack hook is handed during
    the MLP's forward on the CPU, in order (its hook wrapped, then run as it is)."""
    with _backend(lib):
        x, ws = mlp_model(lib, depth, batch, width)
        return _handed_to_pack(lib, x, ws)


def _handed_to_pack(lib, x, ws) -> list[int]:
    ctx = _library(lib)[1]()
    pack, handed = ctx.pack_hook, []

    def counting_pack(tensor):
        handed.append(tensor.data.numel() * tensor.data.element_size())
        return pack(tensor)

    ctx.pack_hook = counting_pack
    with ctx:
        layers(x, ws)
    return handed

"""FSDP2's memory per rank, phase by phase, in torch 2.13's ``fully_shard`` and retorch's.

On CPU torch keeps no memory statistics, so this counts what each library's FSDP2 state holds:
the bytes of the distinct storages (``untyped_storage().nbytes()``, each storage once) of

- *params*: every managed parameter's sharded piece and, while gathered, its unsharded tensor
  (torch's ``FSDPParam._sharded_param_data``, the padded piece the sharded DTensor is a view
  of, and ``all_gather_outputs`` / ``_unsharded_param``, one storage, resized to 0 when
  resharded, torch/distributed/fsdp/_fully_shard/_fsdp_param.py; retorch's ``_Param.sharded``
  and ``_Param.unsharded``);
- *grads*: the ``.grad`` of those (torch's sharded grads are views of one reduce-scatter
  output per group: counted once);
- *gathered*: an all-gather's output not yet copied out into the unsharded parameters:
  torch's ``FSDPParamGroup._all_gather_result`` (a prefetched layer waits there until
  ``_fsdp_param_group.py``'s ``wait_for_unshard`` copies it out when backward reaches it);
  retorch's ``FSDPParamGroup._all_gather_output``, the same;
- *held*: the buffers the groups' shared communication context keeps after their call is
  over (torch's ``FSDPCommContext``, one per root): ``all_gather_state``, the last
  forward all-gather's output, kept after its copy-out until the next layer's copy-out or the
  root's post-forward, and ``reduce_scatter_states``, the last reduce-scatter's input, kept
  until the next group's post-backward or the end of backward; retorch's ``_CommContext``
  keeps the same for as long.

Not counted: activations, the reduce-scatter's output (a local of one call), the all-gather's
input, optimizer state. Peaks are sampled after every op (a ``TorchDispatchMode`` around
forward and around backward) but torch's profiler ranges: ``record_function`` enters and exits
through ops of torch's dispatcher (``profiler._record_function_enter_new``), retorch's does
not, so a sample there would see states between two Python statements of torch's hooks that
retorch holds too but never shows a sampler (after the all-gather's output is stored and
before the previous layer's is released; after a group's last gradient and before its
post-backward reshards). A storage that lives inside one op only is not seen. Phases of one
SGD step (``reshard_after_forward`` True and False): after init, the peak in forward, after
forward, the peak in backward, after backward, after ``opt.step()``, after ``zero_grad()``.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["PHASES", "fsdp2_memory", "memory_table", "padding_bytes"]

PHASES = ("after init", "forward peak", "after forward", "backward peak", "after backward",
          "after step", "after zero_grad")  # fmt: skip


def _bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        t = getattr(t, "_local_tensor", t)  # a DTensor's piece
        s = t.untyped_storage()
        if s._cdata not in seen:
            seen.add(s._cdata)
            total += s.nbytes()
    return total


def _torch_state(model) -> tuple[int, int, int, int]:
    params, grads, gathered = [], [], []
    for m in model.modules():
        state = getattr(m, "_get_fsdp_state", None)
        group = state()._fsdp_param_group if state is not None else None
        if group is not None and group._all_gather_result is not None:
            gathered.append(group._all_gather_result.all_gather_output)
        for fp in group.fsdp_params if group is not None else ():
            params.append(fp._sharded_param_data)
            params.extend(getattr(fp, "all_gather_outputs", []))
            unsharded = getattr(fp, "_unsharded_param", None)
            params.append(unsharded)
            grads.append(fp.sharded_param.grad)
            grads.append(unsharded.grad if unsharded is not None else None)
    return _bytes(params), _bytes(grads), _bytes(gathered), _torch_held(model)


def _torch_held(model) -> int:
    for m in model.modules():  # the root's state (every state shares its comm_ctx)
        state = getattr(m, "_get_fsdp_state", None)
        if state is not None:
            ctx = state()._comm_ctx
            # (set by the root's lazy init, at its first forward)
            held = [s.reduce_scatter_input for s in getattr(ctx, "reduce_scatter_states", [])]
            if getattr(ctx, "all_gather_state", None) is not None:
                held.append(ctx.all_gather_state.all_gather_result.all_gather_output)
            return _bytes(held)
    return 0


def _retorch_state(model) -> tuple[int, int, int, int]:
    params, grads, gathered, held = [], [], [], []
    for m in model.modules():
        group = getattr(m, "_fsdp_group", None)
        for p in group.params if group is not None else ():
            params += [p.sharded, p.unsharded]
            grads += [p.sharded.grad, p.unsharded.grad]
        gathered.append(group._all_gather_output if group is not None else None)
        if group is not None and group.is_root:
            held += [group.comm_ctx.all_gather_state, *group.comm_ctx.reduce_scatter_states]
    return _bytes(params), _bytes(grads), _bytes(gathered), _bytes(held)


class _Peak(TorchDispatchMode):
    """The largest (params + grads + gathered + held) seen after any aten op in the block."""

    def __init__(self, measure) -> None:
        super().__init__()
        self.measure, self.peak = measure, (0, 0, 0, 0)
        self.most_held = (0, 0, 0, 0)  # the sample holding the most in the comm context

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace == "profiler":  # torch's ranges are ops, retorch's are not
            return out
        now = self.measure()
        if sum(now) > sum(self.peak):
            self.peak = now
        if now[3] > self.most_held[3]:
            self.most_held = now
        return out


def fsdp2_memory(rank: int, world: int, models: list[tuple[int, ...]]) -> dict:
    """Per model, library and ``reshard_after_forward``: ``{phase: (params, grads, gathered,
    held)}`` in bytes, over one SGD step of an MLP of Linears ``sizes[0] -> sizes[1] -> ...``
    (ReLU between), each Linear and the root under ``fully_shard`` on ``world`` ranks; the
    :data:`PHASES`, and ``"forward, most held"`` / ``"backward, most held"``: the sample of
    forward / backward whose held part is the largest."""
    from torch import nn

    from .demos import _quiet
    from .device_mesh import init_device_mesh as r_init
    from .fully_shard import fully_shard as r_shard

    with _quiet():
        from torch.distributed.device_mesh import init_device_mesh as t_init
        from torch.distributed.fsdp import fully_shard as t_shard

        libs = {"torch": (t_init, t_shard, _torch_state),
                "retorch": (r_init, r_shard, _retorch_state)}  # fmt: skip
        out = {}
        for lib, (init, shard, measure) in libs.items():
            mesh = init("cpu", (world,))
            for sizes, reshard in [(sizes, r) for sizes in models for r in (True, False)]:
                torch.manual_seed(0)
                layers = []
                for a, b in zip(sizes, sizes[1:], strict=False):
                    layers += [nn.Linear(a, b), nn.ReLU()]
                model = nn.Sequential(*layers[:-1])
                for layer in [*model[::2], model]:
                    shard(layer, mesh=mesh, reshard_after_forward=reshard)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                x = torch.randn(4, sizes[0], generator=torch.Generator().manual_seed(rank))
                rec = {"after init": measure(model)}
                with _Peak(lambda m=model: measure(m)) as fwd:
                    loss = model(x).square().sum()
                rec["forward peak"], rec["after forward"] = fwd.peak, measure(model)
                rec["forward, most held"] = fwd.most_held
                with _Peak(lambda m=model: measure(m)) as bwd:
                    loss.backward()
                rec["backward peak"], rec["after backward"] = bwd.peak, measure(model)
                rec["backward, most held"] = bwd.most_held
                opt.step()
                rec["after step"] = measure(model)
                opt.zero_grad()
                rec["after zero_grad"] = measure(model)
                out[(tuple(sizes), lib, reshard)] = rec
        return out


def memory_table(res: dict, sizes: tuple[int, ...]) -> list[tuple]:
    """Rows ``(phase, reshard_after_forward, torch's (params, grads, gathered, held), retorch's)``
    of one rank's ``fsdp2_memory`` for one model."""
    return [(phase, reshard, res[(sizes, "torch", reshard)][phase],
             res[(sizes, "retorch", reshard)][phase])
            for reshard in (True, False) for phase in PHASES]  # fmt: skip


def padding_bytes(sizes: tuple[int, ...], n: int, rank: int) -> tuple[int, int]:
    """(S, U): the float32 bytes of padding torch adds to ``rank``'s sharded pieces (each
    padded to ``ceil(rows / n)`` rows) and to the unsharded tensors (``n * ceil(rows / n)``
    rows), over the MLP's Linears (a weight row of ``cols`` floats and a bias per row)."""
    sharded = unsharded = 0
    for cols, rows in zip(sizes, sizes[1:], strict=False):
        padded = -(-rows // n)
        mine = max(0, min(rows, padded * (rank + 1)) - padded * rank)
        sharded += (padded - mine) * (cols + 1) * 4
        unsharded += (n * padded - rows) * (cols + 1) * 4
    return sharded, unsharded

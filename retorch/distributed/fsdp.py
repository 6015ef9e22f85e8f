"""Sharded data parallel, ZeRO-3 style: each rank keeps 1/n of every parameter.

Mirrors FSDP's flat parameter (torch/distributed/fsdp/_flat_param.py: one ``FlatParameter``
per wrapped unit, parameters as views into it, storage freed with ``_free_storage`` from
torch/distributed/utils.py) and the unit life cycle of FSDP2
(torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py: ``pre_forward`` all-gathers,
``post_forward`` reshards, ``pre_backward`` all-gathers again, ``post_backward``
reduce-scatters; the collectives are in _fsdp_collectives.py).

Each unit (a submodule named in ``units``, and the root for the parameters left over) owns:

- ``flat_param``: its shard, a ``Parameter`` of ``ceil(total / n)`` elements (the flattened
  parameters, zero-padded to a multiple of n, cut into n pieces); the optimizer sees only
  these, so it steps 1/n of the model and keeps 1/n of its state;
- ``full``: the whole flat tensor, a leaf of its own whose storage exists only while the unit
  runs. Before the unit's forward (and again before its backward, from a hook on its outputs)
  the shards are all-gathered into it and the module's parameters become views of it; after
  its forward the storage is freed (resized to 0 bytes: the views saved for backward keep
  pointing at the same storage, which the pre-backward all-gather refills).
- When backward has accumulated ``full.grad``, a hook reduce-scatters it (divided by n:
  the average over ranks), adds the result to ``flat_param.grad`` and frees both.

The collectives are chapter 7's own ring ``all_gather`` and ``reduce_scatter``
(collectives.py). ``held_bytes`` counts the bytes of parameters, gradients and optimizer
state a rank holds, to compare with ``DistributedDataParallel``'s.

torch 2.13's ``fully_shard`` runs on CPU processes with gloo (a 1-D CPU ``DeviceMesh``;
parameters become ``DTensor``s sharded on dim 0): the tests train it beside this one and the
parameters agree within tolerance. Left out, compared with torch: prefetching the next unit's
all-gather, mixed precision, CPU offload, ``state_dict`` of the sharded model (use
``full_parameters``), and units sharing parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.distributed as dist

from ..nn.parameter import Parameter
from . import collectives

__all__ = [
    "FlatParamUnit",
    "GatheredBytes",
    "full_parameters",
    "fully_shard_units",
    "held_bytes",
]


class GatheredBytes:
    """Bytes of gathered (unsharded) flat parameters alive now, and the most at any time."""

    def __init__(self) -> None:
        self.now = self.peak = 0

    def add(self, nbytes: int) -> None:
        self.now += nbytes
        self.peak = max(self.peak, self.now)


class FlatParamUnit:
    """One unit's flat parameter: its shard, the gathered whole, and the hooks around it."""

    def __init__(
        self,
        module,
        params: list[tuple[object, str, torch.Tensor]],
        group=None,
        gathered: GatheredBytes | None = None,
    ):
        self.module, self.group = module, group
        self.gathered = gathered or GatheredBytes()
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        # (owning module, attribute name, shape) of each parameter, in order
        self.slots = [(owner, name, p.shape) for owner, name, p in params]
        self.numels = [p.numel() for _, _, p in params]
        total = sum(self.numels)
        self.shard_numel = math.ceil(total / self.world)
        self.padding = self.shard_numel * self.world - total
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1) for _, _, p in params])
            flat = torch.cat([flat, flat.new_zeros(self.padding)])
            start = self.rank * self.shard_numel
            shard = flat[start : start + self.shard_numel].clone()
        for owner, name, _ in params:
            delattr(owner, name)  # out of _parameters: from now on a plain attribute (a view)
        self.flat_param = Parameter(shard)
        module.flat_param = self.flat_param  # what the optimizer steps
        self.full = torch.zeros(self.world * self.shard_numel, dtype=shard.dtype)
        self.full.requires_grad_(True)
        self.full.untyped_storage().resize_(0)  # allocated only while the unit runs
        self.full.register_post_accumulate_grad_hook(self._post_backward)
        module.register_forward_pre_hook(self._pre_forward)
        module.register_forward_hook(self._post_forward)

    def _free(self, t: torch.Tensor) -> None:
        self.gathered.add(-t.untyped_storage().nbytes())
        t.untyped_storage().resize_(0)

    def _unshard(self) -> None:
        if self.full.untyped_storage().nbytes():
            return  # already gathered (a unit used twice in one forward)
        self.full.untyped_storage().resize_(self.full.numel() * self.full.element_size())
        self.gathered.add(self.full.untyped_storage().nbytes())
        # .data: a write that autograd does not count, since views of ``full`` saved for
        # backward must still be valid when backward refills them.
        collectives.all_gather(self.full.data, self.flat_param.data, self.group)

    def _pre_forward(self, module, args) -> None:
        self._unshard()
        views = self.full[: self.full.numel() - self.padding].split(self.numels)
        for (owner, name, shape), view in zip(self.slots, views):
            setattr(owner, name, view.view(shape))

    def _post_forward(self, module, args, output):
        self._free(self.full)
        tensors = [t for t in _tensors(output) if t.requires_grad]
        if tensors:
            self._pre_backward_done = False
            for t in tensors:
                t.register_hook(self._pre_backward)
        return output

    def _pre_backward(self, grad: torch.Tensor) -> None:
        if not self._pre_backward_done:  # once per backward, whichever output comes first
            self._pre_backward_done = True
            self._unshard()

    def _post_backward(self, full: torch.Tensor) -> None:
        grad = full.grad
        full.grad = None
        reduced = torch.empty_like(self.flat_param)
        collectives.reduce_scatter(reduced, grad.div_(self.world), self.group)
        if self.flat_param.grad is None:
            self.flat_param.grad = reduced
        else:
            self.flat_param.grad.add_(reduced)
        self._free(self.full)

    def full_parameters(self) -> list[torch.Tensor]:
        """Every rank's shards gathered into the unit's parameters (copies, for comparison)."""
        whole = torch.empty_like(self.full.data)
        collectives.all_gather(whole, self.flat_param.detach(), self.group)
        pieces = whole[: whole.numel() - self.padding].split(self.numels)
        return [piece.view(shape).clone() for piece, (_, _, shape) in zip(pieces, self.slots)]


def fully_shard_units(model, units: Iterable = (), group=None) -> list[FlatParamUnit]:
    """Shard ``model``: one flat parameter per module in ``units`` and one for the root (what
    is left), as FSDP2's ``fully_shard`` on each unit and then the root. Every rank must pass
    the same model; rank 0's values are broadcast first so the replicas start equal.
    Returns the units, the root last; ``model.parameters()`` then yields only the shards.
    The units share one ``GatheredBytes`` (``units[0].gathered``): its ``peak`` is the most
    unsharded parameter memory held at once, one unit and the root's at a time."""
    units = list(units)
    src = 0 if group is None else dist.get_global_rank(group, 0)
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p, src=src, group=group)
    owned, result, gathered = set(), [], GatheredBytes()
    for unit in [*units, model]:
        params = [
            (mod, name, p)
            for mod in unit.modules()
            if not _inside_other_unit(mod, unit, units)
            for name, p in list(mod._parameters.items())
            if p is not None and id(p) not in owned
        ]
        owned |= {id(p) for _, _, p in params}
        if params:
            result.append(FlatParamUnit(unit, params, group, gathered))
    return result


def _inside_other_unit(mod, unit, units) -> bool:
    return any(u is not unit and any(m is mod for m in u.modules()) for u in units)


def full_parameters(units: list[FlatParamUnit]) -> list[torch.Tensor]:
    """All units' parameters, gathered, in the order the units were built."""
    return [p for u in units for p in u.full_parameters()]


def held_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a freed storage counts 0)."""
    storages = {}
    for t in tensors:
        if t is not None and t.untyped_storage().nbytes():
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(storages.values())


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)

"""``DTensor``: this rank's piece of a global tensor, and the spec that says how pieces lie.

Mirrors torch/distributed/tensor/_api.py (``DTensor``, ``distribute_tensor``) and
``_dtensor_spec.py`` (``DTensorSpec``: mesh, placements, global shape and stride). Torch's
DTensor is a tensor subclass whose ops go through ``__torch_dispatch__`` and sharding
propagation; this one is a plain object holding a ``torch.Tensor`` piece (``_local_tensor``),
so what it does is visible: autograd runs on the pieces (``Redistribute`` is an autograd
function), and the ops it supports are listed in ``_ops.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..device_mesh import DeviceMesh
from ._redistribute import Redistribute, _check_no_partial_target
from .placement_types import Partial, Placement, Replicate, Shard

__all__ = ["DTensor", "DTensorSpec", "distribute_tensor"]


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class DTensorSpec:
    mesh: DeviceMesh
    placements: tuple[Placement, ...]
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @property
    def num_shards(self) -> int:
        n = 1
        for i, p in enumerate(self.placements):
            if isinstance(p, Shard):
                n *= self.mesh.size(i)
        return n


def _normalize(placements, ndim: int, mesh: DeviceMesh) -> tuple[Placement, ...]:
    placements = tuple(placements)
    if len(placements) != mesh.ndim:
        raise ValueError(
            f"`placements` must have the same length as `device_mesh.ndim`! Found placements "
            f"length: {len(placements)}, and device_mesh.ndim: {mesh.ndim}."
        )
    out = []
    for p in placements:
        if isinstance(p, Shard) and not -ndim <= p.dim < ndim:  # torch's message for Shard(d)
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], "
                f"but got {p.dim})"
            )
        if isinstance(p, Shard) and p.dim < 0:
            p = Shard(p.dim + ndim)
        out.append(p)
    return tuple(out)


class DTensor:
    """``_local_tensor`` (this rank's piece, a ``torch.Tensor``) and ``_spec``."""

    def __init__(self, local_tensor: torch.Tensor, spec: DTensorSpec) -> None:
        self._local_tensor = local_tensor
        self._spec = spec

    # ---- construction ----------------------------------------------------------------------
    @staticmethod
    def from_local(local_tensor, device_mesh, placements=None, *, run_check: bool = False,
                   shape=None, stride=None) -> DTensor:  # fmt: skip
        """A DTensor over pieces the ranks already hold; the global shape assumes even pieces
        unless ``shape`` is given (torch's ``compute_global_tensor_info``)."""
        if isinstance(local_tensor, DTensor):
            raise RuntimeError(
                "the local_tensor argument only accepts torch.Tensor but got "
                f"{type(local_tensor)} value."
            )
        if placements is None:
            placements = [Replicate()] * device_mesh.ndim
        placements = _normalize(placements, local_tensor.ndim, device_mesh)
        if shape is None:
            shape = list(local_tensor.shape)
            for i, p in enumerate(placements):
                if isinstance(p, Shard):
                    shape[p.dim] *= device_mesh.size(i)
        shape = tuple(shape)
        stride = tuple(stride) if stride is not None else _contiguous_strides(shape)
        spec = DTensorSpec(device_mesh, placements, shape, stride, local_tensor.dtype)
        return DTensor(local_tensor, spec)

    # ---- what it is ------------------------------------------------------------------------
    @property
    def device_mesh(self) -> DeviceMesh:
        return self._spec.mesh

    @property
    def placements(self) -> tuple[Placement, ...]:
        return self._spec.placements

    @property
    def shape(self) -> torch.Size:
        return torch.Size(self._spec.shape)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def stride(self) -> tuple[int, ...]:
        return self._spec.stride

    @property
    def ndim(self) -> int:
        return len(self._spec.shape)

    @property
    def dtype(self) -> torch.dtype:
        return self._spec.dtype

    @property
    def requires_grad(self) -> bool:
        return self._local_tensor.requires_grad

    def __repr__(self) -> str:
        return (
            f"DTensor(local_tensor={self._local_tensor}, device_mesh={self._spec.mesh}, "
            f"placements={self._spec.placements})"
        )

    # ---- conversion ------------------------------------------------------------------------
    def to_local(self) -> torch.Tensor:
        return self._local_tensor

    def redistribute(self, device_mesh=None, placements=None) -> DTensor:
        """The same global tensor, laid out as ``placements`` (each collective counted)."""
        mesh = device_mesh or self._spec.mesh
        if mesh != self._spec.mesh:
            raise NotImplementedError("Cross device mesh comm not supported yet!")
        if placements is None:
            raise RuntimeError("placements is needed for redistribute!")
        placements = _normalize(placements, self.ndim, mesh)
        _check_no_partial_target(self._spec.placements, placements)
        return self._redistribute(placements)

    def _redistribute(self, placements) -> DTensor:
        spec = self._spec
        target = DTensorSpec(spec.mesh, tuple(placements), spec.shape, spec.stride, spec.dtype)
        if target.placements == spec.placements:
            return DTensor(self._local_tensor, target)
        return DTensor(Redistribute.apply(self._local_tensor, spec, target), target)

    def full_tensor(self) -> torch.Tensor:
        """The whole tensor on every rank: a redistribution to Replicate everywhere."""
        return self._redistribute([Replicate()] * self._spec.mesh.ndim).to_local()

    # ---- pointwise ops and sum, propagated as torch's (``_pointwise_ops.py``) -------------
    def __add__(self, other) -> DTensor:
        return _pw().add(self, other)

    def __radd__(self, other) -> DTensor:
        return _pw().add(other, self)

    def __sub__(self, other) -> DTensor:
        return _pw().sub(self, other)

    def __rsub__(self, other) -> DTensor:
        return _pw().sub(other, self)

    def __mul__(self, other) -> DTensor:
        return _pw().mul(self, other)

    def __rmul__(self, other) -> DTensor:
        return _pw().mul(other, self)

    def __truediv__(self, other) -> DTensor:
        return _pw().div(self, other)

    def __neg__(self) -> DTensor:
        return _pw().neg(self)

    def sum(self, dim=None, keepdim: bool = False) -> DTensor:
        return _pw().sum(self, dim, keepdim)

    # ---- reductions by max and min: Partial("max") / Partial("min") (``_math_ops.py``) ----
    def amax(self, dim=(), keepdim: bool = False) -> DTensor:
        return _math().amax(self, dim, keepdim)

    def amin(self, dim=(), keepdim: bool = False) -> DTensor:
        return _math().amin(self, dim, keepdim)

    def max(self, dim=None, keepdim: bool = False):
        return _math().max(self, dim, keepdim)

    def min(self, dim=None, keepdim: bool = False):
        return _math().min(self, dim, keepdim)


def _pw():
    from . import _pointwise_ops  # imports this module: bound on first use

    return _pointwise_ops


def _math():
    from . import _math_ops  # imports this module: bound on first use

    return _math_ops


def distribute_tensor(tensor: torch.Tensor, device_mesh: DeviceMesh, placements=None, *,
                      src_data_rank: int | None = 0) -> DTensor:  # fmt: skip
    """Rank ``src_data_rank``'s ``tensor`` laid out as ``placements``: per mesh dimension a
    scatter (Shard), a broadcast (Replicate), or a broadcast and a partition (Partial)."""
    if placements is None:
        placements = [Replicate()] * device_mesh.ndim
    placements = _normalize(placements, tensor.ndim, device_mesh)
    local = tensor.detach()
    for i, p in enumerate(placements):
        if isinstance(p, Shard):
            local = p._shard_tensor(local, device_mesh, i, src_data_rank)
        elif isinstance(p, Replicate):
            local = p._replicate_tensor(local, device_mesh, i, src_data_rank)
        elif isinstance(p, Partial):
            local = Replicate()._replicate_tensor(local, device_mesh, i, src_data_rank)
            local = p._partition_value(local, device_mesh, i)
    local = local.requires_grad_(tensor.requires_grad)
    spec = DTensorSpec(device_mesh, placements, tuple(tensor.shape), tuple(tensor.stride()),
                       tensor.dtype)  # fmt: skip
    return DTensor(local, spec)

"""A mesh of ranks in n dimensions, with one process group per dimension.

Mirrors torch/distributed/device_mesh.py (``DeviceMesh``, ``init_device_mesh``). The mesh is
an n-dimensional tensor of global ranks; along each mesh dimension the ranks that share every
other coordinate form a sub-group, so a (2, 2) mesh ``[[0, 1], [2, 3]]`` has the groups
``{0, 2}, {1, 3}`` on dimension 0 and ``{0, 1}, {2, 3}`` on dimension 1. Every process
creates every sub-group in the same order (``new_group`` is collective: all ranks call it,
even those not in the group) and keeps the one it belongs to, as torch's
``_init_one_process_group`` does; a dimension that spans the whole world reuses the default
group. ``mesh["tp"]`` is the 1-D slice through this rank, with the parent's group reused.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

__all__ = ["DeviceMesh", "init_device_mesh"]


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


class DeviceMesh:
    """``DeviceMesh(device_type, mesh, mesh_dim_names=...)``: ``mesh`` holds global ranks."""

    def __init__(self, device_type: str, mesh, *, mesh_dim_names=None, _groups=None,
                 _strides=None) -> None:  # fmt: skip
        self.device_type = device_type
        self.mesh = torch.as_tensor(mesh, dtype=torch.int32).detach().clone()
        if mesh_dim_names is not None and len(mesh_dim_names) != self.mesh.ndim:
            raise RuntimeError(
                f"mesh_dim_names {tuple(mesh_dim_names)} must name each of the mesh's "
                f"{self.mesh.ndim} dimensions"
            )
        self._mesh_dim_names = tuple(mesh_dim_names) if mesh_dim_names else None
        self._strides = _strides or _contiguous_strides(tuple(self.mesh.shape))
        here = (self.mesh == dist.get_rank()).nonzero()
        self._coordinate = tuple(here[0].tolist()) if len(here) else None
        self._groups = _groups if _groups is not None else self._init_process_groups()

    def _init_process_groups(self) -> list:
        groups = []
        for dim in range(self.mesh.ndim):
            rows = self.mesh.movedim(dim, -1).reshape(-1, self.mesh.size(dim))
            if rows.size(1) == dist.get_world_size():  # the whole world: the default group
                groups.append(dist.group.WORLD)
                continue
            mine = None
            for row in rows.tolist():
                g = dist.new_group(ranks=row)  # collective: every rank creates every group
                if dist.get_rank() in row:
                    mine = g
            groups.append(mine)
        return groups

    # ---- shape and names -----------------------------------------------------------------
    @property
    def mesh_dim_names(self) -> tuple[str, ...] | None:
        return self._mesh_dim_names

    @property
    def ndim(self) -> int:
        return self.mesh.ndim

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.mesh.shape)

    def size(self, mesh_dim: int | None = None) -> int:
        return self.mesh.numel() if mesh_dim is None else self.mesh.size(mesh_dim)

    def _dim(self, mesh_dim: int | str | None) -> int:
        if mesh_dim is None:
            if self.ndim > 1:
                raise RuntimeError(
                    f"Found the DeviceMesh have {self.ndim} dimensions: name the mesh_dim "
                    "(its index or its name) when device_mesh.ndim > 1"
                )
            return 0
        if isinstance(mesh_dim, str):
            if not self._mesh_dim_names or mesh_dim not in self._mesh_dim_names:
                raise KeyError(
                    f"Mesh dimension '{mesh_dim}' does not exist. Available mesh dimensions "
                    f"are: mesh_dim_names={self._mesh_dim_names}"
                )
            return self._mesh_dim_names.index(mesh_dim)
        return mesh_dim

    # ---- this rank -----------------------------------------------------------------------
    def get_rank(self) -> int:
        return dist.get_rank()

    def get_coordinate(self) -> tuple[int, ...] | None:
        """This rank's index in the mesh; ``None`` for a rank outside it."""
        return self._coordinate

    def get_local_rank(self, mesh_dim: int | str | None = None) -> int:
        """This rank's coordinate on ``mesh_dim`` (its rank inside that dimension's group)."""
        return self._coordinate[self._dim(mesh_dim)]

    def get_group(self, mesh_dim: int | str | None = None):
        return self._groups[self._dim(mesh_dim)]

    def get_all_groups(self) -> list:
        return list(self._groups)

    # ---- slicing -------------------------------------------------------------------------
    def __getitem__(self, names: str | tuple[str, ...]) -> DeviceMesh:
        """The sub-mesh of the named dimensions through this rank; the groups are reused."""
        names = (names,) if isinstance(names, str) else tuple(names)
        dims = [self._dim(n) for n in names]
        index = tuple(slice(None) if d in dims else c for d, c in enumerate(self._coordinate))
        order = sorted(dims)  # indexing keeps the named dims in mesh order; then as named
        sub = self.mesh[index].permute(*[order.index(d) for d in dims])
        return DeviceMesh(self.device_type, sub, mesh_dim_names=names,
                          _groups=[self._groups[d] for d in dims],
                          _strides=tuple(self._strides[d] for d in dims))  # fmt: skip

    def __repr__(self) -> str:
        sizes = (
            f"({', '.join(f'{n}={s}' for n, s in zip(self._mesh_dim_names, self.shape))})"
            if self._mesh_dim_names
            else f"{self.shape}"
        )
        return f"DeviceMesh({sizes}, '{self.device_type}', stride={self._strides})"

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, DeviceMesh)
            and self.device_type == other.device_type
            and torch.equal(self.mesh, other.mesh)
            and self._mesh_dim_names == other._mesh_dim_names
        )

    def __hash__(self) -> int:
        return hash((self.device_type, tuple(self.mesh.flatten().tolist()), self.shape,
                     self._mesh_dim_names))  # fmt: skip


def init_device_mesh(device_type: str, mesh_shape: tuple[int, ...], *, mesh_dim_names=None):
    """A mesh over all ranks, ``arange(world).view(mesh_shape)``, as torch's."""
    if math.prod(mesh_shape) != dist.get_world_size():
        raise RuntimeError(
            f"Mesh shape {tuple(mesh_shape)} has {math.prod(mesh_shape)} ranks but the world "
            f"has {dist.get_world_size()}: their product must equal the world size"
        )
    mesh = torch.arange(math.prod(mesh_shape), dtype=torch.int32).view(mesh_shape)
    return DeviceMesh(device_type, mesh, mesh_dim_names=mesh_dim_names)

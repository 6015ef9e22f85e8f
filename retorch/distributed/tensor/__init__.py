"""Chapter 7b: DTensor rebuilt on chapter 7's collectives (torch/distributed/tensor/).

- ``placement_types``  ``Shard(dim)``, ``Replicate()``, ``Partial(op)`` and the collective
                       each change of placement needs
- ``_redistribute``    the plan of steps between two placement lists, and its autograd node
- ``_api``             ``DTensor``, ``distribute_tensor``
- ``_ops``             sharding propagation of ``mm`` and the Linear layer's ops
- ``_pointwise_ops``   sharding propagation of pointwise ops (+, -, *, /, neg, relu, gelu)
                       and ``sum``
- ``_collective_utils`` the collectives, padded for uneven pieces, counted
- ``debug``            ``CommDebugMode``: the collectives a block issued, by torch's names
"""

from . import debug
from ._api import DTensor, DTensorSpec, distribute_tensor
from .placement_types import Partial, Placement, Replicate, Shard

__all__ = [
    "DTensor",
    "DTensorSpec",
    "Partial",
    "Placement",
    "Replicate",
    "Shard",
    "debug",
    "distribute_tensor",
]

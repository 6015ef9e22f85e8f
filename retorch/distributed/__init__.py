"""Chapter 7: distributed training rebuilt on torch.distributed's gloo process groups (CPU).

- ``launch``       torchrun-style start of N local processes (torch/distributed/run.py)
- ``collectives``  ring all-reduce, tree broadcast, all-gather, reduce-scatter from
                   point-to-point messages (torch/distributed/distributed_c10d.py)
- ``fsdp``         sharded data parallel, ZeRO-3 style (torch/distributed/fsdp/)
- ``device_mesh``  ranks in n dimensions, a group per dimension (torch/distributed/device_mesh.py)
- ``tensor``       DTensor: placements, redistribution, sharding propagation, tensor
                   parallelism (torch/distributed/tensor/)
- ``algorithms``   DDP's communication hooks (torch/distributed/algorithms/ddp_comm_hooks/)

``DistributedDataParallel`` lives where torch keeps it, in ``retorch.nn.parallel``.
The transport is always torch's: gloo's TCP pairs under ``isend``/``irecv``.
"""

from . import algorithms, collectives, device_mesh, fsdp, launch, tensor

__all__ = ["algorithms", "collectives", "device_mesh", "fsdp", "launch", "tensor"]

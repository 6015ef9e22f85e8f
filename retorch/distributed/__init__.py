"""Chapter 7: distributed training rebuilt on torch.distributed's gloo process groups (CPU).

- ``launch``       torchrun-style start of N local processes (torch/distributed/run.py)
- ``collectives``  ring all-reduce, tree broadcast, all-gather, reduce-scatter from
                   point-to-point messages (torch/distributed/distributed_c10d.py)
- ``fsdp``         sharded data parallel, ZeRO-3 style (torch/distributed/fsdp/)

``DistributedDataParallel`` lives where torch keeps it, in ``retorch.nn.parallel``.
The transport is always torch's: gloo's TCP pairs under ``isend``/``irecv``.
"""

from . import collectives, fsdp, launch

__all__ = ["collectives", "fsdp", "launch"]

"""torch/distributed/algorithms/: DDP's communication hooks (``ddp_comm_hooks``)."""

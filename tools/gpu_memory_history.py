"""torch's ``_record_memory_history`` beside retorch's on one training step: step 4 of
``make gpu-report`` (issue 29, "Memory in practice").

Runs :func:`retorch.cuda_memory.compare_training_step`: the same two-layer MLP step, after one
unrecorded warm-up step per library (torch's creates its cuBLAS handles and their workspaces,
which stay allocated; retorch's compiles its kernels), recorded by
``torch.cuda.memory._record_memory_history`` and by retorch's, and writes, for each library, the
count of each trace action (alloc, free_requested, free_completed, segment_alloc, segment_free,
oom, snapshot), the peak of requested bytes over the trace, the rise of
``max_memory_allocated`` (bytes of blocks, rounded to 512: not the same unit), the number of
allocations without frames (backward's), and whether ``EXPECTED`` holds (stored under
``expected``): each library frees every block its warm step takes and takes no new segment;
counts and peaks are not expected to be equal across libraries (different ops).

Under the simulator (``--quick``, the dry run) only retorch's half runs, on chapter 8c's tiny
model (torch has no GPU there): its figures say nothing about a GPU and are never stored.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--to", required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    import retorch  # noqa: F401  (settles the simulator switch before numba.cuda is imported)
    from retorch import cuda_memory
    from retorch.cuda import simulator_enabled

    if args.quick:
        out = cuda_memory.compare_training_step(batch=2, shapes=cuda_memory.TINY_SHAPES)
    else:
        out = cuda_memory.compare_training_step()
    out["simulator"] = simulator_enabled()
    Path(args.to).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the set-up cell of every chapter and lab checks, in plain words, before any lesson runs.

Colab and other hosted runtimes come with their own torch, numpy and numba; the course installs
only what is missing and never pins torch. That leaves two ways for a later cell to fail with a
traceback far from the cause, so the set-up cell checks both up front (``check()``):

* a Numba-CUDA kernel must compile and run here (on the GPU, or under the simulator). A numpy
  newer than the installed numba-cuda supports breaks the first compile (numpy 2.5 removed
  ``np.row_stack``, which numba-cuda 0.30 calls);
* Graphviz's ``dot`` program must exist for the graph drawings (torchviz, ``make_dot``). On a
  runtime where we are root and apt exists (Colab), it is installed; elsewhere we say how.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
from numba import cuda  # retorch/__init__ has already chosen the simulator if there is no GPU

from . import cuda as rcuda

#: The numpy the course pins (requirements.txt); numba-cuda supports it.
KNOWN_GOOD_NUMPY = "2.4.6"


@rcuda.kernel("void(float32[::1])")
def _smoke_kernel(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


def kernel_problem() -> str | None:
    """Compile and launch one tiny kernel; ``None`` if it worked, else what is wrong and the fix."""
    try:
        x = np.arange(8, dtype=np.float32)
        d = cuda.to_device(x)
        _smoke_kernel[1, 32](d)
        got = d.copy_to_host()
    except Exception as e:  # noqa: BLE001 - any failure here is reported in words, not raised
        import numba_cuda

        if isinstance(e, AttributeError) and "numpy" in str(e):
            return (
                f"numba-cuda {numba_cuda.__version__} cannot compile kernels with numpy "
                f"{np.__version__} ({e}). Run `pip install numpy=={KNOWN_GOOD_NUMPY}`, then "
                "restart the runtime (Runtime > Restart session) and run this cell again."
            )
        from .install import cuda_extra, driver_cuda_major, torch_cuda

        # the CUDA extra of this runtime's torch: a wrong one makes pip replace torch (issue 32)
        extra = cuda_extra(torch_cuda(), driver_cuda_major())
        return (
            f"a Numba-CUDA kernel failed to compile or run: {type(e).__name__}: {e}. Run "
            f"`pip install --no-deps -U 'numba-cuda{extra}'` (the CUDA of this runtime's torch), "
            "restart the runtime and run this cell again."
        )
    if not np.array_equal(got, np.arange(1, 9, dtype=np.float32)):
        return f"a Numba-CUDA kernel ran but computed {got.tolist()} instead of 1..8"
    return None


def ensure_dot(install: bool = True) -> str:
    """Make sure Graphviz's ``dot`` is on the PATH; say what was done or what to run."""
    if shutil.which("dot"):
        return "Graphviz dot: found"
    if install and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "graphviz"], check=False)
        if shutil.which("dot"):
            return "Graphviz dot: installed with apt-get"
    return (
        "Graphviz dot: MISSING, so graph drawings will fail. Install it: "
        "`apt-get install graphviz` (Debian, Ubuntu, Colab), `brew install graphviz` (macOS) "
        "or `conda install -c conda-forge graphviz`, then restart the kernel."
    )


def check() -> None:
    """Print where kernels run, whether ``dot`` is there and whether a kernel works.

    Returns nothing, so the set-up cell's last line displays nothing more.
    """
    print("numba.cuda target:", rcuda.target())
    print(ensure_dot())
    problem = kernel_problem()
    print("Numba-CUDA kernel check:", "passed" if problem is None else f"FAILED: {problem}")

"""What the kernel tests check in a kernel's real PTX, compiled in a fresh process.

The tests run Numba-CUDA on the simulator (``NUMBA_ENABLE_CUDASIM=1`` from the first import),
so the real compiler must run in another process: :func:`float_kernel_rows` starts one with the
simulator off, compiles each signature of the named kernels with ``retorch.cuda.compile_ptx``,
assembles it for sm_75, sm_80 and sm_90 (``tools/check_ptx.resources``), and returns one row per
signature and target: ``[kernel, dtype, "(7,", "5)", local bytes, float64 instructions]``, where
local bytes are the stack frame plus spilled registers (0 for a kernel without local memory),
and float64 instructions count the distinct ``.f64`` opcodes in its PTX (0 for a float32 kernel
that stays float32).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tools.course import ROOT

_CODE = """
import sys
import tools.check_ptx as check
import retorch.cuda as rcuda
import importlib

module = importlib.import_module(sys.argv[1])
for name in sys.argv[2:]:
    kernel = getattr(module, name)
    (spec,) = [s for s in rcuda.KERNELS if s.pyfunc is kernel.py_func]
    for sig in spec.signatures:
        one = rcuda.KernelSpec(spec.pyfunc, (sig,))
        ptx = rcuda.compile_ptx(one, (8, 0))
        words = {line.split()[0] for line in ptx.splitlines() if line.strip()}
        f64 = sorted(w for w in words if w.endswith(".f64"))
        for cc in [(7, 5), (8, 0), (9, 0)]:
            (used,) = check.resources(one, cc)
            print("ROW", kernel.py_func.__name__, sig[5:12], cc,
                  used["stack_bytes"] + used["spilled_bytes"], len(f64))
"""


def float_kernel_rows(module: str, kernels: list[str]) -> list[list[str]]:
    """The rows described above for ``kernels`` (names) of ``module`` (a dotted name)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CODE), module, *kernels],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = result.stdout + result.stderr
    if result.returncode != 0:
        raise AssertionError(f"compiling {module}'s kernels to PTX failed:\n{out}")
    return [line.split()[1:] for line in result.stdout.splitlines() if line.startswith("ROW ")]

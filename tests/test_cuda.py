"""The kernel registry and the PTX check: the check must catch code only the simulator accepts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tools.course import ROOT

BAD = """
import numpy as np
from numba import cuda
import retorch.cuda as rc

@rc.kernel("void(float32[:])")
def bad(out):
    i = cuda.grid(1)
    seen = {"i": i}          # a dict: fine in the simulator (plain Python), not on a GPU
    out[i] = seen["i"]

out = np.zeros(4, np.float32)
if rc.simulator_enabled():
    bad[1, 4](out)
    print("simulator ran it:", out.tolist())
else:
    try:
        rc.compile_ptx(rc.KERNELS[-1], (8, 0))
        print("compiled")
    except Exception as e:
        print("PTX compilation failed:", type(e).__name__)
"""


def _run(sim: str, script: str = BAD) -> str:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM=sim)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result.stdout + result.stderr


@pytest.mark.slow
def test_simulator_accepts_what_ptx_compilation_rejects():
    assert "simulator ran it: [0.0, 1.0, 2.0, 3.0]" in _run("1")
    assert "PTX compilation failed: TypingError" in _run("0")


@pytest.mark.slow
def test_check_ptx_compiles_every_registered_kernel():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    result = subprocess.run(
        [sys.executable, "tools/check_ptx.py"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "retorch.overview.kernels.add_kernel: sm_75" in result.stdout
    assert ", 0 failures" in result.stdout


SPILL = """
import retorch.cuda as rc
from retorch.tensor import cuda_kernels as K
from tools.check_ptx import resources

(spec,) = [s for s in rc.KERNELS if s.pyfunc is K.mm_regtile_kernel.py_func]
spec = rc.KernelSpec(spec.pyfunc, spec.signatures[:1])  # float32: 64 sums, 16 operands live
# 80 registers a thread (three blocks of 256 threads on an SM would need <= 85): it must spill
for cap in (None, 80):
    (used,) = resources(spec, (9, 0), max_registers=cap)
    print(used["registers"], used["stack_bytes"], used["spilled_bytes"])
"""


@pytest.mark.slow
def test_resources_report_registers_and_spills():
    out = _run("0", SPILL)
    roomy, tight = (tuple(map(int, line.split())) for line in out.split("\n")[:2])
    assert roomy[0] > 128 and roomy[1:] == (0, 0), out  # chapter 4: one block per SM
    assert tight[0] <= 80 and tight[1] > 0 and tight[2] > 0, out


LOCAL = """
import numba
from numba import cuda
import retorch.cuda as rc
import tools.check_ptx as check

@rc.kernel("void(float32[:], int64)")
def dynamic_index(out, k):  # an index known only at run time: the array lives in local memory
    x = cuda.local.array(64, dtype=numba.float32)
    for u in range(64):
        x[u] = u
    out[0] = x[k % 64]

check.load_kernels = lambda: None
rc.KERNELS[:] = rc.KERNELS[-1:]
print("check_ptx returned", check.main())
"""


@pytest.mark.slow
def test_check_ptx_fails_on_a_kernel_using_local_memory():
    out = _run("0", LOCAL)
    assert "dynamic_index: sm_75 " in out and "LOCAL MEMORY" in out, out
    assert "1 kernel(s) use local memory" in out and "check_ptx returned 1" in out, out

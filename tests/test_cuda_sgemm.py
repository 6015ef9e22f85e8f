"""The SGEMM ladder (retorch/tensor/cuda_sgemm.py): each rung's values under the CUDA
simulator against float64, the vectorized rung's preconditions, and its PTX (16-byte global
accesses, no local memory) for the targets the course compiles for."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from retorch.cuda import cuda  # numba.cuda, after retorch chose the simulator
from retorch.tensor import cuda_sgemm as sg

ROOT = Path(__file__).resolve().parent.parent


def _operands(m, n, k, seed=0):
    g = np.random.default_rng(seed)
    return g.standard_normal((m, k)).astype(np.float32), g.standard_normal((k, n)).astype(
        np.float32
    )


def _check(rung, m, n, k, seed=0):
    a, b = _operands(m, n, k, seed)
    c = sg.sgemm(cuda.to_device(a), cuda.to_device(b), rung).copy_to_host()
    ref = torch.mm(torch.from_numpy(a).double(), torch.from_numpy(b).double()).numpy()
    assert c.dtype == np.float32 and c.shape == (m, n)
    # float32 products summed over k: within k * 2**-23 of the float64 result, relatively
    assert np.allclose(c, ref, rtol=0, atol=max(1, k) * 2.0**-20 * (np.abs(ref).max() + 1))


@pytest.mark.slow  # (make unit runs it; check-fast keeps the vectorized rung's own test)
@pytest.mark.parametrize("rung", sg.RUNGS)
def test_every_rung_on_sizes_inside_one_tile(rung):
    _check(rung, 19, 12, 10)  # k = 10: a full 8-deep step and a partial one


@pytest.mark.slow  # seconds long: make unit runs it, make check-fast does not
def test_the_vectorized_rung_itself_with_a_k_tail_and_both_column_quads():
    """k = 12: a second 8-deep step with one quad inside and one past the end; n = 104: the
    columns 64.. come from each thread's second quad (QUAD_GAP)."""
    a, b = _operands(19, 104, 12, seed=2)
    da, db = cuda.to_device(a), cuda.to_device(b)
    assert sg.resolved("vectorized", da, db, cuda.device_array((19, 104), np.float32)) == (
        "vectorized"
    )
    _check("vectorized", 19, 104, 12, seed=2)


@pytest.mark.slow
@pytest.mark.parametrize("rung", sg.RUNGS)
def test_every_rung_across_tile_edges(rung):
    _check(rung, 70, 68, 12, seed=1)  # past BM1 = BN1 = 64 and EDGE / TILE = 16


def test_the_vectorized_rung_runs_only_where_torch_would_vectorize():
    a, b = (cuda.to_device(x) for x in _operands(8, 12, 16))
    c = cuda.device_array((8, 12), dtype=np.float32)
    assert sg.resolved("vectorized", a, b, c) == "vectorized"
    a5, b5 = (cuda.to_device(x) for x in _operands(8, 12, 5))  # k not a multiple of 4
    assert sg.resolved("vectorized", a5, b5, c) == "blocktile_2d"
    a13, b13 = (cuda.to_device(x) for x in _operands(8, 13, 16))  # n not a multiple of 4
    assert (
        sg.resolved("vectorized", a13, b13, cuda.device_array((8, 13), np.float32))
        == "blocktile_2d"
    )
    flat = cuda.to_device(np.zeros(8 * 16 + 1, np.float32))
    shifted = flat[1:].reshape(8, 16)  # 4 bytes past a 16-byte boundary
    assert sg.resolved("vectorized", shifted, b, c) == "blocktile_2d"
    assert sg.resolved("smem", a5, b5, c) == "smem"


@pytest.mark.simulator  # on a GPU the fault would end the process's CUDA context
def test_a_misaligned_quad_faults_as_on_a_gpu():
    a, b = _operands(4, 4, 4)
    flat = cuda.to_device(np.zeros(17, np.float32))
    with pytest.raises(Exception, match="misaligned address"):
        sg.sgemm_vectorized_kernel[(1, 1), sg.THREADS_2D](
            flat[1:], cuda.to_device(b).reshape(-1), cuda.device_array(16, np.float32), 4, 4, 4
        )


@pytest.mark.slow  # seconds each: make unit runs it, check-fast stays under a minute
def test_a_misaligned_operand_still_gets_torchs_product():
    a, b = _operands(9, 8, 8, seed=4)
    flat = cuda.to_device(np.concatenate([[0], a.ravel()]).astype(np.float32))
    shifted = flat[1:].reshape(9, 8)  # 4 bytes past a 16-byte boundary: the scalar rung
    c = sg.sgemm(shifted, cuda.to_device(b), "vectorized").copy_to_host()
    ref = torch.mm(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    assert np.allclose(c, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # seconds each: make unit runs it, check-fast stays under a minute
def test_vectorized_and_its_fallback_agree_with_each_other():
    a, b = _operands(9, 8, 8, seed=3)
    da, db = cuda.to_device(a), cuda.to_device(b)
    v = sg.sgemm(da, db, "vectorized").copy_to_host()
    t = sg.sgemm(da, db, "blocktile_2d").copy_to_host()
    assert np.array_equal(v, t)  # the same products, summed in the same order


def test_misuse_raises_as_torch_mm_does():
    a, b = (
        cuda.to_device(np.zeros((2, 3), np.float32)),
        cuda.to_device(np.zeros((4, 5), np.float32)),
    )
    with pytest.raises(RuntimeError) as ours:
        sg.sgemm(a, b, "smem")
    with pytest.raises(RuntimeError) as theirs:
        torch.mm(torch.zeros(2, 3), torch.zeros(4, 5))
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(ValueError, match="unknown sgemm rung 'fast'"):
        sg.sgemm(a, a, "fast")


def test_empty_products():
    a, b = (
        cuda.to_device(np.zeros((0, 3), np.float32)),
        cuda.to_device(np.zeros((3, 5), np.float32)),
    )
    assert sg.sgemm(a, b, "vectorized").copy_to_host().shape == (0, 5)


PTX = """
import tools.check_ptx as check
import retorch.cuda as rcuda
from retorch.tensor import cuda_sgemm as sg

for kernel in (sg.sgemm_uncoalesced_kernel, sg.sgemm_blocktile1d_kernel,
               sg.sgemm_vectorized_kernel):
    (spec,) = [s for s in rcuda.KERNELS if s.pyfunc is kernel.py_func]
    one = rcuda.KernelSpec(spec.pyfunc, spec.signatures)
    ptx = rcuda.compile_ptx(one, (8, 0))
    words = {line.split()[0] for line in ptx.splitlines() if line.strip()}
    vector = sorted(w for w in words if ".v4." in w or w.startswith("ld.local"))
    for cc in [(7, 5), (8, 0), (9, 0)]:
        (used,) = check.resources(one, cc)
        print(kernel.py_func.__name__, cc, vector, used["stack_bytes"] + used["spilled_bytes"])
"""


@pytest.mark.slow
def test_the_new_rungs_compile_without_local_memory_and_vectorize():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(PTX)], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    lines = out.splitlines()
    assert len(lines) == 9, out
    assert all(line.endswith(" 0") for line in lines), "local memory:\n" + out
    vectorized = [line for line in lines if line.startswith("sgemm_vectorized_kernel")]
    assert all("['ld.global.v4.f32', 'st.global.v4.f32']" in line for line in vectorized), out
    others = [line for line in lines if not line.startswith("sgemm_vectorized_kernel")]
    assert all(" [] " in line for line in others), out

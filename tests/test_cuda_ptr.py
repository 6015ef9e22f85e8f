"""retorch.cuda_ptr: kernels that take addresses (``tensor.data_ptr()``) and move 16 bytes at a
time. Values run where kernels run (the simulator here, the GPU with the simulator off); the
PTX test compiles the same kernel source with the real compiler, in a subprocess with the
simulator off, and reads the instructions and ptxas's local-memory report."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import retorch.cuda as rcuda
import retorch.tensor as rt
from retorch import cuda_ptr
from retorch.cuda import cuda  # numba.cuda, after retorch chose the simulator
from retorch.cuda_ptr import array_at, load4, store4
from tools.course import ROOT


@rcuda.kernel(*(f"void(int64, int64, int64, {t})" for t in ("float32", "float64")))
def plus_one_quads(out_ptr, a_ptr, n, zero):
    """out[i] = a[i] + 1 for the whole quads of n elements, one quad a thread."""
    out = array_at(out_ptr, n, zero)
    a = array_at(a_ptr, n, zero)
    i = cuda.grid(1) * 4
    if i + 4 <= n:
        x0, x1, x2, x3 = load4(a, i)
        store4(out, i, x0 + 1, x1 + 1, x2 + 1, x3 + 1)


@rcuda.kernel(*(f"void(int64, int64, {t})" for t in ("float32", "float64")))
def scale_by_address(ptr, n, factor):
    """Scalar accesses through array_at: a[i] *= factor, a thread per element."""
    a = array_at(ptr, n, factor)
    i = cuda.grid(1)
    if i < n:
        a[i] *= factor


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_array_at_and_quads_read_and_write_a_tensors_memory(dtype):
    n = 11  # two whole quads, and three elements no thread touches
    src = rt.from_numpy(np.arange(n, dtype=dtype)).to("cuda")
    out = rt.from_numpy(np.full(n, -7, dtype=dtype)).to("cuda")
    assert src.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0
    plus_one_quads[1, 4](out.data_ptr(), src.data_ptr(), n, dtype(0))
    expected = np.r_[np.arange(8, dtype=dtype) + 1, np.full(3, -7, dtype=dtype)]
    np.testing.assert_array_equal(out.cpu().numpy(), expected)
    np.testing.assert_array_equal(src.cpu().numpy(), np.arange(n, dtype=dtype))  # untouched


def test_array_at_sees_a_view_from_its_own_first_element():
    base = rt.from_numpy(np.arange(10, dtype=np.float32)).to("cuda")
    view = base[3:8]  # data_ptr() includes the storage offset
    scale_by_address[1, 8](view.data_ptr(), view.numel(), np.float32(10))
    expected = np.arange(10, dtype=np.float32)
    expected[3:8] *= 10
    np.testing.assert_array_equal(base.cpu().numpy(), expected)


@pytest.mark.simulator
def test_simulated_quads_refuse_a_misaligned_address_as_a_gpu_does():
    assert cuda_ptr.SIMULATED
    base = rt.from_numpy(np.arange(12, dtype=np.float32)).to("cuda")
    with pytest.raises(RuntimeError, match="misaligned address"):
        plus_one_quads[1, 2](base[1:].data_ptr(), base.data_ptr(), 8, np.float32(0))
    a = array_at(base.data_ptr(), 12, np.float32(0))
    with pytest.raises(RuntimeError, match="misaligned address"):
        load4(a, 1)
    with pytest.raises(IndexError, match="elements 12..15 of 12"):
        store4(a, 12, 0, 0, 0, 0)
    assert load4(a, 8) == (8, 9, 10, 11)


@pytest.mark.simulator
def test_simulated_array_at_needs_a_numpy_scalar_for_its_type():
    with pytest.raises(TypeError, match="NumPy scalar"):
        array_at(0, 4, 0.0)  # a Python float: float64 here, float32 in a float32 kernel
    assert array_at(0, 0, np.float64(0)).shape == (0,)  # an empty tensor's null pointer


PTX = """
import tools.check_ptx as check
import retorch.cuda as rcuda
from tests.test_cuda_ptr import plus_one_quads, scale_by_address

for kernel in (plus_one_quads, scale_by_address):
    (spec,) = [s for s in rcuda.KERNELS if s.pyfunc is kernel.py_func]
    for sig in spec.signatures:
        one = rcuda.KernelSpec(spec.pyfunc, (sig,))
        ptx = rcuda.compile_ptx(one, (8, 0))
        words = {line.split()[0] for line in ptx.splitlines() if line.strip()}
        lines = sorted(w for w in words if w.startswith(("ld.global", "st.global", "ld.local")))
        (used,) = check.resources(one, (9, 0))
        print(kernel.py_func.__name__, sig, lines, used["stack_bytes"] + used["spilled_bytes"])
"""


@pytest.mark.slow
def test_quads_compile_to_16_byte_accesses_without_local_memory():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(PTX)], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    for sig, accesses in [
        ("void(int64, int64, int64, float32)", "['ld.global.v4.f32', 'st.global.v4.f32']"),
        ("void(int64, int64, int64, float64)", "['ld.global.v2.f64', 'st.global.v2.f64']"),
        # array_at's scalar accesses are plain global ones (not generic addressing)
        ("void(int64, int64, float32)", "['ld.global.f32', 'st.global.f32']"),
    ]:
        assert f"{sig} {accesses} " in out, out
    assert len(out.splitlines()) == 4, out
    assert all(line.endswith(" 0") for line in out.splitlines()), "local memory:\n" + out

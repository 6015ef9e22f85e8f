"""Multi-tensor Adam on pointer tables (retorch/optim/_multi_tensor_apply.py) against
torch's own fused step, ``torch._fused_adam_`` / ``torch._fused_adamw_`` on the CPU, under the
CUDA simulator; and its PTX (16-byte loads and stores, no local memory)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch  # noqa: F401  (chooses the simulator before numba.cuda is used)
from retorch.optim import _multi_tensor_apply as mta

ROOT = Path(__file__).resolve().parent.parent


def _lists(sizes, seed, offset, steps):
    """Five lists of float32 tensors (``offset`` elements into their storage: misaligned
    when 1) and one step count per tensor."""
    g = torch.Generator().manual_seed(seed)

    def row(positive=False):
        out = [torch.randn(n + offset, generator=g)[offset:] for n in sizes]
        return [t.abs() for t in out] if positive else out

    return [row(), row(), row(), row(True), row(True),
            [torch.tensor(float(s)) for s in steps]]  # fmt: skip


def _step_both(sizes, seed=0, offset=0, steps=None, amsgrad=False, adamw=False, chunk=64,
               threads=8, **kw):  # fmt: skip
    steps = steps or [1 + i for i in range(len(sizes))]
    ours = _lists(sizes, seed, offset, steps)
    theirs = [[t.clone() for t in row] for row in ours]
    hyper = dict(lr=kw.get("lr", 1e-2), beta1=0.9, beta2=0.999,
                 weight_decay=kw.get("weight_decay", 0.1), eps=1e-8, amsgrad=amsgrad,
                 maximize=kw.get("maximize", False))  # fmt: skip
    mta.fused_adam_(*ours, **hyper, adamw=adamw, chunk_size=chunk, threads=threads)
    if not amsgrad:
        theirs[4] = []
    (torch._fused_adamw_ if adamw else torch._fused_adam_)(*theirs, **hyper)
    for name, a, b in zip(("param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"),
                          ours[: 4 + amsgrad], theirs[: 4 + amsgrad], strict=False):  # fmt: skip
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y, msg=lambda m, name=name: f"{name}: {m}")
    return ours


@pytest.mark.simulator  # CPU tensors' addresses: the simulator's device memory
def test_one_step_equals_torchs_fused_adam_on_both_paths():
    _step_both([4, 128, 64, 8])  # aligned, multiples of 4: the 16-byte path
    _step_both([5, 130, 64, 1], offset=1)  # misaligned, odd sizes: ILP elements a block apart
    _step_both([4, 128, 64, 8], amsgrad=True, adamw=True, steps=[3, 1, 700, 2])


@pytest.mark.simulator  # CPU tensors' addresses: the simulator's device memory
def test_which_path_a_table_takes():
    aligned = _lists([4, 128], 0, 0, [1, 1])
    assert mta.table_for(aligned).vectorize
    assert not mta.table_for(_lists([4, 128], 0, 1, [1, 1])).vectorize  # 4 bytes off
    assert not mta.table_for(_lists([4, 130], 0, 0, [1, 1])).vectorize  # a size of 130
    assert not mta.table_for(aligned, chunk_size=66).vectorize


@pytest.mark.simulator  # CPU tensors' addresses: the simulator's device memory
def test_a_table_is_built_once_and_again_when_a_tensor_moves():
    lists = _lists([40, 3], 0, 0, [1, 1])
    first = mta.table_for(lists)
    assert mta.table_for(lists) is first
    lists[1][0] = torch.randn(40)  # a new gradient tensor: a new address
    again = mta.table_for(lists)
    assert again is not first
    assert again.addresses.copy_to_host()[mta.GRAD, 0] == lists[1][0].data_ptr()


@pytest.mark.simulator  # CPU tensors' addresses: the simulator's device memory
def test_misuse():
    lists = _lists([4], 0, 0, [1])
    with pytest.raises(NotImplementedError, match="float32 tensors only"):
        mta.fused_adam_(
            *[[t.double() for t in row] for row in lists],
            lr=1e-3,
            beta1=0.9,
            beta2=0.999,
            weight_decay=0,
            eps=1e-8,
            amsgrad=False,
            maximize=False,
        )
    with pytest.raises(RuntimeError, match="grads must hold one tensor"):
        mta.fused_adam_(
            lists[0],
            [],
            *lists[2:],
            lr=1e-3,
            beta1=0.9,
            beta2=0.999,
            weight_decay=0,
            eps=1e-8,
            amsgrad=False,
            maximize=False,
        )


@pytest.mark.simulator
@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 150), min_size=1, max_size=4),
    st.integers(0, 1),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from([16, 64]),
    st.sampled_from([4, 8]),
    st.lists(st.integers(1, 1000), min_size=4, max_size=4),
    st.integers(0, 99),
)
@pytest.mark.slow  # seconds each: make unit runs it, check-fast stays under a minute
def test_random_groups_equal_torchs_fused_step(sizes, offset, amsgrad, adamw, maximize, chunk,
                                               threads, steps, seed):  # fmt: skip
    _step_both(sizes, seed=seed, offset=offset, steps=steps[: len(sizes)], amsgrad=amsgrad,
               adamw=adamw, maximize=maximize, chunk=chunk, threads=threads)  # fmt: skip


PTX = """
import tools.check_ptx as check
import retorch.cuda as rcuda
from retorch.optim import _multi_tensor_apply as mta

(spec,) = [s for s in rcuda.KERNELS if s.pyfunc is mta.multi_tensor_adam_kernel.py_func]
ptx = rcuda.compile_ptx(spec, (8, 0))
words = {line.split()[0] for line in ptx.splitlines() if line.strip()}
print(sorted(w for w in words if ".v4." in w or w.startswith(("ld.local", "st.local"))))
for cc in [(7, 5), (8, 0), (9, 0)]:
    (used,) = check.resources(spec, cc)
    print(cc, used["registers"], used["stack_bytes"] + used["spilled_bytes"])
"""


@pytest.mark.slow
def test_the_kernel_moves_16_bytes_per_list_and_uses_no_local_memory():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(PTX)], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    lines = out.splitlines()
    assert lines[0] == "['ld.global.v4.f32', 'st.global.v4.f32']", out
    assert len(lines) == 4 and all(line.endswith(" 0") for line in lines[1:]), out

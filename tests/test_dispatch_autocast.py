"""Autocast as a dispatch key beside torch.autocast (CPU): which ops cast, in which direction,
and the output dtype op by op.

Both lower float32 to bfloat16 on the CPU (retorch.tensor has float16 and bfloat16 of its
own); float16 inputs are cast to bfloat16 too, float64 ones never (``cached_cast``'s
``is_eligible``). The policy comparison asks, for each op, does autocast lower its inputs'
precision, raise it, or leave it; the dtype comparison names the output's dtype. The old
"one precision up" mode (float64 -> float32), which chapters written before the half types
used, stays reachable with ``autocast("cpu", dtype=float32)`` and is tested too.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import retorch.tensor as rt
from retorch.dispatch import Tensor
from retorch.dispatch import native_functions as nf
from retorch.dispatch.autocast_mode import autocast, is_autocast_enabled
from retorch.dispatch.dispatch_key import DispatchKey
from retorch.dispatch.local_dispatch_key_set import tls_local_dispatch_key_set
from retorch.testing.dispatch_cases import (
    AUTOCAST_OPS,
    autocast_dtypes,
    autocast_log,
    autocast_precisions,
)

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow

aten = nf.aten
TARGET = [0, 2, 1, 0]
OPS = {
    "mm": lambda x, w: x.mm(w.t()),
    "matmul": lambda x, w: x @ w.t(),
    "linear": lambda x, w: F.linear(x, w),
    "add": lambda x, w: x + x,
    "relu": lambda x, w: x.relu(),
    "softmax": lambda x, w: x.softmax(1),
    "log_softmax": lambda x, w: x.log_softmax(1),
    "exp": lambda x, w: x.exp(),
    "sum": lambda x, w: x.sum(),
    "mean": lambda x, w: x.mean(),
    "nll_loss": None,  # needs a target: below
}


def _run(name, x, w, target):
    if name == "nll_loss":
        return F.nll_loss(x, target) if isinstance(x, torch.Tensor) else aten.nll_loss(x, target)
    return OPS[name](x, w)


def _torch_policy(name):
    rng = np.random.default_rng(0)
    x, w = torch.tensor(rng.standard_normal((4, 3))), torch.tensor(rng.standard_normal((5, 3)))
    target = torch.tensor(TARGET)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        down = _run(name, x.float(), w.float(), target).dtype == torch.bfloat16
        up = _run(name, x.bfloat16(), w.bfloat16(), target).dtype == torch.float32
    return down, up


def _retorch_policy(name, legacy=False):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    full, lower = (rt.float64, rt.float32) if legacy else (rt.float32, rt.bfloat16)
    target = Tensor(rt.tensor(np.array(TARGET)))

    def make(v, d):
        return Tensor(rt.tensor(v.astype(np.float32)).to(dtype=d))

    with autocast("cpu", dtype=rt.float32 if legacy else None):
        hi = _run(name, make(x, full), make(w, full), target)
        lo = _run(name, make(x, lower), make(w, lower), target)
    return hi.data.dtype is lower, lo.data.dtype is full


@pytest.mark.parametrize("name", list(OPS))
def test_cast_policy_as_torch(name):
    assert _retorch_policy(name) == _torch_policy(name)


@pytest.mark.parametrize("name", list(OPS))
def test_legacy_one_precision_up_mode_keeps_torchs_policy(name):
    assert _retorch_policy(name, legacy=True) == _torch_policy(name)


def test_output_dtypes_op_by_op_equal_torch_autocast_cpu():
    """float32, bfloat16, float16 and float64 inputs: mm/matmul/linear give bfloat16 for
    all but float64, nll_loss float32 for all but float64, the rest keep their input's."""
    ours, theirs = autocast_dtypes("retorch"), autocast_dtypes("torch")
    assert ours == theirs
    assert ours["mm"] == ["bfloat16", "bfloat16", "bfloat16", "float64"]


def test_lowered_matmul_values_as_torch():
    """Under autocast both multiply bfloat16 copies of the float32 inputs and accumulate in
    float32: the results agree within one bfloat16 rounding (2**-7 of the largest)."""
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((16, 32)), rng.standard_normal((8, 32))
    with autocast("cpu"):
        ours = F.linear(Tensor(rt.tensor(x.astype(np.float32))),
                        Tensor(rt.tensor(w.astype(np.float32))))  # fmt: skip
    with torch.autocast("cpu"):
        theirs = F.linear(torch.tensor(x).float(), torch.tensor(w).float())
    assert ours.data.dtype is rt.bfloat16 and theirs.dtype == torch.bfloat16
    o, t = ours.data.to(dtype=rt.float32).numpy(), theirs.float().numpy()
    np.testing.assert_allclose(o, t, rtol=0, atol=2.0**-7 * np.abs(t).max())


@pytest.mark.parametrize("op", [name for name, *_ in AUTOCAST_OPS])
def test_output_precision_under_autocast_equals_torch(op):
    """Op by op, the output's precision for full, lower and mixed inputs: an op on the fp32
    list (lower in, full out) is told from an unlisted one (lower in, lower out)."""
    case = [c for c in AUTOCAST_OPS if c[0] == op]
    assert autocast_precisions("retorch", case) == autocast_precisions("torch", case)


def test_the_autocast_cases_cover_every_list_with_distinct_behaviour():
    lists = {name: policy for name, policy, *_ in AUTOCAST_OPS}
    assert set(lists.values()) == {"lower_precision_fp", "fp32", "none"}
    theirs = autocast_precisions("torch")
    behaviour = {
        policy: {theirs[n] for n in lists if lists[n] == policy} for policy in lists.values()
    }
    assert all(not (a & b) for a in behaviour.values() for b in behaviour.values() if a is not b)


def test_autocast_rows_as_torch():
    for name in ("mm", "matmul", "linear", "nll_loss", "add.Tensor", "_to_copy"):
        ours = aten_row(name)
        line = [
            ln for ln in torch._C._dispatch_dump_table(f"aten::{name}").splitlines()
            if ln.startswith("AutocastCPU:")
        ][0]  # fmt: skip
        assert ours == (line.split("[")[-1].rstrip("]"), "fallthrough" in line), name


def aten_row(name):
    from retorch.dispatch.dispatcher import get_dispatcher

    for line in get_dispatcher().find_schema_or_throw(f"aten::{name}").dump_table().splitlines():
        if line.startswith("AutocastCPU:"):
            return line.split("[")[-1].rstrip("]"), "fallthrough" in line
    return None


def test_autocast_key_is_excluded_outside_and_gradients_keep_param_dtype():
    assert not is_autocast_enabled("cpu")
    before = tls_local_dispatch_key_set()
    rng = np.random.default_rng(1)
    x = Tensor(rt.tensor(rng.standard_normal((4, 3)).astype(np.float32)))
    w = Tensor(rt.tensor(rng.standard_normal((5, 3)).astype(np.float32)), requires_grad=True)
    tx = torch.tensor(x.numpy())
    tw = torch.tensor(w.numpy()).requires_grad_()
    with autocast("cpu"):
        assert is_autocast_enabled("cpu")
        assert not tls_local_dispatch_key_set()[1].has(DispatchKey.AutocastCPU)
        y = F.linear(x, w)
        loss = (y * y).sum()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ty = F.linear(tx, tw)
        tloss = (ty * ty).sum()
    assert tls_local_dispatch_key_set() == before
    loss.backward()
    tloss.backward()
    assert y.data.dtype is rt.bfloat16 and ty.dtype == torch.bfloat16  # computed low
    assert w.grad.data.dtype is rt.float32 and tw.grad.dtype == torch.float32  # grads: param's
    assert y.grad_fn.name() == ty.grad_fn.name()  # the node's exact name, torch's
    next_ours = [type(n).__name__ for n, _ in y.grad_fn.next_functions if n is not None]
    next_theirs = [n.name() for n, _ in ty.grad_fn.next_functions if n is not None]
    assert next_ours == next_theirs  # the casts' ToCopyBackward0 nodes below it
    # the gradient as torch computes it, within bfloat16 roundings (2**-7 of the largest)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=0,
                               atol=2.0**-6 * np.abs(tw.grad.numpy()).max())  # fmt: skip


def test_autocast_misuse():
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'tpu'"):
        autocast("tpu")
    with pytest.warns(UserWarning, match="target dtype is not supported. Disabling autocast"):
        ac = autocast("cpu", dtype=rt.float64)
    with pytest.warns(UserWarning, match="target dtype is not supported. Disabling autocast"):
        tac = torch.autocast("cpu", dtype=torch.float64)
    with ac, tac:
        assert is_autocast_enabled("cpu") == torch.is_autocast_enabled("cpu") is False


def test_linear_under_autocast_runs_torchs_ops_in_torchs_dtypes():
    """Two casts to bfloat16, a transpose and mm in bfloat16, logged below autocast."""
    ours = autocast_log("retorch")
    assert ours == autocast_log("torch")
    assert ours[-1] == "aten.mm.default(bfloat16, bfloat16) -> bfloat16"


def test_autocast_kernels_registered_per_key_as_torch():
    """Every aten op retorch defines: has it an AutocastCPU kernel, an AutocastCUDA one, as
    torch's dispatcher (exp, sum, softmax: CUDA only; cross_entropy_loss: CPU only)."""
    from retorch.dispatch.dispatcher import get_dispatcher
    from retorch.testing.autocast_cases import registered_per_key

    names = [n for n, e in get_dispatcher().operators.items() if e.schema is not None]
    rows = registered_per_key(sorted(names))
    assert [r for r in rows if r[1] != r[2]] == []
    table = {r[0]: r[1] for r in rows}
    assert table["aten::exp"] == table["aten::sum"] == "AutocastCUDA"
    assert table["aten::cross_entropy_loss"] == "AutocastCPU"
    assert table["aten::mm"] == "AutocastCPU, AutocastCUDA"


def test_cuda_autocast_output_dtypes_as_torch_on_fake_cuda_tensors():
    """torch's CUDA autocast run on fake CUDA tensors against retorch's AutocastCUDA kernels:
    the output dtype for float32, float16, bfloat16 and float64 inputs, op by op."""
    from retorch.testing.autocast_cases import cuda_dtypes_retorch, cuda_dtypes_torch

    ours, theirs = cuda_dtypes_retorch(), cuda_dtypes_torch()
    assert ours == theirs
    assert theirs["softmax.int"] == ["float32", "float32", "float32", "float64"]
    assert theirs["mm"] == ["float16", "float16", "float16", "float64"]


def test_cuda_fp32_set_opt_dtype_keeps_an_explicit_dtype_as_torch():
    """``set_opt_dtype`` fills only an unset dtype: softmax(x, 1, dtype=float16) of a float32
    input stays float16 under CUDA autocast, in torch (fake CUDA tensors) and retorch."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    import retorch.tensor as rt
    from retorch.dispatch.dispatch_key import DispatchKey
    from retorch.dispatch.dispatch_key_set import DispatchKeySet
    from retorch.dispatch.dispatcher import get_dispatcher

    torch.set_autocast_enabled("cuda", True)
    try:
        with FakeTensorMode():
            x = torch.empty(4, 3, device="cuda")
            theirs = [torch.softmax(x, 1, dtype=torch.float16).dtype, torch.softmax(x, 1).dtype]
    finally:
        torch.set_autocast_enabled("cuda", False)
    kernel = get_dispatcher().operators["aten::softmax.int"].lookup(DispatchKey.AutocastCUDA)
    a = Tensor(rt.tensor(np.ones((4, 3), np.float32)))
    ks = DispatchKeySet(DispatchKey.AutocastCUDA)
    fn = kernel.kernel.fn
    ours = [fn(ks, a, 1, dtype=rt.float16), fn(ks, a, 1), fn(ks, a, 1, rt.float16)]
    assert [str(t).replace("torch.", "") for t in theirs] == [y.data.dtype.name for y in ours][:2]
    assert ours[2].data.dtype is rt.float16  # the dtype given by position stays too
    assert theirs == [torch.float16, torch.float32]

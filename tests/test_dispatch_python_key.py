"""The Python key: TorchDispatchMode stacks on retorch against torch 2.13's
(retorch/dispatch/python_dispatch.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode as TorchMode

import retorch.tensor as rt
from retorch.dispatch import Tensor, tls_local_dispatch_key_set
from retorch.dispatch.python_dispatch import TorchDispatchMode


def _log_mode(base):
    class Log(base):
        def __init__(self, tag, log, scale=None):
            self.tag, self.log, self.scale = tag, log, scale

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.log.append((self.tag, str(func)))
            out = func(*args, **(kwargs or {}))
            if self.scale is not None and str(func) == "aten.sum.default":
                out = func(out * self.scale)  # an op issued inside the handler
            return out

    return Log


STEPS = {
    "mul": lambda x, t: x * t,
    "add": lambda x, t: x + t,
    "add_alpha": lambda x, t: x.add(t, alpha=3),
    "neg": lambda x, t: -x,
    "exp": lambda x, t: x.exp(),
    "sum": lambda x, t: x.sum(),
}


def _run(lib, program, depth, requires_grad, scale):
    if lib == "torch":
        base, x = TorchMode, torch.arange(3.0, dtype=torch.float64, requires_grad=requires_grad)
        two = torch.full((3,), 2.0, dtype=torch.float64)
    else:
        base = TorchDispatchMode
        x = Tensor(rt.tensor(np.arange(3.0)), requires_grad=requires_grad)
        two = Tensor(rt.tensor(np.full(3, 2.0)))
    mode, log = _log_mode(base), []
    modes = [mode(f"m{i}", log, scale if i == 0 else None) for i in range(depth)]
    for m in modes:
        m.__enter__()
    try:
        y = x
        for step in program:
            if step == "sum" and y.dim() == 0:
                continue
            y = STEPS[step](y, two if y.dim() else 2.0)
    finally:
        for m in reversed(modes):
            m.__exit__(None, None, None)
    return log, float(y.sum().item())


@settings(max_examples=40, deadline=None)
@given(
    program=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=5),
    depth=st.integers(1, 3),
    requires_grad=st.booleans(),
    scale=st.sampled_from([None, 3.0]),
)
def test_mode_stack_sees_the_ops_torchs_does(program, depth, requires_grad, scale):
    ours = _run("retorch", program, depth, requires_grad, scale)
    theirs = _run("torch", program, depth, requires_grad, scale)
    # Known difference: torch's autograd saves exp's result through aten.detach, which a mode
    # sees (one per mode, right after exp); retorch's saves the tensor with no op.
    detached = [i for i, (_, f) in enumerate(theirs[0]) if f == "aten.detach.default"]
    assert all(requires_grad and "aten.exp.default" in str(theirs[0][:i]) for i in detached)
    assert ours[0] == [e for e in theirs[0] if e[1] != "aten.detach.default"]
    assert ours[1] == pytest.approx(theirs[1], rel=1e-12)


def test_tls_keys_under_a_mode_match_torch():
    mode = _log_mode(TorchDispatchMode)("m", [])
    tmode = _log_mode(TorchMode)("m", [])
    before = tls_local_dispatch_key_set()[0].raw_repr()
    assert before == torch._C._dispatch_tls_local_include_set().raw_repr()
    with mode, tmode:
        assert (
            tls_local_dispatch_key_set()[0].raw_repr()
            == torch._C._dispatch_tls_local_include_set().raw_repr()
        )
        assert tls_local_dispatch_key_set()[0].raw_repr() != before
    assert tls_local_dispatch_key_set()[0].raw_repr() == before


def test_a_mode_without_torch_dispatch_raises_as_torch():
    class Empty(TorchDispatchMode):
        pass

    with pytest.raises(NotImplementedError), Empty():
        Tensor(rt.tensor(np.arange(3.0))) * 2


def test_modes_exit_in_order():
    a, b = TorchDispatchMode(), TorchDispatchMode()
    a.__enter__()
    b.__enter__()
    with pytest.raises(RuntimeError, match="out of order"):
        a.__exit__(None, None, None)
    b.__exit__(None, None, None)
    a.__exit__(None, None, None)

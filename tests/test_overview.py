"""Chapter 0's helpers against torch itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from retorch import cuda as rcuda
from retorch import overview


def test_dispatch_keys_highest_priority_first():
    keys = overview.dispatch_keys(torch.ones(2))
    assert keys == ["AutocastCPU", "AutogradCPU", "ADInplaceOrView", "CPU"]
    assert keys[0] == torch._C._dispatch_keys(torch.ones(2)).highestPriorityTypeId().name


def test_dispatch_table_matches_torch_has_kernel():
    rows = dict(
        (k, kind)
        for k, kind, _ in overview.dispatch_table(
            "aten::add.Tensor", ["CPU", "Meta", "AutogradCPU", "Nope"]
        )
    )
    assert rows["CPU"] == "kernel" and torch._C._dispatch_has_kernel_for_dispatch_key(
        "aten::add.Tensor", "CPU"
    )
    assert rows["AutogradCPU"] == "autograd kernel"
    assert rows["Nope"] == "no kernel"
    for _, _, where in overview.dispatch_table("aten::add.Tensor", ["CPU", "AutogradCPU"]):
        assert not where.startswith("/"), where  # build-machine paths are cut


def test_op_log_matches_make_fx():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x, w):
        return (x @ w).relu().sum() + x.mean()

    args = (torch.randn(3, 4), torch.randn(4, 2))
    with overview.OpLog() as log:
        f(*args)
    expected = [str(n.target) for n in make_fx(f)(*args).graph.nodes if n.op == "call_function"]
    assert log.names() == expected


def test_profile_summary_counts_calls_without_timings():
    with overview.profile() as prof:
        torch.ones(3).add(1).add(2)
    rows = dict(overview.profile_summary(prof))
    assert rows["aten::add"] == 2


@given(n=st.integers(1, 300), alpha=st.floats(-4, 4, width=32))
def test_add_kernel_equals_torch_add(n, alpha):
    torch.manual_seed(n)
    a, b = torch.randn(n), torch.randn(n)
    assert torch.equal(
        overview.launch_add(a, b, alpha=alpha, threads=64), torch.add(a, b, alpha=alpha)
    )


def test_add_cpu_equals_torch_add():
    a, b = torch.randn(1000), torch.randn(1000)
    out = np.empty(1000, np.float32)
    overview.add_cpu(a.numpy(), b.numpy(), np.float32(0.5), out)
    assert torch.equal(torch.from_numpy(out), torch.add(a, b, alpha=0.5))


def test_launch_add_rejects_what_it_does_not_do():
    with pytest.raises(TypeError, match="same shape"):
        overview.launch_add(torch.ones(2), torch.ones(3))


def test_kernels_are_registered_for_the_ptx_check():
    names = [k.name for k in rcuda.KERNELS]
    assert "retorch.overview.kernels.add_kernel" in names
    assert rcuda.simulator_enabled()  # no GPU on CI: the simulator runs the kernels
    with pytest.raises(TypeError, match="signature"):
        rcuda.kernel()(lambda: None)


def test_layers_diagram_names_every_layer():
    source = overview.layers_diagram().source
    for layer, _, _ in overview.LAYERS:
        assert layer in source

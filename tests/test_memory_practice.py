"""Activation checkpointing and CPU offload of saved tensors beside torch's, in bytes: what a
forward keeps for backward (each library's profiler, on the CPU), what torch's and retorch's
``save_on_cpu`` pack hooks are handed, and what offload leaves on retorch's CUDA device (its
caching allocator's counters, under the simulator)."""

import numpy as np
import pytest
import torch

import retorch.autograd as ra
from retorch.utils import checkpoint_memory as cm

# depth, batch, width, segments: a batch of 1, odd sizes, one segment and one layer per segment
CASES = [(8, 32, 16, 4), (6, 5, 7, 3), (4, 1, 3, 1), (3, 4, 2, 3)]


@pytest.mark.slow  # 12 cases of about a second each (two profilers): make unit runs them
@pytest.mark.parametrize("mode", cm.MODES)
@pytest.mark.parametrize(("depth", "batch", "width", "segments"), CASES)
def test_bytes_kept_after_forward_equal_torchs(mode, depth, batch, width, segments):
    ours = cm.cpu_memory("retorch", mode, depth, batch, width, segments)
    theirs = cm.cpu_memory("torch", mode, depth, batch, width, segments)
    assert ours["kept"] == theirs["kept"], (ours, theirs)


@pytest.mark.slow
def test_checkpointing_lowers_the_peak_in_both_libraries():
    for lib in ("retorch", "torch"):
        plain, ckpt = (cm.cpu_memory(lib, mode)["peak"] for mode in ("plain", "checkpoint"))
        assert ckpt < plain, (lib, plain, ckpt)


def grads(lib, mode, depth=6, batch=5, width=7, segments=3):
    with ra.array_backend("retorch"):  # (torch's model does not use it)
        x, ws = cm.mlp_model(lib, depth, batch, width)
        cm.forward(lib, x, ws, mode, segments).sum().backward()
        return [w.grad.numpy() if lib == "torch" else w.grad.data.numpy() for w in ws]


@pytest.mark.parametrize("mode", ["checkpoint", "save_on_cpu"])
def test_gradients_equal_the_plain_step_and_torchs(mode):
    plain = grads("retorch", "plain")
    for ours, same, theirs in zip(grads("retorch", mode), plain, grads("torch", mode), strict=True):
        np.testing.assert_array_equal(ours, same)  # recomputed or copied: the same numbers
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("depth", "batch", "width"), [(8, 32, 16), (3, 1, 5), (2, 4, 4)])
def test_save_on_cpu_packs_the_tensors_torchs_packs(depth, batch, width):
    ours = cm.bytes_packed("retorch", depth, batch, width)
    theirs = cm.bytes_packed("torch", depth, batch, width)
    assert sorted(ours) == sorted(theirs)


def test_save_on_cpu_keeps_a_cpu_tensor_as_it_is():
    """torch's pack hook returns ``tensor.cpu()``, the tensor itself on the CPU: no copy."""
    with ra.array_backend("retorch"):
        t = ra.tensor(np.ones(3, dtype=np.float32))
        device, packed = ra.graph.save_on_cpu().pack_hook(t)
    x = torch.ones(3)
    assert torch.autograd.graph.save_on_cpu().pack_hook(x)[1] is x
    assert packed is t.data and device == "cpu"


@pytest.mark.simulator
@pytest.mark.slow
def test_save_on_cpu_leaves_only_the_output_on_the_device():
    depth, batch, width = 4, 8, 6
    plain = cm.cuda_memory("plain", depth, batch, width, segments=2)
    off = cm.cuda_memory("save_on_cpu", depth, batch, width, segments=2)
    assert plain["host"] == 0
    assert off["kept"] == batch * width * 4  # the output alone: every saved tensor is on the CPU
    assert off["host"] == sum(cm.bytes_packed("torch", depth, batch, width))
    assert off["peak"] <= plain["peak"]  # (backward brings each saved tensor back for a while)
    for ours, same in zip(off["grads"], plain["grads"], strict=True):
        np.testing.assert_array_equal(ours, same)


@pytest.mark.simulator
@pytest.mark.slow
def test_checkpoint_on_the_device_keeps_what_the_cpu_run_keeps():
    args = (4, 8, 6)
    on_device = cm.cuda_memory("checkpoint", *args, segments=2)
    assert on_device["kept"] == cm.cpu_memory("torch", "checkpoint", *args, segments=2)["kept"]
    assert on_device["host"] == 0


def test_misuse():
    x, ws = cm.mlp_model("torch", 4, 2, 2)
    with pytest.raises(ValueError, match="mode must be one of"):
        cm.forward("torch", x, ws, "offload")
    with pytest.raises(ValueError, match="do not split into 3 equal segments"):
        cm.forward("torch", x, ws, "checkpoint", segments=3)

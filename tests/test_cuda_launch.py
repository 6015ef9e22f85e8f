"""The one launch path (retorch/cuda_launch.py): configured launchers cached, one stream per
torch stream handle, device attributes read once, and a launch that neither synchronises the
host nor allocates through Numba. Runs under the simulator and on a GPU (make gpu-report)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retorch.tensor as rt
from retorch import cuda_launch
from retorch.cuda_launch import cuda  # numba.cuda, after retorch chose the simulator
from retorch.tensor import cuda_kernels as K


@cuda.jit
def _inc(a, n):
    i = cuda.grid(1)
    if i < n:
        a[i] += 1.0


def _forbid(monkeypatch, calls):
    """Make every host-synchronising and allocating entry point of numba.cuda raise (on a
    GPU also the driver's), recording what was attempted in ``calls``."""

    def refuse(name):
        def raiser(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"a launch called {name}")

        return raiser

    names = ["synchronize", "to_device", "device_array", "device_array_like", "pinned_array",
             "mapped_array", "managed_array", "as_cuda_array", "from_cuda_array_interface"]  # fmt: skip
    for name in [n for n in names if hasattr(cuda, n)]:  # the simulator lacks a few
        monkeypatch.setattr(cuda, name, refuse(f"numba.cuda.{name}"))
    from retorch.cuda import simulator_enabled

    if simulator_enabled():
        from numba.cuda.simulator import api

        monkeypatch.setattr(api.stream, "synchronize", refuse("stream.synchronize"))
    else:
        from numba.cuda.cudadrv import devicearray, driver

        monkeypatch.setattr(driver.Stream, "synchronize", refuse("Stream.synchronize"))
        monkeypatch.setattr(driver.Context, "synchronize", refuse("Context.synchronize"))
        monkeypatch.setattr(driver.Context, "memalloc", refuse("Context.memalloc"))
        monkeypatch.setattr(devicearray, "auto_device", refuse("devicearray.auto_device"))


def test_a_launch_neither_synchronises_nor_allocates(monkeypatch):
    a = cuda.to_device(np.zeros(5, dtype=np.float32))
    cuda_launch.launch(_inc, 1, 8, a, 5)  # compiled, configured, stream made: before the watch
    calls: list[str] = []
    _forbid(monkeypatch, calls)
    for _ in range(3):
        cuda_launch.launch(_inc, 1, 8, a, 5)
    assert calls == []
    monkeypatch.undo()
    assert (a.copy_to_host() == 4).all()


def test_the_watch_sees_a_synchronising_launch(monkeypatch):
    """The check above can fail: a launch followed by a host synchronisation is caught."""
    a = cuda.to_device(np.zeros(5, dtype=np.float32))
    calls: list[str] = []
    _forbid(monkeypatch, calls)
    with pytest.raises(AssertionError, match="synchronize"):
        cuda_launch.launch(_inc, 1, 8, a, 5)
        cuda.synchronize()
    assert calls == ["numba.cuda.synchronize"]


def test_retorch_cuda_add_goes_through_the_launch_path_without_a_sync(monkeypatch):
    x = rt.tensor([[1.0, 2.0, 3.0]], device="cuda")
    y = rt.tensor([[10.0], [20.0]], device="cuda")  # broadcast: the grid-stride kernel
    rt.add(x, y)
    seen = []
    real = cuda_launch.launch
    monkeypatch.setattr(K, "launch", lambda k, *a, **kw: (seen.append(k), real(k, *a, **kw)))
    calls: list[str] = []
    _forbid(monkeypatch, calls)
    out = rt.add(x, y, alpha=2)
    monkeypatch.undo()
    assert seen == [K.binary_kernel] and calls == []
    expect = torch.tensor([[1.0, 2.0, 3.0]]) + 2 * torch.tensor([[10.0], [20.0]])
    assert np.array_equal(out.cpu().numpy(), expect.numpy())


def test_configured_launchers_and_streams_are_made_once(monkeypatch):
    made = []
    real_getitem = type(_inc).__getitem__

    def counting(self, config):
        made.append(config)
        return real_getitem(self, config)

    monkeypatch.setattr(type(_inc), "__getitem__", counting)
    a = cuda.to_device(np.zeros(3, dtype=np.float32))
    stream = cuda_launch.current_stream()
    for _ in range(4):
        cuda_launch.launch(_inc, 1, 4, a, 3)
        cuda_launch.launch(_inc, 2, 2, a, 3)
    from retorch.cuda import simulator_enabled

    if not simulator_enabled():  # the simulator's kernel[...] mutates the kernel: no cache
        assert len(made) <= 2  # at most once per (grid, block); none if cached earlier
    assert cuda_launch.current_stream() is stream
    assert (a.copy_to_host() == 8).all()


@cuda.jit
def _config_of(out):
    if cuda.grid(1) == 0:
        out[0] = cuda.gridDim.x
        out[1] = cuda.blockDim.x


def test_alternating_configurations_each_run_as_launched():
    """The simulator's ``kernel[grid, block]`` configures the kernel object itself: a cached
    launcher would run with whichever configuration came last."""
    out = cuda.to_device(np.zeros(2, dtype=np.int64))
    for grid, block in [(1, 4), (3, 2), (1, 4), (3, 2)]:
        cuda_launch.launch(_config_of, grid, block, out)
        assert out.copy_to_host().tolist() == [grid, block]


def test_one_external_stream_per_torch_stream_handle(monkeypatch):
    made = []
    monkeypatch.setattr(cuda_launch.rcuda, "simulator_enabled", lambda: False)
    monkeypatch.setattr(cuda_launch, "_STREAMS", {})
    monkeypatch.setattr(cuda_launch.cuda, "external_stream", lambda h: made.append(h) or ("s", h))
    for handle in (7, 7, 9, 7, 9):
        monkeypatch.setattr(cuda_launch, "torch_stream_handle", lambda h=handle: h)
        assert cuda_launch.current_stream() == ("s", handle)
    assert made == [7, 9]


def test_device_attributes_are_read_once():
    cuda_launch.device_attributes.cache_clear()
    first = cuda_launch.device_attributes()
    assert cuda_launch.device_attributes() is first
    assert cuda_launch.device_attributes.cache_info().misses == 1
    assert first.multiprocessor_count >= 1 and first.warp_size == 32

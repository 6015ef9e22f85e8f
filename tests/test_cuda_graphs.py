"""retorch.cuda.CUDAGraph (retorch/cuda_graphs.py, mirroring torch/cuda/graphs.py): a training
step's launches captured once and replayed, bit for bit equal to the eager step, and the rules
capture imposes (CUDAGraph.cpp, CUDACachingAllocator.cpp's private pools) raising as torch's."""

import numpy as np
import pytest

import retorch  # noqa: F401  (chooses the simulator before numba.cuda is imported)
import retorch.autograd as ra
import retorch.cuda as rc
import retorch.tensor as rt
from retorch.tensor import allocator

SHAPES = {"w1": (3, 4), "b1": (4,), "w2": (4, 2), "b2": (2,)}


def dev(a):
    return rt.tensor(np.asarray(a, dtype=np.float32), device="cuda")


def model(seed=0):
    rng = np.random.default_rng(seed)
    return {k: ra.tensor(dev(rng.standard_normal(s) * 0.5), requires_grad=True)
            for k, s in SHAPES.items()}  # fmt: skip


def step(p, x, target, lr):
    """Forward, backward and SGD with ``lr`` a device tensor (a scalar kept in device memory)."""
    h = (x @ p["w1"] + p["b1"]).relu() @ p["w2"] + p["b2"]
    loss = ((h - target) * (h - target)).sum()
    loss.backward()
    for t in p.values():
        rt.sub(t.data, rt.mul(t.grad.data, lr), out=t.data)
        t.grad = None
    return loss


def batches(n, seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((2, 3)), rng.standard_normal((2, 2))) for _ in range(n)]


@pytest.fixture(autouse=True)
def retorch_arrays():
    previous = ra.set_array_backend("retorch")
    yield
    ra.set_array_backend(previous)  # (left set, it changed the backend of every later test)


@pytest.mark.slow  # about 30 s of simulated kernels; make unit runs it, chapter 8c shows it
def test_replay_equals_the_eager_step_bit_for_bit():
    data, lrs = batches(6), [0.1, 0.05, 0.05, 0.02, 0.02, 0.01]
    eager = model()
    eager_losses = []
    for (x, y), lr in zip(data, lrs):
        loss = step(eager, ra.tensor(dev(x)), ra.tensor(dev(y)), dev(lr))
        eager_losses.append(loss.data.cpu().numpy())

    p = model()
    sx, sy, slr = ra.tensor(dev(data[0][0])), ra.tensor(dev(data[0][1])), dev(lrs[0])
    warm = step(p, sx, sy, slr)  # warm-up, eagerly, as torch's recipe does before capture
    g = rc.CUDAGraph()
    with rc.graph(g):
        static_loss = step(p, sx, sy, slr)  # recorded, not run
    assert len(g.launches) > 10
    losses = [warm.data.cpu().numpy()]
    for (x, y), lr in zip(data[1:], lrs[1:]):
        rt.copy_(sx.data, dev(x))  # new inputs copied into the static tensors
        rt.copy_(sy.data, dev(y))
        rt.copy_(slr, dev(lr))
        g.replay()
        losses.append(static_loss.data.cpu().numpy().copy())
    np.testing.assert_array_equal(losses, eager_losses)
    for k in SHAPES:
        np.testing.assert_array_equal(p[k].data.cpu().numpy(), eager[k].data.cpu().numpy())


def test_a_python_float_is_frozen_at_its_captured_value():
    a = dev([1.0, 2.0])
    out = rt.empty(2, dtype=rt.float32, device="cuda")
    g = rc.CUDAGraph()
    scale = 2.0
    with rc.graph(g):
        rt.mul(a, scale, out=out)
    scale = 3.0  # not seen by the replay: the launch holds 2.0
    g.replay()
    np.testing.assert_array_equal(out.cpu().numpy(), [2.0, 4.0])


def test_capture_on_the_default_stream_raises():
    g = rc.CUDAGraph()
    with pytest.raises(RuntimeError, match="non-default stream"):
        g.capture_begin()
    assert not rc.is_current_stream_capturing()


@pytest.mark.parametrize("sync", ["device", "stream", "event", "item", "cpu"])
def test_host_synchronisation_during_capture_raises(sync):
    g, s = rc.CUDAGraph(), rc.Stream()
    x = rt.ones(2, dtype=rt.float32, device="cuda")
    with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
        with rc.graph(g, stream=s):
            if sync == "device":
                rc.synchronize()
            elif sync == "stream":
                s.synchronize()
            elif sync == "event":
                s.record_event().synchronize()
            elif sync == "item":  # a value read on the host waits for the device
                x.sum().item()
            else:
                x.cpu()
    assert not rc.is_current_stream_capturing() and rc.current_stream() == rc.default_stream()


def test_allocation_outside_the_graphs_pool_raises():
    g, other = rc.CUDAGraph(), rc.Stream()
    with pytest.raises(RuntimeError, match="outside the graph's private pool"):
        with rc.graph(g):
            with rc.stream(other):
                rt.empty(16, dtype=rt.float32, device="cuda")


def test_graph_keeps_its_allocations_at_static_addresses():
    a = dev([1.0, 2.0, 3.0])
    g = rc.CUDAGraph()
    with rc.graph(g):
        b = a * 2
    ptr = b.data_ptr()
    del b
    c = rt.empty(3, dtype=rt.float32, device="cuda")
    assert c.data_ptr() != ptr  # the freed tensor's block stays the graph's
    assert ptr in [allocator._address_of(m) for m in g.kept]


def test_replay_without_capture_and_a_second_capture_raise():
    g = rc.CUDAGraph()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    with rc.graph(g):
        dev([1.0]) * 2
    with pytest.raises(RuntimeError, match="already owns a captured graph"):
        with rc.graph(g):
            pass
    assert rc.current_stream() == rc.default_stream()  # the failed capture left no stream set

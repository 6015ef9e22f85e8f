"""retorch.cuda streams and events (retorch/cuda_streams.py) and the stream-aware caching
allocator of retorch's CUDA tensors (retorch/tensor/allocator.py), under the simulator or on a
GPU. Mirrors torch/cuda/streams.py, torch/cuda/__init__.py and CUDACachingAllocator.cpp's
recordStream."""

import gc

import numpy as np
import pytest

import retorch  # noqa: F401  (chooses the simulator before numba.cuda is imported)
import retorch.cuda as rc
import retorch.tensor as rt
from retorch import cuda_launch
from retorch.tensor import allocator


def cuda_tensor(values):
    return rt.tensor(np.asarray(values, dtype=np.float32)).to("cuda")


def test_current_stream_context_nests_and_restores():
    default = rc.current_stream()
    assert default == rc.default_stream() and default.stream_id == 0
    s1, s2 = rc.Stream(), rc.Stream()
    assert s1 != s2 and s1.stream_id not in (0, s2.stream_id)
    with rc.stream(s1) as got:
        assert got is s1 and rc.current_stream() is s1
        with rc.stream(s2):
            assert rc.current_stream() is s2
        assert rc.current_stream() is s1
        with rc.stream(None):  # torch: stream(None) changes nothing
            assert rc.current_stream() is s1
    assert rc.current_stream() == default
    with pytest.raises(ZeroDivisionError):  # restored however the block ends
        with rc.stream(s1):
            raise ZeroDivisionError
    assert rc.current_stream() == default


def test_kernels_launch_on_the_current_stream(monkeypatch):
    seen = []
    real = cuda_launch.configured

    def spy(kernel, grid, block, stream=None):
        seen.append(cuda_launch.current_stream() if stream is None else stream)
        return real(kernel, grid, block, stream)

    monkeypatch.setattr(cuda_launch, "configured", spy)
    a = cuda_tensor([1, 2, 3])
    s = rc.Stream()
    with rc.stream(s):
        b = a * 2
    c = b + 1
    assert seen[0] is s.numba_stream and seen[-1] is rc.default_stream().numba_stream
    np.testing.assert_array_equal(c.cpu().numpy(), [3, 5, 7])


def test_wait_orders_stream_b_after_a():
    a = cuda_tensor([1, 2, 3, 4])
    sa, sb = rc.Stream(), rc.Stream()
    with rc.stream(sa):
        x = a * 3
        done = rc.Event()
        done.record()
    sb.wait_event(done)
    with rc.stream(sb):
        y = x + 1
    sb.synchronize()
    np.testing.assert_array_equal(y.cpu().numpy(), [4, 7, 10, 13])
    sb.wait_stream(sa)  # record_event + wait_event


def test_event_state_query_and_elapsed_time():
    e = rc.Event()
    assert not e.recorded and e.query()  # an event never recorded counts as complete
    e.wait()  # no-op when never recorded, as CUDAEvent::block
    e.synchronize()
    s = rc.Stream()
    e.record(s)
    assert e.recorded and e.stream is s
    e.synchronize()
    assert e.query() and s.query()
    t0, t1 = rc.Event(enable_timing=True), rc.Event(enable_timing=True)
    t0.record()
    cuda_tensor([1.0]) * 2
    t1.record()
    t1.synchronize()
    assert t0.elapsed_time(t1) >= 0.0
    assert t1.order > t0.order


def test_misuse_raises_as_torch():
    t0, t1 = rc.Event(), rc.Event(enable_timing=True)
    with pytest.raises(RuntimeError, match="Both events must be recorded"):
        t0.elapsed_time(t1)
    t0.record()
    t1.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        t0.elapsed_time(t1)
    with pytest.raises(TypeError):
        rc.stream(3)
    with pytest.raises(TypeError, match="must be Stream"):
        rc.record_stream(cuda_tensor([1.0]), 0)
    with pytest.raises(ValueError, match="cuda:0"):
        rc.Stream(device="cuda:1")


def fresh_block(nbytes=4096):
    """A tensor of nbytes on the current stream, from an emptied cache."""
    gc.collect()
    allocator.empty_cache()
    return rt.empty(nbytes // 4, dtype=rt.float32, device="cuda")


@pytest.mark.slow  # (seconds: make unit runs it, check-fast stays under a minute)
def test_record_stream_holds_the_block_until_the_stream_is_done():
    x = fresh_block()
    ptr = x.data_ptr()
    side = rc.Stream()
    with rc.stream(side):
        _ = x * 2  # side reads x
    x.record_stream(side)  # (Tensor.record_stream, as torch's; rc.record_stream(x, side) too)
    del x
    gc.collect()
    a = allocator._settled()
    pending = [b for q in a.cuda_events.values() for _, b in q]
    assert [b.ptr for b in pending] == [ptr] and a.cuda_events.keys() == {side.stream_id}
    event = a.cuda_events[side.stream_id][0][0]
    y = rt.empty(1024, dtype=rt.float32, device="cuda")
    # NOT handed out while side's event is pending: under the simulator until the host
    # synchronises with side; on a GPU the real event may already have completed
    assert y.data_ptr() != ptr or (not rc.simulator_enabled() and event.done)
    side.synchronize()  # the host waits for side: the event completes
    z = rt.empty(1024, dtype=rt.float32, device="cuda")
    assert z.data_ptr() == ptr and not a.cuda_events


@pytest.mark.slow  # (seconds: make unit runs it, check-fast stays under a minute)
def test_without_record_stream_the_block_is_reused_at_once():
    x = fresh_block()
    ptr = x.data_ptr()
    side = rc.Stream()
    with rc.stream(side):
        _ = x * 2
    del x
    gc.collect()
    y = rt.empty(1024, dtype=rt.float32, device="cuda")
    assert y.data_ptr() == ptr  # the race: side may still be reading these bytes on a GPU


@pytest.mark.slow  # (seconds: make unit runs it, check-fast stays under a minute)
def test_each_stream_has_its_own_pool():
    side = rc.Stream()
    gc.collect()
    allocator.empty_cache()
    with rc.stream(side):
        x = rt.empty(1024, dtype=rt.float32, device="cuda")
    ptr = x.data_ptr()
    del x
    gc.collect()
    y = rt.empty(1024, dtype=rt.float32, device="cuda")  # default stream: not side's block
    assert y.data_ptr() != ptr
    with rc.stream(side):
        z = rt.empty(1024, dtype=rt.float32, device="cuda")
    assert z.data_ptr() == ptr


@pytest.mark.slow  # (seconds: make unit runs it, check-fast stays under a minute)
def test_memory_history_pairs_every_free_with_its_alloc():
    a = cuda_tensor(np.arange(64))
    with allocator.record_memory_history() as history:
        b = a * 2
        c = (b + 1).sum()
        del b
    live = {}
    for kind, ptr, size in history:
        if kind == "alloc":
            assert ptr not in live
            live[ptr] = size
        else:
            assert live.pop(ptr) == size
    assert [k for k, _, _ in history].count("alloc") >= 3
    assert list(live.values()) == [allocator._settled().allocated_blocks[c.data_ptr()].size]
    assert "malloc" not in vars(allocator._settled())  # the logging is undone

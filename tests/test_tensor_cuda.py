"""retorch.tensor on device "cuda": the Numba-CUDA kernels (under the CUDA simulator here,
on the GPU when there is one) against torch's CPU results on tiny inputs (the simulator runs
a Python thread per CUDA thread). Exact where the arithmetic is the same IEEE operation;
else the tolerance stated at the comparison."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch.tensor as rt
from retorch.tensor import cuda_kernels, cuda_vectorized

# Numba's pedantic SSA check warns while compiling the inlined op switch (harmless; the
# package silences it outside pytest, which resets warning filters per test)
pytestmark = pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaIRAssumptionWarning")

RTOL32 = 2e-6  # float32 transcendental math (see test_tensor_ops.RTOL)
SUM32 = 1e-5  # float32 sums in another order


def pair(arr, device="cuda"):
    return rt.from_numpy(np.array(arr)).to(device), torch.from_numpy(np.array(arr))


def check(ours, theirs, rtol=0.0, atol=0.0):
    assert ours.device == "cuda"
    assert ours.dtype.name == str(theirs.dtype).replace("torch.", "")
    assert ours.shape == tuple(theirs.shape)
    assert ours.stride() == theirs.stride(), "the output's layout differs from torch's"
    a = ours.cpu().numpy()
    if rtol == 0 and atol == 0:
        np.testing.assert_array_equal(a, theirs.numpy())
    else:
        np.testing.assert_allclose(a, theirs.numpy(), rtol=rtol, atol=atol)


def outcome(fn):
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001
        return "error", (type(e), str(e))


rng = np.random.default_rng(0)
A = rng.standard_normal((2, 3)).astype(np.float32)
B = rng.standard_normal((3,)).astype(np.float32)


def test_round_trip_keeps_values_and_dense_strides():
    x, tx = pair(A)
    assert x.is_cuda and x.type() == "torch.cuda.FloatTensor"
    xt = rt.from_numpy(A.copy()).t().to("cuda")  # a dense transposed layout travels as is
    assert xt.stride() == (1, 3)
    np.testing.assert_array_equal(xt.cpu().numpy(), A.T)
    np.testing.assert_array_equal(x.cpu().numpy(), A)
    s = rt.from_numpy(np.arange(12.0)).view(3, 4)[:, 1::2]  # not dense: packed on the way
    np.testing.assert_array_equal(s.cuda().cpu().numpy(), np.arange(12.0).reshape(3, 4)[:, 1::2])


def test_binary_broadcast_compare_and_scalars():
    a, ta = pair(A)
    b, tb = pair(B)
    check(a + b, ta + tb)
    check(rt.sub(a, b, alpha=2), torch.sub(ta, tb, alpha=2), rtol=1e-7)
    check(a.t() * 3.0, ta.t() * 3.0)
    check(a / rt.tensor(2.0), ta / torch.tensor(2.0))  # a 0-dim CPU tensor joins a CUDA op
    check(rt.gt(a, b), torch.gt(ta, tb))
    check(rt.maximum(a, b), torch.maximum(ta, tb))
    assert (a + b).stride() == (ta + tb).stride()


def test_unary_where_and_copy_casts():
    a, ta = pair(A)
    for name in ("exp", "tanh", "sigmoid", "relu", "neg"):
        check(getattr(rt, name)(a), getattr(torch, name)(ta), rtol=RTOL32, atol=1e-30)
    c, tc = pair(A > 0)
    check(rt.where(c, a, 0.0), torch.where(tc, ta, 0.0))
    check(a.to(dtype=rt.float64), ta.to(torch.float64))
    i, ti = pair(np.arange(6).reshape(2, 3))
    check(i.to(dtype=rt.float32), ti.to(torch.float32))
    check(a.t().contiguous(), ta.t().contiguous())


def test_reductions_softmax_and_gather():
    a, ta = pair(A)
    check(rt.sum(a, 1), torch.sum(ta, 1), rtol=SUM32)
    check(rt.sum(a), torch.sum(ta), rtol=SUM32)
    check(rt.sum(a.t(), 1), torch.sum(ta.t(), 1), rtol=SUM32)  # copied first on CUDA
    check(rt.sum(a[:, ::2], 0, keepdim=True), ta[:, ::2].sum(0, keepdim=True), rtol=SUM32)
    check(rt.mean(a, 0, keepdim=True), torch.mean(ta, 0, keepdim=True), rtol=SUM32)
    check(rt.amax(a, 1), torch.amax(ta, 1))
    v, i = rt.max(a, 0)
    tv, ti = torch.max(ta, 0)
    check(v, tv)
    check(i, ti)
    check(rt.softmax(a, 1), torch.softmax(ta, 1), rtol=4 * RTOL32, atol=1e-7)
    idx, tidx = pair(np.array([2, 0, 2]))
    check(rt.index_select(a, 1, idx), torch.index_select(ta, 1, tidx))
    g, tg = pair(np.array([[1, 0], [0, 1]]))
    check(rt.gather(a, 1, g), torch.gather(ta, 1, tg))


def test_contiguous_operands_take_the_unrolled_kernels(monkeypatch):
    """Operands that coalesce to one contiguous dim (storage offsets allowed) skip the
    offset calculator: with the general kernel removed, these ops still give torch's bits."""
    x = rng.standard_normal(37).astype(np.float32)  # 37: not a multiple of UNROLL * threads
    a, ta = pair(x)
    m, tm = pair(x.reshape(37, 1) * np.ones((1, 2), np.float32))

    class NoGeneralKernel:
        def __getitem__(self, launch):
            raise AssertionError("the general kernel ran for contiguous operands")

    m2, tm2 = m + m, tm + tm
    for k in ("binary", "compare", "unary", "copy"):
        monkeypatch.setattr(cuda_kernels, f"{k}_kernel", NoGeneralKernel())
    for name in ("add", "sub", "mul", "div", "maximum"):
        check(getattr(rt, name)(a[2:], a[:-2]), getattr(torch, name)(ta[2:], ta[:-2]))
        check(getattr(rt, name)(m, m2), getattr(torch, name)(tm, tm2))
    check(rt.add(a, a, alpha=3), torch.add(ta, ta, alpha=3), rtol=1e-7)
    for name in ("gt", "eq", "le"):
        check(getattr(rt, name)(a[2:], a[:-2]), getattr(torch, name)(ta[2:], ta[:-2]))
    for name in ("exp", "tanh", "neg", "relu"):
        check(getattr(rt, name)(a[1:]), getattr(torch, name)(ta[1:]), rtol=RTOL32, atol=1e-30)
    check(m.to(dtype=rt.float64), tm.to(torch.float64))
    check(rt.gt(a[1:], a[:-1]).to(dtype=rt.float32), torch.gt(ta[1:], ta[:-1]).to(torch.float32))
    strided = a[:36:2], a[1::2]  # strided: the general kernels' job
    for fn in (rt.add, rt.gt, lambda x, y: rt.exp(x), lambda x, y: x.to(dtype=rt.float64)):
        with pytest.raises(AssertionError, match="general kernel"):
            fn(*strided)


def test_launches_pass_no_host_arrays(monkeypatch):
    """A NumPy array given to a kernel makes Numba copy it to the GPU before the launch and
    back after it, synchronously: shapes and strides must travel by value (as tuples)."""
    from retorch import cuda as rcuda

    launched = []

    class NoHostArrays:
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __getitem__(self, config):
            def launch(*args):
                hosts = [type(x).__name__ for x in args if isinstance(x, np.ndarray)]
                assert not hosts, f"{self.name} was given host arrays: {hosts}"
                launched.append(self.name)
                return self.kernel[config](*args)

            return launch

    for spec in rcuda.KERNELS:
        name = spec.pyfunc.__name__
        if spec.pyfunc.__module__ == cuda_kernels.__name__ and not spec.device:
            monkeypatch.setattr(cuda_kernels, name, NoHostArrays(name, spec.dispatcher))
    for table in (cuda_vectorized.BINARY, cuda_vectorized.UNARY):
        for vec, kernel in list(table.items()):
            monkeypatch.setitem(table, vec, NoHostArrays(kernel.py_func.__name__, kernel))
    a, ta = pair(A)
    b, tb = pair(B)
    c, tc = pair(A > 0)
    idx, tidx = pair(np.array([[1, 0], [0, 1]]))
    flat, tflat = a.view(-1)[1:], ta.view(-1)[1:]  # from element 1: 4 bytes past 16, vec_size 1
    # the vectorized kernels, the unrolled ones, the general ones
    for x, tx in ((a, ta), (flat, tflat), (a[:, ::2], ta[:, ::2])):
        check(x * x, tx * tx)
        check(rt.gt(x, x * 0.5), torch.gt(tx, tx * 0.5))
        check(rt.exp(x), torch.exp(tx), rtol=RTOL32)
        check(x.to(dtype=rt.float64), tx.to(torch.float64))
    check(a.t() * b[:2], ta.t() * tb[:2])
    check(rt.where(c, a, b), torch.where(tc, ta, tb))
    check(a.t().contiguous(), ta.t().contiguous())
    check(rt.gather(a, 1, idx), torch.gather(ta, 1, tidx))
    rows, trows = pair(np.array([2, 0]))
    check(rt.zeros(3, 3, device="cuda").index_add_(0, rows, a),
          torch.zeros(3, 3).index_add_(0, trows, ta))  # fmt: skip
    check(rt.sum(a, 1), torch.sum(ta, 1), rtol=SUM32)
    check(rt.mm(a, a.t()), torch.mm(ta, ta.t()), rtol=SUM32)
    kernels = "binary compare unary where copy gather scatter sum_rows mm_tiled".split()
    kernels += [f"{k}_contiguous" for k in ("binary", "compare", "unary", "copy")]
    kernels += ["binary_vectorized4", "unary_vectorized4"]
    assert {f"{k}_kernel" for k in kernels} <= set(launched)


# (the tiled kernels simulate 256 threads a block: seconds, so slow)
@pytest.mark.parametrize(
    "kernel",
    [
        "naive",
        pytest.param("tiled", marks=pytest.mark.slow),
        pytest.param("regtile", marks=pytest.mark.slow),
    ],
)
def test_matmul_kernels(kernel, monkeypatch):
    monkeypatch.setitem(cuda_kernels.MM_KERNEL, "name", kernel)
    x = rng.standard_normal((5, 18)).astype(np.float32)  # k = 18 spans two 16-wide tiles
    y = rng.standard_normal((18, 3)).astype(np.float32)  # (and three 8-deep steps of regtile)
    a, ta = pair(x)
    b, tb = pair(y)
    check(a @ b, ta @ tb, rtol=SUM32, atol=1e-5)
    check(
        rt.bmm(a.unsqueeze(0), b.unsqueeze(0)),
        torch.bmm(ta.unsqueeze(0), tb.unsqueeze(0)),
        rtol=SUM32,
        atol=1e-5,
    )
    if kernel == "regtile":  # (256 simulated threads per block: its batch of two is below)
        return
    # a batch is one launch over grid z; cut to 2 per launch here, 5 matrices take three
    launches = []
    monkeypatch.setattr(cuda_kernels, "MAX_GRID_Z", 2)
    real = getattr(cuda_kernels, f"mm_{kernel}_kernel")

    class Counted:
        def __getitem__(self, config):
            launches.append(config[0])
            return real[config]

    monkeypatch.setattr(cuda_kernels, f"mm_{kernel}_kernel", Counted())
    x, y = rng.standard_normal((5, 3, 18)), rng.standard_normal((5, 18, 2))
    (a, ta), (b, tb) = pair(x), pair(y)
    check(rt.bmm(a, b), torch.bmm(ta, tb), rtol=1e-12, atol=1e-12)
    assert [g[2] for g in launches] == [2, 2, 1]


@pytest.mark.slow
def test_register_tiled_matmul_covers_edges(monkeypatch):
    """Outputs past a 128-wide tile (n = 130: two blocks, the second almost empty), a k
    that ends inside an 8-deep step, float64 too, and a batch of two with two block rows."""
    monkeypatch.setitem(cuda_kernels.MM_KERNEL, "name", "regtile")
    for dtype, tol in ((np.float32, SUM32), (np.float64, 1e-12)):
        x = rng.standard_normal((9, 13)).astype(dtype)
        y = rng.standard_normal((13, 130)).astype(dtype)
        (a, ta), (b, tb) = pair(x), pair(y)
        check(a @ b, ta @ tb, rtol=tol, atol=tol)
    x, y = rng.standard_normal((2, 131, 9)), rng.standard_normal((2, 9, 3))  # 2 block rows
    (a, ta), (b, tb) = pair(x), pair(y)
    check(rt.bmm(a, b), torch.bmm(ta, tb), rtol=1e-12, atol=1e-12)


def test_auto_picks_the_register_tiled_kernel_for_big_products_on_a_gpu(monkeypatch):
    monkeypatch.setitem(cuda_kernels.MM_KERNEL, "name", "auto")
    monkeypatch.setattr(cuda_kernels.rcuda, "simulator_enabled", lambda: False)
    assert cuda_kernels.mm_kernel_for(4096, 4096) == "regtile"
    assert cuda_kernels.mm_kernel_for(5, 3) == "tiled"
    monkeypatch.setattr(cuda_kernels.rcuda, "simulator_enabled", lambda: True)
    assert cuda_kernels.mm_kernel_for(4096, 4096) == "tiled"


def test_misuse_raises_torchs_exception_types():
    a, ta = pair(A)
    i = rt.from_numpy(np.arange(3)).cuda()
    r = outcome(lambda: i + i)
    assert r == ("error", (NotImplementedError, "\"add_cuda\" not implemented for 'Long'"))
    r = outcome(lambda: a + rt.from_numpy(A.copy()))
    assert r == (
        "error",
        (
            RuntimeError,
            "Expected all tensors to be on the same device, but found at least two "
            "devices, cuda:0 and cpu!",
        ),
    )
    assert outcome(lambda: a.numpy())[1][0] is TypeError
    assert outcome(lambda: a.to("tpu"))[1][0] is RuntimeError


def test_storage_is_a_device_array():
    a, _ = pair(A)
    st = a.untyped_storage()
    assert st.device == "cuda" and st.nbytes() == A.nbytes
    assert a.data_ptr() == st.data_ptr()


@pytest.mark.skipif(
    not cuda_kernels.rcuda.simulator_enabled(), reason="needs a machine without a GPU"
)
@pytest.mark.slow  # seconds each: make unit runs it, check-fast stays under a minute
def test_cuda_tensor_without_gpu_or_simulator_is_a_runtime_error():
    """With the simulator off and no driver, torch's CUDA builds raise RuntimeError too."""
    import subprocess
    import sys

    code = (
        "import retorch.tensor as rt\n"
        "try:\n    rt.ones(3, device='cuda')\n"
        "except RuntimeError as e:\n    print('RuntimeError:', str(e).split(':')[0])\n"
    )
    env = {**__import__("os").environ, "NUMBA_ENABLE_CUDASIM": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "RuntimeError: Found no NVIDIA driver on your system", out.stderr


def test_scatter_and_index_add_on_cuda():
    rows, trows = pair(np.array([2, 0, 2]))
    s, ts = pair(np.arange(6.0, dtype=np.float32).reshape(3, 2))
    out = rt.zeros(3, 2, device="cuda").index_add_(0, rows, s)  # atomic adds for row 2
    check(out, torch.zeros(3, 2).index_add_(0, trows, ts))
    idx, tidx = pair(np.array([[1], [0]]))
    check(
        rt.zeros(2, 3, device="cuda").scatter(1, idx, 2.0), torch.zeros(2, 3).scatter(1, tidx, 2.0)
    )


@settings(max_examples=8)
@given(st.data())
def test_cuda_offsets_equal_cpu_on_random_layouts(data):
    """The CUDA kernels find each element from its linear index (OffsetCalculator); on random
    broadcast, transposed and sliced operands they must agree with the CPU loops exactly."""
    shape = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    base = np.arange(int(np.prod(shape)) * 2, dtype=np.float32).reshape((2,) + shape)
    x = rt.from_numpy(base)
    view = x[data.draw(st.integers(0, 1))]
    if len(shape) >= 2 and data.draw(st.booleans()):
        view = view.transpose(0, -1)
    other = view[tuple(slice(0, 1) for _ in range(view.dim()))]  # broadcast along every dim
    cpu = rt.add(view, other, alpha=2)
    gpu = rt.add(view.cuda(), other.cuda(), alpha=2)
    np.testing.assert_array_equal(gpu.cpu().numpy(), cpu.numpy())
    assert gpu.stride() == cpu.stride()
    np.testing.assert_array_equal(view.cuda().contiguous().cpu().numpy(), view.numpy())


def test_register_tiled_shared_memory_accesses_are_conflict_free():
    """Every warp's reads and writes of ``sa`` and ``sb`` in ``mm_regtile_kernel`` take one
    pass of shared memory (float32), and the layouts the kernel avoids would not."""
    K = cuda_kernels
    wf = K.wavefronts
    warps = [range(w * 32, w * 32 + 32) for w in range(K.MM_THREADS // 32)]
    for lanes in warps:
        for q in range(K.LOADS):  # the stores of the fetched tiles
            rs = [t + q * K.MM_THREADS for t in lanes]
            assert wf([(r % K.BK) * K.SA_ROW + r // K.BK for r in rs]) == 1
            assert wf([(r // K.BN) * K.BN + r % K.BN for r in rs]) == 1
            assert wf([(r % K.BK) * K.BM + r // K.BK for r in rs]) == 8  # rows not padded
        ti = [t // K.COL_STRIDE for t in lanes]
        tj = [t % K.COL_STRIDE for t in lanes]
        for u in range(K.TM):
            assert wf([K.SA_ROW + i * K.TM + u for i in ti]) == 1  # (at kk = 1)
        for v in range(K.TN):
            assert wf([K.BN + j + v * K.COL_STRIDE for j in tj]) == 1
            assert wf([K.BN + j * K.TN + v for j in tj]) == 4  # columns side by side
    assert wf([0] * 32) == 1 and wf(range(0, 1024, 32)) == 32


def test_tiled_matmul_shared_memory_accesses_are_conflict_free():
    """``mm_tiled_kernel``'s warp (threadIdx.x fastest: tx = t % TILE, ty = t // TILE) writes
    ``sa[ty, tx]`` and ``sb[ty, tx]`` and reads ``sa[ty, kk]`` and ``sb[kk, tx]`` in one pass
    each; with the row and column taken from the other index, three of them take 8."""
    T, wf, lanes = cuda_kernels.TILE, cuda_kernels.wavefronts, range(32)
    tx, ty = [t % T for t in lanes], [t // T for t in lanes]
    assert wf([y * T + x for x, y in zip(tx, ty)]) == 1
    for kk in range(T):
        assert wf([y * T + kk for y in ty]) == 1 and wf([kk * T + x for x in tx]) == 1
        assert wf([x * T + kk for x in tx]) == 8  # sa[tx, kk]: rows picked by tx

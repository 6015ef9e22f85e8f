"""The global switches beside torch's: default dtype, thread count, deterministic algorithms."""

import mmap
import os
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retorch
import retorch.tensor as rt
from retorch.tensor import ops

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
NOT_FLOATS = [torch.int32, torch.int64, torch.bool]

FACTORIES = {
    "tensor(1.5)": lambda lib: lib.tensor(1.5),
    "tensor([1.0, 2.0])": lambda lib: lib.tensor([1.0, 2.0]),
    "tensor([1, 2])": lambda lib: lib.tensor([1, 2]),
    "zeros(2)": lambda lib: lib.zeros(2),
    "ones(2, 3)": lambda lib: lib.ones(2, 3),
    "arange(3.0)": lambda lib: lib.arange(3.0),
    "arange(3)": lambda lib: lib.arange(3),
    "int tensor * 1.5": lambda lib: lib.tensor([1, 2]) * 1.5,
    "int tensor + True": lambda lib: lib.tensor([1, 2]) + True,
}


@pytest.fixture(autouse=True)
def restore():
    yield
    torch.set_default_dtype(torch.float32)
    retorch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(False)
    retorch.use_deterministic_algorithms(False)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(FLOATS), st.sampled_from(list(FACTORIES)))
def test_factories_and_python_floats_follow_the_default_dtype(d, case):
    torch.set_default_dtype(d)
    retorch.set_default_dtype(d)
    try:
        assert retorch.get_default_dtype().name == str(torch.get_default_dtype())[6:]
        got, want = FACTORIES[case](rt), FACTORIES[case](torch)
        assert got.dtype.name == str(want.dtype)[6:], case
        if not (case == "tensor(1.5)" and d in (torch.float16, torch.bfloat16)):  # see below
            assert list(got.shape) == list(want.shape)
    finally:
        torch.set_default_dtype(torch.float32)
        retorch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("d", [torch.float16, torch.bfloat16])
def test_a_half_scalar_tensor_has_no_dims(d):
    assert list(rt.tensor(1.5, dtype=d).shape) == list(torch.tensor(1.5, dtype=d).shape) == []


def _raised(fn):
    try:
        fn()
    except Exception as e:
        return type(e), str(e)
    return None


@pytest.mark.parametrize("d", [*NOT_FLOATS, "float64", 3])
def test_a_default_dtype_that_is_not_a_float_type_raises_as_torch(d):
    got = _raised(lambda: retorch.set_default_dtype(d))
    want = _raised(lambda: torch.set_default_dtype(d))
    assert got is not None and got[0] is want[0] is TypeError
    assert "only floating-point types are supported as the default type" in got[1]
    assert retorch.get_default_dtype().name == "float32"  # unchanged


@pytest.mark.parametrize("n", [0, -1, 1.5, "2"])
def test_set_num_threads_misuse_raises_as_torch(n):
    got, want = (
        _raised(lambda: retorch.set_num_threads(n)),
        _raised(lambda: torch.set_num_threads(n)),
    )
    assert got is not None and want is not None and got[0] is want[0], (got, want)
    if n in (0, -1, 1.5):
        assert got[1] == want[1]


def test_set_num_threads_drives_numbas():
    import numba  # after retorch, which chooses the CUDA simulator before Numba starts

    before = numba.get_num_threads()
    try:
        retorch.set_num_threads(1)
        assert retorch.get_num_threads() == numba.get_num_threads() == 1
        retorch.set_num_threads(10_000)  # capped at Numba's pool, as torch's is not
        assert retorch.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    finally:
        numba.set_num_threads(before)


@pytest.mark.parametrize("mode", [1, "yes", None])
def test_deterministic_flag_misuse_raises_as_torch(mode):
    got = _raised(lambda: retorch.use_deterministic_algorithms(mode))
    want = _raised(lambda: torch.use_deterministic_algorithms(mode))
    assert got == want


@pytest.mark.parametrize("mode,warn_only", [(True, False), (True, True), (False, False)])
def test_deterministic_flags_read_back_as_torch(mode, warn_only):
    torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    retorch.use_deterministic_algorithms(mode, warn_only=warn_only)
    assert (
        retorch.are_deterministic_algorithms_enabled()
        is torch.are_deterministic_algorithms_enabled()
    )
    assert (
        retorch.is_deterministic_algorithms_warn_only_enabled()
        is torch.is_deterministic_algorithms_warn_only_enabled()
    )


def _torch_alert_texts() -> list[str]:
    """alertNotDeterministic's two sentences, read from the library torch ships."""
    lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    key = b" does not have a deterministic implementation, but you set '"
    out = []
    with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        i = m.find(key)
        while i != -1 and len(out) < 2:
            out.append(m[i : m.find(b"\0", i)].decode())
            i = m.find(key, i + 1)
    return sorted(out)


def _index_add(device):
    x = rt.zeros(5, device=device)
    return x.index_add_(0, rt.tensor([0, 0], device=device), rt.ones(2, device=device))


def test_index_add_on_cuda_raises_torchs_error_when_determinism_is_on():
    retorch.use_deterministic_algorithms(True)
    with pytest.raises(RuntimeError) as e:
        _index_add("cuda")
    ours = str(e.value).replace("retorch.", "torch.")
    assert ours.startswith("index_add_cuda_ ")
    assert ours[len("index_add_cuda_") :] in _torch_alert_texts()
    assert _index_add("cpu").tolist() == [2.0, 0, 0, 0, 0]  # CPU: sequential, deterministic


def test_warn_only_warns_with_torchs_text_and_runs_the_op():
    retorch.use_deterministic_algorithms(True, warn_only=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert _index_add("cuda").cpu().tolist() == [2.0, 0, 0, 0, 0]
    assert [x.category for x in w] == [UserWarning]
    text = str(w[0].message).replace("retorch.", "torch.")
    assert text[len("index_add_cuda_") :] in _torch_alert_texts()


def test_determinism_off_costs_nothing():
    launch = ops._scatter_launch
    retorch.use_deterministic_algorithms(True)
    assert ops._scatter_launch is not launch
    retorch.use_deterministic_algorithms(False)
    assert ops._scatter_launch is launch
    assert _index_add("cuda").cpu().tolist() == [2.0, 0, 0, 0, 0]

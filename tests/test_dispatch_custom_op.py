"""A custom operator end to end, retorch's custom_op beside torch.library.custom_op: schema,
CPU and CUDA (simulator) kernels, the fake kernel, autograd, and torch.compile on torch's."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode

import retorch.dispatch as rd
import retorch.tensor as rt
from retorch.autograd.backend import array_backend
from retorch.autograd.gradcheck import gradcheck
from retorch.dispatch.custom_op_example import make_retorch_softplus, make_torch_softplus
from retorch.dispatch.custom_ops import custom_op, infer_schema

pytestmark = pytest.mark.slow  # Numba-CUDA simulator and torch.compile: seconds


@pytest.fixture(scope="module")
def ops():
    return make_retorch_softplus(), make_torch_softplus()


def test_schema_is_torchs(ops):
    ours, theirs = ops
    assert str(ours._opoverload.schema) == str(theirs._opoverload._schema)
    assert str(ours._opoverload.schema) == "mylib::softplus(Tensor x, float beta=1.) -> Tensor"


def test_infer_schema_types():
    def f(x: rd.Tensor, n: int, flag: bool = False, s: float = 0.5) -> rd.Tensor: ...

    assert infer_schema(f) == "(Tensor x, SymInt n, bool flag=False, float s=0.5) -> Tensor"
    with pytest.raises(ValueError, match="must have a type annotation"):
        infer_schema(lambda x: x)
    with pytest.raises(NotImplementedError, match="mutates_args"):
        infer_schema(f, mutates_args={"x"})


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-50, 50), min_size=1, max_size=8), st.sampled_from([0.5, 1.0, 3.0]))
def test_forward_matches_torch(ops, values, beta):
    ours, theirs = ops
    xv = np.array(values)
    expected = F.softplus(torch.tensor(xv), beta=beta, threshold=1e9).numpy()
    np.testing.assert_allclose(ours(rd.tensor(xv), beta).numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(theirs(torch.tensor(xv), beta).numpy(), expected, rtol=1e-12)


def test_cuda_kernel_matches_cpu(ops):
    ours, _ = ops
    xv = np.linspace(-4, 4, 11)
    for dtype in (np.float64, np.float32):
        x = rd.tensor(xv.astype(dtype), device="cuda")
        with rd.get_dispatcher().trace() as seen:
            out = ours(x, 2.0)
        assert seen[-1] == ("mylib::softplus", "CUDA") and out.device == "cuda"
        cpu = ours(rd.tensor(xv.astype(dtype)), 2.0).numpy()
        np.testing.assert_allclose(out.data.cpu().numpy(), cpu, rtol=1e-6)


def test_gradients_match_torch_and_numeric(ops):
    ours, theirs = ops
    xv = np.linspace(-3, 3, 7)
    x, tx = rd.tensor(xv, requires_grad=True), torch.tensor(xv, requires_grad=True)
    ours(x, 2.0).sum().backward()
    theirs(tx, 2.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    with array_backend("retorch"):
        assert gradcheck(lambda a: ours(a, 2.0), (rd.tensor(xv, requires_grad=True),))
    assert torch.autograd.gradcheck(lambda a: theirs(a, 2.0), (tx,))
    assert ours(x).grad_fn.name() == theirs(tx).grad_fn.name()


def test_fake_kernel_shapes_match_fake_tensor_mode(ops):
    ours, theirs = ops
    for shape in [(3,), (2, 5), (4, 1, 3)]:
        out = ours(rd.Tensor(rt.empty(*shape, device="meta")))
        with FakeTensorMode():
            t = theirs(torch.empty(shape))
        assert out.device == "meta" and tuple(out.shape) == tuple(t.shape) == shape


def test_missing_fake_kernel_error_matches_torch():
    ours = make_retorch_softplus("mylib::nofake", fake=False)
    theirs = make_torch_softplus("mylib::nofake", fake=False)
    with pytest.raises(RuntimeError, match="There was no fake impl registered for") as e:
        ours(rd.Tensor(rt.empty(3, device="meta")))
    with pytest.raises(RuntimeError, match="There was no fake impl registered for") as t:
        with FakeTensorMode():
            theirs(torch.empty(3))
    assert str(e.value).split(".")[0] == str(t.value).split(".")[0]


def test_missing_backward_error():
    @custom_op("mylib::noback", mutates_args=())
    def noback(x: rd.Tensor) -> rd.Tensor:
        return rd.Tensor(rt.from_numpy(x.numpy() * 2))

    x = rd.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        noback(x).sum().backward()
    assert noback(rd.tensor([1.0])).numpy().tolist() == [2.0]  # the default kernel, no grad


def test_redefining_replaces_the_op():
    first = make_retorch_softplus("mylib::again")
    second = make_retorch_softplus("mylib::again")
    assert first._lib is not second._lib and not first._lib._undo
    assert second(rd.tensor(np.array([0.0]))).numpy().tolist() == [np.log(2.0)]


def test_torch_compile_one_node_no_graph_break(ops):
    _, theirs = ops
    targets = []

    def backend(gm, example_inputs):
        targets.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    fn = torch.compile(lambda x: theirs(x * 2, 3.0) + 1, backend=backend, fullgraph=True)
    x = torch.linspace(-2, 2, 5)
    torch.testing.assert_close(fn(x), theirs(x * 2, 3.0) + 1)
    assert targets.count("mylib.softplus.default") == 1 and len(targets) == 3


def test_torch_compile_without_fake_fails_fullgraph():
    theirs = make_torch_softplus("mylib::nofake2", fake=False)
    torch._dynamo.reset()
    fn = torch.compile(lambda x: theirs(x) + 1, backend="eager", fullgraph=True)
    with pytest.raises(Exception, match="There was no fake impl registered"):
        fn(torch.ones(3))

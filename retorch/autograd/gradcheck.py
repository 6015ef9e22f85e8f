"""``gradcheck``: compare the engine's gradients with central finite differences.

Mirrors torch/autograd/gradcheck.py in its slow (dense) mode, for a function with one output:
the numerical Jacobian moves each input element by ``±eps``; the analytical one is read row by
row from ``grad`` with one-hot ``grad_outputs``. They must agree within
``atol + rtol * |numerical|``. Use float64 inputs: float32 cannot resolve a 1e-6 step.
"""

from __future__ import annotations

from . import _ops
from .engine import grad
from .grad_mode import no_grad
from .tensor import Tensor


def _one_hot(numel: int, shape, like, index: int, value: float) -> Tensor:
    flat = _ops.scatter_value((numel,), like, 0, _ops.as_array([index]), value)
    return Tensor(_ops.reshape(flat, tuple(shape)))


def _flat_list(t: Tensor) -> list[float]:
    return _ops.tolist(_ops.reshape(t.data, (-1,)))


def _get_numerical_jacobian(fn, inputs: tuple, eps: float) -> list:
    """``[i][j][k]``: d output_k / d (element j of input i), by central differences."""
    jacobians = []
    with no_grad():
        for i, x in enumerate(inputs):
            columns = []
            for j in range(x.numel()):
                step = _one_hot(x.numel(), x.shape, x.data, j, eps)
                plus = fn(*inputs[:i], x + step, *inputs[i + 1 :])
                minus = fn(*inputs[:i], x - step, *inputs[i + 1 :])
                columns.append(_flat_list((plus - minus) / (2 * eps)))
            jacobians.append(columns)
    return jacobians


def _get_analytical_jacobian(fn, inputs: tuple) -> list:
    """``[i][j][k]`` as above, from the engine: one ``grad`` per output element."""
    out = fn(*inputs)
    jacobians = [[[0.0] * out.numel() for _ in range(x.numel())] for x in inputs]
    for k in range(out.numel()):
        onehot = _one_hot(out.numel(), out.shape, out.data, k, 1.0)
        grads = grad(out, inputs, onehot, retain_graph=True, allow_unused=True)
        for i, g in enumerate(grads):
            for j, value in enumerate(_flat_list(g) if g is not None else ()):
                jacobians[i][j][k] = value
    return jacobians


def gradcheck(
    fn,
    inputs,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
) -> bool:
    """True if the analytical and numerical Jacobians of ``fn`` at ``inputs`` agree."""
    inputs = tuple(inputs)
    numerical = _get_numerical_jacobian(fn, inputs, eps)
    analytical = _get_analytical_jacobian(fn, inputs)
    for i, (num, ana) in enumerate(zip(numerical, analytical)):
        if any(
            abs(n - a) > atol + rtol * abs(n)
            for num_col, ana_col in zip(num, ana)
            for n, a in zip(num_col, ana_col)
        ):
            if raise_exception:
                raise RuntimeError(
                    f"Jacobian mismatch for output 0 with respect to input {i},\n"
                    f"numerical:{num}\nanalytical:{ana}\n"
                )
            return False
    return True

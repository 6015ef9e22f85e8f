"""``gradcheck``: compare the engine's gradients with central finite differences.

Mirrors torch/autograd/gradcheck.py (the slow, dense mode): for each input element, perturb it
by ``±eps`` and difference the outputs; the engine's Jacobian, row by row through ``grad``
with one-hot ``grad_outputs``, must agree within ``atol + rtol * |numerical|``.
"""

from __future__ import annotations

from . import _ops
from .engine import grad
from .grad_mode import no_grad
from .tensor import Tensor


def _jacobians(fn, inputs, eps):
    with no_grad():
        out = fn(*inputs)
        numerical = []
        for x in inputs:
            flat = x.data.view(-1)
            cols = []
            for j in range(flat.numel()):
                orig = flat[j].item()
                flat[j] = orig + eps
                plus = fn(*inputs).data.reshape(-1).clone()
                flat[j] = orig - eps
                minus = fn(*inputs).data.reshape(-1).clone()
                flat[j] = orig
                cols.append((plus - minus) / (2 * eps))
            numerical.append(cols)
    analytical = [[None] * x.numel() for x in inputs]
    out = fn(*inputs)
    for k in range(out.numel()):
        onehot = _ops.zeros_like(out.data).view(-1)
        onehot[k] = 1
        grads = grad(
            out,
            inputs,
            grad_outputs=Tensor(onehot.view(out.shape)),
            retain_graph=True,
            allow_unused=True,
        )
        for i, g in enumerate(grads):
            row = _ops.zeros_like(inputs[i].data).view(-1) if g is None else g.data.reshape(-1)
            for j in range(inputs[i].numel()):
                analytical[i][j] = (analytical[i][j] or []) + [row[j].item()]
    return numerical, analytical


def gradcheck(
    fn,
    inputs,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
):
    """True if analytical and numerical Jacobians of ``fn`` at ``inputs`` (float64) agree."""
    inputs = tuple(inputs)
    numerical, analytical = _jacobians(fn, inputs, eps)
    for i, (num_cols, ana_cols) in enumerate(zip(numerical, analytical)):
        for j, (num, ana) in enumerate(zip(num_cols, ana_cols)):
            for k, (n, a) in enumerate(zip(num.tolist(), ana)):
                if abs(n - a) > atol + rtol * abs(n):
                    if raise_exception:
                        raise RuntimeError(
                            f"Jacobian mismatch for output {k} with respect to input {i}, element {j}:\n"
                            f"numerical:{n}\nanalytical:{a}\n"
                        )
                    return False
    return True

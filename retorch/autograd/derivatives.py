"""Every derivative formula, in one table. Mirrors tools/autograd/derivatives.yaml.

``FORMULAS[op] = (node name, backward)``: ``backward(node, grad)`` returns one gradient per
forward input (``None`` for inputs that need none). Formulas are written with autograd
``Tensor`` operations, so when the engine runs with ``create_graph=True`` they record a graph
of their own, which is what makes higher-order gradients work. Gradients of broadcast inputs
come out in the broadcast shape; the engine sums them back to each input's shape
(``validate_outputs`` in engine.cpp).
"""

from __future__ import annotations

from . import _ops


def _saved(node, name):
    return getattr(node, name).unpack()


def _needs(node, i) -> bool:
    """Whether forward input ``i`` wants a gradient (torch's ``should_compute_output``)."""
    return node.next_functions[i].function is not None


def _add(node, g):
    if not _needs(node, 1):
        return g, None
    return g, g * node.alpha if node.alpha != 1 else g


def _sub(node, g):
    if not _needs(node, 1):
        return g, None
    return g, -g * node.alpha if node.alpha != 1 else -g


def _rsub(node, g):
    return (-g,)


def _mul(node, g):
    a, b = _saved(node, "self_"), _saved(node, "other")
    return g * b if _needs(node, 0) else None, g * a if _needs(node, 1) else None


def _div(node, g):
    a, b = _saved(node, "self_"), _saved(node, "other")
    return g / b if _needs(node, 0) else None, -g * a / (b * b) if _needs(node, 1) else None


def _neg(node, g):
    return (-g,)


def _pow_scalar(node, g):
    x = _saved(node, "self_")
    return (g * node.exponent * x ** (node.exponent - 1),)


def _pow_tensor(node, g):
    x, y, result = _saved(node, "self_"), _saved(node, "exponent"), _saved(node, "result")
    return g * y * x ** (y - 1), g * result * x.log()


def _reciprocal(node, g):
    r = _saved(node, "result")
    return (-g * r * r,)


def _exp(node, g):
    return (g * _saved(node, "result"),)


def _log(node, g):
    return (g / _saved(node, "self_"),)


def _tanh(node, g):
    t = _saved(node, "result")
    return (g * (1 - t * t),)


def _sigmoid(node, g):
    s = _saved(node, "result")
    return (g * s * (1 - s),)


def _relu(node, g):
    return (g * (_saved(node, "result") > 0),)


def _sum(node, g):
    return (g.expand(node.self_sizes),)


def _sum_dim(node, g):
    if not node.keepdim:
        for d in sorted(node.dim):
            g = g.unsqueeze(d)
    return (g.expand(node.self_sizes),)


def _mean(node, g):
    return (g.expand(node.self_sizes) / node.numel,)


def _mean_dim(node, g):
    grad = _sum_dim(node, g)[0]
    return (grad / node.count,)


def _max_full(node, g):
    x, result = _saved(node, "self_"), _saved(node, "result")
    mask = x == result
    return (mask * (g / mask.sum()),)


def _max_dim(node, g):
    indices = node.indices
    if not node.keepdim:
        g, indices = g.unsqueeze(node.dim), indices.unsqueeze(node.dim)
    from .tensor import Tensor

    one_hot = Tensor(_ops.scatter_value(node.self_sizes, g.data, node.dim, indices, 1.0))
    return (one_hot * g,)


def _view(node, g):
    return (g.reshape(node.self_sizes),)


def _transpose(node, g):
    return (g.transpose(node.dim0, node.dim1),)


def _t(node, g):
    return (g.t(),)


def _permute(node, g):
    inverse = [0] * len(node.dims)
    for i, d in enumerate(node.dims):
        inverse[d] = i
    return (g.permute(*inverse),)


def _expand(node, g):
    from .tensor import Tensor

    return (Tensor._sum_to(g, node.self_sizes),)


def _unsqueeze(node, g):
    return (g.squeeze(node.dim),)


def _squeeze(node, g):
    return (g.reshape(node.self_sizes),)


def _select(node, g):
    return (g._scatter_into_zeros(node.self_sizes, node.key),)


def _index(node, g):
    return (g._index_add_zeros(node.self_sizes, 0, node.index),)


def _mm(node, g):
    a, b = _saved(node, "self_"), _saved(node, "mat2")
    return (
        g.matmul(b.transpose(0, 1)) if _needs(node, 0) else None,
        a.transpose(0, 1).matmul(g) if _needs(node, 1) else None,
    )


def _mv(node, g):
    a, v = _saved(node, "self_"), _saved(node, "vec")
    return g.unsqueeze(1) * v.unsqueeze(0), a.transpose(0, 1).matmul(g)


def _dot(node, g):
    a, b = _saved(node, "self_"), _saved(node, "tensor")
    return g * b, g * a


def _bmm(node, g):
    a, b = _saved(node, "self_"), _saved(node, "mat2")
    return g.matmul(b.transpose(1, 2)), a.transpose(1, 2).matmul(g)


def _softmax(node, g):
    y = _saved(node, "result")
    return (y * (g - (g * y).sum(node.dim, keepdim=True)),)


def _log_softmax(node, g):
    y = _saved(node, "result")
    return (g - y.exp() * g.sum(node.dim, keepdim=True),)


def _nll_loss(node, g):
    from .tensor import Tensor

    n, c = node.self_sizes
    one_hot = Tensor(
        _ops.scatter_value((n, c), g.data, 1, _ops.unsqueeze(node.target, 1), -1.0 / n)
    )
    return (one_hot * g,)


def _clone(node, g):
    return (g,)


FORMULAS = {
    "add": ("AddBackward0", _add),
    "sub": ("SubBackward0", _sub),
    "rsub": ("RsubBackward1", _rsub),
    "mul": ("MulBackward0", _mul),
    "div": ("DivBackward0", _div),
    "neg": ("NegBackward0", _neg),
    "pow_scalar": ("PowBackward0", _pow_scalar),
    "pow_tensor": ("PowBackward1", _pow_tensor),
    "reciprocal": ("ReciprocalBackward0", _reciprocal),
    "exp": ("ExpBackward0", _exp),
    "log": ("LogBackward0", _log),
    "tanh": ("TanhBackward0", _tanh),
    "sigmoid": ("SigmoidBackward0", _sigmoid),
    "relu": ("ReluBackward0", _relu),
    "sum": ("SumBackward0", _sum),
    "sum_dim": ("SumBackward1", _sum_dim),
    "mean": ("MeanBackward0", _mean),
    "mean_dim": ("MeanBackward1", _mean_dim),
    "max": ("MaxBackward1", _max_full),
    "max_dim": ("MaxBackward0", _max_dim),
    "view": ("ViewBackward0", _view),
    "unsafe_view": ("UnsafeViewBackward0", _view),
    "clone": ("CloneBackward0", _clone),
    "transpose": ("TransposeBackward0", _transpose),
    "t": ("TBackward0", _t),
    "permute": ("PermuteBackward0", _permute),
    "expand": ("ExpandBackward0", _expand),
    "unsqueeze": ("UnsqueezeBackward0", _unsqueeze),
    "squeeze": ("SqueezeBackward0", _squeeze),
    "squeeze_dim": ("SqueezeBackward1", _squeeze),
    "select": ("SelectBackward0", _select),
    "slice": ("SliceBackward0", _select),
    "index": ("IndexBackward0", _index),
    "mm": ("MmBackward0", _mm),
    "mv": ("MvBackward0", _mv),
    "dot": ("DotBackward0", _dot),
    "bmm": ("BmmBackward0", _bmm),
    "softmax": ("SoftmaxBackward0", _softmax),
    "log_softmax": ("LogSoftmaxBackward0", _log_softmax),
    "nll_loss": ("NllLossBackward0", _nll_loss),
}

"""Every derivative formula, in one table. Mirrors tools/autograd/derivatives.yaml.

``FORMULAS[op] = (node name, backward)``: ``backward(node, grad)`` returns one gradient per
forward input (``None`` for inputs that need none). Formulas are written with autograd
``Tensor`` operations, so when the engine runs with ``create_graph=True`` they record a graph
of their own, which is what makes higher-order gradients work. Gradients of broadcast inputs
come out in the broadcast shape; the engine sums them back to each input's shape
(``validate_outputs`` in engine.cpp). Each formula does its arithmetic in the order torch's
does, so that most gradients come out bit for bit equal to torch's.
"""

from __future__ import annotations

import math

from . import _ops
from . import tensor as _tensor  # formulas build Tensors; tensor.py imports this module first


def _saved(node, name):
    return getattr(node, name).unpack(node)


def _needs(node, i) -> bool:
    """Whether forward input ``i`` wants a gradient (torch's ``should_compute_output``)."""
    return node.next_functions[i].function is not None


def _zeros_like(g):
    return _tensor.Tensor(_ops.zeros_like(g.data))


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
    return (
        g * _saved(node, "other") if _needs(node, 0) else None,
        g * _saved(node, "self_") if _needs(node, 1) else None,
    )


def _div(node, g):
    b = _saved(node, "other")
    return (
        g / b if _needs(node, 0) else None,
        -g * ((_saved(node, "self_") / b) / b) if _needs(node, 1) else None,
    )


def _neg(node, g):
    return (-g,)


def _pow_scalar(node, g):
    x, e = _saved(node, "self_"), node.exponent
    return (_zeros_like(g) if e == 0 else g * (x ** (e - 1) * e),)


def _pow_tensor(node, g):
    x, y, result = _saved(node, "self_"), _saved(node, "exponent"), _saved(node, "result")
    zeros = _zeros_like(g)
    return (
        zeros.where(y.data == 0, g * (y * x ** (y - 1))) if _needs(node, 0) else None,
        g * zeros.where((x.data == 0) & (y.data >= 0), result * x.log())
        if _needs(node, 1)
        else None,
    )


def _pow_scalar_base(node, g):  # base ** exponent with a number as the base
    y, result = _saved(node, "exponent"), _saved(node, "result")
    if node.base == 0:  # log(0) = -inf: where the exponent is >= 0 the gradient is 0
        return (g * _zeros_like(g).where(y.data >= 0, result * -math.inf),)
    return (g * (result * math.log(node.base)),)


def _reciprocal(node, g):
    r = _saved(node, "result")
    return (-g * (r * r),)


def _exp(node, g):
    return (g * _saved(node, "result"),)


def _log(node, g):
    return (g / _saved(node, "self_"),)


def _tanh(node, g):
    t = _saved(node, "result")
    return (g * (1 - t * t),)


def _sigmoid(node, g):
    s = _saved(node, "result")
    return (g * (1 - s) * s,)


def _relu(node, g):  # threshold_backward: no gradient where the output was clamped to 0
    return (_zeros_like(g).where(_saved(node, "result").data <= 0, g),)


def _where(node, g):
    condition, zeros = _saved(node, "condition").data, _zeros_like(g)
    return (
        g.where(condition, zeros) if _needs(node, 0) else None,
        zeros.where(condition, g) if _needs(node, 1) else None,
    )


def _clone(node, g):
    return (g,)


def _zero(node, g):
    return (_zeros_like(g),)


def _sum(node, g):
    return (g.expand(node.self_sizes),)


def _sum_dim(node, g):
    if not node.keepdim:
        for d in node.dim:  # sorted, so each lands where it was reduced
            g = g.unsqueeze(d)
    return (g.expand(node.self_sizes),)


def _mean(node, g):
    return (g.expand(node.self_sizes) / node.numel,)


def _mean_dim(node, g):
    return (_sum_dim(node, g)[0] / node.count,)


def _max_full(node, g):  # evenly_distribute_backward: ties share the gradient
    x, result = _saved(node, "self_"), _saved(node, "result")
    mask = x == result
    return (mask * (g / mask.sum()),)


def _max_dim(node, g):  # value_selecting_reduction_backward: all to the selected index
    indices = _saved(node, "indices").data
    if not node.keepdim:
        g, indices = g.unsqueeze(node.dim), _ops.unsqueeze(indices, node.dim)
    one_hot = _tensor.Tensor(_ops.scatter_value(node.self_sizes, g.data, node.dim, indices, 1.0))
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
    return (_tensor.Tensor._sum_to(g, node.self_sizes),)


def _unsqueeze(node, g):
    return (g.squeeze(node.dim),)


def _squeeze(node, g):
    return (g.reshape(node.self_sizes),)


def _select(node, g):
    op = "select" if isinstance(node.key[-1], int) else "slice"
    return (g._select_backward(op, node.self_sizes, node.key),)


def _select_backward(node, g):
    return (g[node.key],)


def _index(node, g):
    return (g._index_backward(node.self_sizes, _saved(node, "indices").data),)


def _index_backward(node, g):
    return (g[_tensor.Tensor(node.index)],)


def _column_major(sizes, strides) -> bool:
    return strides[0] == 1 and strides[1] == sizes[0]


def _mm(node, g):
    """``mm_mat1_backward`` / ``mm_mat2_backward`` (torch/csrc/autograd/FunctionsManual.cpp):
    "if input was column-major, return grad as column-order for efficiency". The gradient
    of ``w.t()`` in ``x @ w.t()`` is then row-major once transposed back, as ``w`` is, so
    AccumulateGrad keeps it without a copy (the gradient layout contract)."""
    grad_self = grad_mat2 = None
    if _needs(node, 0):
        grad_self = _mm_mat1_backward(
            g, _saved(node, "mat2"), node.self_sym_sizes, node.self_sym_strides
        )
    if _needs(node, 1):
        grad_mat2 = _mm_mat2_backward(
            g, _saved(node, "self_"), node.mat2_sym_sizes, node.mat2_sym_strides
        )
    return grad_self, grad_mat2


def _mm_mat1_backward(g, mat2, sizes, strides):
    if _column_major(sizes, strides):
        return mat2.matmul(g.transpose(0, 1)).transpose(0, 1)
    return g.matmul(mat2.transpose(0, 1))


def _mm_mat2_backward(g, mat1, sizes, strides):
    if _column_major(sizes, strides):
        return g.transpose(0, 1).matmul(mat1).transpose(0, 1)
    return mat1.transpose(0, 1).matmul(g)


def _mv(node, g):
    return (
        g.unsqueeze(1) * _saved(node, "vec").unsqueeze(0) if _needs(node, 0) else None,
        _saved(node, "self_").transpose(0, 1).matmul(g) if _needs(node, 1) else None,
    )


def _dot(node, g):
    return (
        g * _saved(node, "tensor") if _needs(node, 0) else None,
        g * _saved(node, "self_") if _needs(node, 1) else None,
    )


def _bmm(node, g):
    return (
        g.bmm(_saved(node, "mat2").transpose(1, 2)) if _needs(node, 0) else None,
        _saved(node, "self_").transpose(1, 2).bmm(g) if _needs(node, 1) else None,
    )


def _softmax(node, g):
    y = _saved(node, "result")
    return (y * (g - (g * y).sum(node.dim, keepdim=True)),)


def _log_softmax(node, g):
    y = _saved(node, "result")
    return (g - y.exp() * g.sum(node.dim, keepdim=True),)


def _nll_loss(node, g):  # mean reduction: -grad / total_weight at each row's target, else 0
    logp, target = _saved(node, "self_"), _saved(node, "target").data
    one_hot = _ops.scatter_value(logp.shape, g.data, 1, _ops.unsqueeze(target, 1), 1.0)
    return (_tensor.Tensor(one_hot) * -(g / _saved(node, "total_weight")),)


#: For ops with several inputs: which inputs' gradients use each saved tensor. derivatives.yaml
#: names the saved tensors in each input's formula, and torch's generated code saves one only
#: if one of those gradients will be computed: ``a * c`` with a constant ``c`` keeps ``c`` only.
USED_BY = {
    "mul": {"self_": (1,), "other": (0,)},
    "div": {"self_": (1,), "other": (0, 1)},
    "mm": {"self_": (1,), "mat2": (0,)},
    "mv": {"self_": (1,), "vec": (0,)},
    "dot": {"self_": (1,), "tensor": (0,)},
    "bmm": {"self_": (1,), "mat2": (0,)},
}

FORMULAS = {
    "add": ("AddBackward0", _add),
    "sub": ("SubBackward0", _sub),
    "rsub": ("RsubBackward1", _rsub),
    "mul": ("MulBackward0", _mul),
    "div": ("DivBackward0", _div),
    "neg": ("NegBackward0", _neg),
    "pow_scalar": ("PowBackward0", _pow_scalar),
    "pow_tensor": ("PowBackward1", _pow_tensor),
    "pow_scalar_base": ("PowBackward2", _pow_scalar_base),
    "reciprocal": ("ReciprocalBackward0", _reciprocal),
    "exp": ("ExpBackward0", _exp),
    "log": ("LogBackward0", _log),
    "tanh": ("TanhBackward0", _tanh),
    "sigmoid": ("SigmoidBackward0", _sigmoid),
    "relu": ("ReluBackward0", _relu),
    "where": ("WhereBackward0", _where),
    "clone": ("CloneBackward0", _clone),
    "zero": ("ZeroBackward0", _zero),
    "sum": ("SumBackward0", _sum),
    "sum_dim": ("SumBackward1", _sum_dim),
    "mean": ("MeanBackward0", _mean),
    "mean_dim": ("MeanBackward1", _mean_dim),
    "max": ("MaxBackward1", _max_full),
    "max_dim": ("MaxBackward0", _max_dim),
    "view": ("ViewBackward0", _view),
    "unsafe_view": ("UnsafeViewBackward0", _view),
    "reshape_alias": ("ReshapeAliasBackward0", _view),
    "transpose": ("TransposeBackward0", _transpose),
    "t": ("TBackward0", _t),
    "permute": ("PermuteBackward0", _permute),
    "expand": ("ExpandBackward0", _expand),
    "unsqueeze": ("UnsqueezeBackward0", _unsqueeze),
    "squeeze": ("SqueezeBackward0", _squeeze),
    "squeeze_dim": ("SqueezeBackward1", _squeeze),
    "squeeze_inplace": ("SqueezeBackward4", _squeeze),
    "select": ("SelectBackward0", _select),
    "slice": ("SliceBackward0", _select),
    "select_backward": ("SelectBackwardBackward0", _select_backward),
    "slice_backward": ("SliceBackwardBackward0", _select_backward),
    "index": ("IndexBackward0", _index),
    "index_backward": ("IndexPutImplBackward0", _index_backward),
    "mm": ("MmBackward0", _mm),
    "mv": ("MvBackward0", _mv),
    "dot": ("DotBackward0", _dot),
    "bmm": ("BmmBackward0", _bmm),
    "softmax": ("SoftmaxBackward0", _softmax),
    "log_softmax": ("LogSoftmaxBackward0", _log_softmax),
    "nll_loss": ("NllLossBackward0", _nll_loss),
}


def _addmm(node, g):
    """``AddmmBackward0`` (derivatives.yaml): ``self: maybe_multiply(grad, beta)``, and
    ``mm_mat1_backward`` / ``mm_mat2_backward`` of the product, each times ``alpha`` after
    its matmul. ``self``'s gradient has the product's shape: the engine sums it down to the
    bias's (``validate_outputs``), as torch's does."""
    alpha, beta = node.alpha, node.beta
    grads = [None, None, None]
    if _needs(node, 0):
        grads[0] = g * beta if beta != 1 else g
    if _needs(node, 1):
        grads[1] = _mm_mat1_backward(
            g, _saved(node, "mat2"), node.mat1_sym_sizes, node.mat1_sym_strides
        )
    if _needs(node, 2):
        grads[2] = _mm_mat2_backward(
            g, _saved(node, "mat1"), node.mat2_sym_sizes, node.mat2_sym_strides
        )
    if alpha != 1:
        grads[1:] = [None if x is None else x * alpha for x in grads[1:]]
    return tuple(grads)


USED_BY["addmm"] = {"mat1": (2,), "mat2": (1,)}
FORMULAS["addmm"] = ("AddmmBackward0", _addmm)

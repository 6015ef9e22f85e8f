"""The operators a decoder-only Transformer needs that chapter 5's ``retorch.Tensor`` lacked,
as autograd ``Function``s over ``retorch.tensor`` (chapter 4's kernels), reached from torch's
own functions through ``__torch_function__``.

Each forward and backward mirrors torch's kernel for the op:

=====================================  ==============================================================
op                                     torch source
=====================================  ==============================================================
``F.embedding``                        ``aten/src/ATen/native/Embedding.cpp`` (embedding,
                                       embedding_dense_backward: an index_add of the rows)
``F.layer_norm``                       ``aten/src/ATen/native/cpu/layer_norm_kernel.cpp``
                                       (mean, rstd = 1/sqrt(var + eps); LayerNormBackwardKernel)
``F.gelu(approximate="tanh")``         ``aten/src/ATen/native/cpu/Activation.cpp`` (GeluKernelImpl,
                                       GeluBackwardKernelImpl): one fused kernel each way, in
                                       ``retorch.tensor.gelu_kernels``
``torch.transpose``, ``torch.narrow``  ``aten/src/ATen/native/TensorShape.cpp`` (views; backward
                                       transposes back, or writes into a zero tensor)
``F.scaled_dot_product_attention``     ``aten/src/ATen/native/transformers/attention.cpp``
                                       (``_scaled_dot_product_attention_math``), or the fused
                                       kernels of ``retorch.tensor.attention_kernels``
=====================================  ==============================================================

The handlers are added to ``retorch/dispatch/overrides.py``'s table when this module is
imported (:func:`install`), beside its own ``F.linear`` and ``F.cross_entropy``.
"""

from __future__ import annotations

import math

import retorch.tensor as rt
from retorch.autograd.function import Function
from retorch.tensor import gelu_kernels as _gk
from retorch.tensor import ops as _o

_GELU_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5  # M_SQRT2 * M_2_SQRTPI * 0.5
_GELU_KAPPA = 0.044715


def _T(raw):
    from retorch.dispatch import Tensor

    return Tensor(raw)


class Embedding(Function):
    """``out[..., :] = weight[idx[...], :]``; the gradient adds each row of ``grad`` into the
    row its index names (``embedding_dense_backward_cpu``: ``index_add_``)."""

    @staticmethod
    def forward(ctx, idx, weight):
        flat = idx.data.reshape(-1)
        ctx.flat, ctx.num_weights = flat, weight.shape[0]
        rows = _o.index_select(weight.data, 0, flat)
        return _T(rows.view(tuple(idx.shape) + (weight.shape[1],)))

    @staticmethod
    def backward(ctx, grad):
        g = grad.data.reshape(-1, grad.shape[-1])
        gw = rt.zeros(ctx.num_weights, g.shape[1], dtype=g.dtype, device=g.device)
        _o.index_add_(gw, 0, ctx.flat, g)
        return None, _T(gw)


class LayerNorm(Function):
    """Normalize over the last dimension: ``(x - mean) * rstd * weight + bias`` with
    ``rstd = 1 / sqrt(var + eps)`` (biased variance), as ``LayerNormKernelImplInternal``."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        xd = x.data
        mean = _o.mean(xd, dim=(-1,), keepdim=True)
        xc = _o.sub(xd, mean)
        var = _o.mean(_o.mul(xc, xc), dim=(-1,), keepdim=True)
        rstd = _o.reciprocal(_o.pow(_o.add(var, eps), 0.5))
        xhat = _o.mul(xc, rstd)
        ctx.xhat, ctx.rstd, ctx.weight = xhat, rstd, weight.data
        return _T(_o.add(_o.mul(xhat, weight.data), bias.data))

    @staticmethod
    def backward(ctx, grad):
        g, xhat, rstd = grad.data, ctx.xhat, ctx.rstd
        lead = tuple(range(g.dim() - 1))
        dw = _o.sum(_o.mul(g, xhat), dim=lead)
        db = _o.sum(g, dim=lead)
        dxhat = _o.mul(g, ctx.weight)
        m1 = _o.mean(dxhat, dim=(-1,), keepdim=True)
        m2 = _o.mean(_o.mul(dxhat, xhat), dim=(-1,), keepdim=True)
        dx = _o.mul(_o.sub(_o.sub(dxhat, m1), _o.mul(xhat, m2)), rstd)
        return _T(dx), _T(dw), _T(db), None


class Gelu(Function):
    """``gelu(x, approximate="tanh")`` as torch runs it: one op, one kernel each way
    (``retorch.tensor.gelu_kernels``: ``GeluKernelImpl``, ``GeluBackwardKernelImpl``), the input
    saved for the backward (torch's ``gelu_backward(grad, self)``). Its node is named as
    torch's, ``GeluBackward0``."""

    @staticmethod
    def forward(ctx, x, approximate):
        ctx.x, ctx.approximate = x.data, approximate
        return _T(_gk.gelu(x.data, approximate))

    @staticmethod
    def backward(ctx, grad):
        return _T(_gk.gelu_backward(grad.data, ctx.x, ctx.approximate)), None


Gelu._backward_cls.__name__ = Gelu._backward_cls.__qualname__ = "GeluBackward0"


class GeluTanh(Function):
    """``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` and torch's derivative of it,
    composed from chapter 4's elementwise ops (each allocating its result): the version the
    fused :class:`Gelu` replaced, kept to compare with it."""

    @staticmethod
    def forward(ctx, x):
        xd = x.data
        inner = _o.mul(_o.add(xd, _o.mul(_o.mul(_o.mul(xd, xd), xd), _GELU_KAPPA)), _GELU_BETA)
        th = _o.tanh(inner)
        ctx.x, ctx.th = xd, th
        return _T(_o.mul(_o.mul(xd, 0.5), _o.add(th, 1.0)))

    @staticmethod
    def backward(ctx, grad):
        x, th = ctx.x, ctx.th
        left_derivative = _o.mul(_o.add(th, 1.0), 0.5)
        dinner = _o.mul(_o.add(_o.mul(_o.mul(x, x), 3.0 * _GELU_KAPPA), 1.0), _GELU_BETA)
        sech2 = _o.add(_o.mul(_o.mul(th, th), -1.0), 1.0)  # 1 - tanh^2
        right_derivative = _o.mul(_o.mul(_o.mul(x, 0.5), sech2), dinner)
        return _T(_o.mul(grad.data, _o.add(left_derivative, right_derivative)))


class Transpose(Function):
    """A view with two dimensions swapped; its gradient is the gradient swapped back."""

    @staticmethod
    def forward(ctx, x, dim0, dim1):
        ctx.dims = (dim0, dim1)
        return _T(rt.transpose(x.data, dim0, dim1))

    @staticmethod
    def backward(ctx, grad):
        return _T(rt.transpose(grad.data, *ctx.dims)), None, None


class Narrow(Function):
    """``length`` entries from ``start`` along ``dim``; the gradient goes into those entries of a
    zero tensor (``narrow`` is a ``slice``, whose backward is ``slice_backward``)."""

    @staticmethod
    def forward(ctx, x, dim, start, length):
        ctx.args, ctx.shape = (dim, start, length), tuple(x.shape)
        return _T(rt.narrow(x.data, dim, start, length))

    @staticmethod
    def backward(ctx, grad):
        g = rt.zeros(*ctx.shape, dtype=grad.data.dtype, device=grad.data.device)
        _o.copy_(rt.narrow(g, *ctx.args), grad.data)
        return _T(g), None, None, None


# ------------------------------------------------------------------ torch functions' handlers
def _embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
               scale_grad_by_freq=False, sparse=False):  # fmt: skip
    if padding_idx is not None or max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError(
            "retorch's embedding supports a dense lookup only: padding_idx=None, max_norm=None, "
            "scale_grad_by_freq=False, sparse=False"
        )
    if input.data.dtype not in (rt.int64, rt.int32):
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar "
            f"types: Long, Int; but got {input.data.dtype} instead (while checking arguments "
            "for embedding)"
        )
    return Embedding.apply(input, weight)


def _layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    shape = tuple(normalized_shape)
    if len(shape) != 1 or weight is None or bias is None:
        raise NotImplementedError(
            "retorch's layer_norm normalizes over the last dimension with a weight and a bias"
        )
    if tuple(input.shape[-1:]) != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape [*, {shape[0]}], "
            f"but got input of size{list(input.shape)}"
        )
    return LayerNorm.apply(input, weight, bias, eps)


def _gelu(input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")
    if approximate != "tanh":
        raise NotImplementedError(
            "retorch's gelu has the tanh approximation only (retorch.tensor has no erf kernel): "
            "use F.gelu(x, approximate='tanh') or nn.GELU(approximate='tanh')"
        )
    return Gelu.apply(input, approximate)


def _transpose(input, dim0, dim1):
    nd = input.dim()
    return Transpose.apply(input, dim0 % nd, dim1 % nd)


def _narrow(input, dim, start, length):
    return Narrow.apply(input, dim % input.dim(), start, length)


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):  # fmt: skip
    from .attention import scaled_dot_product_attention

    if attn_mask is not None or dropout_p != 0.0 or enable_gqa:
        raise NotImplementedError(
            "retorch's scaled_dot_product_attention supports is_causal and scale only "
            "(attn_mask=None, dropout_p=0.0, enable_gqa=False)"
        )
    return scaled_dot_product_attention(query, key, value, is_causal=is_causal, scale=scale)


def handlers() -> dict:
    import torch
    import torch.nn.functional as F

    return {
        F.embedding: _embedding,
        F.layer_norm: _layer_norm,
        F.gelu: _gelu,
        torch.transpose: _transpose,
        torch.narrow: _narrow,
        F.scaled_dot_product_attention: _sdpa,
    }


def install() -> None:
    """Add the handlers to ``overrides``' table (built first, so that its own stay)."""
    from retorch.dispatch import overrides

    if not overrides._HANDLERS:
        overrides._HANDLERS.update(overrides._build())
    overrides._HANDLERS.update(handlers())

"""``scaled_dot_product_attention`` on ``retorch.Tensor``, with its backward.

Mirrors ``aten/src/ATen/native/transformers/attention.cpp``: ``scaled_dot_product_attention``
chooses a backend, and ``_scaled_dot_product_attention_math`` is the reference one
(``softmax(q @ k^T * scale + mask) @ v``). The backward is the math path's, written out as
flash attention's backward writes it (``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``,
``cpu_flash_attention_backward``): with ``P`` the probabilities and ``dO`` the output's
gradient,

    dV = P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dO * O)),   dQ = dS K s,   dK = dS^T Q s

where ``rowsum(dO * O)`` equals ``rowsum(dP * P)``. ``retorch.tensor.attention_kernels`` has
the fused versions (torch's CPU flash attention in Numba, tasks of (batch x head, block of query
rows); in Numba-CUDA, a block per (batch x head, query row), two kernels for the backward);
``BACKEND`` says which one runs.
"""

from __future__ import annotations

import math

import retorch.tensor as rt
from retorch.autograd.function import Function
from retorch.tensor import ops as _o

#: "math" (composed from chapter 4's ops) or "fused" (retorch.tensor.attention_kernels)
BACKEND = ["math"]


def _T(raw):
    from retorch.dispatch import Tensor

    return Tensor(raw)


def _fold(x):
    """(..., T, D) -> (N, T, D), row-major (a copy when the view is not)."""
    return rt.reshape(x, (-1,) + tuple(x.shape[-2:]))


def causal_mask(t: int, s: int, device="cpu"):
    """True where key ``j`` lies in query ``i``'s future: ``j > i`` (torch's ``is_causal``:
    a lower-triangular mask of ones kept, ``tril(ones(L, S))``)."""
    row = rt.arange(t, device=device).view((t, 1))
    col = rt.arange(s, device=device).view((1, s))
    return _o.gt(col, row)


def attention_math(q, k, v, is_causal, scale):
    """Forward on raw (N, T, D) tensors: returns (out, probabilities)."""
    scores = _o.mul(_o.bmm(q, rt.transpose(k, 1, 2)), scale)
    if is_causal:
        mask = causal_mask(q.shape[1], k.shape[1], q.device)
        scores = _o.where(mask, rt.full((), float("-inf"), dtype=q.dtype), scores)
    p = _o.softmax(scores, -1)
    return _o.bmm(p, v), p


def attention_math_backward(grad, q, k, v, p, scale):
    dv = _o.bmm(rt.transpose(p, 1, 2), grad)
    dp = _o.bmm(grad, rt.transpose(v, 1, 2))
    ds = _o.mul(p, _o.sub(dp, _o.sum(_o.mul(dp, p), dim=(-1,), keepdim=True)))
    dq = _o.mul(_o.bmm(ds, k), scale)
    dk = _o.mul(_o.bmm(rt.transpose(ds, 1, 2), q), scale)
    return dq, dk, dv


class ScaledDotProductAttention(Function):
    """The attention op as one autograd node, whichever backend computes it."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal, scale):
        shape = tuple(query.shape)
        q, k, v = _fold(query.data), _fold(key.data), _fold(value.data)
        ctx.saved = (q, k, v, is_causal, scale, shape, BACKEND[0])
        if BACKEND[0] == "fused":
            from retorch.tensor import attention_kernels as ak

            out, lse = ak.attention_forward(q, k, v, is_causal, scale)
            ctx.stats = (out, lse)
        else:
            out, p = attention_math(q, k, v, is_causal, scale)
            ctx.stats = p
        return _T(out.view(shape[:-1] + (v.shape[-1],)))

    @staticmethod
    def backward(ctx, grad):
        q, k, v, is_causal, scale, shape, backend = ctx.saved
        g = _fold(grad.data)
        if backend == "fused":
            from retorch.tensor import attention_kernels as ak

            out, lse = ctx.stats
            dq, dk, dv = ak.attention_backward(g, q, k, v, out, lse, is_causal, scale)
        else:
            dq, dk, dv = attention_math_backward(g, q, k, v, ctx.stats, scale)
        lead = shape[:-2]
        return (
            _T(dq.view(shape)),
            _T(dk.view(lead + tuple(k.shape[-2:]))),
            _T(dv.view(lead + tuple(v.shape[-2:]))),
            None,
            None,
        )


def scaled_dot_product_attention(query, key, value, is_causal=False, scale=None):
    """``F.scaled_dot_product_attention(q, k, v, is_causal=..., scale=...)`` on retorch
    tensors of shape (..., L, E), (..., S, E), (..., S, Ev); ``scale`` defaults to
    ``1/sqrt(E)`` (``sdp::calculate_scale``)."""
    if query.dim() < 2 or query.dim() != key.dim() or key.dim() != value.dim():
        raise RuntimeError(
            "scaled_dot_product_attention: query, key and value must have the same number of "
            f"dimensions (at least 2), got {query.dim()}, {key.dim()} and {value.dim()}"
        )
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise RuntimeError(
            f"scaled_dot_product_attention: query {list(query.shape)}, key {list(key.shape)} and "
            f"value {list(value.shape)} must agree on E (query, key) and on S (key, value)"
        )
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    return ScaledDotProductAttention.apply(query, key, value, bool(is_causal), scale)

"""The decomposition table handed to AOTAutograd: composite ops into the ops we lower.

Mirrors torch/_inductor/decomposition.py (``select_decomp_table``): torch's own decompositions
from torch/_decomp/decompositions.py turn softmax, log_softmax, layer_norm, gelu and their
backwards into ``amax``/``sum``/``exp``/``mul``... A few are written here, as Inductor writes
its own: ``var_mean``, ``var`` and ``mean`` as sums (torch's go through ``prims``).
"""

from __future__ import annotations

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten

DECOMPOSED_BY_TORCH = [
    aten._softmax, aten._log_softmax, aten._softmax_backward_data,
    aten._log_softmax_backward_data, aten.native_layer_norm, aten.native_layer_norm_backward,
    aten.gelu, aten.gelu_backward, aten.sigmoid_backward, aten.tanh_backward,
    aten.threshold_backward, aten.silu, aten.silu_backward, aten.addmm, aten.rsub,
]  # fmt: skip

decompositions: dict = {}


def register_decomposition(op):
    def wrap(fn):
        for overload in op.overloads():
            decompositions[getattr(op, overload)] = fn
        return fn

    return wrap


def _dims(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    return [dim] if isinstance(dim, int) else list(dim)


@register_decomposition(aten.mean)
def mean(x, dim=None, keepdim=False, *, dtype=None):
    dims = _dims(x, dim)
    n = 1
    for d in dims:
        n *= x.shape[d]
    return aten.sum.dim_IntList(x, dims, keepdim) / n


@register_decomposition(aten.var_mean)
def var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):  # var_mean.default(x, unbiased)
        dim, unbiased = None, dim
    dims = _dims(x, dim)
    n = 1
    for d in dims:
        n *= x.shape[d]
    corr = (1 if unbiased is None or unbiased else 0) if correction is None else correction
    m = aten.sum.dim_IntList(x, dims, True) / n
    diff = x - m
    var = aten.sum.dim_IntList(diff * diff, dims, keepdim) / max(n - corr, 0)
    return var, (m if keepdim else aten.squeeze.dims(m, dims))


@register_decomposition(aten.var)
def var(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var_mean(x, dim, unbiased, keepdim, correction=correction)[0]


def select_decomp_table() -> dict:
    """torch's decompositions of the composite ops, then ours (torch's function of that name)."""
    return {**get_decompositions(DECOMPOSED_BY_TORCH), **decompositions}

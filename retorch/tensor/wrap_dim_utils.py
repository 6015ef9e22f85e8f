"""Negative dims and their errors: mirrors ``c10/core/WrapDimMinimal.h`` (``maybe_wrap_dim``)
and ``aten/src/ATen/WrapDimUtils.h`` (``dim_list_to_bitset``).

``dim`` may count from the end (``-1`` is the last dim). A 0-dim tensor answers as if it had
one dim (``wrap_scalar``), so ``x.sum(0)`` and ``x.sum(-1)`` work on a scalar while
``x.sum(1)`` does not. Out of range is an ``IndexError`` naming the valid range.
"""

from __future__ import annotations


def maybe_wrap_dim(dim: int, dim_post_expr: int, wrap_scalar: bool = True) -> int:
    """``c10::maybe_wrap_dim``: ``dim`` in ``[-n, n-1]`` mapped to ``[0, n-1]``."""
    if dim_post_expr <= 0:
        if not wrap_scalar:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        dim_post_expr = 1  # a scalar behaves like a 1-d tensor for dim wrapping
    lo, hi = -dim_post_expr, dim_post_expr - 1
    if dim < lo or dim > hi:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})"
        )
    return dim + dim_post_expr if dim < 0 else dim


def dim_list_to_bitset(dims, ndims: int) -> list[bool]:
    """``at::dim_list_to_bitset``: which dims a reduction covers; repeats are an error."""
    seen = [False] * max(ndims, 1)
    for d in dims:
        w = maybe_wrap_dim(d, ndims)
        if seen[w]:
            raise RuntimeError(f"dim {w} appears multiple times in the list of dims")
        seen[w] = True
    return seen

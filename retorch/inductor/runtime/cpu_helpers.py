"""Scalar math that generated CPU kernels call, written so LLVM vectorizes the loops around it.

The role of torch/_inductor/runtime/triton_helpers.py (and, for the C++ backend, of at::vec's
Sleef calls in aten/src/ATen/cpu/vec/vec_base.h): Inductor's C++ kernels call a vectorized exp.
Numba without Intel's SVML calls scalar libm ``expf``, which stops LLVM from vectorizing the
loop. :func:`exp` is Sleef's method in plain float32 arithmetic: ``x = k ln2 + r`` with
``k`` rounded by adding and subtracting ``1.5 * 2**23``, ``exp(r)`` by a degree-7 polynomial,
and ``2**k`` made from its bits (two factors, so that results reach the subnormals). It is
within 1 ulp of the correctly rounded value. There is no fused multiply-add or fastmath, so
every machine computes the same bits. ``tanh`` and ``sigmoid`` are written through it
(``math.tanh`` is as scalar as ``expf``; tanh's absolute error stays below 2e-7).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

F = np.float32


@intrinsic
def bits_to_float32(typingctx, bits):
    """The float32 whose bits are the int32 ``bits`` (C++'s ``bit_cast``)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))

    return types.float32(types.int32), codegen


@numba.njit(inline="always", cache=True)
def exp(x):
    x = F(x)
    x = F(-104.0) if x < F(-104.0) else x  # NaN passes both tests unchanged
    x = F(89.0) if x > F(89.0) else x
    kf = (x * F(1.442695) + F(12582912.0)) - F(12582912.0)  # round(x / ln2)
    r = x - kf * F(0.693359375) - kf * F(-2.12194440e-4)  # ln2 in two parts (Cody-Waite)
    p = F(1.0) + r * (F(1.0) + r * (F(0.5) + r * (F(1 / 6) + r * (F(1 / 24) + r * (
        F(1 / 120) + r * (F(1 / 720) + r * F(1 / 5040)))))))  # fmt: skip
    k = np.int32(kf)
    h = k >> 1
    return p * bits_to_float32((h + 127) << 23) * bits_to_float32((k - h + 127) << 23)


@numba.njit(inline="always", cache=True)
def tanh(x):
    return F(1.0) - F(2.0) / (exp(F(2.0) * F(x)) + F(1.0))


@numba.njit(inline="always", cache=True)
def sigmoid(x):
    return F(1.0) / (F(1.0) + exp(-F(x)))


@numba.njit(inline="always", cache=True)
def maximum(a, b):
    """``torch.maximum``: NaN wins (one compare more than a plain max)."""
    return b if (b > a or b != b) else a


@numba.njit(inline="always", cache=True)
def minimum(a, b):
    return b if (b < a or b != b) else a

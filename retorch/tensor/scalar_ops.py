"""The per-element math of every elementwise op, written once as plain Python.

torch writes each op's scalar body once (``aten/src/ATen/native/cpu/BinaryOpsKernel.cpp``,
``UnaryOpsKernel.cpp``; on CUDA ``BinaryMulKernel.cu`` and friends, or the shared
``aten/src/ATen/native/ufunc/add.h``) and instantiates it for every dtype and device. Here
each function below is compiled twice: with ``numba.njit`` for the CPU loops
(``cpu_kernels.py``) and as a Numba-CUDA device function for the GPU kernels
(``cuda_kernels.py``). An op is chosen by a small integer code, so one compiled loop per
dtype serves every op (torch compiles one loop per op and dtype; with Numba's compile times
one per dtype keeps the first run short). The code is the same for every element, so the
branch is taken the same way by every thread and every loop iteration.
"""

from __future__ import annotations

import math

# binary op codes
ADD, SUB, MUL, DIV, POW, MAXIMUM, MINIMUM, ADD_ALPHA = 0, 1, 2, 3, 4, 5, 6, 7
BINARY = {
    "add": ADD,
    "sub": SUB,
    "mul": MUL,
    "div": DIV,
    "pow": POW,
    "maximum": MAXIMUM,
    "minimum": MINIMUM,
}
BINARY_NAMES = {v: k for k, v in BINARY.items()} | {ADD_ALPHA: "add"}
# comparison op codes
GT, LT, GE, LE, EQ, NE = 0, 1, 2, 3, 4, 5
COMPARE = {"gt": GT, "lt": LT, "ge": GE, "le": LE, "eq": EQ, "ne": NE}
# unary op codes
NEG, EXP, LOG, TANH, SIGMOID, RELU, RECIPROCAL, COPY = 0, 1, 2, 3, 4, 5, 6, 7
UNARY = {
    "neg": NEG,
    "exp": EXP,
    "log": LOG,
    "tanh": TANH,
    "sigmoid": SIGMOID,
    "relu": RELU,
    "reciprocal": RECIPROCAL,
}


def binary_float(op, a, b, alpha):
    """Arithmetic on two floats of one dtype (float32 stays float32, as torch computes)."""
    if op == ADD:
        return a + b
    if op == SUB:
        return a - b
    if op == MUL:
        return a * b
    if op == DIV:
        return a / b
    if op == POW:
        return a**b
    if op == MAXIMUM:  # NaN wins, as torch.maximum
        if a != a:
            return a
        if b != b:
            return b
        return a if a > b else b
    if op == MINIMUM:
        if a != a:
            return a
        if b != b:
            return b
        return a if a < b else b
    # ADD_ALPHA: a + alpha * b. For float32 the product is exact in float64, so one rounding
    # of the float64 sum equals CPU torch's fused multiply-add except at rare float32 ties.
    return a + alpha * b


def binary_int(op, a, b, alpha):
    """Arithmetic on integers and bools (DIV never gets here: it promotes to float)."""
    if op == ADD:
        return a + b
    if op == SUB:
        return a - b
    if op == MUL:
        return a * b
    if op == POW:  # repeated squaring, wrapping as C integers do (as int_pow)
        result = a - a + 1
        base = a
        e = b
        while e > 0:
            if e & 1:
                result = result * base
            base = base * base
            e >>= 1
        return result
    if op == MAXIMUM:
        return a if a > b else b
    if op == MINIMUM:
        return a if a < b else b
    return a + alpha * b


def compare(op, a, b):
    if op == GT:
        return a > b
    if op == LT:
        return a < b
    if op == GE:
        return a >= b
    if op == LE:
        return a <= b
    if op == EQ:
        return a == b
    return a != b


def unary_float(op, x):
    """Float-only math, evaluated in float64 and rounded once when stored (float32 results
    are within an ulp or so of torch's vectorised SLEEF versions: tests state a tolerance)."""
    v = 1.0 * x
    if op == NEG:
        return -v
    if op == EXP:
        return math.exp(v)
    if op == LOG:
        if v < 0.0:
            return math.nan
        if v == 0.0:
            return -math.inf
        return math.log(v)
    if op == TANH:
        return math.tanh(v)
    if op == SIGMOID:
        return 1.0 / (1.0 + math.exp(-v))
    if op == RELU:
        return v if v > 0.0 else (v if v != v else 0.0)
    if op == RECIPROCAL:
        return 1.0 / v
    return v


def unary_int(op, x):
    if op == NEG:
        return -x
    if op == RELU:
        return x if x > 0 else x - x
    return x


COMPARE_NAMES = {v: k for k, v in COMPARE.items()}
UNARY_NAMES = {v: k for k, v in UNARY.items()}

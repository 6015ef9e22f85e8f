"""What both backends share: an ``ops`` handler that prints one line per op, with CSE.

Mirrors torch/_inductor/codegen/common.py: ``KernelOps`` is the ``OpsHandler`` a kernel
installs while it calls its nodes' loop bodies. Each ``ops.*`` call appends a line
``tmp3 = <expr>`` and returns the name ``tmp3`` (a :class:`CSEVariable`, which knows its dtype
as torch's does); an expression already printed returns its earlier name (common
subexpression elimination, torch's ``CSE``). Backends override the few ops whose spelling
differs (``exp`` on the CPU calls the vectorizable helper, on CUDA ``math.exp``).
"""

from __future__ import annotations

import re

import torch

NP_DTYPES = {torch.float32: "np.float32", torch.float64: "np.float64",
             torch.bool: "np.bool_", torch.int64: "np.int64", torch.int32: "np.int32"}  # fmt: skip
_RANK = {torch.bool: 0, torch.int32: 1, torch.int64: 2, torch.float32: 3, torch.float64: 4}


def promote(*dtypes):
    return max(dtypes, key=lambda d: _RANK.get(d, 3))


class CSEVariable(str):
    """A kernel-local variable name that carries the dtype of its value."""

    def __new__(cls, name, dtype):
        obj = super().__new__(cls, name)
        obj.dtype = dtype
        return obj


class KernelOps:
    """Prints ``ops.*`` calls as lines of Python into ``self.lines`` (one loop body)."""

    BINARY = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "gt": ">", "ge": ">=",
              "lt": "<", "le": "<=", "eq": "==", "ne": "!="}  # fmt: skip

    def __init__(self, kernel, lines, cache, indent, hoist=None):
        self.kernel, self.lines, self.cache, self.indent = kernel, lines, cache, indent
        self.hoist = hoist  # (row lines, [insert position], row cache, row indent) in a loop

    def emit(self, expr, dtype):
        key = (expr, dtype)
        if key in self.cache:
            return self.cache[key]
        if self.hoist and not set(re.findall(r"[A-Za-z_]\w*", expr)) & self.kernel.loop_names:
            # Loop-invariant: computed once per row, before the loop (torch's CSE per loop level)
            lines, pos, cache, indent = self.hoist
            if key not in cache:
                cache[key] = CSEVariable(f"tmp{self.kernel.next_tmp()}", dtype)
                lines.insert(pos[0], f"{indent}{cache[key]} = {expr}")
                pos[0] += 1
            self.cache[key] = cache[key]
            return cache[key]
        var = CSEVariable(f"tmp{self.kernel.next_tmp()}", dtype)
        self.lines.append(f"{self.indent}{var} = {expr}")
        if self.hoist:
            self.kernel.loop_names.add(str(var))
        self.cache[key] = var
        return var

    def cast(self, expr, dtype):
        return f"{NP_DTYPES[dtype]}({expr})"

    def load(self, name, index):
        local = self.kernel.local_value(name, index)
        if local is not None:
            return local
        return self.emit(self.kernel.load_target(name, index), self.kernel.buffer_dtype(name))

    def constant(self, value, dtype):
        if isinstance(value, bool) or dtype == torch.bool:
            return CSEVariable(repr(bool(value)), torch.bool)
        if value == float("inf") or value == float("-inf") or value != value:
            value = f"np.{'nan' if value != value else 'inf' if value > 0 else '-np.inf'}"
            value = value.replace("np.-np.", "-np.")
        return self.emit(self.cast(value, dtype), dtype)

    def to_dtype(self, x, dtype):
        return self.emit(self.cast(x, dtype), dtype)

    def where(self, c, a, b):
        dtype = promote(a.dtype, b.dtype)
        return self.emit(f"{a} if {c} else {b}", dtype)

    def __getattr__(self, name):
        if name in self.BINARY:
            op = self.BINARY[name]

            def binary(a, b):
                dtype = torch.bool if op[0] in "<>=!" else promote(a.dtype, b.dtype)
                return self.emit(f"{a} {op} {b}", dtype)

            return binary
        raise NotImplementedError(f"{type(self).__name__} has no ops.{name}")

    def neg(self, x):
        return self.emit(f"-{x}", x.dtype)

    def pow(self, a, b):
        if str(b) in ("np.float32(2.0)", "np.float64(2.0)"):
            return self.emit(f"{a} * {a}", a.dtype)
        if str(b) in ("np.float32(3.0)", "np.float64(3.0)"):
            return self.emit(f"{a} * {a} * {a}", a.dtype)
        return self.emit(self.cast(f"{a} ** {b}", a.dtype), a.dtype)

    def relu(self, x):
        """torch's relu keeps NaN and -0.0: only a value below zero becomes zero."""
        zero = self.constant(0, x.dtype)
        return self.emit(f"{zero} if {x} < {zero} else {x}", x.dtype)

    def abs(self, x):
        return self.emit(f"abs({x})", x.dtype)

    def reciprocal(self, x):
        return self.truediv(self.constant(1.0, x.dtype), x)

    def sqrt(self, x):
        return self.emit(self.cast(f"math.sqrt({x})", x.dtype), x.dtype)

    def rsqrt(self, x):
        return self.emit(self.cast(f"1.0 / math.sqrt({x})", x.dtype), x.dtype)

    def log(self, x):
        return self.emit(self.cast(f"math.log({x})", x.dtype), x.dtype)

    def exp(self, x):
        return self.emit(self.cast(f"math.exp({x})", x.dtype), x.dtype)

    def tanh(self, x):
        return self.emit(self.cast(f"math.tanh({x})", x.dtype), x.dtype)

    def sigmoid(self, x):
        return self.emit(self.cast(f"1.0 / (1.0 + math.exp(-{x}))", x.dtype), x.dtype)

    def maximum(self, a, b):
        return self.emit(f"{a} if ({a} >= {b} or {a} != {a}) else {b}", promote(a.dtype, b.dtype))

    def minimum(self, a, b):
        return self.emit(f"{a} if ({a} <= {b} or {a} != {a}) else {b}", promote(a.dtype, b.dtype))

"""float16 and bfloat16: conversion bit by bit, and CPU kernels that compute in float32.

Conversion mirrors two headers, line by line, on NumPy arrays of bits. In torch 2.13 they
live in ``torch/headeronly/util/`` (``c10/util/Half.h`` and ``BFloat16.h`` only include them
and add the vectorized paths); the functions are still in namespace ``c10::detail``:

- ``torch/headeronly/util/Half.h``: ``fp16_ieee_from_fp32_value`` (float32 -> float16: scale the value so
  that float32's own rounding, in one addition, rounds the mantissa to 10 bits to nearest
  even, subnormals and overflow to infinity included) and ``fp16_ieee_to_fp32_value``
  (float16 -> float32, exact: a multiplication for normal numbers, a "magic" subtraction
  for subnormals).
- ``torch/headeronly/util/BFloat16.h``: ``round_to_nearest_even`` (float32 -> bfloat16: add 0x7FFF plus
  the lowest kept bit, keep the top 16 bits; NaN -> 0x7FC0) and ``f32_from_bits`` (bfloat16
  -> float32: the 16 bits become the top half of a float32, exact).

bfloat16 has no NumPy or Numba type: it is stored as ``uint16``, the top half of a float32.
float16 is stored as NumPy's float16 (so ``numpy()`` gives NumPy float16), but retorch never
lets NumPy convert it: kernels see its bits as ``uint16`` too.

Kernels: ``aten/src/ATen/OpMathType.h`` gives each reduced-precision type an "opmath" type,
float for both, and torch's CPU kernels (``binary_op_scalar``, ``cascade_sum``, the
``Vectorized<BFloat16>`` conversions in ``cpu/vec/vec256/vec256_bfloat16.h``) load each
element, widen it to float32, compute in float32 and round once when they store. The
wrappers below do the same around retorch's float32 Numba loops: half operands are widened
to float32 arrays (whole storages, so strides and offsets keep their meaning), the float32
loop runs, and only the elements the loop wrote are rounded back into the output's storage.
The wrappers replace the CPU entries of the dispatch stubs (``REGISTER_DISPATCH``), falling
through to the original kernel when no operand is half, as ``AT_DISPATCH_..._AND2(Half,
BFloat16, ...)`` adds two cases to a kernel's dtype switch.
"""

from __future__ import annotations

import numpy as np

from . import cpu_kernels as K
from . import scalar_ops as S
from .dispatch_stub import stub
from .dtype import bfloat16, float16, float32

_U32, _F32 = np.uint32, np.float32


def _bits32(f) -> np.ndarray:
    return np.ascontiguousarray(f, dtype=_F32).view(_U32)


def fp16_ieee_from_fp32_value(f) -> np.ndarray:
    """float32 values -> float16 bits (uint16), as ``fp16_ieee_from_fp32_value`` in
    ``torch/headeronly/util/Half.h`` computes them."""
    f = np.ascontiguousarray(f, dtype=_F32)
    scale_to_inf = np.array(0x77800000, _U32).view(_F32)  # 2**112
    scale_to_zero = np.array(0x08800000, _U32).view(_F32)  # 2**-110
    with np.errstate(over="ignore", invalid="ignore"):
        base = (np.abs(f) * scale_to_inf) * scale_to_zero
    w = f.view(_U32)
    shl1_w = w + w  # the sign shifted out (uint32 arithmetic wraps, as C's)
    sign = w & _U32(0x80000000)
    bias = shl1_w & _U32(0xFF000000)
    bias = np.maximum(bias, _U32(0x71000000))
    with np.errstate(over="ignore", invalid="ignore"):
        base = ((bias >> _U32(1)) + _U32(0x07800000)).view(_F32) + base
    bits = base.view(_U32)
    exp_bits = (bits >> _U32(13)) & _U32(0x00007C00)
    mantissa_bits = bits & _U32(0x00000FFF)
    nonsign = exp_bits + mantissa_bits
    out = (sign >> _U32(16)) | np.where(shl1_w > _U32(0xFF000000), _U32(0x7E00), nonsign)
    return out.astype(np.uint16)


def fp16_ieee_to_fp32_value(h) -> np.ndarray:
    """float16 bits (uint16) -> float32 values, as ``fp16_ieee_to_fp32_value`` in
    ``torch/headeronly/util/Half.h`` computes them."""
    w = np.asarray(h, dtype=np.uint16).astype(_U32) << _U32(16)
    sign = w & _U32(0x80000000)
    two_w = w + w
    exp_offset = _U32(0xE0 << 23)
    exp_scale = np.array(0x07800000, _U32).view(_F32)  # 2**-112
    with np.errstate(invalid="ignore"):
        normalized = ((two_w >> _U32(4)) + exp_offset).view(_F32) * exp_scale
    magic_mask = _U32(126 << 23)
    denormalized = ((two_w >> _U32(17)) | magic_mask).view(_F32) - _F32(0.5)
    cutoff = _U32(1 << 27)
    result = sign | np.where(two_w < cutoff, denormalized.view(_U32), normalized.view(_U32))
    return result.view(_F32)


def round_to_nearest_even(f) -> np.ndarray:
    """float32 values -> bfloat16 bits (uint16), as ``round_to_nearest_even`` in
    ``torch/headeronly/util/BFloat16.h`` rounds them."""
    f = np.ascontiguousarray(f, dtype=_F32)
    u32 = f.view(_U32)
    rounding_bias = ((u32 >> _U32(16)) & _U32(1)) + _U32(0x7FFF)
    rounded = ((u32 + rounding_bias) >> _U32(16)).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), rounded).astype(np.uint16)


def bf16_to_fp32(b) -> np.ndarray:
    """bfloat16 bits -> float32: ``c10::detail::f32_from_bits``, the bits as the top half."""
    return (np.asarray(b, dtype=np.uint16).astype(_U32) << _U32(16)).view(_F32)


def is_half(d) -> bool:
    return d is float16 or d is bfloat16


def to_float32(bits, d) -> np.ndarray:
    """The float32 value of each element of a float16 / bfloat16 storage array."""
    bits = np.asarray(bits).view(np.uint16)
    return fp16_ieee_to_fp32_value(bits) if d is float16 else bf16_to_fp32(bits)


def from_float32(f, d) -> np.ndarray:
    """float32 values rounded to float16 / bfloat16 bits (uint16), to nearest even."""
    return fp16_ieee_from_fp32_value(f) if d is float16 else round_to_nearest_even(f)


def to_storage(values, d) -> np.ndarray:
    """Host values (any NumPy array) in ``d``'s storage representation. A float64 goes to
    float32 first, as ``c10::convert<Half>(double)`` does (the Half and BFloat16
    constructors take a float): so a double is rounded twice, as in torch."""
    values = np.asarray(values)
    if not is_half(d):
        return values.astype(d.np)
    return from_float32(values.astype(_F32), d).view(d.np).reshape(values.shape)  # 0-dim stays


def tensor_from_bits(bits, d):
    """A new float16 / bfloat16 tensor holding these 16-bit patterns (no rounding)."""
    from .tensor_factories import empty

    bits = np.asarray(bits, dtype=np.uint16)
    out = empty(bits.shape, dtype=d)
    out.numpy().view(np.uint16)[...] = bits
    return out


# ---- opmath wrappers around the CPU stubs ----------------------------------------------------


def _dtypes(it):
    return [op.tensor._impl.dtype for op in it.operands]


def _written(shape, strides_row, offset) -> np.ndarray:
    """Element indices an iteration writes in the output's storage."""
    idx = np.full((), offset, dtype=np.int64)
    for d in range(len(shape)):
        idx = idx[..., None] + np.arange(shape[d], dtype=np.int64) * strides_row[d]
    return idx.reshape(-1)


def _widen(arrays, dts):
    """Each half operand's storage as float32 (others as they are)."""
    return [to_float32(a, d) if is_half(d) else a for a, d in zip(arrays, dts)]


def _store(out_bits, out_f32, d, shape, strides, offset):
    """Round once on store: only the elements the loop wrote."""
    idx = _written(shape, strides[0], offset)
    out_bits.view(np.uint16)[idx] = from_float32(out_f32[idx], d)


def _wrap_iter(name, run):
    """Replace the CPU kernel of stub ``name``: ``run(arrays, offsets, shape, strides, *a)``
    on widened arrays when an operand is half, the original kernel otherwise."""
    original = stub(name).table["cpu"]

    def kernel(it, *args):
        for op in it.operands:  # (a loop, not any(): this runs in front of every CPU op)
            d = op.tensor._impl.dtype
            if d is float16 or d is bfloat16:
                break
        else:
            return original(it, *args)
        dts = _dtypes(it)
        arrays, offsets, shape, strides = it.kernel_args()
        if name == "copy" and dts[0] is dts[1]:  # same type: the bits, as a memcpy
            bits = [a.view(np.uint16) for a in arrays]
            return K._pick(K.copy_loop, it.numel())(bits[0], offsets[0], bits[1], offsets[1],
                                                    shape, strides)  # fmt: skip
        wide = _widen(arrays, dts)
        out_f32 = wide[0]
        if is_half(dts[0]):
            out_f32 = np.array(wide[0])  # a private float32 copy of the output's storage
            wide[0] = out_f32
        run(wide, offsets, shape, strides, it, *args)
        if is_half(dts[0]):
            _store(arrays[0], out_f32, dts[0], shape, strides, offsets[0])

    kernel.__doc__ = f"{name}: half operands computed in float32 (opmath), rounded on store."
    kernel.original = original
    stub(name).register("cpu", kernel)


def _vectorized(strides) -> bool:
    """Whether torch's ``cpu_kernel_vec`` takes its vectorized loop (``Loops.h``): the output
    and the inputs contiguous in the inner dimension, or one input a scalar (stride 0)."""
    so, sa, sb = strides[0, 0], strides[1, 0], strides[2, 0]
    return so == 1 and sa in (0, 1) and sb in (0, 1) and not (sa == 0 and sb == 0)


def _binary(w, o, shape, strides, it, op, alpha):
    d = it.common_dtype  # torch: alpha.to<scalar_t>() first, then widened to opmath
    alpha = float(to_float32(from_float32(np.float32(alpha).reshape(1), d), d)[0])
    if (
        alpha != 1.0
        and op in (S.ADD, S.SUB, S.ADD_ALPHA)
        and is_half(d)
        and not _vectorized(strides)
    ):
        # a strided operand: cpu_kernel_vec's basic_loop runs the scalar ``self + alpha *
        # other`` (ufunc/add.h) in c10::Half / BFloat16 arithmetic, which rounds the product
        # to the 16-bit type before the sum: two roundings, mirrored here. (The vectorized
        # loop computes in float and rounds once, except its scalar tail: not mirrored.)
        w = list(w)
        w[2] = to_float32(from_float32(np.float32(alpha) * w[2], d), d)
        alpha = 1.0
    K._pick(K.binary_loop, it.numel())(op, w[0], o[0], w[1], o[1], w[2], o[2], shape, strides,
                                        alpha)  # fmt: skip


def _compare(w, o, shape, strides, it, op):
    K._pick(K.compare_loop, it.numel())(op, w[0], o[0], w[1], o[1], w[2], o[2], shape, strides)


def _unary(w, o, shape, strides, it, op):
    K._pick(K.unary_loop, it.numel())(op, w[0], o[0], w[1], o[1], shape, strides)


def _copy(w, o, shape, strides, it):
    src = w[1]
    if src.dtype == np.float64:  # double -> float -> half, as c10::convert does
        src = src.astype(_F32)
    K._pick(K.copy_loop, it.numel())(w[0], o[0], src, o[1], shape, strides)


def _sum(w, o, shape, strides, it):
    nred = 0
    while nred < len(shape) and strides[0, nred] == 0:
        nred += 1
    n, zero = it.numel(), _F32(0)
    if nred == len(shape):
        K._pick(K.sum_all, n)(w[0], o[0], w[1], o[1], shape, strides, zero)
    elif nred > 0 and strides[1, 0] == 1:
        K._pick(K.sum_inner, n)(w[0], o[0], w[1], o[1], shape, strides, nred, zero)
    else:
        K._pick(K.sum_outer, n)(w[0], o[0], w[1], o[1], shape, strides, nred, zero)


def _bits_only(name):
    """Stubs that only move elements (where, gather, scatter without add): half bits moved as
    uint16, no arithmetic, so no widening."""
    original = stub(name).table["cpu"]

    def kernel(it, *args):
        dts = _dtypes(it)
        if not any(is_half(d) for d in dts) or (name == "scatter" and args[-1]):
            return (_scatter_add if name == "scatter" and any(map(is_half, dts)) else original)(
                it, *args
            )
        arrays, offsets, shape, strides = it.kernel_args()
        bits = [a.view(np.uint16) if is_half(d) else a for a, d in zip(arrays, dts)]
        loops = {"where": K.where_loop, "gather": K.gather_loop}
        if name == "scatter":
            K.scatter_loop(False, bits[0], offsets[0], bits[1], offsets[1], bits[2], offsets[2],
                           shape, strides, args[0])  # fmt: skip
        else:
            args_ = [x for pair in zip(bits, offsets) for x in pair]
            K._pick(loops[name], it.numel())(*args_, shape, strides, *args)

    kernel.original = original
    stub(name).register("cpu", kernel)


def _scatter_add(it, dim_stride, add):
    arrays, offsets, shape, strides = it.kernel_args()
    dts = _dtypes(it)
    wide = _widen(arrays, dts)
    out_f32 = np.array(wide[0])
    K.scatter_loop(True, out_f32, offsets[0], wide[1], offsets[1], wide[2], offsets[2], shape,
                   strides, dim_stride)  # fmt: skip
    changed = np.flatnonzero(_bits32(out_f32) != _bits32(wide[0]))
    arrays[0].view(np.uint16)[changed] = from_float32(out_f32[changed], dts[0])


#: Which arguments of the tensor stubs are outputs.
_OUTPUTS = {"bmm": (2,), "max": (1,), "max_strided": (1,)}


def _wrap_tensors(name):
    """Stubs that take tensors (bmm, max): half ones widened to float32 tensors, the float32
    kernel run, its outputs rounded once into the half outputs."""
    from . import ops

    original = stub(name).table["cpu"]

    def kernel(*args):
        if not any(hasattr(a, "_impl") and is_half(a.dtype) for a in args):
            return original(*args)
        wide = [a.to(dtype=float32) if hasattr(a, "_impl") and is_half(a.dtype) else a
                for a in args]  # fmt: skip
        original(*wide)
        for i in _OUTPUTS[name]:
            if wide[i] is not args[i]:
                ops.copy_(args[i], wide[i])

    kernel.original = original
    stub(name).register("cpu", kernel)


def register_cpu() -> None:
    """Install the opmath wrappers (once)."""
    if getattr(stub("binary").table["cpu"], "original", None) is not None:
        return
    _wrap_iter("binary", _binary)
    _wrap_iter("compare", _compare)
    _wrap_iter("unary", _unary)
    _wrap_iter("copy", _copy)
    _wrap_iter("sum", _sum)
    for name in ("where", "gather", "scatter"):
        _bits_only(name)
    for name in ("bmm", "max", "max_strided"):
        _wrap_tensors(name)


register_cpu()

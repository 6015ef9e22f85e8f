"""Type promotion: mirrors ``c10/core/ScalarType.cpp`` (``promoteTypes``'s table) and
``aten/src/ATen/native/TypeProperties.cpp`` (``ResultTypeState``, ``update_result_type_state``,
``result_type``).

Three kinds of operand promote differently. Tensors with dims decide first; 0-dim tensors
and then Python numbers ("wrapped numbers") only raise the result to a higher *category*
(bool < integer < floating), never to a wider type within the category. So
``int32_tensor + 5`` stays int32, ``float32_tensor + 2.5`` stays float32, but
``int32_tensor + 2.5`` becomes the default float dtype, float32.
"""

from __future__ import annotations

from .dtype import (
    ALL,
    bfloat16,
    bool_,
    default_dtype,
    dtype,
    float16,
    float32,
    float64,
    int32,
    int64,
)

# c10's _promoteTypesLookup, restricted to retorch's seven dtypes (rows and columns in ALL's
# order). Integers and bool promote to either half type; float16 with bfloat16 has no common
# 16-bit type (different exponent and mantissa widths): float32, as c10's table says.
_b1, _i4, _i8, _f2, _bf, _f4, _f8 = bool_, int32, int64, float16, bfloat16, float32, float64
_TABLE = {
    _b1: (_b1, _i4, _i8, _f2, _bf, _f4, _f8),
    _i4: (_i4, _i4, _i8, _f2, _bf, _f4, _f8),
    _i8: (_i8, _i8, _i8, _f2, _bf, _f4, _f8),
    _f2: (_f2, _f2, _f2, _f2, _f4, _f4, _f8),
    _bf: (_bf, _bf, _bf, _f4, _bf, _f4, _f8),
    _f4: (_f4, _f4, _f4, _f4, _f4, _f4, _f8),
    _f8: (_f8, _f8, _f8, _f8, _f8, _f8, _f8),
}
_INDEX = {d: i for i, d in enumerate(ALL)}


def promote_types(a: dtype, b: dtype) -> dtype:
    """``c10::promoteTypes``: the smallest dtype both ``a`` and ``b`` convert to safely."""
    return _TABLE[a][_INDEX[b]]


def _category(d: dtype | None) -> int:
    if d is None:
        return -1
    return 2 if d.is_floating_point else (0 if d is bool_ else 1)


def _promote_skip_undefined(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return promote_types(a, b)


def _combine_categories(higher, lower):
    """``combine_categories``: ``lower`` matters only if it is of a higher category."""
    if higher is not None and higher.is_floating_point:
        return higher
    if higher is bool_ or (lower is not None and lower.is_floating_point):
        return _promote_skip_undefined(higher, lower)
    return higher if higher is not None else lower


class ResultTypeState:
    """``at::native::ResultTypeState``: the running result of each operand kind."""

    __slots__ = ("dim_result", "zero_result", "wrapped_result")

    def __init__(self):
        self.dim_result = self.zero_result = self.wrapped_result = None

    def update(self, operand) -> ResultTypeState:
        """``update_result_type_state`` for one tensor or Python number."""
        if isinstance(operand, (bool, int, float)):
            current = (
                bool_ if isinstance(operand, bool) else int64 if isinstance(operand, int) else None
            )
            current = current or default_dtype
            self.wrapped_result = _promote_skip_undefined(self.wrapped_result, current)
            return self
        current = operand.dtype
        wrapped = operand._impl.is_wrapped_number
        if wrapped and current.is_floating_point:
            current = default_dtype
        if operand.dim() > 0:
            self.dim_result = _promote_skip_undefined(self.dim_result, current)
        elif wrapped:
            self.wrapped_result = _promote_skip_undefined(self.wrapped_result, current)
        else:
            self.zero_result = _promote_skip_undefined(self.zero_result, current)
        return self

    def result(self) -> dtype:
        return _combine_categories(
            self.dim_result, _combine_categories(self.zero_result, self.wrapped_result)
        )


def result_type(*operands) -> dtype:
    """``torch.result_type`` over any number of tensors and Python numbers."""
    state = ResultTypeState()
    for op in operands:
        state.update(op)
    return state.result()


def can_cast(from_: dtype, to: dtype) -> bool:
    """``c10::canCast``: no float to integral, no non-bool to bool (used for ``out=``)."""
    if from_.is_floating_point and not to.is_floating_point:
        return False
    if from_ is not bool_ and to is bool_:
        return False
    return True

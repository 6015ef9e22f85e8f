"""Broadcasting: mirrors ``aten/src/ATen/ExpandUtils.cpp``.

``infer_size`` (``at::infer_size_impl``) lines two shapes up from the right; a dim of size 1
stretches to the other's size, anything else must match. ``infer_expand_geometry``
(``at::inferExpandGeometry``) turns ``expand``'s target sizes into a view: a stretched dim
gets stride 0, so every index along it reads the same element and nothing is copied.
"""

from __future__ import annotations


def infer_size(a, b) -> tuple[int, ...]:
    """The broadcast shape of ``a`` and ``b``, or torch's RuntimeError naming the dim."""
    if a == b or not b:  # (equal shapes, or a 0-dim one: the commonest calls, answered at once)
        return tuple(a)
    if not a:
        return tuple(b)
    ndim = max(len(a), len(b))
    out = [0] * ndim
    for i in range(ndim - 1, -1, -1):
        offset = ndim - 1 - i
        dim_a, dim_b = len(a) - 1 - offset, len(b) - 1 - offset
        size_a = a[dim_a] if dim_a >= 0 else 1
        size_b = b[dim_b] if dim_b >= 0 else 1
        if size_a != size_b and size_a != 1 and size_b != 1:
            raise RuntimeError(
                f"The size of tensor a ({size_a}) must match the size of tensor b ({size_b}) "
                f"at non-singleton dimension {i}"
            )
        out[i] = size_b if size_a == 1 else size_a
    return tuple(out)


def infer_expand_geometry(tensor_sizes, tensor_strides, sizes, type_name: str = "Tensor"):
    """Sizes and strides of ``tensor.expand(sizes)``; ``-1`` keeps a size."""
    ndim, tensor_dim = len(sizes), len(tensor_sizes)
    if ndim < tensor_dim:
        raise RuntimeError(
            f"expand({type_name}{{{list(tensor_sizes)}}}, size={list(sizes)}): the number of "
            f"sizes provided ({ndim}) must be greater or equal to the number of dimensions in "
            f"the tensor ({tensor_dim})"
        )
    if tensor_dim == 0:
        return tuple(sizes), (0,) * ndim
    out_sizes, out_strides = [0] * ndim, [0] * ndim
    for i in range(ndim - 1, -1, -1):
        offset = ndim - 1 - i
        dim = tensor_dim - 1 - offset
        size = tensor_sizes[dim] if dim >= 0 else 1
        stride = tensor_strides[dim] if dim >= 0 else out_sizes[i + 1] * out_strides[i + 1]
        target = sizes[i]
        if target == -1:
            if dim < 0:
                raise RuntimeError(
                    f"The expanded size of the tensor ({target}) isn't allowed in a leading, "
                    f"non-existing dimension {i}"
                )
            target = size
        if size != target:
            if size != 1:
                raise RuntimeError(
                    f"The expanded size of the tensor ({target}) must match the existing size "
                    f"({size}) at non-singleton dimension {i}.  Target sizes: {list(sizes)}.  "
                    f"Tensor sizes: {list(tensor_sizes)}"
                )
            size, stride = target, 0
        out_sizes[i], out_strides[i] = size, stride
    return tuple(out_sizes), tuple(out_strides)

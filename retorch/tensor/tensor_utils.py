"""When can a reshape be a view? Mirrors ``aten/src/ATen/TensorUtils.cpp`` (``computeStride``)
and ``aten/src/ATen/InferSize.h`` (``infer_size_dv``: the ``-1`` in ``view(-1, 4)``).

``compute_stride`` walks the old dims from the right, grouping them into *chunks* of dims that
are contiguous with each other (``stride[d-1] == size[d] * stride[d]``). Each chunk is one
evenly spaced run of memory, so new dims may split or merge freely inside it; a new dim that
would span two chunks has no single stride, and then there is no view.
"""

from __future__ import annotations


def infer_size(shape, numel: int) -> tuple[int, ...]:
    """``at::infer_size_dv``: fill in one ``-1`` so the sizes multiply to ``numel``."""
    newsize, infer_dim = 1, None
    for d, s in enumerate(shape):
        if s == -1:
            if infer_dim is not None:
                raise RuntimeError("only one dimension can be inferred")
            infer_dim = d
        elif s >= 0:
            newsize *= s
        else:
            raise RuntimeError(f"invalid shape dimension {s} at index {d} of shape {list(shape)}")
    if numel == newsize or (infer_dim is not None and newsize > 0 and numel % newsize == 0):
        if infer_dim is not None:
            if newsize == 0:
                raise RuntimeError(
                    f"cannot reshape tensor of 0 elements into shape {list(shape)} because the "
                    "unspecified dimension size -1 can be any value and is ambiguous"
                )
            shape = list(shape)
            shape[infer_dim] = numel // newsize
        return tuple(shape)
    raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")


def compute_stride(oldshape, oldstride, newshape):
    """Strides that show ``oldshape``/``oldstride`` memory as ``newshape``, or ``None``."""
    if len(oldshape) == 0:
        return (1,) * len(newshape)
    numel = 1
    for s in oldshape:
        numel *= s
    if numel == 0 and tuple(oldshape) == tuple(newshape):
        return tuple(oldstride)
    newstride = [0] * len(newshape)
    if numel == 0:
        for view_d in range(len(newshape) - 1, -1, -1):
            if view_d == len(newshape) - 1:
                newstride[view_d] = 1
            else:
                newstride[view_d] = max(newshape[view_d + 1], 1) * newstride[view_d + 1]
        return tuple(newstride)

    view_d = len(newshape) - 1
    chunk_base_stride = oldstride[-1]  # stride of the innermost dim of the current chunk
    tensor_numel = view_numel = 1
    for tensor_d in range(len(oldshape) - 1, -1, -1):
        tensor_numel *= oldshape[tensor_d]
        # a chunk ends at dim 0 or where the next dim out is not contiguous with this one
        if tensor_d == 0 or (
            oldshape[tensor_d - 1] != 1
            and oldstride[tensor_d - 1] != tensor_numel * chunk_base_stride
        ):
            while view_d >= 0 and (view_numel < tensor_numel or newshape[view_d] == 1):
                newstride[view_d] = view_numel * chunk_base_stride
                view_numel *= newshape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None  # a new dim would span two chunks
            if tensor_d > 0:
                chunk_base_stride = oldstride[tensor_d - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(newstride)

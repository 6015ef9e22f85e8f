"""Meta tensors: sizes, strides and a dtype, and no data (``device="meta"``).

Mirrors ``aten/src/ATen/EmptyTensor.cpp`` (``empty_meta``: a storage of ``nbytes`` bytes
whose ``DataPtr`` is null, from the meta allocator), and the meta functions torch 2.13 runs for these ops on ``"meta"``:
``torch/_meta_registrations.py`` (``meta_mm``, ``check_inplace_broadcast``) and
``torch/_refs/__init__.py`` (``_broadcast_shapes`` of the elementwise refs, ``_dot_check``),
with their error messages, which differ from the CPU kernels' (checked by running torch).

An op in ``ops.py`` is already split as a structured kernel is: the front end checks the
arguments and builds the output (a TensorIterator computes its sizes, strides and dtype), then
the device's kernel fills it through a dispatch stub. On ``"meta"`` every stub's kernel is
:func:`no_kernel`: the same ops run shape-only. That is what fake tensors in ``torch.compile``
are built on (``torch/_subclasses/fake_tensor.py`` runs meta functions to learn output shapes).

Where torch's meta functions check less than its CPU kernels (softmax's dim and dtype, an index
tensor's dtype, mm/bmm dtypes, ``max()`` of an empty tensor), retorch keeps the CPU checks.
"""

from __future__ import annotations

from collections.abc import Sequence

from .dispatch_stub import STUBS
from .tensor_impl import (
    compute_channels_last_contiguous_2d,
    compute_contiguous,
    contiguous_strides,
)

#: torch's message for reading a meta tensor's values (``.cpu()``, ``.tolist()``, a copy out).
NO_DATA = "Cannot copy out of meta tensor; no data!"


def no_kernel(*args, **kwargs) -> None:
    """The kernel of every op on ``"meta"``: the output already has its sizes and strides."""
    return None


def register_meta_kernels() -> None:
    """``REGISTER_DISPATCH`` of :func:`no_kernel` for ``"meta"`` in every stub there is."""
    for s in STUBS.values():
        s.table.setdefault("meta", no_kernel)


def _size(shape) -> str:
    return f"torch.Size({list(shape)})"


def broadcast_shapes(*shapes, show=_size) -> tuple[int, ...]:
    """``torch._refs._broadcast_shapes``: the common shape, checked argument by argument from
    the last dim, with the message the elementwise refs raise on ``"meta"`` (where every shape
    is a ``torch.Size``; ``show`` writes a shape into the message). ``torch.broadcast_shapes``
    calls the same function on the shapes as given: see :func:`public_broadcast_shapes`."""
    common = [1] * max((len(s) for s in shapes), default=0)
    for arg_idx, shape in enumerate(shapes):
        for idx in range(-1, -1 - len(shape), -1):
            if shape[idx] == common[idx]:
                continue
            if common[idx] == 1:
                if shape[idx] < 0:
                    raise ValueError("Attempting to broadcast a dimension with negative length!")
                common[idx] = shape[idx]
            if shape[idx] == 1:
                continue
            if common[idx] != shape[idx]:
                raise RuntimeError(
                    f"Attempting to broadcast a dimension of length {shape[idx]} at {idx}! "
                    f"Mismatching argument at index {arg_idx} had {show(shape)}; but expected "
                    f"shape should be broadcastable to {common}"
                )
    return tuple(common)


def public_broadcast_shapes(*shapes) -> tuple[int, ...]:
    """``torch.broadcast_shapes`` (``torch/functional.py``): ints stand for 1-D shapes, ``None``
    is skipped, and a mismatch names the shape as it was passed."""
    shapes = tuple((s,) if isinstance(s, int) else s for s in shapes if s is not None)
    for shape in shapes:
        if not isinstance(shape, Sequence):
            raise RuntimeError(
                "Input shapes should be of type ints, a tuple of ints, or a list of ints, got "
                f"{shape}"
            )
    return broadcast_shapes(*shapes, show=repr)


def _expanded_strides(t, shape) -> list[int]:
    """``t.expand(shape).stride()`` as ``inferExpandGeometry`` (aten/src/ATen/ExpandUtils.cpp)
    computes it: 0 along the dims it is broadcast in; a new leading dim of size 1 gets the
    next dim's size times its stride (0 after the last dim)."""
    lead = len(shape) - t.dim()
    out = [0] * len(shape)
    next_size, next_stride = 1, 0
    for i in reversed(range(len(shape))):
        if i >= lead:
            n, st = t.shape[i - lead], t.stride()[i - lead]
            out[i] = st if n == shape[i] else 0
        else:
            out[i] = next_size * next_stride if shape[i] == 1 else 0
        next_size, next_stride = shape[i], out[i]
    return out


def _logical_to_physical_perm(shape, all_strides) -> list[int]:
    """``compute_elementwise_output_logical_to_physical_perm`` (torch/_prims_common): the
    dims from outermost to innermost in memory, by an insertion sort on the inputs' strides."""
    ndim = len(shape)
    contiguous = all(compute_contiguous(shape, s) for s in all_strides)
    channels_last = all(compute_channels_last_contiguous_2d(shape, s) for s in all_strides)
    if contiguous and not channels_last:
        return list(range(ndim))
    if channels_last and not contiguous:
        return [0, *range(2, ndim), 1]

    def ge(a, b):
        return True if b == 0 else (False if a == 0 else a >= b or a % b == 0)

    def should_swap(a, b):
        for strides in all_strides:
            sa, sb = strides[a], strides[b]
            if sa == 0 or sb == 0:
                continue
            if sa == sb:
                if ge(shape[b], shape[a]):
                    continue
                return 1
            if ge(sb, sa):
                return -1
            if ge(sa, sb):
                return 1
        return 0

    perm = list(reversed(range(ndim)))
    for i in range(1, ndim):
        dim1 = i
        for dim0 in reversed(range(i)):
            c = should_swap(perm[dim0], perm[dim1])
            if c > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif c < 0:
                break
    return list(reversed(perm))


def elementwise_strides(shape, *inputs) -> tuple[int, ...]:
    """``compute_elementwise_output_strides`` (torch/_prims_common/__init__.py): the strides of
    an elementwise ref's output on ``"meta"``, its inputs expanded to ``shape``. CPU scalar
    tensors (a Python number too, as a 0-dim CPU tensor) take no part, as torch's
    ``is_cpu_scalar_tensor`` filter says. On CPU, TensorIterator decides (reorder_dimensions);
    the two disagree in corners (size-0 and size-1 dims), and on meta torch uses this one."""
    shape = tuple(shape)
    if not shape:
        return ()
    if len(shape) == 1:
        return (1,)
    tensors = [t for t in inputs if not (t.dim() == 0 and t.device == "cpu")]
    all_strides = [_expanded_strides(t, shape) for t in tensors] or [contiguous_strides(shape)]
    perm = _logical_to_physical_perm(shape, all_strides)
    physical = contiguous_strides([shape[p] for p in perm])
    out = [0] * len(shape)
    for i, p in enumerate(perm):
        out[p] = physical[i]
    return tuple(out)


def restride_output(out, *inputs):
    """A meta output of a binary, comparison or where op laid out as torch's elementwise refs
    lay it out (torch runs those refs on meta; unary ops keep their C++ meta function, which is
    TensorIterator's: their outputs are left as built)."""
    from .tensor_factories import empty_strided

    strides = elementwise_strides(out.shape, *inputs)
    if tuple(strides) == tuple(out.stride()):
        return out
    return empty_strided(out.shape, strides, out.dtype, "meta")


def check_inplace_broadcast(self_shape, *shapes) -> None:
    """``check_inplace_broadcast`` (_meta_registrations.py): ``x.add_(y)`` keeps ``x``'s shape."""
    broadcast = broadcast_shapes(tuple(self_shape), *shapes)
    if broadcast != tuple(self_shape):
        raise RuntimeError(
            f"output with shape {_size(self_shape)} doesn't match the broadcast shape {broadcast}"
        )


def check_mm(a, b) -> None:
    """``meta_mm``."""
    if a.dim() != 2:
        raise RuntimeError("a must be 2D")
    if b.dim() != 2:
        raise RuntimeError("b must be 2D")
    (n, m1), (m2, p) = a.shape, b.shape
    if m1 != m2:
        raise RuntimeError(
            f"a and b must have same reduction dim, but got [{n}, {m1}] X [{m2}, {p}]."
        )


def check_mv(a, v) -> None:
    """``mv``'s decomposition (torch/_decomp/decompositions.py)."""
    if a.dim() != 2 or v.dim() != 1:
        raise RuntimeError(f"matrix @ vector expected, got {a.dim()}, {v.dim()}")
    if a.shape[1] != v.shape[0]:
        raise RuntimeError(
            f"size mismatch, got input ({a.shape[0]}x{a.shape[1]}), vec ({v.shape[0]})"
        )


def check_dot(a, b) -> None:
    """``_dot_check`` (torch/_refs/__init__.py), its message as torch has it ("thesame")."""
    if a.dim() != 1 or b.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.dim()}D and {b.dim()}D tensors")
    if a.dtype is not b.dtype:
        raise RuntimeError(
            "dot : expected both vectors to have same dtype, but found "
            f"torch.{a.dtype.name} and torch.{b.dtype.name}"
        )
    if a.numel() != b.numel():
        raise RuntimeError(
            f"inconsistent tensor size, expected tensor [{a.numel()}] and src [{b.numel()}] to "
            f"have thesame number of elements, but got {a.numel()} and {b.numel()} elements "
            "respectively"
        )


def check_reduction_dims(x, reduced) -> None:
    """A max-like reduction has no identity: no reduced dim may be empty (the meta message)."""
    if x.numel() == 0 and any(x.shape[d] == 0 for d in reduced if d < x.dim()):
        raise RuntimeError(
            "reducing over zero-size dimension for reduction operation without identity"
        )

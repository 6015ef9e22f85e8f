"""TensorImpl: a view of a storage, as sizes, strides and a storage offset.

Mirrors ``c10/core/TensorImpl.h`` (``sizes_and_strides_``, ``storage_offset_``,
``storage_``, ``data_type_``, ``is_wrapped_number_``) and its contiguity flags, computed by
``c10/core/Contiguity.h`` (``_compute_contiguous``, ``_compute_channels_last_contiguous_2d``,
``_compute_non_overlapping_and_dense``). Strides count elements, not bytes, as torch's do:
element ``(i0, i1, ...)`` lives at ``storage_offset + i0*stride0 + i1*stride1 + ...``.
"""

from __future__ import annotations

from .dtype import dtype as DType
from .storage import Storage


def contiguous_strides(sizes) -> tuple[int, ...]:
    """Row-major strides; a size-0 dim counts as 1 (``c10::contiguous_strides``). Remembered
    per shape (a training step makes the same few shapes again and again)."""
    if type(sizes) is not tuple:
        sizes = tuple(sizes)
    strides = _CONTIGUOUS_STRIDES.get(sizes)
    if strides is None:
        out, z = [0] * len(sizes), 1
        for d in range(len(sizes) - 1, -1, -1):
            out[d] = z
            z *= max(int(sizes[d]), 1)
        strides = tuple(out)
        if len(_CONTIGUOUS_STRIDES) >= 4096:  # bounded: a run of ever-new shapes starts over
            _CONTIGUOUS_STRIDES.clear()
        _CONTIGUOUS_STRIDES[sizes] = strides
    return strides


_CONTIGUOUS_STRIDES: dict = {}


def channels_last_strides_2d(sizes) -> tuple[int, ...]:
    """``c10::get_channels_last_strides_2d``: NCHW sizes laid out as NHWC in memory."""
    if len(sizes) != 4:
        raise RuntimeError("required rank 4 tensor to use channels_last format")
    n, c, h, w = sizes  # c10 multiplies the raw sizes here: a size-0 dim zeroes the strides
    return (h * w * c, 1, w * c, c)


def compute_contiguous(sizes, strides) -> bool:
    if 0 in sizes:
        return True
    z = 1
    for d in range(len(sizes) - 1, -1, -1):
        size = sizes[d]
        if size != 1:
            if strides[d] != z:
                return False
            z *= size
    return True


def compute_channels_last_contiguous_2d(sizes, strides) -> bool:
    if len(sizes) != 4:
        return False
    expected = 1  # (unlike compute_contiguous, no early "no elements" answer)
    for d in (1, 3, 2, 0):
        if sizes[d] != 1:
            if strides[d] != expected:
                return False
            expected *= sizes[d]
    return True


def compute_non_overlapping_and_dense(sizes, strides) -> bool:
    """Every element at its own address and no gaps, in some order of the dims."""
    if len(sizes) == 1:
        return sizes[0] < 2 or strides[0] == 1
    order = sorted(
        range(len(sizes)), key=lambda d: (sizes[d] < 2, strides[d] if sizes[d] >= 2 else 0)
    )
    require = 1
    for d in order:
        if sizes[d] < 2:
            return True
        if strides[d] != require:
            return False
        require *= sizes[d]
    return True


class TensorImpl:
    """The metadata of one tensor; the bytes are in ``storage`` (shared with its views)."""

    __slots__ = (
        "storage", "dtype", "sizes", "strides", "storage_offset", "is_wrapped_number",
        "is_contiguous_", "_non_overlapping_and_dense",
    )  # fmt: skip

    def __init__(self, storage: Storage, dtype: DType, sizes, strides, storage_offset=0):
        """``strides=None``: row-major (``set_sizes_contiguous``)."""
        self.storage = storage
        self.dtype = dtype
        if strides is None:
            self.set_sizes_contiguous(sizes)
        else:
            self.set_sizes_and_strides(sizes, strides)
        self.storage_offset = int(storage_offset)
        # A Python number turned into a 0-dim tensor (at::wrapped_scalar_tensor): it takes
        # part in type promotion only as a "category" (see type_promotion.py).
        self.is_wrapped_number = False

    @property
    def device(self) -> str:
        return self.storage.device

    def numel(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    def set_sizes_and_strides(self, sizes, strides) -> None:
        """New sizes and strides, and the contiguity flag refreshed from them, as c10's
        ``set_sizes_and_strides`` calls ``refresh_contiguous()``: asking is then free."""
        self.sizes = tuple(map(int, sizes))
        self.strides = tuple(map(int, strides))
        self.is_contiguous_ = compute_contiguous(self.sizes, self.strides)
        self._non_overlapping_and_dense = None  # worked out when first asked (it sorts dims)

    def set_sizes_contiguous(self, sizes) -> None:
        """c10's ``set_sizes_contiguous``: ``sizes`` (ints) with row-major strides, so the
        flags are known without a check: contiguous, hence non-overlapping and dense."""
        self.sizes = sizes = sizes if type(sizes) is tuple else tuple(sizes)
        strides = _CONTIGUOUS_STRIDES.get(sizes)  # (contiguous_strides' cache, read here)
        self.strides = contiguous_strides(sizes) if strides is None else strides
        self.is_contiguous_ = self._non_overlapping_and_dense = True

    def is_contiguous(self) -> bool:
        return self.is_contiguous_

    def is_channels_last_contiguous(self) -> bool:
        return compute_channels_last_contiguous_2d(self.sizes, self.strides)

    def is_non_overlapping_and_dense(self) -> bool:
        """c10's ``refresh_contiguous``: ``is_contiguous_ || ... ||
        compute_non_overlapping_and_dense()``, so a tensor of no elements (contiguous at any
        strides) counts as dense, and ``empty_like`` keeps its strides, as torch's does."""
        if self._non_overlapping_and_dense is None:
            self._non_overlapping_and_dense = (
                self.is_contiguous_ or compute_non_overlapping_and_dense(self.sizes, self.strides)
            )
        return self._non_overlapping_and_dense


def storage_nbytes(sizes, strides, itemsize: int, storage_offset: int = 0) -> int:
    """``at::detail::computeStorageNbytes``: bytes a storage needs to hold this view."""
    if 0 in sizes:
        return 0
    last = storage_offset
    for s, st in zip(sizes, strides):
        last += (s - 1) * st
    return (last + 1) * itemsize


def check_in_bounds(storage: Storage, sizes, strides, storage_offset: int, itemsize: int):
    """``TensorImpl::set_storage_offset`` / ``checkInBoundsForStorage`` in TensorUtils.cpp."""
    need = storage_nbytes(sizes, strides, itemsize, storage_offset)
    if need > storage.nbytes():
        raise RuntimeError(
            f"setStorage: sizes {list(sizes)}, strides {list(strides)}, storage offset "
            f"{storage_offset}, and itemsize {itemsize} requiring a storage size of {need} are "
            f"out of bounds for storage of size {storage.nbytes()}"
        )

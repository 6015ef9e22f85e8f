"""TensorIterator: how an elementwise op walks its operands. Mirrors
``aten/src/ATen/TensorIterator.cpp`` (``TensorIteratorBase::build`` and the steps it calls)
and ``aten/src/ATen/TensorIterator.h`` (``TensorIteratorConfig``, ``OperandInfo``).

``build`` runs torch's steps in torch's order:

1. ``compute_shape``: broadcast every input's sizes together (``infer_size``);
2. ``compute_types``: one common device (0-dim CPU tensors may join a CUDA op, as torch's
   "CPU scalars"), the common dtype by ``result_type``, the output dtype, and the cast of
   inputs to the common dtype (torch casts inside its loops; here a converted copy is made);
3. ``fast_set_up``: operands of one shape that are all contiguous, all channels_last or all
   dense with the same strides run as a single 1-d loop, the output taking their layout;
4. otherwise ``compute_strides`` (byte strides, 0 for broadcast dims), ``reorder_dimensions``
   (sort dims fastest first, so the output inherits the inputs' memory order: ``a.t() + 1``
   is laid out as ``a.t()``), ``allocate_or_resize_outputs`` and ``coalesce_dimensions``
   (merge neighbouring dims that are contiguous for every operand).

The result is what a kernel needs: the iteration ``shape`` (dim 0 fastest), per-operand
byte strides, storage offsets and the typed storage arrays. Kernels (``cpu_kernels``,
``cuda_kernels``) receive strides in elements: bytes divided by each operand's item size.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from . import dtype as _dtypes
from .dtype import as_dtype, bool_, default_dtype
from .expand_utils import infer_size
from .tensor import Tensor
from .tensor_factories import empty_generic
from .tensor_impl import contiguous_strides
from .type_promotion import ResultTypeState, _category, can_cast

#: The element strides of ``fast_op``'s operands (1, or 0 for a broadcast scalar), by
#: pattern: kernels only read strides, so one array serves every op of a pattern.
_UNIT_STRIDES: dict[tuple, np.ndarray] = {}
_ALL_UNIT = [(1,) * (n + 1) for n in range(8)]  # fast_op's pattern for n inputs, no scalar
#: Their 1-d iteration shapes ``[n]``, by ``n`` (likewise only read).
_SHAPES_1D: dict[int, np.ndarray] = {}


def _joins_as_scalar(i, dtype, device) -> bool:
    """A 0-dim input on the op's device that leaves the common dtype as ``dtype``
    (``compute_types``): one of ``dtype`` itself, or a wrapped Python number of no higher
    category (bool < int < float)."""
    if i.storage.device != device:
        return False
    if i.dtype is dtype:
        return True
    return i.is_wrapped_number and _category(i.dtype) <= _category(dtype)


class OperandInfo:
    """``at::OperandInfo``: one tensor taking part, with its byte strides in iteration order."""

    __slots__ = ("tensor", "is_output", "will_resize", "stride_bytes", "target_dtype")

    def __init__(self, tensor, is_output, dtype=None):
        self.tensor = tensor
        self.is_output = is_output
        self.will_resize = False
        self.stride_bytes: list[int] = []
        # (``dtype``: the tensor's, when the caller holds it already)
        self.target_dtype = dtype if dtype is not None or tensor is None else tensor.dtype


class TensorIteratorConfig:
    """``at::TensorIteratorConfig``: operands and the promotion rules of one op."""

    def __init__(self):
        self.outputs: list = []
        self.inputs: list = []
        self.promote_inputs_to_common_dtype_ = False
        self.promote_integer_inputs_to_float_ = False
        self.cast_common_dtype_to_outputs_ = False
        self.enforce_safe_casting_to_output_ = False
        self.check_all_same_dtype_ = True
        self.static_dtype = None  # output dtype fixed by the op (bool for comparisons)
        self.is_reduction = False
        self.resize_outputs_ = True  # False: the outputs' shapes take part in broadcasting
        self.check_mem_overlap = True
        self.trace = False  # record shape and strides after each build step (for teaching)

    def add_output(self, t):
        self.outputs.append(t)
        return self

    def add_input(self, t):
        self.inputs.append(t)
        return self

    def build(self) -> TensorIterator:
        """``TensorIteratorBase::build``: ``fast_op``'s answer when it has one (one output,
        not traced), else every step, in ``TensorIterator.__init__``."""
        if len(self.outputs) == 1 and self.inputs and not self.is_reduction and not self.trace:
            it = TensorIterator.fast_op(
                self.outputs[0], self.inputs, self.static_dtype,
                self.promote_integer_inputs_to_float_,
            )  # fmt: skip
            if it is not None:
                return it
        key = self._plan_key()
        if key is None:
            return TensorIterator(self)
        plan = _PLANS.get(key)
        if plan is not None:
            if self.check_mem_overlap and any(t is not None for t in self.outputs):
                check_mem_overlaps(self)  # step 0 reads storages, which no plan answers
            return TensorIterator._from_plan(self, plan)
        it = TensorIterator(self)
        plan = it._plan(self)
        if plan is not None:
            if len(_PLANS) >= _MAX_PLANS:
                _PLANS.clear()
            _PLANS[key] = plan
        return it

    def _plan_key(self):
        """What every step of ``build`` reads, when that is only metadata: each operand's
        sizes, strides, dtype, device and whether it is a wrapped number, this config's flags
        and the default dtype. ``None`` for a traced build. (Step 0, ``compute_mem_overlaps``,
        compares storages: ``build`` runs it before it replays a plan.)"""
        if self.trace:
            return None
        ops = []
        for t in self.outputs:
            ops.append(_meta_key(t))
        for t in self.inputs:
            ops.append(_meta_key(t))
        return (
            len(self.outputs), self.promote_inputs_to_common_dtype_,
            self.promote_integer_inputs_to_float_, self.cast_common_dtype_to_outputs_,
            self.enforce_safe_casting_to_output_, self.check_all_same_dtype_, self.static_dtype,
            self.is_reduction, self.resize_outputs_, self.check_mem_overlap,
            _dtypes.default_dtype, tuple(ops),
        )  # fmt: skip


def check_mem_overlaps(config) -> None:
    """``compute_mem_overlaps`` for a config's operands, without building its iterator."""
    probe = TensorIterator.__new__(TensorIterator)
    probe.operands = [OperandInfo(t, True) for t in config.outputs]
    probe.operands += [OperandInfo(t, False) for t in config.inputs]
    probe.noutputs = len(config.outputs)
    probe.compute_mem_overlaps()


def _meta_key(t):
    if t is None:
        return None
    i = t._impl
    return (i.sizes, i.strides, i.dtype, i.storage.device, i.is_wrapped_number)


#: Built iterators' answers by ``TensorIteratorConfig._plan_key`` (see ``_plan``).
_PLANS: dict = {}
_MAX_PLANS = 4096


def reduce_op(out, a, trace: bool = False) -> TensorIterator:
    """``TensorIterator::reduce_op`` (``TensorIterator.cpp``): the iterator of a reduction.
    ``out`` is the result viewed with the input's number of dims and stride 0 on every
    reduced dim (``review_reduce_result``), so the two operands broadcast to the input's
    shape and the output's zero strides mark the dims the kernel sums over. The input is
    read where it lies, at its own strides: nothing is copied."""
    cfg = TensorIteratorConfig().add_output(out).add_input(a)
    cfg.check_mem_overlap = False  # the output's stride-0 dims repeat addresses on purpose
    cfg.resize_outputs_ = False
    cfg.is_reduction = True
    cfg.promote_inputs_to_common_dtype_ = True
    cfg.trace = trace
    return cfg.build()


class TensorIterator:
    # (slots: one is built for every op, and an attribute in a slot is set and read faster)
    __slots__ = (
        "operands", "noutputs", "is_reduction", "resize_outputs", "all_ops_same_shape",
        "shape", "perm", "common_dtype", "device", "_out_copy_back", "steps", "_contiguous",
    )  # fmt: skip

    @classmethod
    def fast_binary_op(cls, a, b) -> TensorIterator | None:
        """``fast_op`` for ``out = a (op) b`` with a new output, without building a config."""
        return cls.fast_op(None, (a, b), None, False)

    @classmethod
    def fast_op(cls, out, inputs, static_dtype, integer_to_float) -> TensorIterator | None:
        """What ``build`` gives an elementwise op whose operands have one shape, one dtype and
        one device and are all contiguous, worked out without the general steps; ``None`` for
        any other case (``TensorIteratorConfig.build`` then runs every step).

        torch's ``build`` runs every step for every op: in C++ they cost nanoseconds. Here each
        costs microseconds, so the commonest case of a training step (``fast_set_up``'s first
        branch) takes the answers the steps would reach. ``compute_mem_overlaps``: a
        contiguous output writes each address once, and it may be an input itself
        (``x.add_(y)``) or share no storage with one; anything else goes the long way, which
        raises where torch raises. ``compute_shape``: the shape of all. ``compute_types``:
        their dtype, no casts (a wrapped Python number is left out: it may not keep its own
        dtype); an output given must already have the op's dtype. ``fast_set_up``: a
        contiguous output, one 1-d loop. tests/test_tensor_iterator_fast.py checks every
        field against ``build``'s."""
        first = inputs[0]._impl
        sizes, dtype, storage = first.sizes, first.dtype, first.storage
        device = storage.device
        if device == "meta" or (integer_to_float and not dtype.is_floating_point):
            return None
        scalars = None  # positions of 0-dim inputs broadcast against the others
        for k, t in enumerate(inputs):
            i = t._impl
            if i.sizes != sizes or i.is_wrapped_number:
                if k == 0 or i.sizes or not _joins_as_scalar(i, dtype, device):
                    return None
                scalars = (scalars or ()) + (k,)
            elif i.dtype is not dtype or not i.is_contiguous_ or i.storage.device != device:
                return None
        if scalars is not None:
            if 0 in sizes:
                return None
            inputs = list(inputs)
            for k in scalars:  # compute_types's cast of an input to the common dtype
                if inputs[k]._impl.dtype is not dtype:
                    inputs[k] = inputs[k].to(dtype=dtype)
        out_dtype = static_dtype or dtype
        if out is None:
            out = empty_generic(sizes, out_dtype, device)
        else:
            o = out._impl
            if (
                o.sizes != sizes
                or o.dtype is not out_dtype
                or not o.is_contiguous_
                or o.storage.device != device
                or not o.is_non_overlapping_and_dense()  # (has_internal_overlap's first test)
            ):
                return None
            for t in inputs:
                i = t._impl
                if i.storage is o.storage and (
                    i.storage_offset != o.storage_offset or i.sizes != sizes
                ):  # (a 0-dim view of the output's first element: a partial overlap)
                    return None  # overlapping or not: compute_mem_overlaps decides
        self = cls.__new__(cls)
        ops = [OperandInfo(out, True, out_dtype)]
        for t in inputs:
            ops.append(OperandInfo(t, False, dtype))
        if sizes:
            n = 1
            for s in sizes:
                n *= s
            self.shape, self.perm = [n], [0]
            ops[0].stride_bytes = [out_dtype.itemsize]
            item = dtype.itemsize  # every input has the common dtype (a scalar was cast)
            for op in ops[1:]:
                op.stride_bytes = [item]
            if scalars is not None:
                # not fast_set_up's case (shapes differ): compute_strides gives the scalars
                # stride 0, reorder_dimensions keeps the row-major order (perm reversed),
                # coalesce_dimensions merges every dim into one
                for k in scalars:
                    ops[1 + k].stride_bytes = [0]
                nd = len(sizes)
                self.perm = list(range(nd - 1, -1, -1)) if nd > 1 else [0]
        else:
            self.shape, self.perm = [], []
        self.operands, self.noutputs = ops, 1
        self.is_reduction, self.resize_outputs, self.all_ops_same_shape = False, True, True
        self.common_dtype, self.device = dtype, device
        self._out_copy_back, self.steps = [], None
        # kernel_args's element strides: 1, or 0 for a broadcast scalar
        if scalars is None:
            self._contiguous = _ALL_UNIT[len(inputs)]
        else:
            self._contiguous = tuple(0 if k in scalars else 1 for k in range(-1, len(inputs)))
        return self

    def __init__(self, config: TensorIteratorConfig):
        self.operands = [OperandInfo(t, True) for t in config.outputs]
        self.operands += [OperandInfo(t, False) for t in config.inputs]
        self.noutputs = len(config.outputs)
        self.is_reduction = config.is_reduction
        self.resize_outputs = config.resize_outputs_
        self.shape: list[int] = []
        self.perm: list[int] = []
        self.common_dtype = None
        self.device = "cpu"
        self._out_copy_back: list = []
        self._contiguous = False
        if config.check_mem_overlap:
            self.compute_mem_overlaps()
        #: (step, iteration shape, byte strides per operand) after each step, when traced
        self.steps: list = [] if config.trace else None
        self.compute_shape()
        self.compute_types(config)
        self._record("compute_shape, compute_types")
        if self.fast_set_up():
            self._record("fast_set_up")
        else:
            self.compute_strides()
            self._record("compute_strides")
            self.reorder_dimensions()
            self._record("reorder_dimensions")
            self.allocate_or_resize_outputs()
            self._record("allocate_or_resize_outputs")
            self.coalesce_dimensions()
            self._record("coalesce_dimensions")

    def _plan(self, config):
        """What this build worked out, to be replayed by ``_from_plan`` for operands with the
        same metadata: every field but the operands' tensors; for each operand, how its
        tensor was had (given, converted to a dtype and device, or allocated with these sizes
        and strides). ``None`` when the build copies back into a given output."""
        if self._out_copy_back:
            return None
        given = list(config.outputs) + list(config.inputs)
        operands = []
        for op, t in zip(self.operands, given):
            if op.tensor is t:
                how = None
            elif t is None:  # allocated: by fast_set_up or allocate_or_resize_outputs
                impl = op.tensor._impl
                row_major = impl.strides == contiguous_strides(impl.sizes)
                how = ("empty", impl.sizes, None if row_major else impl.strides)
            elif not op.is_output:  # compute_types's casts of an input
                how = ("to", op.tensor.dtype, op.tensor.device)
            else:
                return None
            operands.append(
                (how, op.is_output, op.will_resize, list(op.stride_bytes), op.target_dtype)
            )
        fields = {
            k: getattr(self, k)
            for k in TensorIterator.__slots__
            if k != "operands" and hasattr(self, k)
        }
        return fields, tuple(operands)

    @classmethod
    def _from_plan(cls, config, plan) -> TensorIterator:
        """The iterator ``build`` would give, from the plan of an earlier build whose operands
        had the same metadata. tests/test_tensor_iterator_fast.py checks every field."""
        fields, operands = plan
        self = cls.__new__(cls)
        for k, v in fields.items():
            setattr(self, k, list(v) if type(v) is list else v)
        given = list(config.outputs) + list(config.inputs)
        ops = self.operands = []
        for (how, is_output, will_resize, stride_bytes, target_dtype), t in zip(operands, given):
            if how is not None:
                if how[0] == "empty":
                    t = empty_generic(how[1], target_dtype, self.device, how[2])
                else:
                    t = t.to(dtype=how[1])
                    if t.device != how[2]:
                        t = t.to(how[2])
            op = OperandInfo(t, is_output)
            op.will_resize = will_resize
            op.stride_bytes = list(stride_bytes)
            op.target_dtype = target_dtype
            ops.append(op)
        return self

    def _record(self, step):
        if self.steps is not None:
            strides = [list(op.stride_bytes) if op.stride_bytes else None for op in self.operands]
            self.steps.append((step, list(self.shape), strides))

    # -- step 0 ---------------------------------------------------------------------------
    def compute_mem_overlaps(self):
        """``compute_mem_overlaps`` (``aten/src/ATen/MemoryOverlap.cpp``): an output may not
        write one address twice, nor partly overlap an input (reading a value it already
        overwrote); exactly the same elements (``x.add_(y)`` into ``x``) is fine."""
        for out in self.operands[: self.noutputs]:
            t = out.tensor
            if t is None:
                continue
            if has_internal_overlap(t):
                raise RuntimeError(
                    "unsupported operation: more than one element of the written-to tensor "
                    "refers to a single memory location. Please clone() the tensor before "
                    "performing the operation."
                )
            for op in self.operands[self.noutputs :]:
                if overlap_status(t, op.tensor) == "partial":
                    raise RuntimeError(
                        "unsupported operation: some elements of the input tensor and the "
                        "written-to tensor refer to a single memory location. Please clone() "
                        "the tensor before performing the operation."
                    )

    # -- step 1 ---------------------------------------------------------------------------
    def compute_shape(self):
        shape: tuple[int, ...] = ()
        self.all_ops_same_shape = True
        first = None
        for op in self.operands:
            if op.tensor is None:
                continue
            if op.is_output and self.resize_outputs:
                continue  # an out= tensor of the wrong shape is resized, not broadcast
            shape = infer_size(shape, op.tensor.shape)
            if first is None:
                first = op.tensor.shape
            elif op.tensor.shape != first:
                self.all_ops_same_shape = False
        for op in self.operands:
            if op.is_output and op.tensor is not None and op.tensor.shape != shape:
                self.all_ops_same_shape = False
        self.shape = list(shape)

    # -- step 2 ---------------------------------------------------------------------------
    def compute_types(self, config):
        device = "cpu"
        for op in self.operands:
            if op.tensor is not None and op.tensor._impl.storage.device != "cpu":
                device = op.tensor._impl.storage.device
        for op in self.operands if device != "cpu" else ():  # (all on the CPU: nothing to check)
            t = op.tensor
            if t is None or t.device == device:
                continue
            if not op.is_output and t.dim() == 0:
                continue  # a CPU scalar may take part in a CUDA op
            if device == "meta":  # the device check of torch's meta functions (_prims_common)
                raise RuntimeError(
                    f"Tensor on device {t.device} is not on the expected device meta!"
                )
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, {_device_name(device)} and {_device_name(t.device)}!"
            )
        self.device = device

        inputs = [op.tensor._impl for op in self.operands if not op.is_output]
        first = inputs[0].dtype if inputs else None
        if all(i.dtype is first and not i.is_wrapped_number for i in inputs[1:]) and not (
            inputs and inputs[0].is_wrapped_number
        ):
            common = first  # one dtype and no Python numbers: what ResultTypeState returns
        else:
            state = ResultTypeState()
            for op in self.operands:
                if not op.is_output:
                    state.update(op.tensor)
            common = state.result()
        if config.promote_integer_inputs_to_float_ and not common.is_floating_point:
            common = default_dtype
        self.common_dtype = common
        out_dtype = config.static_dtype or common
        for op in self.operands:
            t = op.tensor
            if op.is_output:
                if t is None:
                    op.target_dtype = out_dtype
                    op.will_resize = True
                    continue
                if config.enforce_safe_casting_to_output_ and not can_cast(common, t.dtype):
                    raise RuntimeError(
                        f"result type {common.scalar_name} can't be cast to the desired output "
                        f"type {t.dtype.scalar_name}"
                    )
                if t.dtype is not out_dtype:
                    # compute in the common dtype, then copy (and cast) into the given output
                    self._out_copy_back.append((op, t))
                    op.tensor = _empty(t.shape, out_dtype, t.device)
                continue
            if config.promote_inputs_to_common_dtype_ and t.dtype is not common:
                op.tensor = t.to(dtype=common)
            if t.device != device:
                op.tensor = op.tensor.to(device)

    # -- step 3 ---------------------------------------------------------------------------
    def fast_set_up(self) -> bool:
        if not self.all_ops_same_shape:
            return False
        defined = [op.tensor for op in self.operands if op.tensor is not None]
        if not defined:
            return False
        impls = [t._impl for t in defined]
        if all(i.is_contiguous() for i in impls):
            strides = contiguous_strides(self.shape)
        elif all(i.is_channels_last_contiguous() for i in impls):
            from .tensor_impl import channels_last_strides_2d

            strides = channels_last_strides_2d(self.shape)
        elif all(i.is_non_overlapping_and_dense() for i in impls) and all(
            i.strides == impls[-1].strides for i in impls
        ):
            strides = impls[-1].strides
        else:
            return False
        for op in self.operands:
            if op.tensor is None:
                op.tensor = _empty_strided(self.shape, strides, op.target_dtype, self.device)
        if len(self.shape) >= 1:
            numel = math.prod(self.shape)
            self.shape = [numel]
            for op in self.operands:
                op.stride_bytes = [op.tensor.element_size()]
        self.perm = list(range(len(self.shape)))
        return True

    # -- step 4 ---------------------------------------------------------------------------
    def compute_strides(self):
        ndim = len(self.shape)
        for op in self.operands:
            if op.tensor is None:
                continue
            t = op.tensor
            sizes, strides, item = t.shape, t.stride(), t.element_size()
            offset = ndim - len(sizes)
            op.stride_bytes = [0] * ndim
            for i in range(len(sizes)):
                # a size-1 dim broadcast against a larger one reads the same element: stride 0
                if sizes[i] == 1 and self.shape[offset + i] != 1:
                    op.stride_bytes[offset + i] = 0
                else:
                    op.stride_bytes[offset + i] = strides[i] * item

    def reorder_dimensions(self):
        """Sort dims by stride, fastest first: an insertion sort with ambiguous comparisons."""
        ndim = len(self.shape)
        self.perm = list(range(ndim - 1, -1, -1))
        if ndim <= 1:
            self.perm = list(range(ndim))
            return

        def should_swap(dim0, dim1):
            for op in self.operands:
                if op.tensor is None or op.will_resize:
                    continue
                s0, s1 = op.stride_bytes[dim0], op.stride_bytes[dim1]
                if self.is_reduction and op.is_output and (s0 == 0) != (s1 == 0):
                    # a reduction's output has stride 0 on the reduced dims
                    # (review_reduce_result): they go first, innermost in the loop
                    return 1 if s1 == 0 else -1
                if s0 == 0 or s1 == 0:
                    continue  # a broadcast dim says nothing about memory order
                if s0 < s1:
                    return -1
                if s0 > s1:
                    return 1
                if self.shape[dim0] > self.shape[dim1]:  # equal strides: size breaks the tie
                    return 1
            return 0

        perm = self.perm
        for i in range(1, ndim):
            dim1 = i
            for dim0 in range(i - 1, -1, -1):
                c = should_swap(perm[dim0], perm[dim1])
                if c > 0:
                    perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                    dim1 = dim0
                elif c < 0:
                    break
        self.shape = [self.shape[p] for p in perm]
        for op in self.operands:
            if op.stride_bytes:
                op.stride_bytes = [op.stride_bytes[p] for p in perm]

    def _invert_perm(self, values):
        out = [0] * len(values)
        for i, p in enumerate(self.perm):
            out[p] = values[i]
        return out

    def allocate_or_resize_outputs(self):
        for op in self.operands:
            if not op.is_output or not op.will_resize:
                continue
            item = op.target_dtype.itemsize
            shape = self._invert_perm(self.shape)
            # compatible_stride: row-major in iteration order (dim 0 fastest), then inverted
            stride_bytes, nxt = [], item
            for s in self.shape:
                stride_bytes.append(nxt)
                nxt *= s
            op.stride_bytes = stride_bytes
            if self.perm == list(range(len(self.shape) - 1, -1, -1)):
                # torch's "inverted" case: set_output_raw_strided with no strides, contiguous
                op.tensor = _empty(shape, op.target_dtype, self.device)
            else:
                strides = [s // item for s in self._invert_perm(stride_bytes)]
                op.tensor = _empty_strided(shape, strides, op.target_dtype, self.device)
            op.will_resize = False

    def coalesce_dimensions(self):
        ndim = len(self.shape)
        if ndim <= 1:
            return
        shape = self.shape
        ops = [op for op in self.operands if op.stride_bytes]

        def can_coalesce(d0, d1):
            if shape[d0] == 1 or shape[d1] == 1:
                return True
            return all(shape[d0] * op.stride_bytes[d0] == op.stride_bytes[d1] for op in ops)

        prev = 0
        for dim in range(1, ndim):
            if can_coalesce(prev, dim):
                if shape[prev] == 1:
                    for op in ops:
                        op.stride_bytes[prev] = op.stride_bytes[dim]
                shape[prev] *= shape[dim]
            else:
                prev += 1
                if prev != dim:
                    for op in ops:
                        op.stride_bytes[prev] = op.stride_bytes[dim]
                    shape[prev] = shape[dim]
        del shape[prev + 1 :]
        for op in ops:
            del op.stride_bytes[prev + 1 :]

    # -- what kernels read ------------------------------------------------------------------
    def output(self, i=0) -> Tensor:
        return self.operands[i].tensor

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def kernel_args(self):
        """(arrays, offsets, shape, strides): typed storages, element offsets, the iteration
        shape as int64 (one dim of size 1 for a 0-dim op) and element strides [operand, dim]."""
        if self._contiguous:  # fast_op's: one 1-d loop, strides 1 (0: a broadcast scalar)
            arrays, offsets = [], []
            for op in self.operands:
                impl = op.tensor._impl
                storage, np_dtype = impl.storage, impl.dtype.np
                arr = storage._typed.get(np_dtype)  # (typed's cache, read without a call)
                arrays.append(storage.typed(np_dtype) if arr is None else arr)
                offsets.append(impl.storage_offset)
            strides = _UNIT_STRIDES.get(self._contiguous)
            if strides is None:
                strides = _UNIT_STRIDES[self._contiguous] = np.array(
                    self._contiguous, dtype=np.int64
                ).reshape(-1, 1)
            n = self.shape[0] if self.shape else 1
            shape = _SHAPES_1D.get(n)
            if shape is None:  # (kernels only read it: one array per length serves every call)
                if len(_SHAPES_1D) >= 4096:
                    _SHAPES_1D.clear()
                shape = _SHAPES_1D[n] = np.array([n], dtype=np.int64)
            return arrays, offsets, shape, strides
        arrays, offsets, rows = [], [], []
        for op in self.operands:
            impl = op.tensor._impl
            arrays.append(impl.storage.typed(impl.dtype.np))
            offsets.append(impl.storage_offset)
            item = impl.dtype.itemsize
            rows.append([s // item for s in op.stride_bytes] if self.shape else [0])
        shape = np.array(self.shape or [1], dtype=np.int64)
        return arrays, offsets, shape, np.array(rows, dtype=np.int64).reshape(len(rows), -1)

    def finish(self):
        """Copy results computed in the common dtype into ``out=`` tensors of another dtype."""
        if not self._out_copy_back:
            return
        from . import ops

        for op, original in self._out_copy_back:
            ops.copy_(original, op.tensor)
            op.tensor = original


def has_internal_overlap(t) -> bool:
    """``at::has_internal_overlap``: a stride-0 dim of size > 1 repeats an address."""
    if t._impl.is_non_overlapping_and_dense():
        return False
    return any(st == 0 and sz > 1 for sz, st in zip(t.shape, t.stride()))


def overlap_status(a, b) -> str:
    """``at::get_overlap_status`` for dense tensors: "full", "partial", "no" or "too_hard"."""
    if a is b:
        return "full"
    if a.numel() == 0 or b.numel() == 0:
        return "no"
    ia, ib = a._impl, b._impl
    if not ia.is_non_overlapping_and_dense() or not ib.is_non_overlapping_and_dense():
        return "too_hard"
    if ia.storage is not ib.storage:
        return "no"
    a0, b0 = ia.storage_offset * a.element_size(), ib.storage_offset * b.element_size()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    if a0 == b0 and a1 == b1:
        return "full" if ia.strides == ib.strides else "partial"
    return "partial" if a0 < b1 and b0 < a1 else "no"


def _device_name(device):
    return "cuda:0" if device == "cuda" else device


def _empty_strided(shape, strides, dtype, device):
    return empty_generic(tuple(shape), as_dtype(dtype), device, tuple(strides))


def _empty(shape, dtype, device):
    return empty_generic(tuple(shape), as_dtype(dtype), device)


def resize_output(out: Tensor, shape) -> None:
    """``at::native::resize_output``: an ``out=`` tensor of the wrong shape is resized, with
    torch's deprecation warning when it held elements."""
    shape = tuple(shape)
    if out.shape == shape:
        return
    if out.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape "
            f"{list(out.shape)}, which does not match the required output shape {list(shape)}. "
            "This behavior is deprecated, and in a future PyTorch release outputs will not be "
            "resized unless they have zero elements. You can explicitly reuse an out tensor t by "
            "resizing it, inplace, to zero elements with t.resize_(0).",
            UserWarning,
        )
    impl = out._impl
    strides = contiguous_strides(shape)
    from .tensor_impl import storage_nbytes

    need = storage_nbytes(shape, strides, impl.dtype.itemsize, impl.storage_offset)
    if need > impl.storage.nbytes():
        impl.storage.resize_(need)
    impl.set_sizes_and_strides(shape, strides)


__all__ = [
    "TensorIterator",
    "TensorIteratorConfig",
    "reduce_op",
    "OperandInfo",
    "resize_output",
    "bool_",
]

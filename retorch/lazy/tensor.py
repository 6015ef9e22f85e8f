"""LazyTensor: a tensor that records the ops applied to it instead of running them.

Mirrors torch/csrc/lazy/core/tensor.cpp (a `LazyTensor` holds either data or an IR value)
and torch/csrc/lazy/core/tensor_impl.cpp (the TensorImpl the dispatcher sees) at torch
v2.13.0. torch reaches its lazy kernels through the Lazy dispatch key, after
functionalization has turned in-place ops into out-of-place ones; here
`__torch_dispatch__` receives every aten op, records it with `ir.record`, and rebinds the
tensor's value for an in-place op. Reading a value (`.cpu()`, `.item()`) syncs: the pending
graph is compiled and run (lazy_graph_executor.py).
"""

import itertools
import weakref

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from . import ir

aten = torch.ops.aten

#: Every LazyTensor alive: mark_step syncs those with pending IR (torch's DeviceContextArena).
live: "weakref.WeakSet[LazyTensor]" = weakref.WeakSet()
_ids = itertools.count()  # creation order: a step's outputs come in the order of tensor.cpp's ids


class LazyTensor(torch.Tensor):
    """A meta-device wrapper around an IR `Value`: its shape and dtype, but no data."""

    @staticmethod
    def __new__(cls, value: ir.Value):
        meta = value.meta
        t = torch.Tensor._make_wrapper_subclass(cls, meta.shape, strides=meta.stride(),
                                                dtype=meta.dtype, device="meta")  # fmt: skip
        t.value, t.unique_id = value, next(_ids)
        live.add(t)
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self) -> str:
        state = "data" if self.value.node.op == ir.DEVICE_DATA else self.value.node.name
        return f"LazyTensor({state}, shape={tuple(self.shape)}, dtype={self.dtype})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from .lazy_graph_executor import sync

        kwargs = kwargs or {}
        if func is aten._to_copy.default and kwargs.get("device") != torch.device("meta"):
            return func(sync([args[0]])[0], **kwargs)  # .cpu(), .to("cpu"): run, then copy
        if func is aten._local_scalar_dense.default:
            return func(sync([args[0]])[0])  # .item()
        if func in (aten.detach.default, aten.alias.default):
            return LazyTensor(args[0].value)
        values = _to_values(func, args, kwargs)
        if func._schema.is_mutable:  # x.add_(y): record add, then x holds the new value
            functional = getattr(getattr(aten, func._schema.name[6:-1]), func._overloadname)
            node, _ = ir.record(functional, *values)
            args[0].value = ir.Value(node, 0)
            return args[0]
        node, out = ir.record(func, *values)
        leaves, spec = tree_flatten(out)
        outputs, i = [], 0
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                leaf, i = LazyTensor(ir.Value(node, i)), i + 1
            outputs.append(leaf)
        return tree_unflatten(outputs, spec)


def _to_values(func, args, kwargs):
    """IR values for the tensors; a number where the schema takes a Tensor or Scalar (the 2
    of `x * 2`) becomes device data too, as in torch: a new value is then new data, not a
    new graph. Other arguments (dims, sizes, flags) stay in the node."""
    schema = {a.name: str(a.type) for a in func._schema.arguments}
    names = [a.name for a in func._schema.arguments]

    def value(a, kind):
        if isinstance(a, LazyTensor):
            return a.value
        if isinstance(a, torch.Tensor):
            return ir.device_data(a)  # an eager tensor joins the graph as an input
        if kind in ("Tensor", "Scalar") and type(a) in (int, float):
            return ir.device_data(torch.tensor(a))  # dtypes promote as a wrapped number's
        return tree_map(lambda t: value(t, None) if isinstance(t, torch.Tensor) else t, a)

    return ([value(a, schema[n]) for a, n in zip(args, names)],
            {k: value(v, schema[k]) for k, v in kwargs.items()})  # fmt: skip


def to_lazy(t: torch.Tensor) -> LazyTensor:
    """`t.to("lazy")`: a lazy tensor whose IR is the data of `t`."""
    return LazyTensor(ir.device_data(t.detach().clone()))

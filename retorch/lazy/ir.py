"""The lazy IR: a Node per recorded op, a Value per output (torch/csrc/lazy/core/ir.h).

Mirrors torch/csrc/lazy/core/ir.h and ir.cpp at torch v2.13.0: a `Node` has an op, its
operands (the `Value`s it reads) and the shape of each output; torch infers the shapes with
hand-written rules (torch/csrc/lazy/core/shape_inference.cpp), here the op runs on meta
tensors. A device-data node holds a real tensor: an input of the graph, or a result of an
earlier step. Non-tensor arguments (scalars, dims) stay in the node, as a torch node's
attributes, and are part of what the graph's hash sees; numbers in Tensor or Scalar
positions (the 2 of `x * 2`) become device data, as in torch (tensor.py).
"""

from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_flatten, tree_map

DEVICE_DATA = "device_data"


@dataclass(frozen=True, eq=False)
class Value:
    """Output `index` of `node` (ir.h `Value`); a leaf to pytree, unlike a NamedTuple."""

    node: "Node"
    index: int = 0

    @property
    def meta(self) -> torch.Tensor:
        return self.node.metas[self.index]


class Node:
    """One op: `op(*args, **kwargs)` with `Value`s where tensors go, and its output metas."""

    def __init__(self, op, args=(), kwargs=None, metas=(), data=None, multi=False):
        self.op, self.args, self.kwargs = op, tuple(args), kwargs or {}
        self.metas, self.data, self.multi = list(metas), data, multi
        self.operands = [v for v in tree_flatten((self.args, self.kwargs))[0]
                         if isinstance(v, Value)]  # fmt: skip

    @property
    def name(self) -> str:
        return DEVICE_DATA if self.op == DEVICE_DATA else self.op._schema.name


def device_data(t: torch.Tensor) -> Value:
    """A tensor with data: a leaf of the IR (torch's `DeviceData` node)."""
    return Value(Node(DEVICE_DATA, metas=[t.to("meta")], data=t))


def record(op, args, kwargs) -> tuple[Node, object]:
    """A node for `op` on Values; its output shapes come from running `op` on meta tensors."""
    out = op(*tree_map(lambda v: v.meta if isinstance(v, Value) else v, args),
             **tree_map(lambda v: v.meta if isinstance(v, Value) else v, kwargs))  # fmt: skip
    metas = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    return Node(op, args, kwargs, metas, multi=not isinstance(out, torch.Tensor)), out


def post_order(roots: list[Value]) -> list[Node]:
    """Every node the roots depend on, operands first (ir_util.cpp ComputePostOrder).

    As torch's, the depth-first walk takes a node's operands last to first, so the numbering
    of a dump matches torch's."""
    order, seen = [], set()
    stack = [(v.node, False) for v in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
        elif id(node) not in seen:
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((v.node, False) for v in node.operands)  # the last is visited first
    return order

"""Functionalization of the joint graph: in-place aten ops become their out-of-place twins.

Mirrors, in miniature, what torch/_subclasses/functional_tensor.py (`FunctionalTensorMode`) and
torch/_functorch/_aot_autograd/functional_utils.py do for AOTAutograd at torch v2.13.0: the
graph handed to the partitioner has no mutation, so that any node may be moved or recomputed.

torch wraps every tensor in a FunctionalTensor whose updates are replayed through its views.
The rebuild works in two steps. While tracing (`check_mutation`), the tracer binds the mutated
tensor to the node of the in-place op, so every later read of `z` after `z.add_(1)` reads that
node: the data flow is already right. After tracing (`functionalize`), each in-place node's
target is swapped for the functional overload (`aten.add_.Tensor` -> `aten.add.Tensor`).
That is sound only when nothing else sees the old value: so a mutation of a function input,
or of a tensor that shares storage with another traced tensor (a view, a base), is refused
here; torch handles those (input mutations become a `copy_` epilogue, views are regenerated).
"""

import torch


def check_mutation(tracer, func, args, kwargs, out) -> None:
    """Refuse mutations the renaming cannot express; called by the tracer for mutable ops."""
    schema = func._schema
    written = [
        i
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    ]
    if written != [0] or out is not args[0] or kwargs:
        raise NotImplementedError(
            f"aot functionalization handles in-place ops `x.op_(...)` only, not {func} "
            "(out= variants and ops writing several arguments are left to torch's "
            "FunctionalTensorMode)"
        )
    target = args[0]
    node = tracer.env.get(id(target))
    if node is not None and node.op == "placeholder":
        raise NotImplementedError(
            f"aot functionalization: {func} mutates the input `{node.name}`; the rebuild "
            "functionalizes mutations of intermediates only (torch writes input mutations back "
            "with a copy_ epilogue). Clone the input first: `x = x.clone()`."
        )
    ptr = target.untyped_storage().data_ptr()
    for t in tracer._alive:
        if t is not target and t.untyped_storage().data_ptr() == ptr:
            raise NotImplementedError(
                f"aot functionalization: {func} mutates a tensor that shares storage with "
                f"another traced tensor (node `{tracer.env[id(t)].name}`, a view or a base); "
                "the rebuild does not regenerate views. Clone before the in-place op."
            )


def functional_overload(func):
    """`aten.add_.Tensor` -> `aten.add.Tensor`: the out-of-place twin of an in-place op."""
    name = func.overloadpacket.__name__
    if not name.endswith("_"):
        raise NotImplementedError(f"{func} has no functional twin named {name[:-1]!r}")
    packet = getattr(torch.ops.aten, name[:-1])
    return getattr(packet, func._overloadname)


def functionalize(graph) -> int:
    """Swap every in-place aten node for its functional twin; returns how many were swapped."""
    swapped = 0
    for node in graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            if node.target._schema.is_mutable:
                node.target = functional_overload(node.target)
                node.meta["functionalized_from"] = node.name
                swapped += 1
    return swapped

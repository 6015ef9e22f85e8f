"""`aot_function`: trace forward and backward ahead of time, partition, compile, run.

Mirrors torch/_functorch/aot_autograd.py (`aot_function`) and, for what runs at call time,
torch/_functorch/_aot_autograd/runtime_wrappers.py (`AOTDispatchAutograd.post_compile`:
a `CompiledFunction(torch.autograd.Function)` whose forward calls the compiled forward graph
and saves its extra outputs with `ctx.save_for_backward`, and whose backward calls the
compiled backward graph on `saved tensors + tangents`) at torch v2.13.0.

As torch: the first call traces (retorch.aot.graph_capture.trace_joint), partitions the joint
graph with `partition_fn(joint_module, joint_inputs, num_fwd_outputs=...)`, and hands each
graph to its compiler, `compiler(graph_module, example_inputs) -> callable`; a callable marked
`_boxed_call` (functorch's `make_boxed_func`) is called with one list of arguments. Unlike
torch, which compiles once and then guards nothing, the rebuild keeps one compiled pair per
input signature (shapes, strides, dtypes, requires_grad).
"""

import torch

from .graph_capture import trace_joint
from .partitioners import default_partition


def _call(compiled, args: list):
    return compiled(args) if getattr(compiled, "_boxed_call", False) else compiled(*args)


def _example_inputs(gm) -> list:
    return [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]


class AOTCompiled:
    """One traced, partitioned and compiled function for one input signature."""

    def __init__(self, fn, args, fw_compiler, bw_compiler, partition_fn):
        joint = trace_joint(fn, args)
        self.joint = joint
        self.fw_module, self.bw_module = partition_fn(
            joint.module, list(args), num_fwd_outputs=joint.num_fwd_outputs
        )
        compiled_fw = fw_compiler(self.fw_module, _example_inputs(self.fw_module))
        compiled_bw = bw_compiler(self.bw_module, _example_inputs(self.bw_module))
        n_out, needs = joint.num_fwd_outputs, joint.outputs_need_grad

        class CompiledFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *primals):
                results = _call(compiled_fw, list(primals))
                outs, saved = results[:n_out], results[n_out:]
                ctx.save_for_backward(*saved)
                ctx.mark_non_differentiable(*(o for o, n in zip(outs, needs) if not n))
                return tuple(outs)

            @staticmethod
            def backward(ctx, *grad_outs):
                # as torch's runtime wrapper: the graph was traced with contiguous tangents
                tangents = [g.contiguous() for g, n in zip(grad_outs, needs) if n]
                return tuple(_call(compiled_bw, [*ctx.saved_tensors, *tangents]))

        self.function = CompiledFunction

    def __call__(self, *args):
        outs = self.function.apply(*args)
        return outs[0] if self.joint.single_output else outs


def aot_function(fn, fw_compiler, bw_compiler=None, partition_fn=default_partition):
    """Return a callable that runs `fn`'s compiled forward and, under autograd, its backward.

    `fw_compiler(gm, example_inputs)` compiles the forward graph, `bw_compiler` the backward
    one (default: `fw_compiler`); `partition_fn` splits the joint graph (`default_partition`
    or `recompute_partition` of retorch.aot.partitioners, or torch-style custom ones).
    The returned callable exposes `.compiled` (signature -> AOTCompiled) for inspection.
    """
    bw_compiler = fw_compiler if bw_compiler is None else bw_compiler
    compiled: dict = {}

    def returned_function(*args):
        key = tuple(
            (tuple(a.shape), a.stride(), a.dtype, a.requires_grad)
            if isinstance(a, torch.Tensor)
            else (type(a),)
            for a in args
        )
        if key not in compiled:
            compiled[key] = AOTCompiled(fn, args, fw_compiler, bw_compiler, partition_fn)
        return compiled[key](*args)

    returned_function.compiled = compiled
    return returned_function

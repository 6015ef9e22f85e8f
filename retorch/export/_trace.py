"""export(): trace a module into a functional aten graph whose placeholders are its parameters,
buffers and inputs, with a graph signature that says which is which.

Mirrors torch/export/_trace.py at torch v2.13.0 (`export` -> `_export_for_training` ->
`_export_to_aten_ir`: trace with the state lifted to inputs, then `_get_graph_signature`
writes the specs) in the functional form torch gives after `ep.run_decompositions()`: a
mutated buffer is an extra output, BUFFER_MUTATION, placed before the user outputs.

It reuses retorch.aot's tracer (a TorchDispatchMode that writes one node per aten op, make_fx's
role) and its `functionalize`, and adds what export needs: placeholders named as torch's
(`p_l_weight`, `b_bn_running_mean`, `x`); mutations of buffers and inputs allowed, each
becoming an output; `native_batch_norm`, whose schema hides that it writes the running stats
(torch/_decomp/__init__.py says so), traced as `_native_batch_norm_legit_functional`. The
model is run on clones of its state (torch runs it on fake tensors), so it is left untouched.
"""

import operator

import torch

from ..aot.functional_utils import functionalize
from ..aot.graph_capture import JointGraphTracer
from ..fx import GraphModule
from ..fx.node import map_aggregate
from .dynamic_shapes import input_names, other_example, symbolic_shapes
from .exported_program import ExportedProgram
from .graph_signature import ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec

aten = torch.ops.aten


class ExportTracer(JointGraphTracer):
    """retorch.aot's tracer, which here lets in-place ops write any tensor that is no view."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten.native_batch_norm.default and args[5] and args[3] is not None:
            return self._batch_norm_training(args)
        if func._schema.is_mutable:
            target = args[0]
            alias = [t for t in self._alive if t._base is target and t is not target]
            if target._base is not None or alias or func(*args, **kwargs) is not target:
                raise NotImplementedError(
                    f"export: {func} writes a view or a base of a view, or is not `x.op_(...)`; "
                    "the rebuild functionalizes in-place ops on whole tensors only"
                )
            out = target
        else:
            out = func(*args, **kwargs)
        name = func.overloadpacket.__name__.removesuffix("_")
        node = self.graph.call_function(
            func, map_aggregate(args, self.node_of), map_aggregate(kwargs, self.node_of), name=name
        )
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if not all(isinstance(o, torch.Tensor) for o in outs):
            raise NotImplementedError(f"export: {func} returned a non-tensor (data-dependent)")
        if isinstance(out, torch.Tensor):
            self.bind(out, node)
        else:
            for i, o in enumerate(out):
                self.bind(o, self.graph.call_function(operator.getitem, (node, i), name="getitem"))
        return out

    def _batch_norm_training(self, args):
        func = aten._native_batch_norm_legit_functional.default
        out = func(*args)
        node = self.graph.call_function(
            func, map_aggregate(args, self.node_of), name="_native_batch_norm_legit_functional"
        )
        items = [self.graph.call_function(operator.getitem, (node, i)) for i in range(5)]
        args[3].copy_(out[3])  # eager writes the running stats: so does the trace
        args[4].copy_(out[4])
        for t, item in zip((*out[:3], args[3], args[4]), items):
            self.bind(t, item)
        return out[:3]


def _trace(mod, names, args):
    """One trace on real clones: (GraphModule, signature) of `mod(*args)`."""
    tracer = ExportTracer()
    params = dict(mod.named_parameters()) if isinstance(mod, torch.nn.Module) else {}
    buffers = dict(mod.named_buffers()) if isinstance(mod, torch.nn.Module) else {}
    persistent = set(mod.state_dict()) if isinstance(mod, torch.nn.Module) else set()
    state = {k: v.detach().clone() for k, v in {**params, **buffers}.items()}
    user = [a.detach().clone() for a in args]
    specs = []
    for k in params:
        specs.append(InputSpec(InputKind.PARAMETER, "p_" + k.replace(".", "_"), k))
    for k in buffers:
        specs.append(InputSpec(InputKind.BUFFER, "b_" + k.replace(".", "_"), k, k in persistent))
    specs += [InputSpec(InputKind.USER_INPUT, n) for n in names]
    tensors = [state[s.target] for s in specs[: len(state)]] + user
    phs = [tracer.placeholder(s.name, t) for s, t in zip(specs, tensors)]
    with torch.no_grad(), tracer:
        if isinstance(mod, torch.nn.Module):
            out = torch.func.functional_call(mod, state, tuple(user))
        else:
            out = mod(*user)
    single = isinstance(out, torch.Tensor)
    outs = [out] if single else list(out)
    out_specs, results = [], []
    for s, t, ph in zip(specs, tensors, phs):  # mutations first, in input order (as torch)
        if tracer.env[id(t)] is not ph:
            kind = {InputKind.PARAMETER: OutputKind.PARAMETER_MUTATION,
                    InputKind.BUFFER: OutputKind.BUFFER_MUTATION}.get(s.kind)  # fmt: skip
            node = tracer.env[id(t)]
            results.append(node)
            out_specs.append(
                OutputSpec(kind or OutputKind.USER_INPUT_MUTATION, "", s.target or s.name)
            )
    for o in outs:
        results.append(tracer.node_of(o))
        out_specs.append(OutputSpec(OutputKind.USER_OUTPUT, ""))
    tracer.graph.output(tuple(results))
    functionalize(tracer.graph)
    tracer.graph.eliminate_dead_code(lambda n: n.op in ("placeholder", "output"))
    for spec, node in zip(out_specs, results):
        spec.name = node.name
    gm = GraphModule(torch.nn.Module(), tracer.graph)
    gm.meta["single_output"] = single
    return gm, ExportGraphSignature(specs, out_specs)


def _symbolize(gm, gm2, sizes, example_sizes, first_use) -> None:
    """Where the second trace's ints differ from the first's, the int is a dynamic dim's size:
    read it from the input at run time with `aten.sym_size.int`, as torch's graphs do."""
    n1, n2 = list(gm.graph.nodes), list(gm2.graph.nodes)
    if [n.target for n in n1] != [n.target for n in n2]:
        raise NotImplementedError("export: the program's ops change with the size of a dynamic "
                                  "dim (control flow on a shape); mark the dim static")  # fmt: skip
    by_size = {v: s for s, v in example_sizes.items()}

    def merge(a, b, node):
        if isinstance(a, (tuple, list)):
            return type(a)(merge(x, y, node) for x, y in zip(a, b))
        if isinstance(a, int) and not isinstance(a, bool) and a != b:
            sym = by_size.get(a)
            if sym is None or sizes[sym] != b:
                raise NotImplementedError(
                    f"export: node {node.name} takes {a}, which follows a dynamic dim but is no "
                    "dim's size (an expression such as s0*4); the rebuild has no symbolic ints"
                )
            ph, d = first_use[sym]
            with gm.graph.inserting_before(node):
                return gm.graph.call_function(aten.sym_size.int, (ph, d), name="sym_size_int")
        return a

    for a, b in zip(n1, n2):
        if a.op == "call_function":
            a.args = merge(a.args, b.args, a)
            a.kwargs = {k: merge(v, b.kwargs[k], a) for k, v in a.kwargs.items()}
    gm.recompile()


def export(mod, args, kwargs=None, *, dynamic_shapes=None) -> ExportedProgram:
    """Trace `mod(*args)` (a Module or a function of tensors) into an ExportedProgram."""
    if kwargs:
        raise NotImplementedError("export: pass inputs positionally (args), not as kwargs")
    args = tuple(args)
    if not all(isinstance(a, torch.Tensor) for a in args):
        raise TypeError("export traces tensor inputs only; close over other values")
    names = input_names(mod, args)
    shapes, ranges = symbolic_shapes(names, args, dynamic_shapes)
    gm, sig = _trace(mod, names, args)
    if ranges:
        args2, sizes = other_example(args, shapes, ranges)
        gm2, _ = _trace(mod, names, args2)
        phs = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
        first_use, example_sizes = {}, {}
        for name, a, shape in reversed(list(zip(names, args, shapes))):
            for d, s in reversed(list(enumerate(shape))):
                if isinstance(s, str):
                    first_use[s], example_sizes[s] = (phs[name], d), a.shape[d]
        _symbolize(gm, gm2, sizes, example_sizes, first_use)
    state = {s.target: t for s, t in zip(sig.input_specs, _state_tensors(mod, sig))}
    return ExportedProgram(gm, sig, state, ranges, shapes, [a.dtype for a in args])


def _state_tensors(mod, sig):
    if not isinstance(mod, torch.nn.Module):
        return []
    own = {**dict(mod.named_parameters()), **dict(mod.named_buffers())}
    kinds = (InputKind.PARAMETER, InputKind.BUFFER)
    return [own[s.target].detach().clone() for s in sig.input_specs if s.kind in kinds]

"""ExportedProgram: a functional aten graph, its signature, its state and its symbol ranges.

Mirrors torch/export/exported_program.py at torch v2.13.0: `graph_module`, `graph`,
`graph_signature`, `state_dict`, `range_constraints`, and `module()`, which gives back an
nn.Module holding the state (torch's `_unlift_exported_program_lifted_states`,
torch/export/_unlift.py): it checks every call against the guards and writes mutated buffers
back. Unlike torch's, the program may be called directly: it runs on its own `state_dict`.

The readers at the end (`signature_rows`, `format_signature`, `range_constraints_of`,
`dynamic_dims`, `aten_op_counts`) take a torch or a retorch program and return plain sorted
values with no addresses, so a notebook can print them and compare them strictly.
"""

import collections
import operator

import torch

from .dynamic_shapes import INF, check_inputs, guards
from .graph_signature import InputKind, OutputKind, signature_rows

_WRITES_STATE = (OutputKind.BUFFER_MUTATION, OutputKind.PARAMETER_MUTATION)


class ExportedProgram:
    """What `retorch.export.export` returns; `ep(*inputs)` or `ep.module()(*inputs)` runs it."""

    def __init__(self, graph_module, graph_signature, state_dict, range_constraints,
                 input_shapes, input_dtypes):  # fmt: skip
        self.graph_module = graph_module
        self.graph_signature = graph_signature
        self.state_dict = state_dict  # target -> tensor: parameters and buffers
        self.range_constraints = range_constraints  # symbol -> (min, max or None)
        self.input_shapes = input_shapes  # per user input: ints and symbols ("s0")
        self.input_dtypes = input_dtypes
        names = graph_signature.user_inputs
        self._guards = guards(names, input_shapes, input_dtypes, range_constraints)

    @property
    def graph(self):
        return self.graph_module.graph

    def _run(self, state, args):
        names = self.graph_signature.user_inputs
        check_inputs(self._guards, names, args)
        lifted = [state[s.target] for s in self.graph_signature.input_specs
                  if s.kind in (InputKind.PARAMETER, InputKind.BUFFER)]  # fmt: skip
        outs = self.graph_module(*lifted, *args)
        user = []
        for spec, value in zip(self.graph_signature.output_specs, outs):
            if spec.kind in _WRITES_STATE:
                with torch.no_grad():
                    state[spec.target].copy_(value)
            elif spec.kind == OutputKind.USER_INPUT_MUTATION:
                args[names.index(spec.target)].copy_(value)
            else:
                user.append(value)
        return user[0] if self.graph_module.meta.get("single_output") else tuple(user)

    def __call__(self, *args):
        return self._run(self.state_dict, args)

    def module(self) -> torch.nn.Module:
        """An nn.Module owning copies of the state, whose forward runs the program."""
        return _UnliftedModule(self)

    def __str__(self) -> str:
        code = self.graph_module.print_readable(print_output=False)
        ranges = {s: list(r) for s, r in self.range_constraints.items()}
        return f"ExportedProgram:\n{code}\nGraph signature:\n{self.graph_signature}\n" + (
            f"Range constraints: {ranges}"
        )


class _UnliftedModule(torch.nn.Module):
    """The program with its parameters and buffers back on a module, at their dotted names."""

    def __init__(self, ep: ExportedProgram):
        super().__init__()
        self._ep = ep
        for spec in ep.graph_signature.input_specs:
            if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER):
                continue
            *path, leaf = spec.target.split(".")
            owner = self
            for p in path:
                if not hasattr(owner, p):
                    owner.add_module(p, torch.nn.Module())
                owner = getattr(owner, p)
            value = ep.state_dict[spec.target].clone()
            if spec.kind == InputKind.PARAMETER:
                owner.register_parameter(leaf, torch.nn.Parameter(value))
            else:
                owner.register_buffer(leaf, value, persistent=spec.persistent is not False)

    def forward(self, *args):
        state = {**dict(self.named_parameters()), **dict(self.named_buffers())}
        return self._ep._run(state, args)


# -- readers: the same summaries of torch's program and of ours --


def format_signature(ep) -> str:
    """The signature as aligned rows: side, kind, placeholder or output name, target."""
    rows = signature_rows(ep)
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{a:<{w[0]}}  {b:<{w[1]}}  {c:<{w[2]}}  {d}".rstrip() for a, b, c, d in rows)


def range_constraints_of(ep) -> dict[str, tuple]:
    """{symbol: (min, max)}, max None when unbounded (torch's int_oo), sorted by symbol."""
    items = {}
    for sym, vr in ep.range_constraints.items():
        lo, hi = (vr.lower, vr.upper) if hasattr(vr, "lower") else vr
        items[str(sym)] = (int(lo), INF if hi is INF or str(hi) == "int_oo" else int(hi))
    return dict(sorted(items.items()))


def dynamic_dims(ep) -> list[tuple[str, int, str]]:
    """(user input, dim, symbol) for every dim of an input that is a symbol."""
    if isinstance(ep, ExportedProgram):
        named = zip(ep.graph_signature.user_inputs, ep.input_shapes)
    else:
        users = {s.arg.name for s in ep.graph_signature.input_specs
                 if s.kind.name == "USER_INPUT"}  # fmt: skip
        named = [(n.name, tuple(n.meta["val"].shape)) for n in ep.graph.nodes
                 if n.op == "placeholder" and n.name in users]  # fmt: skip
    return [(name, d, str(s)) for name, shape in named for d, s in enumerate(shape)
            if not isinstance(s, int)]  # fmt: skip


def aten_op_counts(ep) -> dict[str, int]:
    """How often each op is called in the graph, by qualified name, sorted by name."""
    names = []
    for n in ep.graph.nodes:
        if n.op == "call_function":
            t = n.target
            names.append("getitem" if t is operator.getitem else str(t))
    return dict(sorted(collections.Counter(names).items()))

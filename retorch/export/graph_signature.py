"""The graph signature: which placeholder is a parameter, a buffer or a user input, and which
output is a user output or the new value of a mutated buffer.

Mirrors torch/export/graph_signature.py at torch v2.13.0: `InputKind`, `OutputKind`,
`InputSpec`, `OutputSpec` and `ExportGraphSignature` keep torch's names and members (the kinds
the rebuild never makes, CUSTOM_OBJ, TOKEN, gradients, are listed so that torch's signatures
read into these classes too). torch's `arg` is a `TensorArgument(name=...)`; here it is the
name itself. `signature_rows` reads either a torch or a retorch program into plain rows.
"""

from dataclasses import dataclass
from enum import Enum, auto


class InputKind(Enum):
    USER_INPUT = auto()
    PARAMETER = auto()
    BUFFER = auto()
    CONSTANT_TENSOR = auto()
    CUSTOM_OBJ = auto()
    TOKEN = auto()


class OutputKind(Enum):
    USER_OUTPUT = auto()
    LOSS_OUTPUT = auto()
    BUFFER_MUTATION = auto()
    PARAMETER_MUTATION = auto()
    GRADIENT_TO_PARAMETER = auto()
    GRADIENT_TO_USER_INPUT = auto()
    USER_INPUT_MUTATION = auto()
    TOKEN = auto()


@dataclass
class InputSpec:
    """One placeholder: its kind, its name in the graph, and the state_dict key it reads."""

    kind: InputKind
    name: str
    target: str | None = None  # "l.weight" for a parameter; None for a user input
    persistent: bool | None = None  # buffers only: whether it is in the state_dict

    def __str__(self) -> str:
        extra = "" if self.target is None else f" target={self.target!r}"
        if self.persistent is not None:
            extra += f" persistent={self.persistent}"
        return f"{self.name}: {self.kind.name}{extra}"


@dataclass
class OutputSpec:
    """One output: its kind, the node it returns, and what it writes back (mutations)."""

    kind: OutputKind
    name: str
    target: str | None = None  # the buffer or user input a mutation writes

    def __str__(self) -> str:
        extra = "" if self.target is None else f" target={self.target!r}"
        return f"{self.name}: {self.kind.name}{extra}"


@dataclass
class ExportGraphSignature:
    """Inputs, then outputs, in the order of the graph's placeholders and output tuple."""

    input_specs: list[InputSpec]
    output_specs: list[OutputSpec]

    def specs(self, kind) -> list:
        pool = self.input_specs if isinstance(kind, InputKind) else self.output_specs
        return [s for s in pool if s.kind == kind]

    @property
    def user_inputs(self) -> list[str]:
        return [s.name for s in self.specs(InputKind.USER_INPUT)]

    @property
    def buffers_to_mutate(self) -> dict[str, str]:
        """Output node name -> buffer it writes (torch's property of the same name)."""
        return {s.name: s.target for s in self.specs(OutputKind.BUFFER_MUTATION)}

    def __str__(self) -> str:
        lines = ["# inputs", *map(str, self.input_specs), "", "# outputs"]
        return "\n".join(lines + [str(s) for s in self.output_specs])


def from_torch(sig) -> ExportGraphSignature:
    """torch's ExportGraphSignature as retorch's (kinds by name; arg -> its name)."""

    def name(arg) -> str:
        return getattr(arg, "name", str(arg))

    ins = [InputSpec(InputKind[s.kind.name], name(s.arg), s.target, s.persistent)
           for s in sig.input_specs]  # fmt: skip
    outs = [OutputSpec(OutputKind[s.kind.name], name(s.arg), s.target) for s in sig.output_specs]
    return ExportGraphSignature(ins, outs)


def signature_rows(ep) -> list[tuple[str, str, str, str]]:
    """(side, kind, name, target) per spec of a torch or a retorch ExportedProgram."""
    sig = ep.graph_signature
    if not isinstance(sig, ExportGraphSignature):
        sig = from_torch(sig)
    rows = [("input", s.kind.name, s.name, s.target or "") for s in sig.input_specs]
    return rows + [("output", s.kind.name, s.name, s.target or "") for s in sig.output_specs]

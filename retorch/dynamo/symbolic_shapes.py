"""Dynamic shapes: sizes as symbols, the guards that keep a graph valid, and automatic dynamic.

Mirrors, in miniature and at torch v2.13.0, torch/fx/experimental/symbolic_shapes.py
(`ShapeEnv`: `create_symbol` with duck sizing, sizes 0 and 1 specialized, `produce_guards`)
and the automatic-dynamic bookkeeping of torch/_dynamo/pgo.py (`FrameStateSizeEntry`,
`update_automatic_dynamic`) used by variables/builder.py (`_automatic_dynamic`).

With `dynamic=None` (torch.compile's default) a frame is first compiled with every size
static. The sizes each graph input had are kept per source (the frame state); when a later
compile sees a size that differs, that dimension becomes dynamic: it gets a symbol, the
tensor's TENSOR_MATCH no longer checks it, and the ShapeEnv guards what the graph now
assumes instead: the size is at least 2 (0 and 1 stay specialized, as in torch), and sizes
that were equal when the symbol was made share it (duck sizing) and must stay equal.

torch traces the graph with SymInts (a placeholder per symbol, `s77`) and runs every op on
fake tensors with symbolic shapes; here the example values keep their concrete sizes (the
hints), and a shape query on a tensor that depends on a dynamic size is recorded in the
graph (`l_x_.size(0)`), so the compiled graph reads the size at run time.
"""

from __future__ import annotations

from .guards import Guard


def update_automatic_dynamic(frame_state: dict, name: str, sizes) -> list[bool]:
    """Record `sizes` for the input `name`; the dimensions now dynamic (seen to change)."""
    sizes = list(sizes)
    seen = frame_state.get(name)
    if seen is None or len(seen) != len(sizes):  # first sight, or another rank: static
        frame_state[name] = sizes
        return [False] * len(sizes)
    merged = [a if a == b else None for a, b in zip(seen, sizes)]
    frame_state[name] = merged
    return [m is None for m in merged]


class ShapeEnv:
    """The symbols of one graph: which input sizes each stands for, and their guards."""

    def __init__(self):
        self.var_to_sources: dict[str, list] = {}  # "s0" -> [(tensor source, dim), ...]
        self._by_hint: dict[int, str] = {}

    def create_symbol(self, hint: int, source, dim: int) -> str | None:
        """A symbol for `source.size()[dim]`, or None where torch specializes (0 and 1)."""
        if hint in (0, 1):
            return None
        sym = self._by_hint.get(hint)  # duck sizing: equal sizes share a symbol
        if sym is None:
            sym = self._by_hint[hint] = f"s{len(self.var_to_sources)}"
            self.var_to_sources[sym] = []
        if (source, dim) not in self.var_to_sources[sym]:
            self.var_to_sources[sym].append((source, dim))
        return sym

    def produce_guards(self) -> list[Guard]:
        return [SHAPE_ENV(sym, places) for sym, places in self.var_to_sources.items()]


class SHAPE_ENV(Guard):
    """One symbol's guards: `2 <= L['x'].size()[0]`, and each other size it stands for equal."""

    kind = "SHAPE_ENV"

    def __init__(self, sym: str, places: list):
        super().__init__(places[0][0])
        self.sym, self.places = sym, list(places)

    needs_frame = True  # reads several sources: GuardManager passes the whole frame

    def check(self, frame) -> bool:
        sizes = [source.get(frame).shape[dim] for source, dim in self.places]
        return sizes[0] >= 2 and all(size == sizes[0] for size in sizes[1:])

    def detail(self) -> str:
        first = f"{self.places[0][0].name()}.size()[{self.places[0][1]}]"
        rest = [f"{s.name()}.size()[{d}] == {first}" for s, d in self.places[1:]]
        return ", ".join([f"{self.sym}: 2 <= {first}", *rest])

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail()}"

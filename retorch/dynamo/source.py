"""Sources: where a value the graph reads lives in the running frame (`L['x']`, `G['w'].bias`).

Mirrors torch/_dynamo/source.py at torch v2.13.0 (LocalSource, GlobalSource, AttrSource,
GetItemSource, ClosureSource's role in torch's `cell_contents` sources). A source names a
value (`name()`, the spelling torch's guard log uses) and fetches it again from a new frame
(`get`), so guards re-check it and graph inputs are re-read on every call.
"""

import builtins
from dataclasses import dataclass


@dataclass(frozen=True)
class Frame:
    """What a source reads from: the frame's locals, its function's globals and closure."""

    f_locals: dict
    f_globals: dict
    closure: tuple = ()


class Source:
    def name(self) -> str:
        raise NotImplementedError

    def get(self, frame: Frame):
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name()


@dataclass(frozen=True, repr=False)
class LocalSource(Source):
    local_name: str

    def name(self) -> str:
        return f"L[{self.local_name!r}]"

    def get(self, frame):
        return frame.f_locals[self.local_name]


@dataclass(frozen=True, repr=False)
class GlobalSource(Source):
    global_name: str

    def name(self) -> str:
        return f"G[{self.global_name!r}]"

    def get(self, frame):
        if self.global_name in frame.f_globals:
            return frame.f_globals[self.global_name]
        return getattr(builtins, self.global_name)


@dataclass(frozen=True, repr=False)
class ClosureSource(Source):
    """A free variable of the frame, read from its cell; torch spells it as a local, `L['k']`
    (the frame's locals include its free variables: a LocalSource of a dereferenced cell)."""

    var_name: str
    index: int

    def name(self) -> str:
        return f"L[{self.var_name!r}]"

    def get(self, frame):
        return frame.closure[self.index].cell_contents


@dataclass(frozen=True, repr=False)
class AttrSource(Source):
    base: Source
    member: str

    def name(self) -> str:
        return f"{self.base.name()}.{self.member}"

    def get(self, frame):
        return getattr(self.base.get(frame), self.member)


@dataclass(frozen=True, repr=False)
class GetItemSource(Source):
    base: Source
    index: object

    def name(self) -> str:
        return f"{self.base.name()}[{self.index!r}]"

    def get(self, frame):
        return self.base.get(frame)[self.index]


@dataclass(frozen=True, repr=False, eq=False)
class ModuleGlobalSource(Source):
    """A global of an inlined function's module, read from that module's live dict."""

    f_globals: dict
    global_name: str

    def name(self) -> str:
        return f"G[{self.f_globals.get('__name__', '?')!r}][{self.global_name!r}]"

    def get(self, frame):
        if self.global_name in self.f_globals:
            return self.f_globals[self.global_name]
        return getattr(builtins, self.global_name)

    def __hash__(self):
        return hash(self.name())

    def __eq__(self, other):
        return isinstance(other, ModuleGlobalSource) and other.name() == self.name()

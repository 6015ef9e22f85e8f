"""Guards: the checks a cached graph's assumptions must pass before it may run again.

Mirrors torch/_dynamo/guards.py at torch v2.13.0, in miniature. Torch builds a tree of C++
guard managers (`GuardManager`, `RootGuardManager`, leaf guards such as TYPE_MATCH, ID_MATCH,
EQUALS_MATCH, TENSOR_MATCH) from the `Guard` objects the tracer installed, and a cache
entry's code runs only if the whole tree passes. Here a `GuardManager` is a flat list of small
guard objects, each of which re-reads its value through its `Source` and prints the way torch's
guard log does (`TENSOR_MATCH: L['x'] Tensor float32 (4, 4) stride=(4, 1) requires_grad=False`).
`check_verbose` returns the first failing guard, the reason torch logs for a recompile.
"""

import torch

from .source import Frame, Source

_MISSING = object()


class Guard:
    """One assumption about the value at `source`."""

    kind = "GUARD"

    def __init__(self, source: Source | None):
        self.source = source

    @property
    def name(self) -> str:
        return self.source.name() if self.source is not None else ""

    def check_value(self, value) -> bool:
        raise NotImplementedError

    def detail(self) -> str:
        return ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.name} {self.detail()}".rstrip()

    __repr__ = __str__


class TYPE_MATCH(Guard):
    kind = "TYPE_MATCH"

    def __init__(self, source, value):
        super().__init__(source)
        self.type = type(value)

    def check_value(self, value) -> bool:
        return type(value) is self.type

    def detail(self) -> str:
        return self.type.__qualname__


class ID_MATCH(Guard):
    """The very same object (globals such as modules, functions, nn.Modules)."""

    kind = "ID_MATCH"

    def __init__(self, source, value):
        super().__init__(source)
        self.value = value  # held strongly: an id() alone could be reused by a new object

    def check_value(self, value) -> bool:
        return value is self.value

    def detail(self) -> str:
        return f"id={id(self.value):#x} ({type(self.value).__name__})"


class CONSTANT_MATCH(Guard):
    """A Python constant the graph baked in (torch: EQUALS_MATCH, type checked too)."""

    kind = "CONSTANT_MATCH"

    def __init__(self, source, value):
        super().__init__(source)
        self.value, self.type = value, type(value)

    def check_value(self, value) -> bool:
        return type(value) is self.type and value == self.value

    def detail(self) -> str:
        return f"== {self.value!r}"


class LIST_LENGTH(Guard):
    kind = "LIST_LENGTH"

    def __init__(self, source, value):
        super().__init__(source)
        self.type, self.length = type(value), len(value)

    def check_value(self, value) -> bool:
        return type(value) is self.type and len(value) == self.length

    def detail(self) -> str:
        return f"{self.type.__name__} of length {self.length}"


class DICT_KEYS_MATCH(Guard):
    """A dict of the same type with the same keys in the same order (torch: DICT_KEYS_MATCH)."""

    kind = "DICT_KEYS_MATCH"

    def __init__(self, source, value):
        super().__init__(source)
        self.type, self.keys = type(value), list(value)

    def check_value(self, value) -> bool:
        return type(value) is self.type and list(value) == self.keys

    def detail(self) -> str:
        return f"{self.type.__name__} with keys {self.keys!r}"


class TENSOR_MATCH(Guard):
    """Type, dtype, device, shape, stride and requires_grad; a dynamic size (and a stride that
    spans it) is None, not checked (symbolic_shapes.py guards it), as in torch's
    `size=[None, 3]`."""

    kind = "TENSOR_MATCH"

    def __init__(self, source, value: torch.Tensor, dynamic=None):
        super().__init__(source)
        dynamic = list(dynamic or [False] * value.dim())
        sizes = [None if d else s for s, d in zip(value.shape, dynamic)]
        # a stride that steps over a dynamic dimension depends on its size
        strides = [None if any(d and j != i and value.stride(j) * value.shape[j] <= st
                               for j, d in enumerate(dynamic)) else st
                   for i, st in enumerate(value.stride())]  # fmt: skip
        self.key = (type(value), value.dtype, value.device, value.requires_grad)
        self.sizes, self.strides = sizes, strides

    @staticmethod
    def _matches(pattern, actual) -> bool:
        return len(pattern) == len(actual) and all(
            p is None or p == a for p, a in zip(pattern, actual)
        )

    def check_value(self, value) -> bool:
        return (
            isinstance(value, torch.Tensor)
            and (type(value), value.dtype, value.device, value.requires_grad) == self.key
            and self._matches(self.sizes, value.shape)
            and self._matches(self.strides, value.stride())
        )

    def detail(self) -> str:
        typ, dtype, device, rg = self.key
        shape = tuple(self.sizes) if None not in self.sizes else self.sizes
        stride = tuple(self.strides) if None not in self.strides else self.strides
        return (f"{typ.__name__} {str(dtype).removeprefix('torch.')} {device} "
                f"{shape} stride={stride} requires_grad={rg}")  # fmt: skip


class GRAD_MODE(Guard):
    """Global state: torch.is_grad_enabled() as it was at capture (torch's GLOBAL_STATE)."""

    kind = "GRAD_MODE"

    def __init__(self):
        super().__init__(None)
        self.enabled = torch.is_grad_enabled()

    def check(self, frame: Frame) -> bool:
        return torch.is_grad_enabled() == self.enabled

    def detail(self) -> str:
        return f"torch.is_grad_enabled() == {self.enabled}"


class GuardManager:
    """All guards of one cache entry; `check(frame)` is True when every one passes."""

    def __init__(self, guards: list[Guard]):
        self.guards = list(guards)

    def _failing(self, frame: Frame):
        for g in self.guards:
            if g.source is None or getattr(g, "needs_frame", False):
                try:
                    if not g.check(frame):
                        return g
                except (KeyError, AttributeError, IndexError, TypeError, ValueError):
                    return g
                continue
            try:
                value = g.source.get(frame)
            except (KeyError, AttributeError, IndexError, TypeError, ValueError):
                return g
            if not g.check_value(value):
                return g
        return None

    def check(self, frame: Frame) -> bool:
        return self._failing(frame) is None

    def check_verbose(self, frame: Frame) -> str | None:
        """The first failing guard, as torch's recompile log names it; None if all pass."""
        g = self._failing(frame)
        return None if g is None else str(g)

    def __iter__(self):
        return iter(self.guards)

    def __len__(self) -> int:
        return len(self.guards)

    def __str__(self) -> str:
        return "\n".join(str(g) for g in self.guards)

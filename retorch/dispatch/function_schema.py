"""``FunctionSchema``: an operator's signature, parsed from torch's schema strings.

Mirrors ``aten/src/ATen/core/function_schema.h`` and the parser in
``torch/csrc/jit/frontend/function_schema_parser.cpp``. A schema such as
``add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor`` names the operator and
its overload, the arguments (type, name, default, whether keyword-only, alias annotation such
as ``Tensor(a!)`` for an argument written in place) and the returns. The dispatcher uses it to
find the tensor arguments (whose key sets decide the kernel) and to move between the unboxed
call (``op(x, y, alpha=2)``) and the boxed one (a stack of all arguments in schema order).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

_NO_DEFAULT = object()


@dataclass(frozen=True)
class AliasInfo:
    """``(a!)``: the argument shares storage with set ``a``; ``!``: it is written."""

    name: str
    is_write: bool


@dataclass(frozen=True)
class Argument:
    name: str
    type: str  # as written, without the alias annotation: "Tensor", "Tensor?", "int[1]", ...
    default: object = _NO_DEFAULT
    kwarg_only: bool = False
    alias_info: AliasInfo | None = None

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT

    @property
    def is_tensor_like(self) -> bool:
        """Whether the dispatcher reads keys from it: ``Tensor``, ``Tensor?``, ``Tensor[]``."""
        return self.type.startswith("Tensor")

    def __str__(self) -> str:
        t = self.type
        if self.alias_info is not None:
            mark = "!" if self.alias_info.is_write else ""
            t = t.replace("Tensor", f"Tensor({self.alias_info.name}{mark})", 1)
        text = f"{t} {self.name}" if self.name else t
        return text + (f"={_default_str(self.default)}" if self.has_default else "")


class _Quoted(str):
    """A string default written in quotes (``str padding="valid"``), kept apart from a bare
    name (``MemoryFormat memory_format=contiguous_format``) so both print back as written."""


def _default_str(value) -> str:
    if isinstance(value, _Quoted):
        return f'"{value}"'
    if isinstance(value, float):  # torch prints 17 significant digits, 0.0 as "0."
        return f"{int(value)}." if value.is_integer() else f"{value:.17g}"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


@dataclass(frozen=True)
class FunctionSchema:
    name: str  # "aten::add"
    overload_name: str  # "Tensor" ("" for the default overload)
    arguments: tuple[Argument, ...]
    returns: tuple[Argument, ...]
    positional: tuple[Argument, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "positional", tuple(a for a in self.arguments if not a.kwarg_only))

    @property
    def operator_name(self) -> str:
        return f"{self.name}.{self.overload_name}" if self.overload_name else self.name

    def __str__(self) -> str:
        args, star = [], False
        for a in self.arguments:
            if a.kwarg_only and not star:
                args.append("*")
                star = True
            args.append(str(a))
        if len(self.returns) == 1:
            rets = str(self.returns[0])
        else:
            rets = "(" + ", ".join(str(r) for r in self.returns) + ")"
        return f"{self.operator_name}({', '.join(args)}) -> {rets}"

    def bind(self, args: tuple, kwargs: dict) -> list:
        """The boxed stack for a call: every argument in schema order, defaults filled in.
        Errors read as torch's (``expected at most 1 argument(s) but received 2``)."""
        if len(args) > len(self.positional):
            raise TypeError(
                f"{self.name}() expected at most {len(self.positional)} argument(s) but "
                f"received {len(args)} argument(s). Declaration: {self}"
            )
        names = {a.name for a in self.arguments}
        for key in kwargs:
            if key not in names:
                raise TypeError(f"{self.name}() got an unexpected keyword argument '{key}'")
        stack = []
        for i, a in enumerate(self.arguments):
            if i < len(args) and not a.kwarg_only:
                if a.name in kwargs:
                    raise TypeError(f"{self.name}() got multiple values for argument '{a.name}'")
                stack.append(args[i])
            elif a.name in kwargs:
                stack.append(kwargs[a.name])
            elif a.has_default:
                stack.append(a.default)
            else:
                raise TypeError(
                    f"{self.name}() is missing value for argument '{a.name}'. Declaration: {self}"
                )
        return stack

    def unbind(self, stack: list) -> tuple[tuple, dict]:
        """The unboxed call for a stack: positional arguments, keyword-only ones as kwargs."""
        n = len(self.positional)
        kwargs = {a.name: v for a, v in zip(self.arguments[n:], stack[n:])}
        return tuple(stack[:n]), kwargs


_TYPE = re.compile(r"^(?P<base>[A-Za-z_][A-Za-z0-9_]*)(?P<alias>\([a-z]+!?\))?(?P<rest>.*)$")


def _parse_default(text: str):
    text = text.strip()
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [_parse_default(x) for x in inner.split(",")] if inner else []
    if text[:1] in "'\"":
        return _Quoted(ast.literal_eval(text))
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # an enum-like name such as "contiguous_format" or "Mean"


def _parse_argument(text: str, kwarg_only: bool, is_return: bool = False) -> Argument:
    text = text.strip()
    default = _NO_DEFAULT
    if "=" in text:
        text, default_text = text.split("=", 1)
        default = _parse_default(default_text)
    parts = text.strip().rsplit(" ", 1)
    type_text, name = (parts[0], parts[1]) if len(parts) == 2 else (parts[0], "")
    if not is_return and not name:
        raise ValueError(f"schema argument {text!r} has no name")
    m = _TYPE.match(type_text.strip())
    if m is None:
        raise ValueError(f"could not parse the type {type_text!r}")
    alias = None
    if m["alias"]:
        a = m["alias"][1:-1]
        alias = AliasInfo(a.rstrip("!"), a.endswith("!"))
    return Argument(name, m["base"] + m["rest"], default, kwarg_only, alias)


def _split_top(text: str) -> list[str]:
    """Split on the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    tail = text[start:]
    return parts + [tail] if tail.strip() else parts


def parse_schema(text: str, namespace: str | None = None) -> FunctionSchema:
    """``parse_schema("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")``.
    A name without ``ns::`` takes ``namespace`` (as ``Library.define`` does)."""
    m = re.fullmatch(r"\s*([\w:]+?)(?:\.(\w+))?\((.*)\)\s*->\s*(.+?)\s*", text, re.S)
    if m is None:
        raise ValueError(
            f"could not parse the schema {text!r}: expected 'name.overload(args) -> returns'"
        )
    name, overload, args_text, rets_text = m.groups()
    if "::" not in name and namespace is not None:
        name = f"{namespace}::{name}"
    args, kwarg_only = [], False
    for part in _split_top(args_text):
        if part.strip() == "*":
            kwarg_only = True
            continue
        args.append(_parse_argument(part, kwarg_only))
    if rets_text.startswith("(") and rets_text.endswith(")"):
        rets = [_parse_argument(p, False, True) for p in _split_top(rets_text[1:-1])]
    else:
        rets = [_parse_argument(rets_text, False, True)]
    seen = set()
    for a in args:
        if a.name in seen:
            raise ValueError(f"schema {text!r} names the argument {a.name!r} twice")
        seen.add(a.name)
    return FunctionSchema(name, overload or "", tuple(args), tuple(rets))

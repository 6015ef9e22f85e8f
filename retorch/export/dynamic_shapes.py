"""Dynamic shapes: which input dims may vary, their symbols and ranges, and the guards that
check a call against them.

Mirrors torch/export/dynamic_shapes.py at torch v2.13.0 (the `dynamic_shapes` argument: a dict
keyed by the forward's argument names, or a tuple by position, of `{dim: Dim(...)}`; the same
`Dim` in two places is one symbol) and the guards torch/export/_unlift.py writes into
`ep.module()` (`torch._assert(x.size()[0] <= 64, "Guard failed: x.size()[0] <= 64")`: a
call outside the ranges raises AssertionError, as torch's).

torch gives each dim a sympy symbol (`s77`) and proves its guards with a ShapeEnv. The rebuild
numbers the symbols `s0, s1, ...` in order of appearance and accepts torch's own `Dim` objects.
"""

import inspect

import torch

INF = None  # an unbounded upper end (torch's int_oo), stored as JSON null


def _arg_names(fn, n: int) -> list[str]:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    params = list(inspect.signature(target).parameters.values())
    if len(params) < n or any(p.kind is p.VAR_POSITIONAL for p in params[:n]):
        return [f"args_{i}" for i in range(n)]
    return [p.name for p in params[:n]]


def input_names(fn, args) -> list[str]:
    """The user inputs' names: the forward's parameter names, as torch's placeholders."""
    return _arg_names(fn, len(args))


def symbolic_shapes(names, args, dynamic_shapes):
    """Per input, its shape with dynamic dims as symbols; and {symbol: (min, max)}."""
    if dynamic_shapes is None:
        return [tuple(a.shape) for a in args], {}
    specs = dynamic_shapes
    if isinstance(specs, dict):
        unknown = sorted(set(specs) - set(names))
        if unknown:
            raise ValueError(f"dynamic_shapes names {unknown}, not arguments of the forward "
                             f"({names}); key it by argument name or give a tuple by position")  # fmt: skip
        specs = [specs.get(n) for n in names]
    if len(specs) != len(args):
        raise ValueError(f"dynamic_shapes has {len(specs)} entries for {len(args)} inputs")
    symbols: dict[str, str] = {}  # Dim name -> symbol
    ranges: dict[str, tuple] = {}
    shapes = []
    for name, a, spec in zip(names, args, specs):
        shape = list(a.shape)
        for d, dim in (spec or {}).items():
            if not hasattr(dim, "__name__") or not hasattr(dim, "min"):
                raise NotImplementedError(f"dynamic_shapes[{name!r}][{d}] is {dim}; the rebuild "
                                          "takes named dims only: Dim('batch', min=2, max=64)")  # fmt: skip
            hi = INF if str(dim.max) == "int_oo" else int(dim.max)
            if not (max(dim.min, 2) <= shape[d] and (hi is INF or shape[d] <= hi)):
                raise ValueError(
                    f"{name}.size()[{d}] = {shape[d]} is outside {dim.__name__}'s range "
                    f"[{dim.min}, {dim.max}] (or is 0 or 1, which export specializes); "
                    "pick an example inside the range"
                )
            sym = symbols.setdefault(dim.__name__, f"s{len(symbols)}")
            ranges[sym] = (int(dim.min), hi)
            shape[d] = sym
        shapes.append(tuple(shape))
    return shapes, ranges


def other_example(args, shapes, ranges):
    """The same inputs with every symbol's size changed by one (inside its range): a second
    trace on these shows which ints in the graph follow the dynamic dims."""
    sizes = {}
    for a, shape in zip(args, shapes):
        for d, s in enumerate(shape):
            if isinstance(s, str) and s not in sizes:
                hi = ranges[s][1]
                sizes[s] = a.shape[d] + 1 if hi is INF or a.shape[d] + 1 <= hi else a.shape[d] - 1
    out = []
    for a, shape in zip(args, shapes):
        for d, s in enumerate(shape):
            if isinstance(s, str):
                n = sizes[s]
                a = a.narrow(d, 0, n) if n < a.shape[d] else torch.cat([a, a.narrow(d, 0, 1)], d)
        out.append(a.clone())
    return out, sizes


def guards(names, shapes, dtypes, ranges) -> list[tuple[str, object]]:
    """(message, check) per guard, in torch's wording: `x.size()[1] == 4`."""
    out, seen = [], {}  # symbol -> its first (input index, dim, name)
    for i, (name, shape, dtype) in enumerate(zip(names, shapes, dtypes)):
        out.append(
            (f"{name}.dim() == {len(shape)}", lambda xs, i=i, s=shape: xs[i].dim() == len(s))
        )
        out.append((f"{name}.dtype == {dtype}", lambda xs, i=i, t=dtype: xs[i].dtype == t))
        for d, s in enumerate(shape):
            size = lambda xs, i=i, d=d: xs[i].size()[d]  # noqa: E731
            if isinstance(s, int):
                out.append((f"{name}.size()[{d}] == {s}", lambda xs, f=size, s=s: f(xs) == s))
                continue
            if s in seen:  # the same Dim twice: the sizes must agree
                j, e, other = seen[s]
                msg = f"{name}.size()[{d}] == {other}.size()[{e}]"
                out.append((msg, lambda xs, f=size, j=j, e=e: f(xs) == xs[j].size()[e]))
                continue
            seen[s] = (i, d, name)
            lo, hi = ranges[s]
            out.append((f"{name}.size()[{d}] >= {lo}", lambda xs, f=size, lo=lo: f(xs) >= lo))
            if hi is not INF:
                out.append((f"{name}.size()[{d}] <= {hi}", lambda xs, f=size, hi=hi: f(xs) <= hi))
    return out


def check_inputs(guard_list, names, args) -> None:
    """Raise AssertionError("Guard failed: ...") at the first failing guard, as torch's."""
    if len(args) != len(names):
        raise TypeError(f"the program takes {len(names)} inputs ({', '.join(names)}), "
                        f"got {len(args)}")  # fmt: skip
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"input {names[i]} must be a tensor, got {type(a).__name__}")
    for message, check in guard_list:
        if not check(args):
            raise AssertionError(f"Guard failed: {message}")

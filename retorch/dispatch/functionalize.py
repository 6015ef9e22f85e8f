"""The Functionalize key: a program with mutations and views run as one without them.

Mirrors ``aten/src/ATen/FunctionalTensorWrapper.cpp`` (the wrapper: ``replace_``,
``commit_update``, ``sync``, ``regenerate_from_base``), ``aten/src/ATen/FunctionalStorageImpl.cpp``
(the storage every view of one base shares: the base's latest value and a generation count),
``aten/src/ATen/FunctionalizeFallbackKernel.cpp`` (the boxed fallback at ``Functionalize``) and
``torch/_functorch/eager_transforms.py`` (``functionalize``: wrap the inputs, run, sync, and
``copy_`` the new values back into the inputs the program mutated).

A functional tensor is a wrapper around an ordinary tensor, its *value*, with the
``Functionalize`` key added to the value's keys. The key sits below autograd and above the
Python key, so autograd records on the wrappers and a dispatch mode sees what the
functionalization kernel calls. That kernel, for each operator:

- *in place* (an argument ``Tensor(a!)``): calls the operator's functional variant on the
  values (``add_.Tensor`` -> ``add.Tensor``), ``replace_`` s the wrapper's value with the
  result and ``commit_update`` s it to the shared storage: a view's new value is carried back
  to the base through the view's *inverse* (``view`` back to the base's size, ``t`` again);
  then every other view of that base is stale and is regenerated from the base when next used;
- a *view* (returns ``Tensor(a)``): runs the view on the value and returns a wrapper that
  shares the base's storage and remembers how to redo and undo the view (torch's
  ``ViewMeta``);
- anything else: runs on the values and wraps the results.

Torch generates a kernel per in-place and view operator from ``native_functions.yaml``
(``torchgen/gen_functionalization_type.py``), pairing each with its functional variant at
build time; retorch finds the variant by name in one boxed fallback, and knows the views
``view``, ``t`` and ``detach``. Factories inside the program make functional tensors too: the
key is in the thread's included set for the whole call.
"""

from __future__ import annotations

from .dispatch_key import DispatchKey
from .dispatch_key_set import DispatchKeySet
from .library import Library
from .local_dispatch_key_set import ExcludeDispatchKeyGuard, IncludeDispatchKeyGuard

_FUNCTIONALIZE = DispatchKeySet(DispatchKey.Functionalize)


def _dispatcher():
    from .dispatcher import get_dispatcher

    return get_dispatcher()


def _call(name: str, *args, **kwargs):
    """The operator ``name`` called from the top of the dispatcher."""
    return _dispatcher().find_schema_or_throw(name)(*args, **kwargs)


class FunctionalStorage:
    """``FunctionalStorageImpl``: the base's latest value, shared by the base and its views;
    ``generation`` counts the updates, so a view knows it is stale."""

    def __init__(self, base) -> None:
        self.base = base
        self.generation = 0
        self.mutated = False


class ViewMeta:
    """How a view was made from its base, forward and back (``at::functionalization::ViewMeta``:
    ``forward_fn`` and ``reverse_fn``, the latter from ``FunctionalInverses``)."""

    def __init__(self, op: str, forward, reverse) -> None:
        self.op, self.forward, self.reverse = op, forward, reverse


def _view_meta(op_name: str, args: tuple, base_value) -> ViewMeta:
    """The ViewMeta of the view operators retorch has (``FunctionalInverses.cpp``)."""
    if op_name == "aten::view":
        size, base_size = list(args[1]), list(base_value.shape)
        return ViewMeta(
            op_name,
            lambda b: _call("aten::view", b, size),
            lambda b, mutated: _call("aten::view", mutated, base_size),  # view_inverse
        )
    if op_name == "aten::t":
        return ViewMeta(op_name, lambda b: _call("aten::t", b), lambda b, m: _call("aten::t", m))
    if op_name == "aten::detach":  # detach_inverse: the mutated view is the new base
        return ViewMeta(op_name, lambda b: _call("aten::detach", b), lambda b, m: m)
    raise NotImplementedError(
        f"functionalize: retorch has no inverse for the view operator {op_name} (it knows "
        f"aten::view, aten::t and aten::detach); torch generates one per view operator"
    )


def _make_wrapper(value, storage: FunctionalStorage | None = None, view_metas=()):
    """``FunctionalTensorWrapper``: a retorch.Tensor whose keys are its value's plus
    ``Functionalize``; the class is made on first use (``_tensor`` imports the ops)."""
    global FunctionalTensorWrapper
    if FunctionalTensorWrapper is None:
        from ._tensor import Tensor

        class _Wrapper(Tensor):
            """A functional tensor (``at::FunctionalTensorWrapper``)."""

            def __init__(self, value, storage, view_metas) -> None:
                super().__init__(value.data, device=value._device)
                self._key_set = value.key_set | _FUNCTIONALIZE
                self.value = value
                self.storage = FunctionalStorage(value) if storage is None else storage
                self.view_metas = list(view_metas)
                self.generation = 0  # generation_'s initializer: a view of an updated base
                # is stale from birth, and regenerates when first used

            def __repr__(self) -> str:
                return f"FunctionalTensor({self.value!r})"

        _Wrapper.__name__ = _Wrapper.__qualname__ = "FunctionalTensorWrapper"
        FunctionalTensorWrapper = _Wrapper
    return FunctionalTensorWrapper(value, storage, view_metas)


FunctionalTensorWrapper = None  # the class, once _make_wrapper has built it


def is_functional_tensor(t) -> bool:
    """``torch._is_functional_tensor``."""
    return FunctionalTensorWrapper is not None and isinstance(t, FunctionalTensorWrapper)


def to_functional_tensor(t):
    """``torch._to_functional_tensor``: wrap ``t`` as the base of a new functional storage."""
    return _make_wrapper(t)


def _replace(w, new_value) -> None:
    """``FunctionalTensorWrapper::replace_``: the wrapper now holds ``new_value``."""
    w.value = new_value
    w.data = new_value.data


def _commit_update(w) -> None:
    """``commit_update``: carry the wrapper's value back to the base through the inverse of
    each of its views, innermost first, and count a new generation of the storage. (torch
    queues the update, ``add_update``, and applies it in the next ``sync``, which the in-place
    kernel calls at once: the same ops, in the same order.)"""
    value = w.value
    if w.view_metas:
        bases = [w.storage.base]  # the value at each level of the view chain
        for meta in w.view_metas[:-1]:
            bases.append(meta.forward(bases[-1]))
        for meta, base in zip(reversed(w.view_metas), reversed(bases), strict=True):
            value = meta.reverse(base, value)
    w.storage.base = value
    w.storage.generation += 1
    w.storage.mutated = True


def sync(w) -> None:
    """``FunctionalTensorWrapper::sync_`` / ``regenerate_from_base``: a wrapper older than its
    storage replays its views on the base's latest value."""
    if w.generation == w.storage.generation:
        return
    value = w.storage.base
    with ExcludeDispatchKeyGuard(_FUNCTIONALIZE):  # the views replayed on plain values
        for meta in w.view_metas:
            value = meta.forward(value)
    _replace(w, value)
    w.generation = w.storage.generation


def from_functional_tensor(w):
    """``torch._from_functional_tensor``: the wrapper's value, after a sync."""
    sync(w)
    return w.value


def _unwrap(v, synced: bool = True):
    if is_functional_tensor(v):
        if synced:
            sync(v)
        return v.value
    if isinstance(v, (list, tuple)):
        return type(v)(_unwrap(x, synced) for x in v)
    return v


def _wrap(v):
    if hasattr(v, "key_set") and not is_functional_tensor(v):
        return to_functional_tensor(v)
    if isinstance(v, (list, tuple)):
        return type(v)(_wrap(x) for x in v)
    return v


def _functional_name(op) -> str:
    """``add_.Tensor`` -> ``aten::add.Tensor``: the variant torchgen pairs an in-place op with."""
    schema = op.schema
    base = schema.name.removesuffix("_")
    name = f"{base}.{schema.overload_name}" if schema.overload_name else base
    if _dispatcher().find_schema(name) is None:
        raise NotImplementedError(
            f"functionalize: {op.name} mutates its input and retorch has no functional "
            f"variant {name} to run instead"
        )
    return name


def functionalize_fallback(op, keyset: DispatchKeySet, stack: list) -> None:
    """The boxed kernel at ``Functionalize`` (``functionalizeFallback`` and the kernels
    torchgen writes into ``RegisterFunctionalization_*.cpp``)."""
    schema = op.schema
    args, kwargs = schema.unbind(stack)
    written = [i for i, a in enumerate(schema.arguments) if a.alias_info and a.alias_info.is_write]
    is_view = not written and any(r.alias_info is not None for r in schema.returns)
    # a view op reads its input's value as it stands, stale or not (the view kernels torchgen
    # writes call from_functional_tensor, no sync)
    inner_args = _unwrap(args, synced=not is_view)
    inner_kwargs = {k: _unwrap(v, not is_view) for k, v in kwargs.items()}
    with ExcludeDispatchKeyGuard(_FUNCTIONALIZE):  # AutoDispatchSkipFunctionalize
        if written:
            if written != [0] or not is_functional_tensor(args[0]):
                raise RuntimeError(
                    f"functionalize: {op.name} writes into an argument that is not a "
                    f"functional tensor, or into more than its first"
                )
            out = _call(_functional_name(op), *inner_args, **inner_kwargs)
            self_ = args[0]
            _replace(self_, out)
            _commit_update(self_)
            sync(self_)  # a view regenerates itself from the updated base
            stack[:] = [self_]
            return
        out = _call(op.name, *inner_args, **inner_kwargs)
    if is_view and is_functional_tensor(args[0]):
        base = args[0]
        meta = _view_meta(op.schema.name, inner_args, inner_args[0])
        with ExcludeDispatchKeyGuard(_FUNCTIONALIZE):
            view = _make_wrapper(out, base.storage, base.view_metas + [meta])
        stack[:] = [view]
        return
    stack[:] = list(_wrap(out)) if isinstance(out, tuple) else [_wrap(out)]


def functionalize(func):
    """``torch.func.functionalize(func)`` (``remove="mutations"``): ``func`` run on functional
    tensors, its outputs unwrapped, and each input it mutated written back with ``copy_``."""

    def wrapped(*args):
        inputs = [to_functional_tensor(a) if hasattr(a, "key_set") else a for a in args]
        with IncludeDispatchKeyGuard(_FUNCTIONALIZE):  # torch._enable_functionalization
            out = func(*inputs)
        for original, inp in zip(args, inputs, strict=True):
            if is_functional_tensor(inp):
                sync(inp)
                if inp.storage.mutated:
                    original.copy_(inp.value)
        return _unwrap(out)

    return wrapped


_LIB = Library("_", "IMPL")
_LIB.fallback(functionalize_fallback, "Functionalize")


# ------------------------------------------------ reading the program functionalize runs
def _op_name(qualified: str) -> str:
    """``aten::add.Tensor`` -> ``add``: the name FX gives the node that calls it."""
    return qualified.split("::")[-1].split(".")[0]


def _arg_text(v, names: dict) -> str:
    if id(v) in names:
        return names[id(v)]
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_arg_text(x, names) for x in v) + "]"
    if hasattr(v, "key_set") and v.data.ndim == 0:  # a Python scalar, wrapped by the method
        return _number(v.item())
    return _number(v) if isinstance(v, (int, float)) else repr(v)


def _number(v) -> str:
    """A scalar as both sides print it: 2 whether it was 2 or 2.0 (a method wraps a Python
    number into a float64 tensor), else as Python writes it."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return repr(v)
    return str(int(v)) if float(v).is_integer() and abs(v) < 2**53 else repr(v)


def _is_default(arg, value) -> bool:
    return arg.has_default and not hasattr(value, "key_set") and arg.default == value


def _line(names: dict, counts: dict, op: str, args, kwargs, out) -> str:
    text = [_arg_text(a, names) for a in args]
    text += [f"{k}={_arg_text(v, names)}" for k, v in kwargs.items()]
    base = _op_name(op)
    n = counts[base] = counts.get(base, -1) + 1
    name = base if n == 0 else f"{base}_{n}"
    names[id(out)] = name  # an in-place op's result is its own node from here on, as in FX
    return f"{name} = {op.split('::')[-1]}({', '.join(text)})"


def recorded_program(fn, **inputs) -> list[str]:
    """The aten ops ``fn(**inputs)`` sends below the Functionalize key, one line each, named
    as FX names nodes (``add``, ``mul_1``); keyword arguments equal to their default left out,
    as ``make_fx`` leaves them."""
    from .python_dispatch import TorchDispatchMode

    names = {id(v): k for k, v in inputs.items()}
    counts: dict = {}
    lines: list[str] = []
    alive: list = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            schema = func._op.schema
            defaults = {a.name: a.default for a in schema.arguments if a.has_default}
            given = {k: v for k, v in (kwargs or {}).items() if defaults.get(k, object()) != v}
            kept = list(args)
            while kept and _is_default(schema.positional[len(kept) - 1], kept[-1]):
                kept.pop()  # trailing positional defaults, as make_fx drops them
            lines.append(_line(names, counts, func.name, kept, given, out))
            alive.append(out)  # a named tensor's id must not be reused by a later one
            return out

    with Recorder():
        fn(*inputs.values())
    return lines


def fx_program(gm, arg_names) -> list[str]:
    """The same lines read from a torch ``GraphModule`` (``make_fx``'s), placeholders named
    ``arg_names``."""
    names, lines = {}, []
    placeholders = iter(arg_names)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            names[node.name] = next(placeholders)
        elif node.op == "call_function":
            names[node.name] = node.name

            def text(v):
                if hasattr(v, "name") and v.name in names:
                    return names[v.name]
                if isinstance(v, (list, tuple)):
                    return "[" + ", ".join(text(x) for x in v) + "]"
                return _number(v)

            target = str(node.target).removeprefix("aten.")
            if target.count(".") == 1 and target.endswith(".default"):
                target = target.removesuffix(".default")
            body = [text(a) for a in node.args] + [f"{k}={text(v)}" for k, v in node.kwargs.items()]
            lines.append(f"{node.name} = {target}({', '.join(body)})")
    return lines

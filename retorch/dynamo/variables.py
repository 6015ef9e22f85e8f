"""VariableTrackers: the symbolic values on the tracer's stack, and the builder that makes them.

Mirrors torch/_dynamo/variables/ at torch v2.13.0, one class per family: base.py
(VariableTracker), constant.py (ConstantVariable), tensor.py (TensorVariable), lists.py
(ListVariable, TupleVariable, ListIteratorVariable), dicts.py (ConstDictVariable), torch.py
(TorchInGraphFunctionVariable, here `TorchVariable`), builtin.py (BuiltinVariable),
functions.py (UserFunctionVariable, UserMethodVariable, NestedUserFunctionVariable for a
`def`, lambda or comprehension made inside the traced code, LocalGeneratorObjectVariable),
misc.py (NewCellVariable, here `CellVariable`; GetAttrVariable, NullVariable), nn_module.py
(NNModuleVariable) and builder.py (`VariableBuilder`, here `wrap`, which installs the guards; `wrap_fx_proxy`,
which records a node and computes its example value).

Torch runs every recorded op on fake tensors to learn the result's shape and dtype. Here the
example values are meta tensors (shapes and dtypes, no data), with the real device tracked
beside them, as a FakeTensor tracks its fake device. Results that are not tensors are trusted
only from shape queries (`size`, `dim`, `numel`...): anything else is data-dependent and
breaks the graph.
"""

import inspect
import operator
import types

import torch

from .exc import Unsupported, unimplemented
from .guards import CONSTANT_MATCH, DICT_KEYS_MATCH, ID_MATCH, LIST_LENGTH, TYPE_MATCH, Guard
from .source import AttrSource, GetItemSource

CONSTANT_TYPES = (int, float, bool, complex, str, bytes, type(None), type(...), range, slice,
                  torch.dtype, torch.device, torch.memory_format, torch.layout, torch.Size)  # fmt: skip
# Tensor methods and attributes whose non-tensor results depend only on shape/dtype/device.
SHAPE_METHODS = {"size", "dim", "ndimension", "numel", "nelement", "stride", "is_contiguous",
                 "is_floating_point", "is_complex", "element_size", "is_signed"}  # fmt: skip
CONSTANT_ATTRS = {"shape", "dtype", "ndim", "requires_grad", "layout", "is_sparse", "is_leaf"}
DATA_DEPENDENT = {"item", "tolist", "numpy", "__bool__", "__index__", "__int__", "__float__",
                  "data_ptr", "backward", "register_hook", "retain_grad", "storage",
                  "untyped_storage"}  # fmt: skip
MUTABLE_ATTRS = {"grad", "data", "_base", "grad_fn", "_version"}  # may change under the same guards
PURE_BUILTINS = {abs, min, max, round, int, float, bool, str, len, divmod, pow, sum, any, all,
                 sorted, tuple, list, range, slice, isinstance, issubclass, type, hash, repr,
                 complex, reversed, enumerate, zip, chr, ord, getattr, hasattr, dict,
                 next}  # fmt: skip
# torch callables that are ops (recorded as call_function nodes); the rest of torch (seeding,
# saving, settings) has effects a graph must not replay at capture time.
_OP_MODULES = {"torch.nn.functional", "torch.functional", "torch._C._nn", "torch._C._linalg",
               "torch._C._special", "torch._C._fft", "torch.linalg", "torch.special", "torch.fft",
               "torch._C._VariableFunctions"}  # fmt: skip


class _Null:
    """The NULL that 3.11+ bytecode pushes below a callable (PUSH_NULL, LOAD_GLOBAL's low bit)."""

    def __repr__(self):
        return "NULL"


NULL = _Null()


class VariableTracker:
    """A value the tracer knows symbolically; `source` says where it came from, if anywhere."""

    source = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def python_type(self):
        unimplemented(f"type of {self} is unknown")

    def is_python_constant(self) -> bool:
        try:
            self.as_python_constant()
            return True
        except Unsupported:
            return False

    def as_python_constant(self):
        unimplemented(f"{self} is not a Python constant")

    def as_proxy(self):
        unimplemented(f"{self} cannot be an argument of a graph op")

    def example(self):
        return self.as_python_constant()

    def var_getattr(self, tx, name: str) -> "VariableTracker":
        unimplemented(f"attribute {name!r} of {self}")

    def call_function(self, tx, args, kwargs) -> "VariableTracker":
        unimplemented(f"call to {self}")

    def call_method(self, tx, name, args, kwargs) -> "VariableTracker":
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def unpack(self, tx) -> list:
        unimplemented(f"iteration over {self}")

    def truth(self) -> bool:
        unimplemented(f"truth value of {self}", kind="jump")

    def next_variable(self, tx):  # FOR_ITER on an iterator the frame received (a resume)
        unimplemented(f"iterating {self}, which the traced code did not build", kind="opcode")

    def children(self) -> list:
        return []


class ConstantVariable(VariableTracker):
    def __init__(self, value, source=None):
        self.value, self.source = value, source

    def __repr__(self):
        return f"ConstantVariable({self.value!r})"

    def python_type(self):
        return type(self.value)

    def as_python_constant(self):
        return self.value

    def as_proxy(self):
        return self.value

    def var_getattr(self, tx, name):
        value = getattr(self.value, name)
        if isinstance(value, CONSTANT_TYPES):
            return ConstantVariable(value)
        if callable(value):  # a method of an immutable constant: safe to fold
            return BuiltinVariable(value, pure=True)
        unimplemented(f"attribute {name!r} of constant {self.value!r}")

    def unpack(self, tx):
        if isinstance(self.value, (tuple, range, str, torch.Size)):
            return [ConstantVariable(v) for v in self.value]
        return super().unpack(tx)

    def truth(self):
        return bool(self.value)


class TensorVariable(VariableTracker):
    """A tensor: an fx Proxy in the graph, a meta tensor for shapes, and its real device."""

    dynamic = False  # depends on a dynamic size: its shape queries are recorded, not baked

    def __init__(self, proxy, example, device, cls=torch.Tensor, source=None):
        self.proxy, self._example, self.device, self.cls = proxy, example, device, cls
        self.source = source

    def __repr__(self):
        ex = self._example
        return f"TensorVariable({self.proxy.node.name}: {ex.dtype} {tuple(ex.shape)})"

    def python_type(self):
        return self.cls

    def as_proxy(self):
        return self.proxy

    def example(self):
        return self._example

    def var_getattr(self, tx, name):
        if name in MUTABLE_ATTRS:
            unimplemented(f"Unsupported Tensor.{name} access: it can change under the same guards")
        if name == "shape" and self.dynamic:
            return self.call_method(tx, "size", [], {})
        if name in CONSTANT_ATTRS:
            return ConstantVariable(getattr(self._example, name))
        if name == "device":
            return ConstantVariable(self.device)
        if name == "is_cuda":
            return ConstantVariable(self.device.type == "cuda")
        if name in ("T", "mT", "H", "mH", "real", "imag"):
            return wrap_fx_proxy(tx, "call_function", getattr, [self, ConstantVariable(name)], {})
        if callable(getattr(torch.Tensor, name, None)):
            return BoundMethodVariable(self, name)
        unimplemented(f"Tensor attribute {name!r}")

    def call_method(self, tx, name, args, kwargs):
        if name == "item":  # torch's words (variables/tensor.py)
            unimplemented("Unsupported Tensor.item() call with capture_scalar_outputs=False\n"
                          "  Explanation: Dynamo does not support tracing `Tensor.item()` with "
                          "config.capture_scalar_outputs=False.")  # fmt: skip
        if name == "tolist" and (self._example.is_floating_point() or self._example.is_complex()):
            unimplemented(
                "Tensor.tolist() with non-integer tensor\n  Explanation: Dynamo "
                "currently does not support tracing `tolist()` on non-integer tensors."
            )
        if name in DATA_DEPENDENT:
            unimplemented(f"Unsupported Tensor.{name}() call: its value is data-dependent")
        return wrap_fx_proxy(tx, "call_method", name, [self, *args], kwargs)

    def unpack(self, tx):
        if self._example.dim() == 0:
            unimplemented("iteration over a 0-d tensor")
        if self.dynamic:
            unimplemented("iteration over a tensor whose length is symbolic")
        return [
            wrap_fx_proxy(tx, "call_function", operator.getitem, [self, ConstantVariable(i)], {})
            for i in range(self._example.shape[0])
        ]

    def truth(self):
        unimplemented("generic_jump TensorVariable()", kind="jump")  # data-dependent control flow


class SymNodeVariable(VariableTracker):
    """An int (or bool) that depends on a dynamic size: a node of the graph, with its value at
    capture time as the hint (torch: SymNodeVariable over a SymInt)."""

    def __init__(self, proxy, hint):
        self.proxy, self.hint = proxy, hint

    def __repr__(self):
        return f"SymNodeVariable({self.proxy.node.name}, hint={self.hint})"

    def python_type(self):
        return type(self.hint)

    def as_proxy(self):
        return self.proxy

    def example(self):
        return self.hint

    def truth(self):  # torch would guard on the hint; the rebuild lets Python decide
        unimplemented("generic_jump on a symbolic size", kind="jump")


class BaseListVariable(VariableTracker):
    def __init__(self, items, source=None, owner=None):
        self.items, self.source, self.owner = list(items), source, owner

    def __repr__(self):
        return f"{type(self).__name__}({self.items})"

    def as_python_constant(self):
        return self.python_type()(v.as_python_constant() for v in self.items)

    def as_proxy(self):
        return self.python_type()(v.as_proxy() for v in self.items)

    def example(self):
        return self.python_type()(v.example() for v in self.items)

    def unpack(self, tx):
        return list(self.items)

    def truth(self):
        return bool(self.items)

    def children(self):
        return self.items

    def var_getattr(self, tx, name):
        if callable(getattr(self.python_type(), name, None)):
            return BoundMethodVariable(self, name)
        return super().var_getattr(tx, name)

    def getitem(self, tx, index: VariableTracker):
        i = index.as_python_constant()
        if isinstance(i, slice):
            return type(self)(self.items[i], owner=tx)
        return self.items[i]

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name in ("index", "count") and all(a.is_python_constant() for a in args):
            return ConstantVariable(getattr(self.as_python_constant(), name)(*[a.as_python_constant() for a in args]))  # fmt: skip
        return super().call_method(tx, name, args, kwargs)


class TupleVariable(BaseListVariable):
    def python_type(self):
        return tuple


class ListVariable(BaseListVariable):
    """A list; the traced code may mutate it only if it built it (the caller's lists are not
    mutated: torch replays such side effects after the graph, the rebuild breaks instead)."""

    def python_type(self):
        return list

    def call_method(self, tx, name, args, kwargs):
        if name in ("append", "extend", "insert", "pop", "reverse"):
            if self.source is not None or not tx.may_mutate(self):
                unimplemented(
                    f"list.{name} on a list the traced code did not build (a side effect)"
                )
            if kwargs:
                unimplemented(f"list.{name} with keyword arguments")
            if name == "append":
                self.items.append(args[0])
            elif name == "extend":
                self.items.extend(args[0].unpack(tx))
            elif name == "insert":
                self.items.insert(args[0].as_python_constant(), args[1])
            elif name == "reverse":
                self.items.reverse()
            else:
                return self.items.pop(*[a.as_python_constant() for a in args])
            return ConstantVariable(None)
        return super().call_method(tx, name, args, kwargs)


class ListIteratorVariable(VariableTracker):
    """`iter(...)` of something the tracer can unpack; FOR_ITER advances it."""

    def __init__(self, items, owner):
        self.items, self.index, self.owner = list(items), 0, owner

    def __repr__(self):
        return f"ListIteratorVariable({self.index}/{len(self.items)})"

    def next_variable(self, tx):
        if self.owner is not tx:
            unimplemented("advancing an iterator another frame built (a side effect)")
        if self.index >= len(self.items):
            return None
        self.index += 1
        return self.items[self.index - 1]

    def unpack(self, tx):
        return self.items[self.index :]

    def children(self):
        return self.items[self.index :]


class GeneratorObjectVariable(ListIteratorVariable):
    """A generator made by calling a generator function inside the traced code (torch:
    LocalGeneratorObjectVariable): each `next` steps its own translator to the next YIELD_VALUE,
    so its ops interleave with the consumer's, as in eager Python."""

    def __init__(self, gen_tx, owner):
        super().__init__([], owner)
        self.gen_tx, self.exhausted = gen_tx, False

    def __repr__(self):
        return f"GeneratorObjectVariable({self.gen_tx.code.co_qualname})"

    def next_variable(self, tx):
        if self.owner is not tx:
            unimplemented("advancing a generator another frame built (a side effect)")
        if self.exhausted:
            return None
        value = self.gen_tx.run_to_yield()
        self.exhausted = value is None
        return value

    def unpack(self, tx):
        items = []
        while (v := self.next_variable(tx)) is not None:
            items.append(v)
        return items

    def children(self):
        return []


class ConstDictVariable(VariableTracker):
    """A dict with constant keys (torch: variables/dicts.py); only the frame that built it may
    mutate it, as for lists."""

    def __init__(self, items: dict, source=None, owner=None):
        self.items, self.source, self.owner = dict(items), source, owner

    def __repr__(self):
        return f"ConstDictVariable({self.items})"

    def python_type(self):
        return dict

    def as_python_constant(self):
        return {k: v.as_python_constant() for k, v in self.items.items()}

    def as_proxy(self):
        return {k: v.as_proxy() for k, v in self.items.items()}

    def example(self):
        return {k: v.example() for k, v in self.items.items()}

    def unpack(self, tx):
        return [ConstantVariable(k) for k in self.items]

    def truth(self):
        return bool(self.items)

    def children(self):
        return list(self.items.values())

    def var_getattr(self, tx, name):
        if callable(getattr(dict, name, None)):
            return BoundMethodVariable(self, name)
        return super().var_getattr(tx, name)

    @staticmethod
    def key(k: VariableTracker):
        if not k.is_python_constant():
            unimplemented(f"a dict key that is not a constant: {k}")
        return k.as_python_constant()

    def getitem(self, tx, k):
        key = self.key(k)
        if key not in self.items:
            unimplemented(f"dict has no key {key!r} (a KeyError, raised by Python)")
        return self.items[key]

    def setitem(self, tx, k, value):
        if self.source is not None or not tx.may_mutate(self):
            unimplemented("writing into a dict the traced code did not build (a side effect)")
        self.items[self.key(k)] = value

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name == "get" and not kwargs:
            key = self.key(args[0])
            default = args[1] if len(args) > 1 else ConstantVariable(None)
            return self.items.get(key, default)
        if name == "__contains__":
            return ConstantVariable(self.key(args[0]) in self.items)
        if name in ("keys", "values", "items") and not args:
            rows = {"keys": self.unpack(tx), "values": list(self.items.values()),
                    "items": [TupleVariable([ConstantVariable(k), v])
                              for k, v in self.items.items()]}[name]  # fmt: skip
            return TupleVariable(rows)  # a view in Python; here a snapshot, used at once
        if name == "copy" and not args:
            return ConstDictVariable(self.items, owner=tx)
        if name in ("update", "pop", "setdefault", "__setitem__"):
            if self.source is not None or not tx.may_mutate(self):
                unimplemented(
                    f"dict.{name} on a dict the traced code did not build (a side effect)"
                )
            if name == "update" and not kwargs and len(args) == 1:
                other = args[0]
                if not isinstance(other, ConstDictVariable):
                    unimplemented(f"dict.update with {other}")
                self.items.update(other.items)
                return ConstantVariable(None)
            if name == "update" and not args:
                self.items.update(kwargs)
                return ConstantVariable(None)
            if name == "__setitem__":
                self.setitem(tx, args[0], args[1])
                return ConstantVariable(None)
            key = self.key(args[0])
            if name == "setdefault":
                return self.items.setdefault(
                    key, args[1] if len(args) > 1 else ConstantVariable(None)
                )
            if key in self.items:
                return self.items.pop(key)
            if len(args) > 1:
                return args[1]
            unimplemented(f"dict.pop of a missing key {key!r}")
        unimplemented(f"dict.{name}")


class CellVariable(VariableTracker):
    """A cell of a frame being traced (LOAD_CLOSURE), read and written through that frame's
    symbolic locals when a nested function runs (torch: NewCellVariable and side_effects)."""

    def __init__(self, tx, name: str):
        self.tx, self.name = tx, name

    def __repr__(self):
        return f"CellVariable({self.name})"

    def get(self):
        return self.tx.read_deref(self.name)

    def set(self, value):
        self.tx.write_deref(self.name, value)


class NestedUserFunctionVariable(VariableTracker):
    """A function made by MAKE_FUNCTION inside the traced code: a `def`, a lambda, or a
    comprehension's or generator expression's code object (3.11). Calling it inlines it."""

    def __init__(self, code, f_globals, defaults=None, kwdefaults=None, closure=None):
        self.code, self.f_globals = code, f_globals
        self.defaults, self.kwdefaults, self.closure = defaults, kwdefaults, closure

    def __repr__(self):
        return f"NestedUserFunctionVariable({self.code.co_qualname})"

    def python_type(self):
        return types.FunctionType

    def truth(self):
        return True

    def children(self):
        return [v for v in (self.defaults, self.kwdefaults) if v is not None]

    def call_function(self, tx, args, kwargs):
        return tx.inline_user_function(self, None, args, kwargs)


class BoundMethodVariable(VariableTracker):
    """`obj.name` loaded to be called (LOAD_METHOD / LOAD_ATTR's method form)."""

    def __init__(self, obj: VariableTracker, name: str):
        self.obj, self.name = obj, name

    def __repr__(self):
        return f"BoundMethodVariable({self.obj}.{self.name})"

    def call_function(self, tx, args, kwargs):
        return self.obj.call_method(tx, self.name, args, kwargs)

    def children(self):
        return [self.obj]


class _ValueVariable(VariableTracker):
    """A Python object the tracer holds by reference (re-read from `source` at run time)."""

    def __init__(self, value, source=None):
        self.value, self.source = value, source

    def __repr__(self):
        return (
            f"{type(self).__name__}({getattr(self.value, '__name__', type(self.value).__name__)})"
        )

    def python_type(self):
        return type(self.value)

    def truth(self):
        return True


def _is_torch_op(fn) -> bool:
    name = getattr(fn, "__name__", None)
    if name is not None and getattr(torch._C._VariableFunctions, name, None) is fn:
        return True
    return getattr(fn, "__module__", None) in _OP_MODULES


class TorchVariable(_ValueVariable):
    """torch, a torch submodule, or a torch op (`torch.relu`, `F.linear`)."""

    def var_getattr(self, tx, name):
        if not isinstance(self.value, types.ModuleType):
            unimplemented(f"attribute {name!r} of {self}")
        value = getattr(self.value, name)
        source = AttrSource(self.source, name) if self.source is not None else None
        return wrap(tx, value, source, guard=False)

    def call_function(self, tx, args, kwargs):
        fn = self.value
        if fn in (torch.device, torch.Size) and all(
            a.is_python_constant() for a in [*args, *kwargs.values()]
        ):
            return ConstantVariable(fn(*[a.as_python_constant() for a in args]))
        if fn is torch.is_grad_enabled:  # the GRAD_MODE guard pins it
            return ConstantVariable(torch.is_grad_enabled())
        if fn is torch.is_tensor:
            return ConstantVariable(isinstance(args[0], TensorVariable))
        if not _is_torch_op(fn):
            unimplemented(f"torch.{getattr(fn, '__name__', fn)} is not an op a graph can hold")
        return wrap_fx_proxy(tx, "call_function", fn, args, kwargs)


class BuiltinVariable(_ValueVariable):
    """A builtin (`len`, `range`, `print`), or an `operator`/`math` function."""

    def __init__(self, value, source=None, pure=False):
        super().__init__(value, source)
        self.pure = pure or value in PURE_BUILTINS or getattr(value, "__module__", None) in (
            "math", "_operator", "operator")  # fmt: skip

    def call_function(self, tx, args, kwargs):
        fn = self.value
        name = getattr(fn, "__name__", repr(fn))
        if fn is print:  # torch's words (variables/builtin.py): its break reasons compare equal
            types_ = [a.python_type().__name__ for a in args]
            unimplemented("Failed to trace builtin operator\n  Explanation: Dynamo does not know "
                          f"how to trace builtin operator `print` with argument types {types_} "
                          f"(has_kwargs {bool(kwargs)})", kind="builtin")  # fmt: skip
        if fn is len and not kwargs:
            obj = args[0]
            if isinstance(obj, TensorVariable):
                if obj.example().dim() == 0:
                    unimplemented("len() of a 0-d tensor")
                if obj.dynamic:
                    return obj.call_method(tx, "size", [ConstantVariable(0)], {})
                return ConstantVariable(obj.example().shape[0])
            return ConstantVariable(len(obj.unpack(tx)))
        if fn is isinstance and not kwargs:
            return ConstantVariable(issubclass(args[0].python_type(), args[1].as_python_constant()))
        if fn in (list, tuple) and not kwargs:
            items = args[0].unpack(tx) if args else []
            return (ListVariable if fn is list else TupleVariable)(items, owner=tx)
        if fn is enumerate and not kwargs:
            start = args[1].as_python_constant() if len(args) > 1 else 0
            items = [TupleVariable([ConstantVariable(i + start), v]) for i, v in enumerate(args[0].unpack(tx))]  # fmt: skip
            return ListIteratorVariable(items, owner=tx)
        if fn is zip and not kwargs:
            cols = [a.unpack(tx) for a in args]
            return ListIteratorVariable([TupleVariable(list(r)) for r in zip(*cols)], owner=tx)
        if fn is dict and len(args) <= 1:
            items = {}
            if args and isinstance(args[0], ConstDictVariable):
                items.update(args[0].items)
            elif args:
                for pair in args[0].unpack(tx):
                    k, v = pair.unpack(tx)
                    items[ConstDictVariable.key(k)] = v
            return ConstDictVariable({**items, **kwargs}, owner=tx)
        if fn is next and not kwargs and isinstance(args[0], ListIteratorVariable):
            value = args[0].next_variable(tx)
            if value is None:
                unimplemented("next() of an exhausted iterator (StopIteration, raised by Python)")
            return value
        if fn is sum and not kwargs and not all(a.is_python_constant() for a in args):
            # torch/_dynamo/polyfills/builtins.py: value = start; value = value + element ...
            seq = args[0]
            if not isinstance(seq, ListIteratorVariable):
                seq = ListIteratorVariable(seq.unpack(tx), owner=tx)
            value = args[1] if len(args) > 1 else ConstantVariable(0)
            while (element := seq.next_variable(tx)) is not None:
                value = tx._binop(operator.add, value, element)
            return value
        if fn is getattr and not kwargs and len(args) == 2:
            return args[0].var_getattr(tx, args[1].as_python_constant())
        if fn is operator.getitem and isinstance(args[0], BaseListVariable):
            return args[0].getitem(tx, args[1])
        if any(isinstance(a, (TensorVariable, SymNodeVariable)) for a in [*args, *kwargs.values()]):
            if getattr(fn, "__module__", None) in ("_operator", "operator"):
                return wrap_fx_proxy(tx, "call_function", fn, args, kwargs)
            unimplemented(f"builtin `{name}` with tensor arguments")
        if self.pure and all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            try:
                value = fn(*[a.as_python_constant() for a in args],
                           **{k: v.as_python_constant() for k, v in kwargs.items()})  # fmt: skip
            except Exception as e:  # let Python raise it, at run time, in the right place
                unimplemented(f"builtin `{name}` raised {type(e).__name__} on constants")
            if isinstance(value, CONSTANT_TYPES):
                return ConstantVariable(value)
            if isinstance(value, (tuple, list)) and all(
                isinstance(v, CONSTANT_TYPES) for v in value
            ):
                return (TupleVariable if isinstance(value, tuple) else ListVariable)(
                    [ConstantVariable(v) for v in value], owner=tx)  # fmt: skip
        unimplemented(f"builtin `{name}` is not supported here")


class UserFunctionVariable(_ValueVariable):
    """A Python function: calling it inlines its bytecode into the same graph."""

    def call_function(self, tx, args, kwargs):
        return tx.inline_user_function(self.value, self.source, args, kwargs)


class UserMethodVariable(VariableTracker):
    def __init__(self, fn, obj: VariableTracker, fn_source=None):
        self.fn, self.obj, self.fn_source = fn, obj, fn_source

    def call_function(self, tx, args, kwargs):
        return tx.inline_user_function(self.fn, self.fn_source, [self.obj, *args], kwargs)

    def children(self):
        return [self.obj]


def _has_hooks(m: torch.nn.Module) -> bool:
    g = torch.nn.modules.module
    return bool(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks
                or m._backward_pre_hooks or g._global_forward_hooks
                or g._global_forward_pre_hooks or g._global_backward_hooks
                or g._global_backward_pre_hooks)  # fmt: skip


class NO_HOOKS(Guard):
    """The module's forward may be inlined: no hooks, its own or global, were added since."""

    kind = "NN_MODULE_NO_HOOKS"

    def check_value(self, value) -> bool:
        return not _has_hooks(value)


class NNModuleVariable(_ValueVariable):
    """An nn.Module reached through a source; its parameters become graph inputs."""

    def var_getattr(self, tx, name):
        m, source = self.value, AttrSource(self.source, name)
        d = m.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if name in d.get(table, {}):
                return wrap(tx, d[table][name], source)
        if name in d:
            return wrap(tx, d[name], source)
        attr = inspect.getattr_static(m, name, None)
        if isinstance(attr, types.FunctionType):
            return UserMethodVariable(attr, self)
        unimplemented(f"attribute {name!r} of {type(m).__name__}")

    def call_function(self, tx, args, kwargs):
        if _has_hooks(self.value):
            unimplemented(f"calling {type(self.value).__name__} with hooks registered")
        tx.output.add_guard(NO_HOOKS(self.source))
        forward = inspect.getattr_static(self.value, "forward")
        if not isinstance(forward, types.FunctionType):
            unimplemented(f"{type(self.value).__name__}.forward is not a Python function")
        return tx.inline_user_function(forward, None, [self, *args], kwargs)

    def call_method(self, tx, name, args, kwargs):
        if name == "forward":
            return self.var_getattr(tx, name).call_function(tx, args, kwargs)
        return super().call_method(tx, name, args, kwargs)


class GradModeClassVariable(_ValueVariable):
    """`torch.no_grad` or `torch.enable_grad` itself: calling it makes the context manager."""

    def call_function(self, tx, args, kwargs):
        if args or kwargs:
            unimplemented(f"{self.value.__name__} with arguments")
        return GradModeVariable(self.value is torch.enable_grad)


class GradModeVariable(VariableTracker):
    """A `torch.no_grad()` / `torch.enable_grad()` context manager (torch: GradModeVariable in
    variables/ctx_manager.py). Entering and leaving it set the grad mode now, so the example
    values are computed under it, and record `torch._C._set_grad_enabled` in the graph, so the
    compiled graph sets it too."""

    def __init__(self, target: bool):
        self.target, self.prior = target, None

    def __repr__(self):
        return f"GradModeVariable({self.target})"

    def _set(self, tx, mode: bool):
        torch._C._set_grad_enabled(mode)
        tx.output.create_proxy("call_function", torch._C._set_grad_enabled, [mode], {})

    def enter(self, tx):
        self.prior = torch.is_grad_enabled()
        self._set(tx, self.target)
        return ConstantVariable(None)

    def exit(self, tx):
        self._set(tx, self.prior)
        return ConstantVariable(None)


class WithExitVariable(VariableTracker):
    """The `__exit__` that BEFORE_WITH leaves on the stack; the normal exit calls it."""

    def __init__(self, ctx: GradModeVariable):
        self.ctx = ctx

    def call_function(self, tx, args, kwargs):
        tx.with_stack.pop()
        return self.ctx.exit(tx)


class ObjectVariable(_ValueVariable):
    """Any other object: it may be passed along, but nothing is traced through it."""


class LazyVariable(_ValueVariable):
    """An argument not read yet: wrapped (and guarded) on its first LOAD_FAST, as torch does."""


def wrap(tx, value, source, guard: bool = True) -> VariableTracker:
    """VariableBuilder: a VariableTracker for `value` found at `source`, with its guards."""
    add = tx.output.add_guard if (guard and source is not None) else (lambda g: None)
    if isinstance(value, torch.Tensor):
        if source is None:
            unimplemented("a tensor with no source (a constant tensor held by an object)")
        return tx.output.graph_input(source, value)
    if isinstance(value, CONSTANT_TYPES):
        add(CONSTANT_MATCH(source, value))
        return ConstantVariable(value, source)
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        add(LIST_LENGTH(source, value))
        items = [wrap(tx, v, GetItemSource(source, i) if source else None, guard)
                 for i, v in enumerate(value)]  # fmt: skip
        return (ListVariable if type(value) is list else TupleVariable)(items, source)
    if type(value) is dict and all(isinstance(k, (str, int)) for k in value):
        add(DICT_KEYS_MATCH(source, value))
        items = {k: wrap(tx, v, GetItemSource(source, k) if source else None, guard)
                 for k, v in value.items()}  # fmt: skip
        return ConstDictVariable(items, source)
    if isinstance(value, torch.nn.Module):
        add(ID_MATCH(source, value))
        return NNModuleVariable(value, source)
    if value is torch.no_grad or value is torch.enable_grad:
        add(ID_MATCH(source, value))
        return GradModeClassVariable(value, source)
    is_torch = isinstance(value, types.ModuleType) and value.__name__.split(".")[0] == "torch"
    if (
        is_torch
        or (callable(value) and _is_torch_op(value))
        or any(
            value is t for t in (torch.device, torch.Size, torch.is_grad_enabled, torch.is_tensor)
        )
    ):
        add(ID_MATCH(source, value))
        return TorchVariable(value, source)
    if isinstance(value, types.FunctionType):
        add(ID_MATCH(source, value))
        return UserFunctionVariable(value, source)
    if isinstance(value, types.BuiltinFunctionType) or any(value is b for b in PURE_BUILTINS):
        add(ID_MATCH(source, value))
        return BuiltinVariable(value, source)
    if isinstance(value, type) or isinstance(value, types.ModuleType):
        add(ID_MATCH(source, value))
        return ConstantLikeVariable(value, source)
    add(TYPE_MATCH(source, value))
    return ObjectVariable(value, source)


class ConstantLikeVariable(_ValueVariable):
    """A class or a non-torch module (math): constants by identity; `math.pi`, `math.sqrt`."""

    def as_python_constant(self):
        return self.value

    def var_getattr(self, tx, name):
        if isinstance(self.value, types.ModuleType):
            return wrap(tx, getattr(self.value, name),
                        AttrSource(self.source, name) if self.source else None)  # fmt: skip
        return super().var_getattr(tx, name)


def _device_of(args, kwargs):
    for a in [*args, *kwargs.values()]:
        if isinstance(a, TensorVariable):
            return a.device
        if isinstance(a, BaseListVariable):
            d = _device_of(a.items, {})
            if d is not None:
                return d
    return None


def _to_meta(x):
    if isinstance(x, torch.device):
        return torch.device("meta")
    if isinstance(x, (list, tuple)):
        return type(x)(_to_meta(v) for v in x)
    return x


def wrap_fx_proxy(tx, kind: str, target, args, kwargs) -> VariableTracker:
    """Record `target(*args, **kwargs)` as a node; run it on meta tensors for the example value."""
    name = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
    ex_args = [a.example() for a in args]
    ex_kwargs = {k: v.example() for k, v in kwargs.items()}
    device = _device_of(args, kwargs) or torch.get_default_device()
    explicit = [v for v in [*ex_args, *ex_kwargs.values()] if isinstance(v, torch.device)]
    if "device" in ex_kwargs:
        explicit.append(torch.device(ex_kwargs["device"]))
        ex_kwargs["device"] = torch.device("meta")
    if kind == "call_method" and name == "to" and len(ex_args) > 1 and isinstance(ex_args[1], str):
        explicit.append(torch.device(ex_args[1]))
        ex_args[1] = "meta"
    if kind == "call_method" and name in ("cuda", "cpu"):
        explicit.append(torch.device(name))
        ex_args, ex_kwargs, name = ex_args[:1], {}, "clone"
    device = explicit[-1] if explicit else device
    ex_args, ex_kwargs = _to_meta(ex_args), _to_meta(ex_kwargs)
    try:
        with torch.device("meta"):
            if kind == "call_function":
                example = target(*ex_args, **ex_kwargs)
            else:
                example = getattr(ex_args[0], name)(*ex_args[1:], **ex_kwargs)
    except Exception as e:
        msg = str(e).splitlines()[0][:200] if str(e) else ""
        unimplemented(f"{name}: cannot be run on meta tensors ({type(e).__name__}: {msg})")
    proxy = tx.output.create_proxy(kind, target, [a.as_proxy() for a in args],
                                   {k: v.as_proxy() for k, v in kwargs.items()})  # fmt: skip
    dynamic = any(_is_dynamic(a) for a in [*args, *kwargs.values()])
    return wrap_example(tx, proxy, example, device, kind, name, dynamic)


def _is_dynamic(v) -> bool:
    if isinstance(v, SymNodeVariable):
        return True
    if isinstance(v, TensorVariable):
        return v.dynamic
    return isinstance(v, BaseListVariable) and any(_is_dynamic(i) for i in v.items)


def _tensor(proxy, example, device, dynamic):
    tv = TensorVariable(proxy, example, device)
    tv.dynamic = dynamic
    return tv


def wrap_example(tx, proxy, example, device, kind="call_function", name="", dynamic=False):
    if isinstance(example, torch.Tensor):
        return _tensor(proxy, example, device, dynamic)
    if isinstance(example, (tuple, list)) and all(isinstance(e, torch.Tensor) for e in example):
        items = [
            _tensor(
                tx.output.create_proxy("call_function", operator.getitem, (proxy, i), {}),
                e,
                device,
                dynamic,
            )  # fmt: skip
            for i, e in enumerate(example)
        ]
        return TupleVariable(items)
    sized = kind == "call_function" or name in ("size", "numel", "nelement", "stride")
    if dynamic and sized and isinstance(example, (int, float, bool)):  # a size, or arithmetic
        return SymNodeVariable(proxy, example)
    if (
        dynamic
        and sized
        and isinstance(example, tuple)
        and all(isinstance(e, int) for e in example)
    ):
        return TupleVariable([
            SymNodeVariable(tx.output.create_proxy("call_function", operator.getitem, (proxy, i),
                                                   {}), e)
            for i, e in enumerate(example)
        ])  # fmt: skip
    tx.output.remove_node(proxy.node)
    shape_query = kind == "call_method" and name in SHAPE_METHODS
    shape_query = shape_query or (kind == "call_function" and name in ("numel", "is_floating_point",
                                                                       "is_complex"))  # fmt: skip
    if shape_query and isinstance(example, CONSTANT_TYPES):
        return ConstantVariable(example)
    if shape_query and isinstance(example, tuple):
        return ConstantVariable(tuple(example))
    unimplemented(f"{name} returned a {type(example).__name__}, which is data-dependent")

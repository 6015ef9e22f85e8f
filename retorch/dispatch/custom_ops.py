"""``custom_op``: a new operator from Python, with kernels per device, a fake kernel, autograd.

Mirrors ``torch/_library/custom_ops.py`` (``custom_op``, ``CustomOpDef``), with the schema
inference of ``torch/_library/infer_schema.py`` and the autograd kernel of
``torch/_library/autograd.py`` (``make_autograd_impl``). Everything goes through the public
registration API of ``library.py``, as torch's does through ``torch.library.Library``:

- ``custom_op("ns::name", mutates_args=())`` infers the schema from the function's
  annotations (or takes ``schema=``), and defines it in a ``FRAGMENT`` library of the
  namespace (a ``DEF`` library is one per namespace; custom ops share theirs);
- the decorated function is the kernel for ``device_types`` (``"cpu"`` -> the CPU key), or for
  every backend when ``device_types`` is None (CompositeExplicitAutograd);
  ``register_kernel("cuda")`` adds another device's kernel;
- a Meta kernel runs the function given to ``register_fake`` (shapes only), or fails with
  torch's "There was no fake impl registered" message;
- an Autograd kernel (the ``Autograd`` alias: every AutogradCPU/CUDA/Meta row) records a node
  of chapter 3's engine, a ``Function`` subclass named ``GeneratedBackwardFor_ns_name_default``,
  whose backward is the function given to ``register_autograd``.

Defining an op of the same name again destroys the old op's library first
(``get_library_allowing_overwrite``), so a notebook cell can run twice.
"""

from __future__ import annotations

import inspect

from retorch.autograd import grad_mode
from retorch.autograd.function import Function
from retorch.autograd.tensor import Tensor as AutogradTensor

from .dispatch_key_set import after_autograd_keyset, autograd_dispatch_keyset_with_ADInplaceOrView
from .dispatcher import get_dispatcher
from .function_schema import Argument
from .library import Library
from .local_dispatch_key_set import ExcludeDispatchKeyGuard

#: One library per custom op, so redefining an op replaces it (custom_ops.py: OPDEF_TO_LIB).
OPDEF_TO_LIB: dict[str, Library] = {}

#: ``torch._C._dispatch_key_for_device`` for the devices retorch has; None: every backend.
_DEVICE_KEYS = {None: "CompositeExplicitAutograd", "cpu": "CPU", "cuda": "CUDA"}

#: Python annotation -> schema type, as infer_schema.py's table (int is SymInt there too).
_SCHEMA_TYPES = {float: "float", int: "SymInt", bool: "bool", str: "str"}


def _schema_type(annotation, where: str) -> str:
    if isinstance(annotation, type) and issubclass(annotation, AutogradTensor):
        return "Tensor"
    if annotation in _SCHEMA_TYPES:
        return _SCHEMA_TYPES[annotation]
    raise ValueError(
        f"infer_schema(func): Parameter {where} has unsupported type {annotation}. "
        f"Supported here: retorch.Tensor, float, int, bool, str"
    )


def infer_schema(fn, mutates_args=()) -> str:
    """``"(Tensor x, float beta=1.) -> Tensor"`` from ``fn``'s annotations (infer_schema.py)."""
    if mutates_args:
        raise NotImplementedError(
            "retorch's custom_op makes functional operators only: pass mutates_args=()"
        )
    sig = inspect.signature(fn, eval_str=True)
    params = []
    for p in sig.parameters.values():
        if p.annotation is inspect.Parameter.empty:
            raise ValueError(f"infer_schema(func): Parameter {p.name} must have a type annotation.")
        default = {} if p.default is inspect.Parameter.empty else {"default": p.default}
        params.append(str(Argument(p.name, _schema_type(p.annotation, p.name), **default)))
    ret = sig.return_annotation
    if isinstance(ret, type) and issubclass(ret, AutogradTensor):
        returns = "Tensor"
    elif getattr(ret, "__origin__", None) is tuple:
        returns = "(" + ", ".join(_schema_type(a, "return") for a in ret.__args__) + ")"
    else:
        raise ValueError(f"infer_schema(func): return type {ret} is not supported")
    return f"({', '.join(params)}) -> {returns}"


def _library_allowing_overwrite(namespace: str, name: str) -> Library:
    qualname = f"{namespace}::{name}"
    if qualname in OPDEF_TO_LIB:
        OPDEF_TO_LIB.pop(qualname)._destroy()
    lib = OPDEF_TO_LIB[qualname] = Library(namespace, "FRAGMENT")
    return lib


class CustomOpDef:
    """A custom operator: call it like a function; add kernels, a fake kernel and a backward."""

    def __init__(self, namespace: str, name: str, schema: str, fn) -> None:
        self._namespace, self._name, self._schema, self._init_fn = namespace, name, schema, fn
        self._backend_fns: dict = {}
        self._abstract_fn = self._setup_context_fn = self._backward_fn = None
        self._lib = _library_allowing_overwrite(namespace, name)
        self._lib.define(name + schema)
        self._opoverload = get_dispatcher().find_schema_or_throw(self._qualname)
        self._lib.impl(name, self._fake_impl, "Meta")
        self._lib.impl(name, make_autograd_impl(self._opoverload, self), "Autograd",
                       with_keyset=True)  # fmt: skip

    @property
    def _qualname(self) -> str:
        return f"{self._namespace}::{self._name}"

    def __repr__(self) -> str:
        return f"<CustomOpDef({self._qualname})>"

    def __call__(self, *args, **kwargs):
        return self._opoverload(*args, **kwargs)

    def register_kernel(self, device_types, fn=None):
        """The kernel for ``device_types`` (``"cpu"``, ``"cuda"``, a list, or None for every
        backend); usable as a decorator. A second kernel for a device replaces the first."""

        def inner(fn):
            types = [device_types] if device_types is None or isinstance(device_types, str) else (
                list(device_types))  # fmt: skip
            for device_type in types:
                if device_type not in _DEVICE_KEYS:
                    raise ValueError(f"retorch's custom_op has no device type {device_type!r}")
                if device_type not in self._backend_fns:  # register once, look up per call

                    def backend_impl(*args, _device=device_type, **kwargs):
                        return self._backend_fns[_device](*args, **kwargs)

                    self._lib.impl(self._name, backend_impl, _DEVICE_KEYS[device_type])
                self._backend_fns[device_type] = fn
            return fn

        return inner if fn is None else inner(fn)

    def register_fake(self, fn):
        """The shape-only kernel: given meta tensors, return empty outputs of the right shape
        and dtype (``x.new_empty(shape)``), computing nothing."""
        self._abstract_fn = fn
        return fn

    def register_autograd(self, backward, /, *, setup_context=None) -> None:
        """``setup_context(ctx, inputs, output)`` saves what ``backward(ctx, *grads)`` needs;
        backward returns one gradient per input (None for non-tensors)."""
        self._backward_fn, self._setup_context_fn = backward, setup_context

    def _fake_impl(self, *args, **kwargs):
        if self._abstract_fn is None:
            raise RuntimeError(
                f"There was no fake impl registered for {self}. This is necessary for meta "
                f"tensors (what torch.compile/export/fx tracing run) to work. Please use "
                f"`{self._init_fn.__name__}.register_fake` to add an fake impl."
            )
        return self._abstract_fn(*args, **kwargs)


def make_autograd_impl(op, info: CustomOpDef):
    """The Autograd kernel of a custom op (torch/_library/autograd.py): a ``Function`` whose
    forward runs the op below autograd and whose backward calls the registered backward."""
    name = f"GeneratedBackwardFor_{info._namespace}_{info._name}_default"

    def forward(ctx, *args):
        keyset, args = args[-1], args[:-1]
        with ExcludeDispatchKeyGuard(autograd_dispatch_keyset_with_ADInplaceOrView):
            result = op.redispatch(keyset & after_autograd_keyset, *args)
        if info._setup_context_fn is not None:
            info._setup_context_fn(ctx=ctx, inputs=args, output=result)
        return result

    def backward(ctx, *grads):
        if info._backward_fn is None:
            raise RuntimeError(
                f"Trying to backward through {info._qualname} but no autograd formula was "
                f"registered. Please use register_autograd to add one."
            )
        result = info._backward_fn(ctx, *grads)
        return (*result, None) if isinstance(result, tuple) else (result, None)  # keyset: None

    generated = type(name, (Function,), {"forward": staticmethod(forward),
                                         "backward": staticmethod(backward)})  # fmt: skip

    def autograd_impl(keyset, *args, **kwargs):
        args = tuple(op.schema.bind(args, kwargs))  # defaults filled in (utils.fill_defaults)
        if grad_mode._enabled and any(
            isinstance(a, AutogradTensor) and a.requires_grad for a in args
        ):
            return generated.apply(*args, keyset)
        with ExcludeDispatchKeyGuard(autograd_dispatch_keyset_with_ADInplaceOrView):
            return op.redispatch(keyset & after_autograd_keyset, *args)

    return autograd_impl


def custom_op(name: str, fn=None, /, *, mutates_args=(), device_types=None, schema=None):
    """``@custom_op("mylib::softplus", mutates_args=())``: make ``fn`` an operator of the
    dispatcher (``torch.library.custom_op``); returns its :class:`CustomOpDef`."""

    def inner(fn):
        namespace, _, opname = name.partition("::")
        if not opname or "." in opname:
            raise ValueError(
                f"custom_op(name): expected 'namespace::opname' (no overload name), got {name!r}"
            )
        op = CustomOpDef(namespace, opname, schema or infer_schema(fn, mutates_args), fn)
        op.register_kernel(device_types)(fn)
        return op

    return inner if fn is None else inner(fn)

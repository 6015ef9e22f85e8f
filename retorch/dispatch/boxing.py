"""Boxing and unboxing, and the BackendSelect key of the factory functions.

Mirrors ``aten/src/ATen/core/boxing/KernelFunction.h`` (a kernel held both ways),
``aten/src/ATen/core/boxing/impl/make_boxed_from_unboxed_functor.h`` (an unboxed kernel wrapped so a
boxed caller can call it), ``aten/src/ATen/core/dispatch/Dispatcher.h`` (``callBoxed``),
``aten/src/ATen/core/BackendSelectFallbackKernel.cpp`` (BackendSelect is a fallthrough for
every operator) and the generated ``RegisterBackendSelect.cpp`` (a kernel for each factory,
which has no tensor argument to read a backend from).

*Unboxed*: a call with the operator's own Python arguments, ``add(x, y, alpha=2)``. *Boxed*:
one list, the *stack*, holding every argument in schema order with defaults filled in
(``[x, y, 2]``); the kernel pops them and pushes its results. A boxed kernel can serve every
operator, because it needs nothing but the schema to read the stack: that is what a backend
fallback is (autograd's, Python's, Functionalize's).
"""

from __future__ import annotations

from .dispatch_key import DispatchKey
from .dispatch_key_set import DispatchKeySet
from .function_schema import FunctionSchema
from .operator_entry import KernelFunction


def box(schema: FunctionSchema, args: tuple, kwargs: dict) -> list:
    """The stack of a call: every argument in schema order, defaults filled in
    (``boxArgs`` in ``aten/src/ATen/core/boxing/impl/boxing.h``)."""
    return schema.bind(args, kwargs)


def unbox(schema: FunctionSchema, stack: list) -> tuple[tuple, dict]:
    """``(args, kwargs)`` from a stack: positional arguments, keyword-only ones by name."""
    return schema.unbind(stack)


def make_boxed_from_unboxed_functor(fn) -> KernelFunction:
    """A boxed kernel ``(op, keyset, stack)`` that unboxes the stack for ``fn``, calls it and
    puts its results back on the stack (``make_boxed_from_unboxed_functor::call``)."""

    def boxed(op, keyset, stack: list) -> None:
        args, kwargs = unbox(op.schema, stack)
        out = fn(*args, **kwargs)
        stack[:] = list(out) if isinstance(out, tuple) else [out]

    boxed.__qualname__ = f"boxed({getattr(fn, '__qualname__', fn)})"
    return KernelFunction(boxed, boxed=True)


def logging_fallback(key: DispatchKey, log: list):
    """A boxed fallback for ``key`` that serves every operator: it records the operator's name
    and a copy of its stack, then redispatches below ``key``."""

    def fallback(op, keyset: DispatchKeySet, stack: list) -> None:
        log.append((op.name, list(stack)))
        op.redispatch_boxed(keyset.remove(key), stack)

    return fallback


# ---------------------------------------------------------------- BackendSelect
_FACTORY_OPTIONS = (
    "ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None"
)
FACTORY_SCHEMAS = {
    "empty.memory_format": f"empty.memory_format(SymInt[] size, *, {_FACTORY_OPTIONS}, "
    f"MemoryFormat? memory_format=None) -> Tensor",
    "zeros": f"zeros(SymInt[] size, *, {_FACTORY_OPTIONS}) -> Tensor",
    "arange.start_step": f"arange.start_step(Scalar start, Scalar end, Scalar step=1, *, "
    f"{_FACTORY_OPTIONS}) -> Tensor",
}
_DENSE = {"cpu": DispatchKey.CPU, "cuda": DispatchKey.CUDA, "meta": DispatchKey.Meta}


def compute_dispatch_key(dtype=None, layout=None, device=None) -> DispatchKey:
    """The backend key of a factory's options (``c10::computeDispatchKey`` in
    ``c10/core/TensorOptions.h``): the device's dense key for a strided layout."""
    from retorch.tensor.tensor import normalize_device

    if layout not in (None, "strided") and str(layout) != "torch.strided":
        raise RuntimeError(f"retorch has strided tensors only; got layout={layout}")
    return _DENSE[normalize_device("cpu" if device is None else device)]


def _backend_select(name: str):
    """The BackendSelect kernel of factory ``name`` (as ``RegisterBackendSelect.cpp``'s): the
    keys from the options, then a redispatch with exactly that backend key."""
    from .dispatcher import get_dispatcher

    def kernel(keyset, *args, **kwargs):
        key = compute_dispatch_key(kwargs.get("dtype"), kwargs.get("layout"), kwargs.get("device"))
        op = get_dispatcher().find_schema_or_throw(f"aten::{name}")
        return op.redispatch(DispatchKeySet(key), *args, **kwargs)

    return kernel


def _backend_kernels():
    import retorch.tensor as rt

    from ._tensor import Tensor

    def empty(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        return Tensor(rt.empty(*size, dtype=dtype, device=device or "cpu"))

    def zeros(size, *, dtype=None, layout=None, device=None, pin_memory=None):
        return Tensor(rt.zeros(*size, dtype=dtype, device=device or "cpu"))

    def arange(start, end, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
        return Tensor(rt.arange(start, end, step, dtype=dtype, device=device or "cpu"))

    return {"empty.memory_format": empty, "zeros": zeros, "arange.start_step": arange}


def register_factories() -> list:
    """Define the factories in aten (a FRAGMENT), with CPU, CUDA and Meta kernels and a
    BackendSelect kernel each; returns the libraries (kept alive by the caller)."""
    from .library import Library

    lib = Library("aten", "FRAGMENT")
    for schema in FACTORY_SCHEMAS.values():
        lib.define(schema)
    for name, fn in _backend_kernels().items():
        for key in ("CPU", "CUDA", "Meta"):
            lib.impl(name, fn, key)
        lib.impl(name, _backend_select(name), "BackendSelect", with_keyset=True)
    return [lib]


#: Registered on import, kept alive (destroying the library would deregister the kernels).
LIBRARIES = register_factories()

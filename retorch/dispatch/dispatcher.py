"""The ``Dispatcher``: every operator by name, the backend fallbacks, and the call path.

Mirrors ``aten/src/ATen/core/dispatch/Dispatcher.h`` / ``Dispatcher.cpp`` (and
``DispatchKeyExtractor.h`` for the key set of a call). A call ``op(*args)``:

1. extracts the keys: the union of the key sets of its tensor arguments (the schema says which),
   then ``(keys | tls included) - tls excluded`` (``computeDispatchKeySet``);
2. drops the keys whose table row is a fallthrough kernel (``nonFallthroughKeys_``);
3. runs the kernel of the highest-priority key left, passing it that key set, so the kernel
   can *redispatch*: call the same operator with the keys below its own
   (``ks & after_autograd_keyset``) without recomputing anything.

At import, the dispatcher registers the backend fallbacks torch registers for the keys retorch
models: fallthroughs for ``BackendSelect``, ``ADInplaceOrView`` and every Autocast key
(``aten/src/ATen/core/BackendSelectFallbackKernel.cpp``, ``aten/src/ATen/autocast_mode.cpp``),
and for the autograd keys a kernel that runs the op below autograd, recording nothing
(``aten/src/ATen/core/VariableFallbackKernel.cpp``); for Meta, an error naming the missing
kernel (``aten/src/ATen/core/MetaFallbackKernel.cpp``).
"""

from __future__ import annotations

import contextlib

from .dispatch_key import DispatchKey
from .dispatch_key_set import (
    FULL_BACKEND_MASK,
    DispatchKeySet,
    after_autograd_keyset,
    autocast_dispatch_keyset,
)
from .function_schema import FunctionSchema
from .local_dispatch_key_set import _tls
from .operator_entry import AnnotatedKernel, KernelFunction, OperatorEntry, fallthrough_kernel

#: RecordFunction's switch (``aten/src/ATen/record_function.h``): ``None`` while no profiler
#: runs, so ``call`` pays one global read, as ``Dispatcher::call`` pays one
#: ``at::getStepCallbacksUnlessEmpty``. ``retorch.profiler`` sets it to a function
#: ``(handle, kernel, ks, args, kwargs, stack)`` that records the op around the kernel
#: (``callWithDispatchKeySlowPath``). ``redispatch`` never records ("do not use RecordFunction
#: on redispatch", Dispatcher.h), so an op appears once however many keys it passes.
step_callbacks = None


class OperatorHandle:
    """What ``findSchemaOrThrow`` returns: call it, box it, redispatch it, read its table."""

    __slots__ = ("_entry", "_dispatcher", "_tensor_args", "_full_arity", "_positional_tensors")

    def __init__(self, dispatcher: Dispatcher, entry: OperatorEntry) -> None:
        self._dispatcher, self._entry = dispatcher, entry
        self._tensor_args = None
        # a call with exactly these many positional arguments and no keywords binds to a
        # valid stack (every keyword-only argument has a default): its keys are read from
        # the positional tensors without building the stack (DispatchKeyExtractor's bitset)
        self._full_arity, self._positional_tensors = -1, ()

    @property
    def name(self) -> str:
        return self._entry.name

    @property
    def schema(self) -> FunctionSchema:
        if self._entry.schema is None:
            raise RuntimeError(
                f"{self.name} has kernels but no schema: define it (Library.define) first"
            )
        return self._entry.schema

    def __call__(self, /, *args, **kwargs):  # positional-only: ``op(self=x)`` names an argument
        return self._dispatcher.call(self, args, kwargs)

    def call_boxed(self, stack: list) -> list:
        self._dispatcher.call_boxed(self, stack)
        return stack

    def redispatch(self, keyset: DispatchKeySet, /, *args, **kwargs):
        return self._dispatcher.redispatch(self, keyset, args, kwargs)

    def redispatch_boxed(self, keyset: DispatchKeySet, stack: list) -> list:
        self._dispatcher.redispatch_boxed(self, keyset, stack)
        return stack

    def has_kernel_for_dispatch_key(self, k) -> bool:
        return self._entry.has_kernel_for_dispatch_key(_key(k))

    def has_computed_kernel_for_dispatch_key(self, k) -> bool:
        return self._entry.lookup(_key(k)) is not None

    def dump_table(self) -> str:
        return self._entry.dump_computed_table()

    def dump_state(self) -> str:
        return self._entry.dump_state()

    def __repr__(self) -> str:
        return f"<OperatorHandle {self.name}>"


def _key(k) -> DispatchKey:
    from .dispatch_key import parse_dispatch_key

    return parse_dispatch_key(k)


def _keys_of(value) -> DispatchKeySet | None:
    ks = getattr(value, "key_set", None)
    if isinstance(ks, DispatchKeySet):
        return ks
    if isinstance(value, (list, tuple)):  # Tensor[]
        out = DispatchKeySet()
        for v in value:
            vk = _keys_of(v)
            if vk is not None:
                out = out | vk
        return out
    return None


#: One ``DispatchKeySet`` per bits a call computed (``_key_set_of``).
_KEY_SETS_BY_BITS: dict = {}


class Dispatcher:
    """The registry of operators and backend fallbacks (``c10::Dispatcher``)."""

    _singleton: Dispatcher | None = None

    def __init__(self) -> None:
        self.operators: dict[str, OperatorEntry] = {}
        self.handles: dict[str, OperatorHandle] = {}
        self.backend_fallback_kernels: dict[DispatchKey, AnnotatedKernel] = {}
        self.libraries: dict[str, str] = {}  # namespace -> where its DEF library was made

    @classmethod
    def singleton(cls) -> Dispatcher:
        if cls._singleton is None:
            cls._singleton = cls()
            _register_default_fallbacks(cls._singleton)
        return cls._singleton

    # ------------------------------------------------------------------ registration
    def _find_or_register_name(self, name: str) -> OperatorHandle:
        if name not in self.operators:
            entry = OperatorEntry(name, self)
            entry.update_dispatch_table_full(self)
            self.operators[name] = entry
            self.handles[name] = OperatorHandle(self, entry)
        return self.handles[name]

    def register_def(self, schema: FunctionSchema, debug: str):
        """Give an operator its schema; returns a function that undoes the registration."""
        handle = self._find_or_register_name(schema.operator_name)
        entry = handle._entry
        if entry.schema is not None:
            raise RuntimeError(
                f"Tried to register an operator ({schema}) with the same name and overload "
                f"name multiple times. Each overload's schema should only be registered with "
                f"a single call to def(). Duplicate registration: {debug}. Original "
                f"registration: {entry.schema_debug}"
            )
        entry.schema, entry.schema_debug = schema, debug
        handle._tensor_args = tuple(i for i, a in enumerate(schema.arguments) if a.is_tensor_like)
        n = len(schema.positional)
        if all(a.has_default for a in schema.arguments[n:]):
            handle._full_arity = n
            handle._positional_tensors = tuple(i for i in handle._tensor_args if i < n)

        def undo() -> None:
            from ._ops import _uncache

            entry.schema, entry.schema_debug = None, ""
            handle._full_arity, handle._positional_tensors = -1, ()  # calls bind, which raises
            self._cleanup(schema.operator_name)
            _uncache(schema.operator_name)

        return undo

    def register_impl(self, name: str, key: DispatchKey, kernel: KernelFunction, debug: str):
        handle = self._find_or_register_name(name)
        handle._entry.register_kernel(self, key, kernel, debug)

        def undo() -> None:
            handle._entry.deregister_kernel(self, key)
            self._cleanup(name)

        return undo

    def register_fallback(self, key: DispatchKey, kernel: KernelFunction, debug: str):
        if key in self.backend_fallback_kernels:
            raise RuntimeError(
                f"Tried to register multiple backend fallbacks for the same dispatch key "
                f"{key.name}; previous registration {self.backend_fallback_kernels[key].debug}, "
                f"new registration {debug}"
            )
        self.backend_fallback_kernels[key] = AnnotatedKernel(kernel, debug)
        self._update_fallback(key)

        def undo() -> None:
            self.backend_fallback_kernels.pop(key, None)
            self._update_fallback(key)

        return undo

    def _update_fallback(self, key: DispatchKey) -> None:
        for entry in self.operators.values():
            entry.update_dispatch_table(self, key)

    def _cleanup(self, name: str) -> None:
        entry = self.operators.get(name)
        if entry is not None and entry.schema is None and not entry.kernels:
            del self.operators[name], self.handles[name]

    def find_schema(self, name: str) -> OperatorHandle | None:
        handle = self.handles.get(name)
        return handle if handle is not None and handle._entry.schema is not None else None

    def find_schema_or_throw(self, name: str, overload: str = "") -> OperatorHandle:
        full = f"{name}.{overload}" if overload else name
        handle = self.find_schema(full)
        if handle is None:
            known = "" if full not in self.operators else " (it has kernels but no schema)"
            raise RuntimeError(f"Could not find schema for {full}{known}")
        return handle

    # ------------------------------------------------------------------ calling
    def compute_dispatch_key_set(self, handle: OperatorHandle, args: tuple, kwargs: dict):
        """The call's keys: tensor arguments' keys, plus TLS included, minus TLS excluded."""
        if handle._tensor_args is None:  # no schema: every argument may carry keys
            return self._key_set_of(list(args) + list(kwargs.values()))
        if not kwargs and len(args) == handle._full_arity:
            pos = handle._positional_tensors  # (all of them tensors: the tuple itself serves)
            return self._key_set_of(args if len(pos) == len(args) else [args[i] for i in pos])
        stack = handle.schema.bind(args, kwargs)
        return self._key_set_of([stack[i] for i in handle._tensor_args])

    def _key_set_of_stack(self, handle: OperatorHandle, stack: list) -> DispatchKeySet:
        if handle._tensor_args is None:
            return self._key_set_of(stack)
        return self._key_set_of([stack[i] for i in handle._tensor_args])

    @staticmethod
    def _key_set_of(values) -> DispatchKeySet:
        bits = 0  # on raw bits, the TLS read once (as DispatchKeyExtractor's computeDispatchKeySet)
        for v in values:
            vk = getattr(v, "_key_set", None)  # a tensor's keys, read as one field
            if vk.__class__ is not DispatchKeySet:
                vk = _keys_of(v)  # a list of tensors, or none
                if vk is None:
                    continue
            bits |= vk.repr_
        bits = (bits | _tls.included.repr_) & (FULL_BACKEND_MASK | ~_tls.excluded.repr_)
        ks = _KEY_SETS_BY_BITS.get(bits)  # (a key set is a value: one object per bits serves)
        if ks is None:
            if len(_KEY_SETS_BY_BITS) >= 1024:
                _KEY_SETS_BY_BITS.clear()
            ks = _KEY_SETS_BY_BITS[bits] = DispatchKeySet.from_raw_repr(bits)
        return ks

    def _select(self, handle: OperatorHandle, ks: DispatchKeySet):
        entry = handle._entry
        # c10 indexes its dispatchTable_ array with the key set's bits
        # (getDispatchTableIndexForDispatchKeySet); retorch caches the whole walk per key set
        # on the OperatorEntry, emptied by any change to the entry's table rows
        hit = entry.select_cache.get(ks.repr_)
        if hit is not None:
            return hit
        bits = ks.repr_
        while True:
            k = ks.highest_priority_type_id()
            kernel = entry.lookup(k)
            if kernel is None:
                raise NotImplementedError(self._missing_kernel_message(entry, k))
            if not kernel.kernel.fallthrough:
                entry.select_cache[bits] = hit = (kernel.kernel, ks)
                return hit
            ks = ks.remove(k)  # a fallthrough: the key is skipped for this call

    @contextlib.contextmanager
    def trace(self):
        """Record every kernel selected inside the block, in order, as ``(operator, key)``
        pairs: the path of a call down the keys (what torch prints with
        ``TORCH_SHOW_DISPATCH_TRACE=1`` in a debug build)."""
        seen: list[tuple[str, str]] = []
        select = self._select

        def traced(handle: OperatorHandle, ks: DispatchKeySet):
            kernel, ks = select(handle, ks)
            seen.append((handle.name, ks.highest_priority_type_id().name))
            return kernel, ks

        self._select = traced
        try:
            yield seen
        finally:
            del self._select

    def call(self, handle: OperatorHandle, args: tuple, kwargs: dict):
        ks = self.compute_dispatch_key_set(handle, args, kwargs)
        kernel, ks = self._select(handle, ks)
        if step_callbacks is not None:  # a profiler is on: Dispatcher.h's slow path
            return step_callbacks(handle, kernel, ks, args, kwargs, None)
        return kernel.call(handle, ks, args, kwargs)

    def call_boxed(self, handle: OperatorHandle, stack: list) -> None:
        ks = self._key_set_of_stack(handle, stack)
        kernel, ks = self._select(handle, ks)
        if step_callbacks is not None:
            step_callbacks(handle, kernel, ks, None, None, stack)
            return
        kernel.call_boxed(handle, ks, stack)

    def redispatch(self, handle: OperatorHandle, ks: DispatchKeySet, args: tuple, kwargs: dict):
        """Call with the given keys (no extraction, no TLS): a kernel hands on to the next."""
        kernel, ks = self._select(handle, ks)
        return kernel.call(handle, ks, args, kwargs)

    def redispatch_boxed(self, handle: OperatorHandle, ks: DispatchKeySet, stack: list) -> None:
        kernel, ks = self._select(handle, ks)
        kernel.call_boxed(handle, ks, stack)

    @staticmethod
    def _missing_kernel_message(entry: OperatorEntry, k: DispatchKey) -> str:
        return (
            f"Could not run '{entry.name}' with arguments from the '{k.name}' backend. This "
            f"could be because the operator doesn't exist for this backend, or was omitted "
            f"during the selective/custom build process (if using custom build). "
            f"'{entry.name}' is only available for these backends: "
            f"[{', '.join(entry.list_all_dispatch_keys())}].\n\n{entry.dump_computed_table()}"
        )


def _autograd_fallback(op, ks: DispatchKeySet, stack: list) -> None:
    """An op with no autograd kernel runs below autograd and records nothing
    (VariableFallbackKernel.cpp's fallback, minus its warning on backward)."""
    op.redispatch_boxed(ks & after_autograd_keyset, stack)


#: The autograd keys VariableFallbackKernel.cpp gives a fallback (not HIP, IPU, VE, PrivateUse2/3).
AUTOGRAD_FALLBACK_BACKENDS = (
    "Other", "CPU", "CUDA", "XLA", "MPS", "XPU", "HPU", "Lazy", "MTIA", "MAIA", "PrivateUse1", "Meta",
)  # fmt: skip


def _meta_fallback(op, ks: DispatchKeySet, stack: list) -> None:
    """Meta with no kernel: an error that says what to register (MetaFallbackKernel.cpp)."""
    raise NotImplementedError(
        f"{op.name}: attempted to run this operator with Meta tensors, but there was no fake "
        f"impl or Meta kernel registered: register one with Library.impl(..., 'Meta')"
    )


def _register_default_fallbacks(d: Dispatcher) -> None:
    here = "retorch/dispatch/dispatcher.py"
    d.register_fallback(DispatchKey.Meta, KernelFunction(_meta_fallback, boxed=True), here)
    for k in (DispatchKey.BackendSelect, DispatchKey.ADInplaceOrView, *autocast_dispatch_keyset):
        d.register_fallback(k, fallthrough_kernel(), f"{here} (fallthrough)")
    autograd = KernelFunction(_autograd_fallback, boxed=True)
    for backend in AUTOGRAD_FALLBACK_BACKENDS:
        d.register_fallback(DispatchKey["Autograd" + backend], autograd, f"{here} (autograd)")


def get_dispatcher() -> Dispatcher:
    return Dispatcher.singleton()

"""``DispatchKeySet``: a 64-bit set of keys, functionality bits above backend bits.

Mirrors ``c10/core/DispatchKeySet.h`` (and ``c10/core/DispatchKeySet.cpp`` for the alias
expansions). The low ``NUM_BACKENDS`` bits say which devices (``CPUBit``...); the bits above
them, one per functionality key, say which functionalities (``Dense``, ``AutogradFunctionality``,
``Python``...). A runtime key such as ``AutogradCPU`` is one functionality bit plus one backend
bit, so a CPU tensor's ``{CPU, ADInplaceOrView, AutogradCPU, AutocastCPU}`` costs four bits, not
one per (functionality, device) pair. The highest functionality bit, combined with the highest
backend bit, is the key that runs first (``highestPriorityTypeId``). ``raw_repr()`` equals
``torch._C.DispatchKeySet``'s bit for bit.
"""

from __future__ import annotations

from .dispatch_key import (
    NUM_BACKENDS,
    NUM_FUNCTIONALITY_KEYS,
    BackendComponent,
    DispatchKey,
    is_alias_dispatch_key,
    is_per_backend_functionality_key,
    to_backend_component,
    to_functionality_key,
    to_runtime_per_backend_functionality_key,
)

FULL_BACKEND_MASK = (1 << NUM_BACKENDS) - 1


def _bits(k) -> int:
    if isinstance(k, BackendComponent):
        return 0 if k == BackendComponent.InvalidBit else 1 << (k - 1)
    if k == DispatchKey.Undefined:
        return 0
    if k <= DispatchKey.EndOfFunctionalityKeys:  # functionality only, no backend bit
        return 1 << (NUM_BACKENDS + k - 1)
    if k <= DispatchKey.EndOfRuntimeBackendKeys:  # a functionality bit and a backend bit
        return _bits(to_functionality_key(k)) | _bits(to_backend_component(k))
    return 0  # alias keys are not representable: expand them with get_runtime_dispatch_key_set


class DispatchKeySet:
    """An immutable set of dispatch keys (``c10::DispatchKeySet``)."""

    __slots__ = ("repr_",)

    def __init__(self, keys=()) -> None:
        if isinstance(keys, (DispatchKey, BackendComponent)):
            keys = (keys,)
        repr_ = 0
        for k in keys:
            repr_ |= _bits(k)
        self.repr_ = repr_

    @classmethod
    def from_raw_repr(cls, x: int) -> DispatchKeySet:
        out = cls.__new__(cls)
        out.repr_ = x
        return out

    @classmethod
    def full(cls) -> DispatchKeySet:
        return cls.from_raw_repr((1 << (NUM_BACKENDS + NUM_FUNCTIONALITY_KEYS - 1)) - 1)

    @classmethod
    def full_after(cls, k: DispatchKey) -> DispatchKeySet:
        """Every key of lower priority than ``k`` (and ``PythonDispatcher``): what a kernel at
        ``k`` redispatches to (``DispatchKeySet(FULL_AFTER, k)``)."""
        bits = (1 << (NUM_BACKENDS + to_functionality_key(k) - 1)) - 1
        return cls.from_raw_repr(bits).add(DispatchKey.PythonDispatcher)

    def raw_repr(self) -> int:
        return self.repr_

    # ------------------------------------------------------------------ set algebra
    def has(self, k: DispatchKey) -> bool:
        bits = _bits(k)
        return bits != 0 and self.repr_ & bits == bits

    def has_backend(self, b: BackendComponent) -> bool:
        return bool(self.repr_ & _bits(b))

    def has_all(self, ks: DispatchKeySet) -> bool:
        return self.repr_ & ks.repr_ == ks.repr_

    def has_any(self, ks: DispatchKeySet) -> bool:
        return bool(self.repr_ & ks.repr_)

    def add(self, k) -> DispatchKeySet:
        other = k.repr_ if isinstance(k, DispatchKeySet) else _bits(k)
        return DispatchKeySet.from_raw_repr(self.repr_ | other)

    def remove(self, k: DispatchKey) -> DispatchKeySet:
        """Remove ``k``'s functionality bit only: removing ``AutogradCPU`` from
        ``{CPU, AutogradCPU}`` keeps the CPU bit that ``CPU`` still needs."""
        return DispatchKeySet.from_raw_repr(self.repr_ & ~(_bits(k) & ~FULL_BACKEND_MASK))

    def __or__(self, other: DispatchKeySet) -> DispatchKeySet:
        return DispatchKeySet.from_raw_repr(self.repr_ | other.repr_)

    def __and__(self, other: DispatchKeySet) -> DispatchKeySet:
        return DispatchKeySet.from_raw_repr(self.repr_ & other.repr_)

    def __sub__(self, other: DispatchKeySet) -> DispatchKeySet:
        """Remove ``other``'s functionalities; backend bits stay (as torch's ``operator-``)."""
        return DispatchKeySet.from_raw_repr(self.repr_ & (FULL_BACKEND_MASK | ~other.repr_))

    def __eq__(self, other) -> bool:
        return isinstance(other, DispatchKeySet) and self.repr_ == other.repr_

    def __hash__(self) -> int:
        return hash(self.repr_)

    def empty(self) -> bool:
        return self.repr_ == 0

    # ------------------------------------------------------------------ priority
    def highest_functionality_key(self) -> DispatchKey:
        idx = self.repr_.bit_length()
        return DispatchKey(idx - NUM_BACKENDS) if idx > NUM_BACKENDS else DispatchKey.Undefined

    def highest_backend_key(self) -> BackendComponent:
        return BackendComponent((self.repr_ & FULL_BACKEND_MASK).bit_length())

    def highest_priority_type_id(self) -> DispatchKey:
        """The key that runs first: the highest functionality, on the highest backend."""
        k = self.highest_functionality_key()
        if is_per_backend_functionality_key(k):
            return to_runtime_per_backend_functionality_key(k, self.highest_backend_key())
        return k

    highestPriorityTypeId = highest_priority_type_id  # noqa: N815  (torch's name)

    def __iter__(self):
        """The runtime keys, lowest priority first (functionalities up, backends up within)."""
        for f in range(1, NUM_FUNCTIONALITY_KEYS):
            if not self.repr_ >> (NUM_BACKENDS + f - 1) & 1:
                continue
            k = DispatchKey(f)
            if not is_per_backend_functionality_key(k):
                yield k
                continue
            for b in range(1, NUM_BACKENDS + 1):
                if self.repr_ >> (b - 1) & 1:
                    yield to_runtime_per_backend_functionality_key(k, BackendComponent(b))

    def __repr__(self) -> str:
        return f"DispatchKeySet({', '.join(k.name for k in self)})"


# ---------------------------------------------------------------------- named key sets
K = DispatchKey
autograd_dispatch_keyset = DispatchKeySet(
    (K.AutogradFunctionality, K.AutogradOther, K.AutogradNestedTensor)
)
autocast_dispatch_keyset = DispatchKeySet(
    [k for k in DispatchKey if k.name.startswith("Autocast") and k <= K.EndOfFunctionalityKeys]
)
default_included_set = DispatchKeySet((K.BackendSelect, K.ADInplaceOrView))
default_excluded_set = autocast_dispatch_keyset
autograd_dispatch_keyset_with_ADInplaceOrView = autograd_dispatch_keyset.add(K.ADInplaceOrView)  # noqa: N816
inplace_or_view_ks = DispatchKeySet(K.ADInplaceOrView)
python_ks = DispatchKeySet((K.Python, K.PythonTLSSnapshot))
autogradother_backends = DispatchKeySet(
    (K.FPGA, K.Vulkan, K.Metal, K.CustomRNGKeyId, K.MkldnnCPU, K.Sparse, K.SparseCsr, K.Quantized)
) | DispatchKeySet.from_raw_repr(FULL_BACKEND_MASK)
after_autograd_keyset = DispatchKeySet.full_after(K.AutogradOther)
after_ADInplaceOrView_keyset = DispatchKeySet.full_after(K.ADInplaceOrView)  # noqa: N816
#: CompositeExplicitAutograd's runtime keys: every backend ("Dense" on every device).
backend_dispatch_keyset = autogradother_backends | DispatchKeySet(K.Dense)
#: CompositeImplicitAutograd's: every backend and every autograd key, plus two functionalities.
math_dispatch_keyset = (
    backend_dispatch_keyset
    | autograd_dispatch_keyset
    | DispatchKeySet((K.NestedTensor, K.Functionalize))
)
#: CompositeExplicitAutogradNonFunctional's: not Sparse, not the functional backends XLA, Lazy.
non_functional_backend_dispatch_keyset = DispatchKeySet.from_raw_repr(
    backend_dispatch_keyset.remove(K.Sparse).repr_
    & ~DispatchKeySet((BackendComponent.XLABit, BackendComponent.LazyBit)).repr_
)
del K


def get_runtime_dispatch_key_set(k: DispatchKey) -> DispatchKeySet:
    """The runtime keys an alias stands for (``getRuntimeDispatchKeySet``); a runtime key: itself."""
    if k == DispatchKey.Autograd:
        return autograd_dispatch_keyset | DispatchKeySet.from_raw_repr(FULL_BACKEND_MASK)
    if k == DispatchKey.CompositeImplicitAutograd:
        return math_dispatch_keyset
    if k == DispatchKey.CompositeExplicitAutograd:
        return backend_dispatch_keyset
    if k == DispatchKey.CompositeExplicitAutogradNonFunctional:
        return non_functional_backend_dispatch_keyset
    if is_alias_dispatch_key(k):
        raise NotImplementedError(f"retorch does not model the alias key {k.name}")
    return DispatchKeySet(k)


def is_included_in_alias(k: DispatchKey, alias: DispatchKey) -> bool:
    return k != DispatchKey.Undefined and get_runtime_dispatch_key_set(alias).has(k)


def is_backend_dispatch_key(k: DispatchKey) -> bool:
    return (
        k != DispatchKey.Undefined
        and not is_alias_dispatch_key(k)
        and (backend_dispatch_keyset.has(k))
    )


def get_backend_key_set_from_autograd(k: DispatchKey) -> DispatchKeySet:
    """``AutogradCPU`` -> ``{CPU}``; ``AutogradOther`` -> the backends without their own key."""
    if k == DispatchKey.AutogradOther:
        return autogradother_backends
    if to_functionality_key(k) == DispatchKey.AutogradFunctionality:
        return DispatchKeySet(
            to_runtime_per_backend_functionality_key(DispatchKey.Dense, to_backend_component(k))
        )
    return DispatchKeySet()


def all_runtime_keys() -> list[DispatchKey]:
    """Every runtime key, as ``DispatchKeySet(FULL)`` iterates them."""
    return list(DispatchKeySet.full())


def tensor_key_set_for(dense_key: DispatchKey) -> DispatchKeySet:
    """The keys a tensor of a dense backend carries (``TensorImpl``'s constructor): the backend,
    ``ADInplaceOrView``, its autograd key and its autocast key, if the device has one."""
    from .dispatch_key import autocast_key_for, get_autograd_key_from_backend

    backend = to_backend_component(dense_key)
    keys = [dense_key, DispatchKey.ADInplaceOrView, get_autograd_key_from_backend(backend)]
    autocast = autocast_key_for(backend)
    return DispatchKeySet(keys + ([autocast] if autocast is not None else []))

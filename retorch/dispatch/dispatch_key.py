"""``DispatchKey`` and ``BackendComponent``: the names the dispatcher routes by.

Mirrors ``c10/core/DispatchKey.h``. A key is one of four kinds, in one integer enum as torch's:

- a *functionality* key (``Dense``, ``Python``, ``ADInplaceOrView``, ``AutocastCPU``...):
  one bit each in a ``DispatchKeySet``, in priority order (a later key runs first);
- a *backend component* (``CPUBit``, ``CUDABit``, ``PrivateUse1Bit``, ``MetaBit``...): the
  low bits of a key set, saying which device the tensor lives on;
- a *runtime per-backend* key (``CPU`` = Dense x CPUBit, ``AutogradCPU`` = AutogradFunctionality
  x CPUBit): what a kernel is registered to and what a table row is for;
- an *alias* key (``Autograd``, ``CompositeImplicitAutograd``, ``CompositeExplicitAutograd``):
  registration-only, expanded into runtime keys when the table is computed.

The numbering is torch's, so ``int(DispatchKey.AutogradCPU)`` equals
``int(torch._C.DispatchKey.AutogradCPU)``; tests check every name.
"""

from __future__ import annotations

from enum import IntEnum

#: ``C10_FORALL_BACKEND_COMPONENTS``: bit i (from 1) of a key set's backend part.
BACKENDS = (
    "CPU", "CUDA", "HIP", "XLA", "MPS", "IPU", "XPU", "HPU", "VE", "Lazy", "MTIA", "MAIA",
    "PrivateUse1", "PrivateUse2", "PrivateUse3", "Meta",
)  # fmt: skip

#: The functionality keys, lowest priority first (``DispatchKey.h``, ``Undefined`` = 0).
FUNCTIONALITIES = (
    "Undefined", "Dense", "FPGA", "Vulkan", "Metal", "Quantized", "CustomRNGKeyId",
    "MkldnnCPU", "Sparse", "SparseCsr", "NestedTensor", "BackendSelect", "Fake", "Python",
    "FuncTorchDynamicLayerBackMode", "Functionalize", "Conjugate", "Negative", "ZeroTensor",
    "ADInplaceOrView", "AutogradOther", "AutogradFunctionality", "AutogradNestedTensor",
    "Tracer", "AutocastCPU", "AutocastMTIA", "AutocastMAIA", "AutocastXPU", "AutocastIPU",
    "AutocastHPU", "AutocastXLA", "AutocastMPS", "AutocastCUDA", "AutocastPrivateUse1",
    "FuncTorchBatched", "BatchedNestedTensor", "FuncTorchVmapMode", "Batched", "VmapMode",
    "FuncTorchGradWrapper", "DeferredInit", "PythonTLSSnapshot",
    "FuncTorchDynamicLayerFrontMode", "TESTING_ONLY_GenericWrapper",
    "TESTING_ONLY_GenericMode", "PreDispatch", "PythonDispatcher", "EndOfFunctionalityKeys",
)  # fmt: skip

#: ``C10_FORALL_FUNCTIONALITY_KEYS``: functionalities that have one runtime key per backend,
#: with the prefix of those keys (``Dense`` x ``CPU`` is plain ``CPU``).
PER_BACKEND = {
    "Dense": ("Dense", ""),
    "Quantized": ("Quantized", "Quantized"),
    "Sparse": ("Sparse", "Sparse"),
    "SparseCsr": ("SparseCsr", "SparseCsr"),
    "NestedTensor": ("NestedTensor", "NestedTensor"),
    "AutogradFunctionality": ("AutogradFunctionality", "Autograd"),
}

ALIASES = (
    "Autograd",
    "CompositeImplicitAutograd",
    "FuncTorchBatchedDecomposition",
    "CompositeImplicitAutogradNestedTensor",
    "CompositeExplicitAutograd",
    "CompositeExplicitAutogradNonFunctional",
)

_FUNCTIONALITY_OF_PREFIX = {prefix: name for name, (_, prefix) in PER_BACKEND.items()}


def torch_key_layout() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(BACKENDS, FUNCTIONALITIES)`` as the running torch numbers them, read from the names
    of its full key set (``torch._C._dispatch_keyset_full()`` lists every key, lowest bit
    first: the Dense keys, which bear the backends' names, then each functionality, a
    per-backend one as its runtime keys). torch adds keys between releases, so the enum below
    and code that reads torch's raw bits (lab 5 on Colab's torch) take their layout from here;
    on the torch this course pins it equals :data:`TORCH_2_13_LAYOUT` (tests check)."""
    import torch

    names = repr(torch._C._dispatch_keyset_full()).removeprefix("DispatchKeySet(")
    names = names.removesuffix(")").split(", ")
    dense = torch._C.DispatchKeySet(torch._C.DispatchKey.Dense).raw_repr()
    backends = tuple(names[: dense.bit_length() - 1])  # the Dense bit sits above the backends
    functionalities, i = ["Undefined", "Dense"], len(backends)
    while i < len(names):
        prefix = names[i].removesuffix(backends[0])
        group = [prefix + b for b in backends]
        if names[i] != prefix and names[i : i + len(backends)] == group:
            functionalities.append(_FUNCTIONALITY_OF_PREFIX.get(prefix, prefix))
            i += len(backends)
        else:
            functionalities.append(names[i])
            i += 1
    return backends, (*functionalities, "EndOfFunctionalityKeys")


#: The layout above is torch 2.13's. torch adds, removes and reorders keys between releases
#: (2.10 to 2.12 have ``Python`` below ``Fake`` and a ``Named`` functionality after
#: ``Functionalize``, which moves every bit above it), so the enum is numbered as the running
#: torch numbers its keys, read from that torch.
TORCH_2_13_LAYOUT = (BACKENDS, FUNCTIONALITIES)
BACKENDS, FUNCTIONALITIES = torch_key_layout()


def _members() -> list[tuple[str, int]]:
    members = [(name, i) for i, name in enumerate(FUNCTIONALITIES)]
    n = len(FUNCTIONALITIES)
    for fullname, prefix in PER_BACKEND.values():
        members.append((f"StartOf{fullname}Backends", n))
        members += [(prefix + b, n + 1 + i) for i, b in enumerate(BACKENDS)]
        members.append((f"EndOf{fullname}Backends", n + len(BACKENDS)))
        n += len(BACKENDS) + 1
    members.append(("EndOfRuntimeBackendKeys", n - 1))
    members += [(name, n + i) for i, name in enumerate(ALIASES)]
    members += [("StartOfAliasKeys", n), ("EndOfAliasKeys", n + len(ALIASES) - 1)]
    return members


DispatchKey = IntEnum("DispatchKey", _members(), module=__name__)
DispatchKey.__doc__ = "A dispatch key, numbered as ``c10::DispatchKey``."
DispatchKey.__str__ = lambda self: self.name  # torch prints bare names: "AutogradCPU"

BackendComponent = IntEnum(
    "BackendComponent",
    [("InvalidBit", 0)] + [(b + "Bit", i + 1) for i, b in enumerate(BACKENDS)],
    module=__name__,
)
BackendComponent.__doc__ = "A device's bit in a key set (``c10::BackendComponent``)."

NUM_BACKENDS = len(BACKENDS)
NUM_FUNCTIONALITY_KEYS = len(FUNCTIONALITIES) - 1  # EndOfFunctionalityKeys is an end marker


def parse_dispatch_key(name: str | DispatchKey) -> DispatchKey:
    """``"AutogradCPU"`` as ``DispatchKey.AutogradCPU`` (``c10::parseDispatchKey``)."""
    if isinstance(name, DispatchKey):
        return name
    try:
        return DispatchKey[name]
    except KeyError:
        raise ValueError(
            f"could not parse dispatch key: {name!r}; expected a runtime key such as 'CPU', "
            f"'AutogradCPU', 'Meta' or an alias such as 'CompositeImplicitAutograd'"
        ) from None


def is_alias_dispatch_key(k: DispatchKey) -> bool:
    return DispatchKey.StartOfAliasKeys <= k <= DispatchKey.EndOfAliasKeys


def is_per_backend_functionality_key(k: DispatchKey) -> bool:
    """``Dense``, ``Quantized``, ``Sparse``, ``SparseCsr``, ``NestedTensor``, ``AutogradFunctionality``."""
    return k.name in PER_BACKEND


def is_runtime_per_backend_key(k: DispatchKey) -> bool:
    return DispatchKey.EndOfFunctionalityKeys < k <= DispatchKey.EndOfRuntimeBackendKeys


def to_backend_component(k: DispatchKey) -> BackendComponent:
    """The device bit of a runtime per-backend key (``AutogradCUDA`` -> ``CUDABit``)."""
    if not is_runtime_per_backend_key(k):
        return BackendComponent.InvalidBit
    offset = (k - DispatchKey.EndOfFunctionalityKeys - 1) % (NUM_BACKENDS + 1)
    return BackendComponent(offset)  # offset 0 is a StartOf... marker: InvalidBit


def to_functionality_key(k: DispatchKey) -> DispatchKey:
    """The functionality of a key (``AutogradCUDA`` -> ``AutogradFunctionality``)."""
    if k <= DispatchKey.EndOfFunctionalityKeys:
        return k
    if not is_runtime_per_backend_key(k):
        return DispatchKey.Undefined
    block = (k - DispatchKey.EndOfFunctionalityKeys - 1) // (NUM_BACKENDS + 1)
    return DispatchKey[list(PER_BACKEND)[block]]


def to_runtime_per_backend_functionality_key(
    functionality: DispatchKey, backend: BackendComponent
) -> DispatchKey:
    """``(AutogradFunctionality, CPUBit)`` -> ``AutogradCPU``."""
    prefix = PER_BACKEND[functionality.name][1]
    if backend == BackendComponent.InvalidBit:
        return DispatchKey.Undefined
    return DispatchKey[prefix + BACKENDS[backend - 1]]


def get_autograd_key_from_backend(backend: BackendComponent) -> DispatchKey:
    """``CPUBit`` -> ``AutogradCPU`` (``getAutogradKeyFromBackend``); no device: ``AutogradOther``."""
    if backend == BackendComponent.InvalidBit:
        return DispatchKey.AutogradOther
    return DispatchKey["Autograd" + BACKENDS[backend - 1]]


def autocast_key_for(backend: BackendComponent) -> DispatchKey | None:
    """The autocast functionality of a device, if it has one (``AutocastCPU`` for ``CPUBit``)."""
    name = "Autocast" + BACKENDS[backend - 1] if backend else None
    return DispatchKey[name] if name in DispatchKey.__members__ else None

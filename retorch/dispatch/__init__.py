"""Chapter 5: the dispatcher rebuilt. Mirrors c10/core/DispatchKey.h and
aten/src/ATen/core/dispatch/Dispatcher.h.

=============================  =====================================================
module                         mirrors
=============================  =====================================================
``dispatch_key``               ``c10/core/DispatchKey.h``
``dispatch_key_set``           ``c10/core/DispatchKeySet.h``
``local_dispatch_key_set``     ``c10/core/impl/LocalDispatchKeySet.h``
``function_schema``            ``aten/src/ATen/core/function_schema.h``
``operator_entry``             ``aten/src/ATen/core/dispatch/OperatorEntry.cpp``
``dispatcher``                 ``aten/src/ATen/core/dispatch/Dispatcher.cpp``
``library``                    ``torch/library.py``
``_ops``                       ``torch/_ops.py``
``native_functions``           ``aten/src/ATen/native/native_functions.yaml``
``variable_type``              ``tools/autograd/templates/VariableType.cpp``
``_tensor``                    ``torch/_tensor.py``, ``c10/core/TensorImpl.h``
``overrides``                  ``torch/overrides.py``
``autocast_mode``              ``aten/src/ATen/autocast_mode.cpp``
``inference_mode``             ``c10/core/InferenceMode.h``
``precedence``                 ``OperatorEntry.cpp``'s precedence, observed (an experiment)
``backend_registration``       ``torch/utils/backend_registration.py``
``custom_ops``                 ``torch/_library/custom_ops.py``
``torch_privateuse1``          ``torch/utils/backend_registration.py`` (torch's side)
=============================  =====================================================

``retorch.dispatch.tensor(...)`` is the factory, as ``torch.tensor``: the class lives in
``_tensor`` (as torch's in ``torch/_tensor.py``), so no submodule shadows the function.

Layering: imports ``retorch.tensor`` and ``retorch.autograd`` (the two bottom layers) and
composes them; ``nn``, ``optim`` and ``utils.data`` reach it only through a tensor's interface.
"""

from ._ops import ops
from .dispatch_key import BackendComponent, DispatchKey, parse_dispatch_key
from .dispatch_key_set import DispatchKeySet
from .dispatcher import Dispatcher, OperatorHandle, get_dispatcher
from .function_schema import FunctionSchema, parse_schema
from .library import Library, _scoped_library, fallthrough_kernel
from .local_dispatch_key_set import (
    ExcludeDispatchKeyGuard,
    ForceDispatchKeyGuard,
    IncludeDispatchKeyGuard,
    tls_local_dispatch_key_set,
)

#: Names that import retorch.tensor (Numba) on first use, so the keys and the dispatcher stay
#: cheap to import: ``retorch.dispatch.Tensor``, ``.aten`` (registers the aten library)...
_LAZY = {
    "Tensor": "_tensor",
    "tensor": "_tensor",
    "to_retorch": "_tensor",
    "from_torch": "_tensor",
    "collate": "_tensor",
    "aten": "native_functions",
    "autocast": "autocast_mode",
    "inference_mode": "inference_mode",
    "InferenceMode": "inference_mode",
    "ArenaBackend": "backend_registration",
    "rename_privateuse1_backend": "backend_registration",
    "custom_op": "custom_ops",
    "CustomOpDef": "custom_ops",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        if name != "aten":
            importlib.import_module(f"{__name__}.native_functions")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BackendComponent",
    "Dispatcher",
    "FunctionSchema",
    "Library",
    "OperatorHandle",
    "_scoped_library",
    "fallthrough_kernel",
    "get_dispatcher",
    "ops",
    "parse_schema",
    "DispatchKey",
    "DispatchKeySet",
    "ExcludeDispatchKeyGuard",
    "ForceDispatchKeyGuard",
    "IncludeDispatchKeyGuard",
    "parse_dispatch_key",
    "tls_local_dispatch_key_set",
]

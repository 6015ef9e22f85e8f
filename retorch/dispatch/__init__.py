"""Chapter 5: the dispatcher rebuilt. Mirrors c10/core/DispatchKey.h and
aten/src/ATen/core/dispatch/Dispatcher.h.

=============================  =====================================================
module                         mirrors
=============================  =====================================================
``dispatch_key``               ``c10/core/DispatchKey.h``
``dispatch_key_set``           ``c10/core/DispatchKeySet.h``
``local_dispatch_key_set``     ``c10/core/impl/LocalDispatchKeySet.h``
=============================  =====================================================

Layering: imports ``retorch.tensor`` and ``retorch.autograd`` (the two bottom layers) and
composes them; ``nn``, ``optim`` and ``utils.data`` reach it only through a tensor's interface.
"""

from .dispatch_key import BackendComponent, DispatchKey, parse_dispatch_key
from .dispatch_key_set import DispatchKeySet
from .local_dispatch_key_set import (
    ExcludeDispatchKeyGuard,
    ForceDispatchKeyGuard,
    IncludeDispatchKeyGuard,
    tls_local_dispatch_key_set,
)

__all__ = [
    "BackendComponent",
    "DispatchKey",
    "DispatchKeySet",
    "ExcludeDispatchKeyGuard",
    "ForceDispatchKeyGuard",
    "IncludeDispatchKeyGuard",
    "parse_dispatch_key",
    "tls_local_dispatch_key_set",
]

"""The old path of ``_tensor`` (``retorch.Tensor``), kept for code outside this package.

Import from ``retorch.dispatch`` (``from retorch.dispatch import Tensor, tensor``) or from
``retorch.dispatch._tensor``, which mirrors ``torch/_tensor.py``. Importing this module does
not shadow the ``retorch.dispatch.tensor`` factory (see the package's ``_Package``).
"""

from ._tensor import (  # noqa: F401
    Tensor,
    collate,
    from_torch,
    key_set_for_device,
    register_backend_device,
    tensor,
    to_retorch,
)

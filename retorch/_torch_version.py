"""Which torch is running, for the few places where the rebuild mirrors a behaviour that changed
between torch releases.

The course pins torch 2.13 and the chapters compare against it, but a student's runtime (Colab)
may ship another. Where the difference is data the rebuild can read from the running torch (the
dispatch key layout: :func:`retorch.dispatch.dispatch_key.torch_key_layout`), it reads it; where
torch's code changed, the rebuild follows the running release, branching here on the release in
which the change first shipped (each found by running the released wheels: see ``CHANGES``).
"""

from __future__ import annotations

import re

import torch

#: Version-dependent behaviours the rebuild mirrors: (first release with the new behaviour,
#: what changed, torch file). Before that release, the rebuild does what the older torch did.
CHANGES = {
    "anomaly_hint_check_nan": (
        (2, 11),
        "the in-place error's hint says set_detect_anomaly(True, check_nan=False), was (True)",
        "torch/csrc/autograd/saved_variable.cpp",
    ),
    "layer_norm_repr_bias": (
        (2, 12),
        "LayerNorm's repr ends with bias=True/False",
        "torch/nn/modules/normalization.py",
    ),
    "checkpoint_saves_inputs_directly": (
        (2, 12),
        # before: _NoopSaveInputs.apply(dummy, kwargs, *args) saved them; now _make_saved_tensor
        "use_reentrant=False packs only its inputs; before, an empty (0,) dummy first",
        "torch/utils/checkpoint.py",
    ),
    "exclude_guard_restores_set": (
        (2, 12),
        "leaving an ExcludeDispatchKeyGuard(AutogradCPU) restores the excluded set; was: CPUBit left",
        "c10/core/impl/LocalDispatchKeySet.cpp",
    ),
    "inplace_error_names_forward_op": (
        (2, 13),
        "the in-place error says grad_fn->forward_op_name() (Add), was name() (AddBackward0)",
        "torch/csrc/autograd/saved_variable.cpp",
    ),
}


def torch_release() -> tuple[int, int]:
    """(major, minor) of the running torch, read at each call (``2.10.0+cu128`` -> (2, 10))."""
    m = re.match(r"(\d+)\.(\d+)", str(torch.__version__))
    if m is None:
        raise ValueError(f"cannot read a release from torch.__version__ {torch.__version__!r}")
    return int(m.group(1)), int(m.group(2))


def torch_has(change: str) -> bool:
    """Whether the running torch has ``change`` (a key of :data:`CHANGES`)."""
    return torch_release() >= CHANGES[change][0]

"""Autocast per key: which ops each autocast key has a kernel for, and CUDA autocast's output
dtypes, in retorch and in torch (chapter 8 and ``tests/test_dispatch_autocast.py``).

torch's CUDA autocast runs here on a CPU-only torch: a ``FakeTensorMode`` makes tensors that
say ``device="cuda"`` (their key set holds ``CUDA`` and ``AutocastCUDA``) without memory, and
``torch.set_autocast_enabled("cuda", True)`` un-hides the key (``torch.autocast("cuda")``
refuses without a GPU). retorch has no CUDA half-precision kernels yet, so its side runs the
kernel its dispatcher holds for ``AutocastCUDA`` directly, on CPU tensors of each dtype.
"""

from __future__ import annotations

import numpy as np

#: aten op (``name.overload``) -> its arguments, from (a, b, target): each library calls its
#: own ``aten.<name>.<overload>`` with them.
CUDA_OPS = {
    "mm": lambda a, b, t: (a, b.t()),
    "linear": lambda a, b, t: (a, b),
    "nll_loss": lambda a, b, t: (a.log_softmax(1), t),
    "exp": lambda a, b, t: (a,),
    "log": lambda a, b, t: (a,),
    "pow.Tensor_Scalar": lambda a, b, t: (a, 2),
    "softmax.int": lambda a, b, t: (a, 1),
    "log_softmax.int": lambda a, b, t: (a, 1),
    "sum": lambda a, b, t: (a,),
    "sum.dim_IntList": lambda a, b, t: (a, [1]),
    "add.Tensor": lambda a, b, t: (a, a),
    "relu": lambda a, b, t: (a,),
}
INPUT_DTYPES = ("float32", "float16", "bfloat16", "float64")


def registered_per_key(names) -> list[tuple[str, str, str]]:
    """(op, retorch's keys with a kernel, torch's) for AutocastCPU and AutocastCUDA."""
    import torch

    from retorch.dispatch.dispatcher import get_dispatcher

    rows = []
    for name in names:
        full = name if name.startswith("aten::") else f"aten::{name}"
        handle = get_dispatcher().find_schema_or_throw(full)
        ours = [k for k in ("AutocastCPU", "AutocastCUDA") if handle.has_kernel_for_dispatch_key(k)]
        theirs = [
            k for k in ("AutocastCPU", "AutocastCUDA")
            if torch._C._dispatch_has_kernel_for_dispatch_key(full, k)
        ]  # fmt: skip
        rows.append((name, ", ".join(ours) or "-", ", ".join(theirs) or "-"))
    return rows


def _inputs():
    rng = np.random.default_rng(0)
    return rng.standard_normal((4, 3)), rng.standard_normal((5, 3)), [0, 2, 1, 0]


def cuda_dtypes_torch(ops=CUDA_OPS) -> dict[str, list[str]]:
    """op -> torch's output dtype under CUDA autocast (float16) for each input dtype."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    x, w, target = _inputs()
    out = {}
    before = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", torch.float16)
    try:
        with FakeTensorMode():
            # fake tensors hold no values: only shapes and dtypes matter here
            t = torch.zeros(len(target), dtype=torch.int64, device="cuda")
            for op, call in ops.items():
                row = []
                for d in INPUT_DTYPES:
                    a = torch.empty(x.shape, dtype=getattr(torch, d), device="cuda")
                    b = torch.empty(w.shape, dtype=getattr(torch, d), device="cuda")
                    y = _overload(torch.ops.aten, op)(*call(a, b, t))
                    row.append(str(y.dtype).replace("torch.", ""))
                out[op] = row
    finally:
        torch.set_autocast_enabled("cuda", before[0])
        torch.set_autocast_dtype("cuda", before[1])
        torch.clear_autocast_cache()
    return out


def cuda_dtypes_retorch(ops=CUDA_OPS) -> dict[str, list[str]]:
    """op -> the output dtype of retorch's AutocastCUDA kernel for ``op`` (the op itself when
    the key falls through), called on CPU tensors of each input dtype."""
    import retorch.tensor as rt
    from retorch.dispatch import Tensor
    from retorch.dispatch.dispatch_key import DispatchKey
    from retorch.dispatch.dispatch_key_set import DispatchKeySet
    from retorch.dispatch.dispatcher import get_dispatcher
    from retorch.dispatch.native_functions import aten

    x, w, target = _inputs()
    t = Tensor(rt.tensor(np.array(target)))
    out = {}
    for op, call in ops.items():
        entry = get_dispatcher().operators[f"aten::{op}"]
        fallthrough = entry.is_fallthrough(DispatchKey.AutocastCUDA)
        row = []
        for d in INPUT_DTYPES:
            a, b = (Tensor(rt.tensor(v.astype(np.float32)).to(dtype=getattr(rt, d)))
                    for v in (x, w))  # fmt: skip
            args = call(a, b, t)
            if fallthrough:
                y = _overload(aten, op)(*args)
            else:
                kernel = entry.lookup(DispatchKey.AutocastCUDA).kernel.fn
                y = kernel(DispatchKeySet(DispatchKey.AutocastCUDA), *args)
            row.append(y.data.dtype.name)
        out[op] = row
    return out


def _overload(namespace, op: str):
    name, _, overload = op.partition(".")
    return getattr(getattr(namespace, name), overload or "default")

"""Cases that chapter 5 and its tests run on torch and on retorch alike.

``autocast_precisions``: the precision of each op's output under autocast on the CPU, op by
op, for ops from each of the policy lists of ``aten/src/ATen/autocast_mode.cpp``
(``lower_precision_fp``, ``fp32``, ``promote``) and for ops on none of them. Precisions are
named by their part, not their dtype: both lower float32 ("full") to bfloat16 ("lower") on
the CPU (``autocast("cpu", dtype=float32)``: retorch's earlier float64 -> float32). Each op runs on
inputs of full, lower and (for two-input ops) mixed precision, so an op on the fp32 list
(lower in, full out) differs from an unlisted one (lower in, lower out), and a
lower_precision_fp op from both (full in, lower out).
"""

from __future__ import annotations

import numpy as np

#: (op, torch's list for it, how to call it on inputs a, b and a class-index target)
AUTOCAST_OPS = [
    ("mm", "lower_precision_fp", 2, lambda F, a, b, t: a.mm(b.t())),
    ("matmul", "lower_precision_fp", 2, lambda F, a, b, t: a @ b.t()),
    ("linear", "lower_precision_fp", 2, lambda F, a, b, t: F.linear(a, b)),
    ("nll_loss", "fp32", 1, lambda F, a, b, t: F.nll_loss(a, t)),
    ("add", "none", 2, lambda F, a, b, t: a + b),
    ("mul", "none", 2, lambda F, a, b, t: a * b),
    ("relu", "none", 1, lambda F, a, b, t: a.relu()),
    ("exp", "none", 1, lambda F, a, b, t: a.exp()),
    ("softmax", "none", 1, lambda F, a, b, t: a.softmax(1)),
    ("sum", "none", 1, lambda F, a, b, t: a.sum()),
]
#: torch's CPU promote list holds cat, stack and index_copy: retorch defines none of them.
PROMOTE_OPS = [("stack", "promote", 2, lambda F, a, b, t: F.stack([a, b]))]

INPUTS = {1: ("full", "lower"), 2: ("full", "lower", "full+lower")}


def _libs(lib: str):
    from types import SimpleNamespace

    import torch
    import torch.nn.functional as F

    if lib == "torch":
        fns = SimpleNamespace(linear=F.linear, nll_loss=F.nll_loss, stack=torch.stack)
        dtypes = {"full": torch.float32, "lower": torch.bfloat16}

        def make(v, p):
            return torch.tensor(v, dtype=dtypes[p])

        target = torch.tensor([0, 2, 1, 0])
        return make, target, dtypes, lambda: torch.autocast("cpu", dtype=torch.bfloat16), fns
    import retorch.tensor as rt
    from retorch.dispatch import Tensor
    from retorch.dispatch.autocast_mode import autocast
    from retorch.dispatch.native_functions import aten

    fns = SimpleNamespace(linear=F.linear, nll_loss=aten.nll_loss)

    dtypes = {"full": rt.float32, "lower": rt.bfloat16}

    def make(v, p):
        return Tensor(rt.tensor(v.astype(np.float32)).to(dtype=dtypes[p]))

    target = Tensor(rt.tensor(np.array([0, 2, 1, 0])))
    return make, target, dtypes, lambda: autocast("cpu"), fns


def autocast_precisions(lib: str, ops=None) -> dict[str, str]:
    """op -> "full->lower, lower->lower, full+lower->lower": the precision of its output
    under ``lib``'s CPU autocast for each precision of its inputs."""
    make, target, dtypes, autocast, fns = _libs(lib)
    name_of = {v: k for k, v in dtypes.items()}
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    out = {}
    for name, _, arity, call in AUTOCAST_OPS if ops is None else ops:
        parts = []
        for inputs in INPUTS[arity]:
            pa, pb = (inputs.split("+") * 2)[:2]
            a, b = make(x, pa), make(w if name in ("mm", "matmul", "linear") else x, pb)
            with autocast():
                y = call(fns, a, b, target)
            parts.append(f"{inputs}->{name_of.get(y.dtype, str(y.dtype))}")
        out[name] = ", ".join(parts)
    return out


#: The input dtypes of ``autocast_dtypes``: the eligible ones and float64, which never is.
AUTOCAST_INPUT_DTYPES = ("float32", "bfloat16", "float16", "float64")


def autocast_dtypes(lib: str, ops=None) -> dict[str, list[str]]:
    """op -> the output dtype's name under ``lib``'s CPU autocast (its default dtype,
    bfloat16) for two inputs of each of ``AUTOCAST_INPUT_DTYPES``."""
    import retorch.tensor as rt

    make, target, _, autocast, fns = _libs(lib)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    if lib == "torch":
        import torch

        def cast(v, d):
            return torch.tensor(v, dtype=torch.float32).to(getattr(torch, d))

        def name(y):
            return str(y.dtype).replace("torch.", "")
    else:
        from retorch.dispatch import Tensor

        def cast(v, d):
            return Tensor(rt.tensor(v.astype(np.float32)).to(dtype=getattr(rt, d)))

        def name(y):
            return y.data.dtype.name

    out = {}
    for op, _, _arity, call in AUTOCAST_OPS if ops is None else ops:
        row = []
        for d in AUTOCAST_INPUT_DTYPES:
            a, b = cast(x, d), cast(w if op in ("mm", "matmul", "linear") else x, d)
            with autocast():
                row.append(name(call(fns, a, b, target)))
        out[op] = row
    return out


def autocast_log(lib: str) -> list[str]:
    """Each aten op that ``F.linear`` of two float32 tensors runs under ``lib``'s CPU autocast,
    seen by a dispatch mode below autocast: ``op(input dtypes) -> output dtype``."""
    import torch
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode as TorchMode

    import retorch.tensor as rt
    from retorch.dispatch import Tensor
    from retorch.dispatch.autocast_mode import autocast
    from retorch.dispatch.python_dispatch import TorchDispatchMode

    log = []

    def name(t):
        return str(t.dtype).replace("retorch.", "").replace("torch.", "")

    class Log(TorchMode if lib == "torch" else TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            ins = ", ".join(name(a) for a in args if hasattr(a, "dtype"))
            log.append(f"{func}({ins}) -> {name(out)}")
            return out

    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (5, 3)))
    if lib == "torch":
        x, w = torch.from_numpy(x), torch.from_numpy(w)
        with torch.autocast("cpu"), Log():
            F.linear(x, w)
    else:
        x, w = Tensor(rt.tensor(x)), Tensor(rt.tensor(w))
        with autocast("cpu"), Log():
            F.linear(x, w)
    return log

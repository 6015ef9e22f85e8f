"""``retorch.Tensor.__torch_function__``: torch's functions called on retorch tensors.

Mirrors ``torch/overrides.py``: a class that defines ``__torch_function__`` receives every
torch function called with one of its instances (``F.linear``, ``F.relu``,
``F.cross_entropy``, ``torch.zeros_like``, ``torch._foreach_add_``...) before torch runs any
kernel, and answers it itself. That is how chapter 1's modules (``Linear.forward`` calls
``F.linear``) and chapter 2's optimizers (``torch._foreach_*``) run on retorch.Tensor without
importing this layer and without a single torch kernel: each handler below calls the aten
operators of retorch's dispatcher. The ``_foreach_*`` handlers loop over the list, as torch's
slow path does (``aten/src/ATen/native/ForeachOpsKernels.cpp``).
"""

from __future__ import annotations

import retorch.tensor as rt

_HANDLERS: dict = {}
_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _aten():
    from .native_functions import aten

    return aten


def _cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                   reduce=None, reduction="mean", label_smoothing=0.0):  # fmt: skip
    return _aten().cross_entropy_loss(
        input, target, weight, _REDUCTIONS[reduction], ignore_index, label_smoothing
    )


def _relu(input, inplace=False):
    if inplace:
        raise NotImplementedError("retorch.Tensor has no in-place relu_: use inplace=False")
    return _aten().relu(input)


def _zeros_like(input, *, dtype=None, layout=None, device=None, requires_grad=False,
                memory_format=None, **_):  # fmt: skip
    from ._tensor import Tensor

    if dtype is not None or device is not None:
        raise NotImplementedError("retorch's zeros_like keeps the input's dtype and device")
    return Tensor(rt.zeros_like(input.data), requires_grad=requires_grad)


def _pairs(*lists):
    n = len(lists[0])
    return zip(*[lst if isinstance(lst, (list, tuple)) else [lst] * n for lst in lists])


def _foreach(method: str, inplace: bool):
    """``torch._foreach_<op>[_](tensors, others, ...)``: the op per tensor, in a loop."""

    def run(self_list, *others, **kwargs):
        if others:
            outs = [getattr(s, method)(*rest, **kwargs) for s, *rest in _pairs(self_list, *others)]
        else:
            outs = [getattr(s, method)(**kwargs) for s in self_list]
        return None if inplace else outs

    return run


def _build() -> dict:
    import torch
    import torch.nn.functional as F

    handlers = {
        F.linear: lambda input, weight, bias=None: _aten().linear(input, weight, bias),
        F.relu: _relu,
        torch.relu: _relu,
        F.cross_entropy: _cross_entropy,
        torch.zeros_like: _zeros_like,
        torch.matmul: lambda a, b: _aten().matmul(a, b),
    }
    for name, method in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "div"),
                         ("neg", "neg"), ("sqrt", "sqrt")]:  # fmt: skip
        handlers[getattr(torch, f"_foreach_{name}")] = _foreach(method, False)
    for name in ("add", "mul", "div", "addcmul", "addcdiv", "lerp", "zero"):
        handlers[getattr(torch, f"_foreach_{name}_")] = _foreach(f"{name}_", True)
    return handlers


def torch_function(func, types, args=(), kwargs=None):
    """The body of ``retorch.Tensor.__torch_function__``."""
    if not _HANDLERS:
        _HANDLERS.update(_build())
    handler = _HANDLERS.get(func)
    if handler is None:
        name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
        raise NotImplementedError(
            f"retorch.Tensor does not implement torch function {name}: call the aten operator "
            f"through retorch.dispatch.ops.aten, or add a handler in retorch/dispatch/overrides.py"
        )
    return handler(*args, **(kwargs or {}))

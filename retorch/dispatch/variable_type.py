"""The Autograd and ADInplaceOrView kernels of the aten operators: record, then redispatch.

Mirrors the kernels torch generates into ``torch/csrc/autograd/generated/VariableType_*.cpp``
(from ``tools/autograd/templates/VariableType.cpp``) and ``ADInplaceOrViewType_*.cpp``
(``tools/autograd/templates/ADInplaceOrViewType.cpp``). An autograd kernel, registered to the
``Autograd`` alias (so every ``AutogradCPU``/``AutogradCUDA``/``AutogradMeta`` row holds it):

1. excludes the autograd keys for everything it calls (``AutoDispatchBelowADInplaceOrView``:
   a ``ExcludeDispatchKeyGuard``), and redispatches with ``ks & after_autograd_keyset``,
   so the same operator continues at the next key: ADInplaceOrView for in-place and view ops,
   then the backend kernel;
2. if grad mode is on and an input requires grad, makes the op's node with chapter 3's
   machinery (``NODE_CLASSES``, ``_save``, ``SavedVariable``: the formulas of
   ``retorch/autograd/derivatives.py``) and sets it as the output's ``grad_fn``.

The ADInplaceOrView kernels bump the version counter of an in-place op's output and make a view
op's output share its base's counter (chapter 3's ``_view_of``).
"""

from __future__ import annotations

from retorch.autograd import grad_mode
from retorch.autograd.graph import NO_EDGE, SavedVariable
from retorch.autograd.tensor import NODE_CLASSES, _normalize_dims, _save, maybe_wrap_dim
from retorch.autograd.tensor import Tensor as AutogradTensor

from .dispatch_key_set import (
    after_ADInplaceOrView_keyset,
    after_autograd_keyset,
    autograd_dispatch_keyset,
    autograd_dispatch_keyset_with_ADInplaceOrView,
)
from .dispatcher import get_dispatcher
from .library import Library
from .local_dispatch_key_set import _tls


def _handle(name: str):
    return get_dispatcher().find_schema_or_throw(f"aten::{name}")


def _below(handle, ks, args, kwargs, view_or_inplace=False):
    """``at::redispatch::op(ks & after_autograd_keyset, ...)`` under the guard torch uses
    (``at::AutoDispatchBelowADInplaceOrView``, an ``ExcludeDispatchKeyGuard``; written out
    here, as the guard's constructor and destructor are inlined in C++)."""
    saved = _tls.excluded
    # the two key sets, remembered per bits: c10 computes each with one AND/OR on a uint64
    excluding = _EXCLUDING.get((saved.repr_, view_or_inplace))
    if excluding is None:
        exclude = (
            autograd_dispatch_keyset
            if view_or_inplace
            else (autograd_dispatch_keyset_with_ADInplaceOrView)
        )
        excluding = _EXCLUDING[saved.repr_, view_or_inplace] = saved | exclude
    below = _AFTER_AUTOGRAD.get(ks.repr_)
    if below is None:
        below = _AFTER_AUTOGRAD[ks.repr_] = ks & after_autograd_keyset
    _tls.excluded = excluding
    try:
        return _dispatcher.redispatch(handle, below, args, kwargs)
    finally:
        _tls.excluded = saved


_EXCLUDING: dict = {}  # (excluded bits, view_or_inplace) -> the excluded set below autograd
_AFTER_AUTOGRAD: dict = {}  # a call's key set bits -> those bits & after_autograd_keyset


_dispatcher = get_dispatcher()


def _needs_grad(inputs) -> bool:
    return grad_mode._enabled and any(
        isinstance(t, AutogradTensor) and t.requires_grad for t in inputs
    )


def record(op: str, out, inputs, save=None, save_output=None, **attrs):
    """Make ``out`` the output of a new ``op`` node (chapter 3's ``_record_graph``, kept to
    the tensor the backend kernel returned)."""
    if not _needs_grad(inputs):
        return out
    return _set_history(op, out, inputs, save, save_output, attrs)


_MISSING = object()


def _set_history(op, out, inputs, save, save_output, attrs):
    """The node, its edges, saved values and attributes, set as ``out``'s ``grad_fn``
    (``set_history`` in VariableType's kernels), for inputs of which one needs a gradient."""
    node = NODE_CLASSES[op](
        tuple(
            t._gradient_edge() if isinstance(t, AutogradTensor) and t.requires_grad else NO_EDGE
            for t in inputs
        )
    )
    node.input_metadata = (tuple(out.shape),)
    if save:
        _save(node, op, save)
    for name, value in attrs.items():
        setattr(node, name, value)
    out._grad_fn, out._output_nr, out.requires_grad = node, 0, True
    if save_output:
        setattr(node, save_output, SavedVariable(out, is_output=True))
    return out


def _functional(name, op, inputs=("self",), save=None, save_output=None, attrs=None):
    """An autograd kernel for a functional op: ``save`` maps formula names to argument names;
    ``attrs(values, out)`` gives the node's attributes."""
    handle = _handle(name)
    schema = handle.schema
    arg_names = [a.name for a in schema.arguments]
    where = tuple((arg_names.index(i), i) for i in inputs)
    defaults = [a.default if a.has_default else _MISSING for a in schema.arguments]

    def kernel(ks, *args, **kwargs):
        # compute_requires_grad(inputs), before the call below, as VariableType's kernels do:
        # with no input that needs a gradient the kernel only redispatches
        if grad_mode._enabled:
            for i, name_ in where:
                t = args[i] if i < len(args) else kwargs.get(name_)
                if isinstance(t, AutogradTensor) and t.requires_grad:
                    break
            else:
                return _below(handle, ks, args, kwargs)
        else:
            return _below(handle, ks, args, kwargs)
        out = _below(handle, ks, args, kwargs)
        rest = defaults[len(args) :]
        if kwargs or _MISSING in rest:  # box the call (the schema checks the arguments)
            values = dict(zip(arg_names, schema.bind(args, kwargs)))
        else:  # positional, defaults for the rest: the stack is known
            values = dict(zip(arg_names, (*args, *rest)))
        first = out[0] if isinstance(out, tuple) else out
        saved = None
        if save:
            saved = {k: (v(values, out) if callable(v) else values[v]) for k, v in save.items()}
        extra = attrs(values, first) if attrs else {}
        _set_history(op, first, [values[i] for i in inputs], saved, save_output, extra)
        return out

    return kernel


def _sizes(v, out):
    return {"self_sizes": tuple(v["self"].shape)}


def _sum_dim_attrs(v, out):
    dims = _normalize_dims(v["dim"], v["self"].dim())
    return {"self_sizes": tuple(v["self"].shape), "dim": dims, "keepdim": v["keepdim"]}


def _mean_dim_attrs(v, out):
    a = _sum_dim_attrs(v, out)
    count = 1
    for d in a["dim"]:
        count *= v["self"].shape[d]
    return {**a, "count": count}


def _mm_attrs(v, out):  # the layouts mm_mat1_backward / mm_mat2_backward choose from
    a, b = v["self"].data._impl, v["mat2"].data._impl
    return {"self_sym_sizes": a.sizes, "self_sym_strides": a.strides,
            "mat2_sym_sizes": b.sizes, "mat2_sym_strides": b.strides}  # fmt: skip


def _softmax_attrs(v, out):
    return {"dim": maybe_wrap_dim(v["dim"], v["self"].dim())}


FUNCTIONAL = {
    "add.Tensor": dict(op="add", inputs=("self", "other"), attrs=lambda v, o: {"alpha": v["alpha"]}),
    "sub.Tensor": dict(op="sub", inputs=("self", "other"), attrs=lambda v, o: {"alpha": v["alpha"]}),
    "mul.Tensor": dict(op="mul", inputs=("self", "other"), save={"self_": "self", "other": "other"}),
    "div.Tensor": dict(op="div", inputs=("self", "other"), save={"self_": "self", "other": "other"}),
    "neg": dict(op="neg"),
    "pow.Tensor_Scalar": dict(op="pow_scalar", save={"self_": "self"},
                              attrs=lambda v, o: {"exponent": v["exponent"]}),
    "relu": dict(op="relu", save_output="result"),
    "exp": dict(op="exp", save_output="result"),
    "log": dict(op="log", save={"self_": "self"}),
    "clone": dict(op="clone"),
    "_unsafe_view": dict(op="unsafe_view", attrs=_sizes),
    "sum": dict(op="sum", attrs=_sizes),
    "sum.dim_IntList": dict(op="sum_dim", attrs=_sum_dim_attrs),
    "mean": dict(op="mean", attrs=lambda v, o: {**_sizes(v, o), "numel": v["self"].numel()}),
    "mean.dim": dict(op="mean_dim", attrs=_mean_dim_attrs),
    "mm": dict(op="mm", inputs=("self", "mat2"), save={"self_": "self", "mat2": "mat2"},
               attrs=_mm_attrs),
    "_softmax": dict(op="softmax", save_output="result", attrs=_softmax_attrs),
    "_log_softmax": dict(op="log_softmax", save_output="result", attrs=_softmax_attrs),
    "nll_loss_forward": dict(
        op="nll_loss",
        save={"self_": "self", "target": "target", "total_weight": lambda v, out: out[1]},
    ),
}  # fmt: skip


def _view_kernel(name, op, attrs=None):
    handle = _handle(name)

    def kernel(ks, *args, **kwargs):
        out = _below(handle, ks, args, kwargs, view_or_inplace=True)
        self = args[0]
        return record(op, out, [self], **(attrs(self) if attrs else {}))

    return kernel


def _detach_kernel(ks, *args, **kwargs):
    out = _below(_handle("detach"), ks, args, kwargs, view_or_inplace=True)
    out.requires_grad = False
    return out


#: In-place ops with a formula; the others run with no grad only.
INPLACE_FORMULA = {"add_.Tensor": "add", "mul_.Tensor": "mul", "zero_": "zero"}
INPLACE = ["add_.Tensor", "mul_.Tensor", "div_.Tensor", "zero_", "copy_", "addcmul_",
           "addcdiv_", "lerp_.Scalar"]  # fmt: skip


def _inplace_kernel(name):
    handle = _handle(name)
    op = INPLACE_FORMULA.get(name)

    def kernel(ks, self, *args, **kwargs):
        inputs = [self] + [a for a in args if isinstance(a, AutogradTensor)]
        needs = _needs_grad(inputs)
        if needs and self.is_leaf and self.requires_grad:
            raise RuntimeError(
                "a leaf Variable that requires grad is being used in an in-place operation."
            )
        if needs and (op is None or self._base is not None):
            raise NotImplementedError(
                f"aten::{name} on a tensor that needs a gradient: retorch records in-place "
                f"history for add_, mul_ and zero_ on non-views only; use the out-of-place op"
            )
        before = None
        if needs and op == "mul":  # the gradient for `other` needs self's value before
            before = _below(_handle("clone"), ks, (self,), {})
        _below(handle, ks, (self, *args), kwargs, view_or_inplace=True)
        if needs:
            edges = tuple(t._gradient_edge() if t.requires_grad else NO_EDGE for t in inputs)
            node = NODE_CLASSES[op](edges)
            node.input_metadata = (tuple(self.shape),)
            if op == "add":
                node.alpha = kwargs.get("alpha", 1)
            if op == "mul":
                _save(node, op, {"self_": before, "other": args[0]})
            self._grad_fn, self._output_nr, self.requires_grad = node, 0, True
        return self

    return kernel


def bump(self) -> None:
    """``VariableVersion::bump``: an inference tensor has no counter, and may change in place
    only inside inference mode (it reaches this kernel only outside it: inside, neither its
    keys nor the thread's included set hold ADInplaceOrView)."""
    if self._version_counter is grad_mode.INFERENCE_VERSION:
        if not grad_mode._inference_enabled:
            raise RuntimeError(grad_mode.ERR_INFERENCE_INPLACE)
        return
    self._version_counter.value += 1


def _ad_inplace(name):
    """ADInplaceOrView for an in-place op: run below, then bump the version counter."""
    handle = _handle(name)

    def kernel(ks, self, *args, **kwargs):
        handle.redispatch(ks & after_ADInplaceOrView_keyset, self, *args, **kwargs)
        bump(self)
        return self

    return kernel


def _ad_view(name):
    """ADInplaceOrView for a view op: the output shares its base's storage, version counter
    and keys (``TensorImpl``'s VIEW constructor copies the base's key set, so a view made in
    inference mode of a normal tensor is a normal tensor, and one of an inference tensor is
    an inference tensor)."""
    handle = _handle(name)

    def kernel(ks, self, *args, **kwargs):
        out = handle.redispatch(ks & after_ADInplaceOrView_keyset, self, *args, **kwargs)
        out._key_set = self._key_set
        if name == "detach":
            out._version_counter = self._version_counter
            return out
        return self._view_of(out)

    return kernel


def register() -> list:
    autograd = Library("aten", "IMPL", "Autograd")
    for name, spec in FUNCTIONAL.items():
        autograd.impl(name, _functional(name, **spec), with_keyset=True)
    autograd.impl("t", _view_kernel("t", "t"), with_keyset=True)
    autograd.impl(
        "view",
        _view_kernel("view", "view", lambda s: {"self_sizes": tuple(s.shape)}),
        with_keyset=True,
    )
    autograd.impl("detach", _detach_kernel, with_keyset=True)
    for name in INPLACE:
        autograd.impl(name, _inplace_kernel(name), with_keyset=True)
    inplace_or_view = Library("aten", "IMPL", "ADInplaceOrView")
    for name in INPLACE:
        inplace_or_view.impl(name, _ad_inplace(name), with_keyset=True)
    for name in ("t", "view", "detach"):
        inplace_or_view.impl(name, _ad_view(name), with_keyset=True)
    return [autograd, inplace_or_view]


def _addmm_attrs(v, out):  # AddmmBackward0's scalars and mm_mat*_backward's layouts
    a, b = v["mat1"].data._impl, v["mat2"].data._impl
    return {"alpha": v["alpha"], "beta": v["beta"],
            "mat1_sym_sizes": a.sizes, "mat1_sym_strides": a.strides,
            "mat2_sym_sizes": b.sizes, "mat2_sym_strides": b.strides}  # fmt: skip


FUNCTIONAL["addmm"] = dict(
    op="addmm", inputs=("self", "mat1", "mat2"), save={"mat1": "mat1", "mat2": "mat2"},
    attrs=_addmm_attrs,
)  # fmt: skip

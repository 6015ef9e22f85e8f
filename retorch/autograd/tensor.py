"""The autograd ``Tensor``: data plus the bookkeeping reverse mode needs.

Mirrors the autograd half of torch's tensor (torch/csrc/autograd/variable.h: ``grad_fn``,
``requires_grad``, ``is_leaf``, ``_version``, ``retain_grad``, hooks) and the generated
"VariableType" wrappers that record a node per op (see ``_record``). The data is a raw array
handled only through ``_ops``; the derivative formulas live in ``derivatives.py``.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Callable, NamedTuple

from torch.utils.hooks import RemovableHandle

from . import _ops, forward_ad, grad_mode
from .copy_slices import rebase_history, regenerate_view_grad_fn
from .derivatives import FORMULAS, USED_BY
from .graph import NO_EDGE, AccumulateGrad, Edge, Node, SavedVariable

_new_tuple = tuple.__new__
_NO_HOOKS: dict = {}  # shared by every tensor until a hook is registered; never filled


class _VersionCounter:
    """Shared by a tensor and its views: an in-place change to either bumps both."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class FormulaNode(Node):
    """A node whose backward is an entry of ``FORMULAS``."""

    formula: Callable = None

    def apply(self, grads: list) -> tuple:
        if grads[0] is None:  # no gradient reached this node: none goes on
            return (None,) * len(self.next_functions)
        return type(self).formula(self, grads[0])


#: One node class per formula, named as torch's (``MulBackward0``...), as torch generates them.
NODE_CLASSES = {
    op: type(name, (FormulaNode,), {"formula": staticmethod(fn)})
    for op, (name, fn) in FORMULAS.items()
}


def _wrap(value, like: Tensor) -> Tensor:
    if isinstance(value, Tensor):
        return value
    return _WrappedNumber(_ops.scalar(value, like.data))


class Tensor:
    """A value in an autograd graph: wraps raw ``data`` (a torch.Tensor today)."""

    __slots__ = (
        "data",
        "requires_grad",
        "grad",
        "_grad_fn",
        "_output_nr",
        "_version_counter",
        "_base",
        "_attr_version",
        "_fw_grad",
        "_hooks",
        "_accumulator",
        "_retains_grad",
        "__weakref__",
    )
    _is_wrapped_number = False

    def __init__(self, data, requires_grad: bool = False, grad_fn: Node | None = None) -> None:
        self.data = data
        self.requires_grad = requires_grad or grad_fn is not None
        self.grad: Tensor | None = None
        self._grad_fn = grad_fn
        self._output_nr = 0  # which output of grad_fn this tensor is
        self._version_counter = _VersionCounter()
        self._base: Tensor | None = None  # the tensor this one is a view of
        self._hooks: dict = _NO_HOOKS  # a leaf's tensor hooks (a non-leaf's live on its grad_fn)
        self._accumulator = None  # weak reference to a leaf's AccumulateGrad
        self._retains_grad = False
        self._fw_grad = None  # (level, tangent) of a dual tensor (forward_ad.py)

    # ------------------------------------------------------------ autograd metadata
    @property
    def grad_fn(self) -> Node | None:
        """The node that made this tensor. A view whose data changed in place since its node
        was made (through itself, its base or another view) gets a regenerated one."""
        if self._base is not None and self._attr_version != self._version_counter.value:
            regenerate_view_grad_fn(self)
        return self._grad_fn

    @grad_fn.setter
    def grad_fn(self, node: Node | None) -> None:
        self._grad_fn = node

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def _version(self) -> int:
        counter = self._version_counter
        if counter is grad_mode.INFERENCE_VERSION:
            raise RuntimeError(grad_mode.ERR_INFERENCE_VERSION)
        return counter.value

    def is_inference(self) -> bool:
        """Whether this tensor was made in inference mode (it has no version counter)."""
        return self._version_counter is grad_mode.INFERENCE_VERSION

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def device(self):
        return self.data.device

    @property
    def ndim(self) -> int:
        return self.data.dim()

    def dim(self) -> int:
        return self.data.dim()

    def size(self, dim: int | None = None):
        return self.data.shape if dim is None else self.data.shape[dim]

    def numel(self) -> int:
        return _ops.numel(self.data)

    def item(self):
        return self.data.item()

    def tolist(self) -> list:
        return _ops.tolist(self.data)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if requires_grad and self.is_inference() and not grad_mode._inference_enabled:
            raise RuntimeError(grad_mode.ERR_INFERENCE_REQUIRES_GRAD)
        if not self.is_leaf and not requires_grad:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to use a "
                "computed variable in a subgraph that doesn't require differentiation use "
                "var_no_grad = var.detach()."
            )
        self.requires_grad = requires_grad
        return self

    def detach(self) -> Tensor:
        """The same data, cut from the graph (it shares the version counter: same data)."""
        out = Tensor(self.data)
        out._version_counter = self._version_counter
        return out

    def _grad_accumulator(self) -> AccumulateGrad:
        """A leaf's AccumulateGrad, made on first use. The tensor holds it weakly (the graph
        holds it), as torch's leaves do: a strong reference would be a reference cycle."""
        acc = self._accumulator() if self._accumulator is not None else None
        if acc is None:
            acc = AccumulateGrad(self)
            self._accumulator = weakref.ref(acc)
        return acc

    def _gradient_edge(self) -> Edge | None:
        """Where a gradient for this tensor goes: its grad_fn, or its leaf's AccumulateGrad."""
        fn = self.grad_fn
        if fn is not None:
            # tuple.__new__ is what Edge(...) ends up calling, minus a Python-level __new__.
            return _new_tuple(Edge, (fn, self._output_nr))
        if self.requires_grad:
            return Edge(self._grad_accumulator(), 0)
        return None

    def register_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(grad)`` runs when this tensor's gradient is computed; may return a new one."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            return self.grad_fn._add_tensor_pre_hook(self._output_nr, hook)
        if self._hooks is _NO_HOOKS:
            self._hooks = OrderedDict()  # OrderedDict: the handle keeps a weak reference
        handle = RemovableHandle(self._hooks)
        self._hooks[handle.id] = hook
        return handle

    def retain_grad(self) -> None:
        """Keep ``.grad`` for a non-leaf tensor (leaves keep it anyway)."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.is_leaf or self._retains_grad:
            return
        ref = weakref.ref(self)  # the hook lives on grad_fn, which this tensor owns: no cycle

        def retain_grad_hook(grad: Tensor) -> None:
            var = ref()
            if var is not None:
                var.grad = grad.clone() if var.grad is None else var.grad + grad

        self.grad_fn._set_retains_grad_hook(self._output_nr, retain_grad_hook)
        self._retains_grad = True

    def backward(
        self, gradient=None, retain_graph=None, create_graph: bool = False, inputs=None
    ) -> None:
        from .engine import backward

        backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    def __repr__(self) -> str:
        text = repr(self.data).replace("tensor(", "retorch.tensor(", 1)
        if self.grad_fn is not None:
            return text[:-1] + f", grad_fn=<{self.grad_fn.name()}>)"
        if self.requires_grad:
            return text[:-1] + ", requires_grad=True)"
        return text

    # ------------------------------------------------------------ recording (VariableType)
    @staticmethod
    def _record(
        op: str,
        data,
        inputs: tuple,
        save: dict | None = None,
        save_output: str | None = None,
        **attrs: Any,
    ) -> Tensor:
        """Wrap an op's result; if grad mode is on and an input needs grad, add its node to the
        graph; inside forward_ad.dual_level, also give it its tangent."""
        if forward_ad._current_level is not None:
            out = Tensor._record_graph(op, data, inputs, save, save_output, attrs)
            forward_ad.propagate(op, inputs, out, attrs)
            return out
        return Tensor._record_graph(op, data, inputs, save, save_output, attrs)

    @staticmethod
    def _record_graph(op: str, data, inputs: tuple, save, save_output, attrs: dict) -> Tensor:
        """What ``_record`` does for reverse mode (the generated VariableType kernels)."""
        if not grad_mode._enabled:
            out = Tensor(data)
            if grad_mode._inference_enabled:  # an inference tensor: no version counter
                out._version_counter = grad_mode.INFERENCE_VERSION
            return out
        for t in inputs:
            if t.requires_grad:
                break
        else:
            return Tensor(data)
        node = NODE_CLASSES[op](
            tuple([t._gradient_edge() if t.requires_grad else NO_EDGE for t in inputs])
        )
        node.input_metadata = (tuple(data.shape),)  # the shape of the gradient it receives
        if save:
            _save(node, op, save)
        for name, value in attrs.items():
            setattr(node, name, value)
        out = Tensor(data, grad_fn=node)
        if save_output:
            setattr(node, save_output, SavedVariable(out, is_output=True))
        return out

    def _inplace(self, op: str, fn: Callable, other: Tensor | None = None, **attrs: Any) -> Tensor:
        """An in-place op: change the data, bump the version, rebase this tensor's history."""
        inputs = (self,) if other is None else (self, other)
        inference = self._version_counter is grad_mode.INFERENCE_VERSION
        if inference and not grad_mode._inference_enabled:
            raise RuntimeError(grad_mode.ERR_INFERENCE_INPLACE)
        if forward_ad._current_level is not None and any(t._fw_grad for t in inputs):
            raise NotImplementedError(
                f"{op}_ on a dual tensor: retorch's forward-mode AD has no in-place ops; use "
                f"the out-of-place {op} instead"
            )
        needs = grad_mode._enabled and any(t.requires_grad for t in inputs)
        if needs and self.is_leaf and self.requires_grad:
            raise RuntimeError(
                "a leaf Variable that requires grad is being used in an in-place operation."
            )
        view = needs and self._base is not None
        if view and self._base.is_leaf and self._base.requires_grad:
            raise RuntimeError(
                "a view of a leaf Variable that requires grad is being used in an in-place "
                "operation."
            )
        if needs:
            node = NODE_CLASSES[op](
                tuple([t._gradient_edge() if t.requires_grad else NO_EDGE for t in inputs])
            )
            node.input_metadata = (tuple(self.shape),)
            for name, value in attrs.items():
                setattr(node, name, value)
            if op == "mul":  # the gradient for `other` needs self's value from before the change
                _save(node, op, {"self_": Tensor(_ops.clone(self.data)), "other": other})
        fn(self.data)
        if not inference:
            self._version_counter.value += 1
        if view:  # the base's history changes: CopySlices (copy_slices.py)
            rebase_history(self, node)
        elif needs:
            self.grad_fn, self._output_nr, self.requires_grad = node, 0, True
        return self

    # ------------------------------------------------------------ arithmetic
    def __add__(self, other) -> Tensor:
        other = _wrap(other, self)
        return Tensor._record("add", _ops.add(self.data, other.data), (self, other), alpha=1)

    __radd__ = __add__

    def __sub__(self, other) -> Tensor:
        other = _wrap(other, self)
        return Tensor._record("sub", _ops.sub(self.data, other.data), (self, other), alpha=1)

    def __rsub__(self, other) -> Tensor:  # number - tensor
        return Tensor._record("rsub", _ops.sub(other, self.data), (self,))

    def __mul__(self, other) -> Tensor:
        other = _wrap(other, self)
        return Tensor._record(
            "mul",
            _ops.mul(self.data, other.data),
            (self, other),
            save={"self_": self, "other": other},
        )

    __rmul__ = __mul__

    def __truediv__(self, other) -> Tensor:
        other = _wrap(other, self)
        return Tensor._record(
            "div",
            _ops.div(self.data, other.data),
            (self, other),
            save={"self_": self, "other": other},
        )

    def __rtruediv__(self, other) -> Tensor:
        return self.reciprocal() * other  # as torch's Tensor.__rtruediv__

    def reciprocal(self) -> Tensor:
        return Tensor._record(
            "reciprocal", _ops.reciprocal(self.data), (self,), save_output="result"
        )

    def __neg__(self) -> Tensor:
        return Tensor._record("neg", _ops.neg(self.data), (self,))

    def __pow__(self, exponent) -> Tensor:
        if isinstance(exponent, Tensor):
            return Tensor._record(
                "pow_tensor",
                _ops.pow(self.data, exponent.data),
                (self, exponent),
                save={"self_": self, "exponent": exponent},
                save_output="result",
            )
        return Tensor._record(
            "pow_scalar",
            _ops.pow(self.data, exponent),
            (self,),
            save={"self_": self},
            exponent=exponent,
        )

    def __rpow__(self, base) -> Tensor:
        return Tensor._record(
            "pow_scalar_base",
            _ops.pow(base, self.data),
            (self,),
            save={"exponent": self},
            save_output="result",
            base=base,
        )

    def __matmul__(self, other) -> Tensor:
        return self.matmul(other)

    def __gt__(self, other) -> Tensor:
        return Tensor(_ops.gt(self.data, other.data if isinstance(other, Tensor) else other))

    def __eq__(self, other) -> Tensor:  # elementwise, as torch's
        return Tensor(_ops.eq(self.data, other.data if isinstance(other, Tensor) else other))

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        return bool(self.data)  # fails for several elements, as torch's

    # ------------------------------------------------------------ in-place
    def add_(self, other, alpha: float = 1) -> Tensor:
        other = _wrap(other, self)
        return self._inplace("add", lambda d: _ops.add_(d, other.data, alpha), other, alpha=alpha)

    def mul_(self, other) -> Tensor:
        other = _wrap(other, self)
        return self._inplace("mul", lambda d: _ops.mul_(d, other.data), other)

    def zero_(self) -> Tensor:
        return self._inplace("zero", _ops.zero_)

    # ------------------------------------------------------------ elementwise functions
    def exp(self) -> Tensor:
        return Tensor._record("exp", _ops.exp(self.data), (self,), save_output="result")

    def log(self) -> Tensor:
        return Tensor._record("log", _ops.log(self.data), (self,), save={"self_": self})

    def tanh(self) -> Tensor:
        return Tensor._record("tanh", _ops.tanh(self.data), (self,), save_output="result")

    def sigmoid(self) -> Tensor:
        return Tensor._record("sigmoid", _ops.sigmoid(self.data), (self,), save_output="result")

    def relu(self) -> Tensor:
        return Tensor._record("relu", _ops.relu(self.data), (self,), save_output="result")

    def clone(self) -> Tensor:
        return Tensor._record("clone", _ops.clone(self.data), (self,))

    def where(self, condition, other) -> Tensor:
        """This tensor where ``condition`` holds, else ``other`` (``torch.where``)."""
        condition = condition if isinstance(condition, Tensor) else Tensor(condition)
        other = _wrap(other, self)
        return Tensor._record(
            "where",
            _ops.where(condition.data, self.data, other.data),
            (self, other),
            save={"condition": condition},
        )

    # ------------------------------------------------------------ reductions
    def sum(self, dim=None, keepdim: bool = False) -> Tensor:
        if dim is None:
            return Tensor._record("sum", _ops.sum(self.data), (self,), self_sizes=self.shape)
        dims = _normalize_dims(dim, self.dim())
        return Tensor._record(
            "sum_dim",
            _ops.sum(self.data, dim=dims if dims else dim, keepdim=keepdim),
            (self,),
            self_sizes=self.shape,
            dim=dims,
            keepdim=keepdim,
        )

    def mean(self, dim=None, keepdim: bool = False) -> Tensor:
        if dim is None:
            return Tensor._record(
                "mean", _ops.mean(self.data), (self,), self_sizes=self.shape, numel=self.numel()
            )
        dims = _normalize_dims(dim, self.dim())
        count = 1
        for d in dims:
            count *= self.shape[d]
        return Tensor._record(
            "mean_dim",
            _ops.mean(self.data, dim=dims if dims else dim, keepdim=keepdim),
            (self,),
            self_sizes=self.shape,
            dim=dims,
            keepdim=keepdim,
            count=count,
        )

    def max(self, dim: int | None = None, keepdim: bool = False):
        """The largest value; with ``dim``, ``(values, indices)`` along it, as torch's."""
        if dim is None:
            return Tensor._record(
                "max",
                _ops.amax(self.data, dim=tuple(range(self.dim()))),
                (self,),
                save={"self_": self},
                save_output="result",
            )
        values, indices = _ops.max(self.data, dim=dim, keepdim=keepdim)
        indices = Tensor(indices)
        out = Tensor._record(
            "max_dim",
            values,
            (self,),
            save={"indices": indices},
            self_sizes=self.shape,
            dim=maybe_wrap_dim(dim, self.dim()),
            keepdim=keepdim,
        )
        return MaxResult(out, indices)

    # ------------------------------------------------------------ shapes and views
    def _view_of(self, out: Tensor) -> Tensor:
        """Make ``out`` a view of this tensor: same data, so the same version counter."""
        out._version_counter = self._version_counter
        out._base = self if self._base is None else self._base
        out._attr_version = self._version_counter.value
        return out

    def view(self, *shape) -> Tensor:
        shape = _shape_args(shape)
        return self._view_of(
            Tensor._record("view", _ops.view(self.data, shape), (self,), self_sizes=self.shape)
        )

    def reshape(self, *shape) -> Tensor:
        """A view when the strides allow one (``view``, or ``_reshape_alias`` for a
        non-contiguous tensor), else a copy, as ``at::reshape`` decides."""
        shape = _shape_args(shape)
        if _ops.is_contiguous(self.data):
            return self.view(*shape)
        alias = _ops.view_if_possible(self.data, shape)
        if alias is not None:
            return self._view_of(
                Tensor._record("reshape_alias", alias, (self,), self_sizes=self.shape)
            )
        copy = Tensor._record("clone", _ops.clone(self.data), (self,))
        return Tensor._record(
            "unsafe_view", _ops.reshape(copy.data, shape), (copy,), self_sizes=copy.shape
        )

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        return self._view_of(
            Tensor._record(
                "transpose", _ops.transpose(self.data, dim0, dim1), (self,), dim0=dim0, dim1=dim1
            )
        )

    def t(self) -> Tensor:
        return self._view_of(Tensor._record("t", _ops.t(self.data), (self,)))

    def permute(self, *dims) -> Tensor:
        dims = tuple(maybe_wrap_dim(d, self.dim()) for d in _shape_args(dims))
        return self._view_of(
            Tensor._record("permute", _ops.permute(self.data, dims), (self,), dims=dims)
        )

    def expand(self, *sizes) -> Tensor:
        sizes = _shape_args(sizes)
        return self._view_of(
            Tensor._record("expand", _ops.expand(self.data, sizes), (self,), self_sizes=self.shape)
        )

    def unsqueeze(self, dim: int) -> Tensor:
        dim = dim % (self.dim() + 1)
        return self._view_of(
            Tensor._record("unsqueeze", _ops.unsqueeze(self.data, dim), (self,), dim=dim)
        )

    def squeeze(self, dim: int | None = None) -> Tensor:
        if dim is None:
            data, op = _ops.squeeze(self.data), "squeeze"
        else:
            data, op = _ops.squeeze(self.data, dim), "squeeze_dim"
        return self._view_of(Tensor._record(op, data, (self,), self_sizes=self.shape))

    def __getitem__(self, key) -> Tensor:
        """Ints and slices (one view node per indexed dimension, as torch), or a 1-d index tensor."""
        if isinstance(key, Tensor):  # integer-array indexing along dim 0: a gather, not a view
            return Tensor._record(
                "index",
                _ops.index_select(self.data, 0, key.data),
                (self,),
                save={"indices": key},
                self_sizes=self.shape,
            )
        out, dim = self, 0
        for k in key if isinstance(key, tuple) else (key,):
            if isinstance(k, slice) and k == slice(None):
                dim += 1
                continue
            if not isinstance(k, (int, slice)):
                raise TypeError(
                    f"retorch.autograd indexing supports ints, slices and 1-d index tensors, got {k!r}"
                )
            key_d = (slice(None),) * dim + (k,)
            op = "select" if isinstance(k, int) else "slice"
            out = out._view_of(
                Tensor._record(
                    op, _ops.index(out.data, key_d), (out,), self_sizes=out.shape, key=key_d
                )
            )
            dim += op == "slice"  # a select removes its dimension
        return out

    # ------------------------------------------------------------ linear algebra and friends
    def dot(self, other: Tensor) -> Tensor:
        return Tensor._record(
            "dot",
            _ops.dot(self.data, other.data),
            (self, other),
            save={"self_": self, "tensor": other},
        )

    def mv(self, vec: Tensor) -> Tensor:
        return Tensor._record(
            "mv", _ops.mv(self.data, vec.data), (self, vec), save={"self_": self, "vec": vec}
        )

    def mm(self, mat2: Tensor) -> Tensor:
        a, b = self.data, mat2.data  # (sizes and strides: MmBackward0's layout choice)
        return Tensor._record(
            "mm", _ops.mm(a, b), (self, mat2), save={"self_": self, "mat2": mat2},
            self_sym_sizes=tuple(a.shape), self_sym_strides=tuple(a.stride()),
            mat2_sym_sizes=tuple(b.shape), mat2_sym_strides=tuple(b.stride()),
        )  # fmt: skip

    def bmm(self, mat2: Tensor) -> Tensor:
        return Tensor._record(
            "bmm", _ops.bmm(self.data, mat2.data), (self, mat2), save={"self_": self, "mat2": mat2}
        )

    @property
    def mT(self) -> Tensor:  # noqa: N802  (torch's name)
        return self.transpose(-2, -1)

    def contiguous(self) -> Tensor:
        return (
            self
            if _ops.is_contiguous(self.data)
            else Tensor._record("clone", _ops.contiguous(self.data), (self,))
        )

    def _unsafe_view(self, shape) -> Tensor:
        return Tensor._record(
            "unsafe_view", _ops.reshape(self.data, shape), (self,), self_sizes=self.shape
        )

    def _should_fold(self, other: Tensor) -> bool:
        """Whether ``matmul`` folds the batch of the larger operand into mm/mv rows
        (LinearAlgebra.cpp: should_fold)."""
        larger_first = self.dim() >= other.dim()
        t1 = self if larger_first else other.mT
        small = other if larger_first else self
        if not (t1.dim() >= 3 and small.dim() <= 2):
            return False
        if small.requires_grad:  # fold: a batched gradient for `small` would be large
            return True
        if self.dim() == 2:  # folding would need a copy of the transposed result
            return False
        if t1.numel() == 0:
            return True
        shape, strides = t1.shape, _ops.strides(t1.data)
        return all(strides[i] == strides[i + 1] * shape[i + 1] for i in range(t1.dim() - 2))

    def matmul(self, other: Tensor) -> Tensor:
        """``@`` as ``at::matmul`` decomposes it (LinearAlgebra.cpp: _matmul_impl): dot, mv,
        mm, the batch of one operand folded into mm/mv rows, or an expanded bmm."""
        a, b = self.dim(), other.dim()
        if a == 0 or b == 0:
            raise RuntimeError(
                f"both arguments to matmul need to be at least 1D, but they are {a}D and {b}D"
            )
        if a == 1 and b == 1:
            return self.dot(other)
        if a == 2 and b == 1:
            return self.mv(other)
        if a == 1 and b == 2:  # torch squeezes in place: its node is SqueezeBackward4
            out = self.unsqueeze(0).mm(other)
            return Tensor._record(
                "squeeze_inplace", _ops.squeeze(out.data, 0), (out,), self_sizes=out.shape
            )
        if a == 2 and b == 2:
            return self.mm(other)
        if self._should_fold(other):
            transpose = b > a  # fold the larger operand: for 2-D @ 3-D+, compute (B^T A^T)^T
            t1 = other.mT if transpose else self
            t2 = (self.t() if a == 2 else self) if transpose else other
            shape = tuple(t1.shape[:-1])
            rows = 1
            for n in shape:
                rows *= n
            folded = t1.reshape(rows, t1.shape[-1])
            if t2.dim() == 2:
                out = folded.mm(t2)._unsafe_view(shape + (t2.shape[1],))
                return out.mT.contiguous() if transpose else out
            return folded.mv(t2)._unsafe_view(shape)
        return self._matmul_batched(other)

    def _matmul_batched(self, other: Tensor) -> Tensor:
        """The general case: broadcast the batch dimensions, expand, one bmm."""
        a, b = self.dim(), other.dim()
        n, m1 = (self.shape[-2] if a > 1 else 1), self.shape[-1]
        m2, p = (other.shape[-2] if b > 1 else other.shape[0]), (other.shape[-1] if b > 1 else 1)
        batch1, batch2 = tuple(self.shape[: max(a - 2, 0)]), tuple(other.shape[: max(b - 2, 0)])
        if a == 3 and b == 3 and batch1[0] != batch2[0]:  # a batch of one: squeeze it, fold
            if batch1[0] == 1 and self.requires_grad:
                return self.squeeze(0).matmul(other)
            if batch2[0] == 1 and other.requires_grad:
                return self.matmul(other.squeeze(0))
        batch = _broadcast_shapes(batch1, batch2)
        count = 1
        for k in batch:
            count *= k
        x = self.expand(*batch, n, m1).reshape(count, n, m1)
        if b == 1:
            y = other.expand(*batch, m2).reshape(count, m2).unsqueeze(2)
        else:
            y = other.expand(*batch, m2, p).reshape(count, m2, p)
        shape = batch + ((n,) if a > 1 else ()) + ((p,) if b > 1 else ())
        out = x.bmm(y)
        return (out.squeeze(-1) if b == 1 else out)._unsafe_view(shape)

    def softmax(self, dim: int) -> Tensor:
        dim = maybe_wrap_dim(dim, self.dim())
        return Tensor._record(
            "softmax", _ops.softmax(self.data, dim), (self,), save_output="result", dim=dim
        )

    def log_softmax(self, dim: int) -> Tensor:
        dim = maybe_wrap_dim(dim, self.dim())
        return Tensor._record(
            "log_softmax", _ops.log_softmax(self.data, dim), (self,), save_output="result", dim=dim
        )

    # ------------------------------------------------------------ helpers used by the formulas
    @staticmethod
    def _sum_to(t: Tensor, shape) -> Tensor:
        """Differentiably sum ``t`` down to ``shape`` (reverse broadcasting, ``at::sum_to``)."""
        if t.shape == shape:
            return t
        lead = t.dim() - len(shape)
        dims = list(range(lead)) + [
            lead + i for i, n in enumerate(shape) if n == 1 and t.shape[lead + i] != 1
        ]
        out = t.sum(dims, keepdim=True) if dims else t
        return out.view(*shape) if lead else out

    def _select_backward(self, op: str, shape, key) -> Tensor:
        """The gradient of select/slice: zeros of ``shape`` with this gradient at ``key``."""
        return Tensor._record(
            f"{op}_backward",
            _ops.scatter_into_zeros(shape, self.data, key, self.data),
            (self,),
            key=key,
        )

    def _index_backward(self, shape, index) -> Tensor:
        """The gradient of indexing with ``index``: zeros of ``shape``, this gradient added in."""
        return Tensor._record(
            "index_backward",
            _ops.index_add_zeros(shape, self.data, 0, index, self.data),
            (self,),
            index=index,
        )


class MaxResult(NamedTuple):
    """What ``max(dim)`` returns (torch.return_types.max)."""

    values: Tensor
    indices: Tensor


class _WrappedNumber(Tensor):
    """A Python number used in a tensor op (ATen's "wrapped number"): hooks never see it saved."""

    __slots__ = ()
    _is_wrapped_number = True


def _save(node: Node, op: str, tensors: dict) -> None:
    """Save what the formula needs, skipping what only unneeded gradients would use."""
    used_by = USED_BY.get(op)
    for name, tensor in tensors.items():
        if used_by is not None:
            for i in used_by[name]:
                if node.next_functions[i][0] is not None:
                    break
            else:
                continue
        setattr(node, name, SavedVariable(tensor))


def maybe_wrap_dim(dim: int, ndim: int) -> int:
    """``dim`` as an index in ``[0, ndim)`` (c10/core/WrapDimMinimal.h): negative dims count
    from the end, and a 0-dim tensor accepts 0 and -1, as if it had one dimension."""
    if ndim <= 0:
        ndim = 1
    if not -ndim <= dim < ndim:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], "
            f"but got {dim})"
        )
    return dim + ndim if dim < 0 else dim


def _normalize_dims(dim, ndim: int) -> tuple[int, ...]:
    """The reduced dims, wrapped and sorted; none for a 0-dim tensor (its one value stays)."""
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    wrapped = [maybe_wrap_dim(d, ndim) for d in dims]
    for d in wrapped:
        if wrapped.count(d) > 1:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return tuple(sorted(wrapped)) if ndim else ()


def _broadcast_shapes(a: tuple, b: tuple) -> tuple:
    """The broadcast of two shapes (ATen's infer_size)."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x, y = (a[-i] if i <= len(a) else 1), (b[-i] if i <= len(b) else 1)
        if x != y and x != 1 and y != 1:
            raise RuntimeError(
                f"The size of tensor a ({x}) must match the size of tensor b ({y}) at "
                f"non-singleton dimension {max(len(a), len(b)) - i}"
            )
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def _shape_args(shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def tensor(data, requires_grad: bool = False, dtype=None) -> Tensor:
    """``retorch.autograd.tensor(data, requires_grad=False)``: a leaf wrapping an array of the
    current backend (a torch tensor; a ``retorch.tensor.Tensor`` after
    ``set_array_backend("retorch")``)."""
    out = Tensor(_ops.as_array(data, dtype), requires_grad=requires_grad)
    if grad_mode._inference_enabled:  # made in inference mode: an inference tensor
        out._version_counter = grad_mode.INFERENCE_VERSION
    return out


def where(condition, input: Tensor, other) -> Tensor:
    """``torch.where(condition, input, other)``: ``input`` where ``condition``, else ``other``."""
    return input.where(condition, other)


def cross_entropy(logits: Tensor, target) -> Tensor:
    """Mean cross-entropy over class indices, as ``F.cross_entropy``: log_softmax, then nll_loss."""
    target = target if isinstance(target, Tensor) else Tensor(_ops.as_array(target))
    logp = logits.log_softmax(1)
    total_weight = Tensor(_ops.scalar(logp.shape[0], logp.data))  # nll_loss's second output
    return Tensor._record(
        "nll_loss",
        _ops.nll_loss(logp.data, target.data),
        (logp,),
        save={"self_": logp, "target": target, "total_weight": total_weight},
    )

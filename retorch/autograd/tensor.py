"""The autograd ``Tensor``: data plus the bookkeeping reverse mode needs.

Mirrors the autograd half of torch's tensor (torch/csrc/autograd/variable.h: ``grad_fn``,
``requires_grad``, ``is_leaf``, ``_version``, ``retain_grad``, hooks) and the generated
"VariableType" wrappers that record a node per op (see ``_record``). The data is a raw array
handled only through ``_ops``; the derivative formulas live in ``derivatives.py``.
"""

from __future__ import annotations

from typing import Any, Callable

from . import _ops, grad_mode
from .derivatives import FORMULAS
from .graph import NO_EDGE, AccumulateGrad, Edge, Node, SavedVariable

_NO_HOOKS: list = []


class _VersionCounter:
    """Shared by a tensor and its views: an in-place change to either bumps both."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class FormulaNode(Node):
    """A node whose backward is an entry of ``FORMULAS``."""

    __slots__ = ()
    formula: Callable = None

    def apply(self, grads: list) -> tuple:
        return type(self).formula(self, grads[0])


NODE_CLASSES = {
    op: type(name, (FormulaNode,), {"formula": staticmethod(fn)})
    for op, (name, fn) in FORMULAS.items()
}


def _wrap(value, like: Tensor) -> Tensor:
    if isinstance(value, Tensor):
        return value
    return Tensor(_ops.scalar(value, like.data))


class Tensor:
    """A value in an autograd graph: wraps raw ``data`` (a torch.Tensor today)."""

    __slots__ = (
        "data",
        "requires_grad",
        "grad",
        "grad_fn",
        "_output_nr",
        "_version_counter",
        "_hooks",
        "_accumulator",
        "_retains_grad",
        "__weakref__",
    )

    def __init__(self, data, requires_grad: bool = False, grad_fn: Node | None = None) -> None:
        self.data = data
        self.requires_grad = requires_grad or grad_fn is not None
        self.grad: Tensor | None = None
        self.grad_fn = grad_fn
        self._output_nr = 0
        self._version_counter = _VersionCounter()
        self._hooks: list[Callable] = _NO_HOOKS
        self._accumulator: AccumulateGrad | None = None
        self._retains_grad = False

    # ------------------------------------------------------------ autograd metadata
    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def _version(self) -> int:
        return self._version_counter.value

    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

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

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if not self.is_leaf and not requires_grad:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to use a computed "
                "variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach()."
            )
        self.requires_grad = requires_grad
        return self

    def detach(self) -> Tensor:
        out = Tensor(self.data)
        out._version_counter = (
            self._version_counter
        )  # a detached tensor shares data, so versions too
        return out

    def _gradient_edge(self) -> Edge | None:
        """Where a gradient for this tensor goes: its grad_fn, or its leaf's AccumulateGrad."""
        if self.grad_fn is not None:
            return Edge(self.grad_fn, self._output_nr)
        if self.requires_grad:
            if self._accumulator is None:
                self._accumulator = AccumulateGrad(self)
            return Edge(self._accumulator, 0)
        return None

    def register_hook(self, hook: Callable) -> Callable:
        """``hook(grad)`` runs when this tensor's gradient is computed; may return a new one."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is None:
            self._hooks = [*self._hooks, hook]
        else:
            self.grad_fn._add_tensor_pre_hook(self._output_nr, hook)
        return hook

    def retain_grad(self) -> None:
        """Keep ``.grad`` for a non-leaf tensor (leaves keep it anyway)."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.is_leaf or self._retains_grad:
            return

        def store(grad):
            self.grad = grad.detach() if self.grad is None else self.grad + grad.detach()

        self.grad_fn._set_retains_grad_hook(self._output_nr, store)
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
        """Wrap an op's result; if grad mode is on and an input needs grad, add its node to the graph."""
        if not grad_mode._enabled:
            return Tensor(data)
        for t in inputs:
            if t.requires_grad:
                break
        else:
            return Tensor(data)
        node = NODE_CLASSES[op](tuple([t._gradient_edge() or NO_EDGE for t in inputs]))
        node.input_metadata = [data.shape]  # the shape of the gradient this node receives
        if save:
            for name, tensor in save.items():
                setattr(node, name, SavedVariable(tensor))
        for name, value in attrs.items():
            setattr(node, name, value)
        out = Tensor(data, grad_fn=node)
        if save_output:
            setattr(node, save_output, SavedVariable(out, is_output=True))
        return out

    def _check_inplace(self) -> None:
        if grad_mode._enabled and self.is_leaf and self.requires_grad:
            raise RuntimeError(
                "a leaf Variable that requires grad is being used in an in-place operation."
            )

    def _inplace(self, op: str, fn: Callable, other: Tensor | None, **attrs: Any) -> Tensor:
        """An in-place op: change the data, bump the version, rebase this tensor's history."""
        self._check_inplace()
        inputs = (self,) if other is None else (self, other)
        needs = grad_mode._enabled and any(t.requires_grad for t in inputs)
        if needs:
            node = NODE_CLASSES[op](tuple(t._gradient_edge() or NO_EDGE for t in inputs))
            node.input_metadata = [tuple(self.shape)]
            for name, value in attrs.items():
                setattr(node, name, value)
            if op == "mul":  # the gradient for `other` needs self's value from before the change
                node.self_ = SavedVariable(Tensor(_ops.clone(self.data)))
                node.other = SavedVariable(other)
        fn(self.data)
        self._version_counter.value += 1
        if needs:
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

    def __rsub__(self, other) -> Tensor:
        if isinstance(other, Tensor):
            return other.__sub__(self)
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
        return self.reciprocal() * other

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

    def __matmul__(self, other) -> Tensor:
        return self.matmul(other)

    def __gt__(self, other) -> Tensor:
        return Tensor(_ops.gt(self.data, other.data if isinstance(other, Tensor) else other))

    def __eq__(self, other) -> Tensor:  # elementwise, as torch's
        return Tensor(_ops.eq(self.data, other.data if isinstance(other, Tensor) else other))

    __hash__ = object.__hash__

    # ------------------------------------------------------------ in-place
    def add_(self, other, alpha: float = 1) -> Tensor:
        other = _wrap(other, self)
        return self._inplace("add", lambda d: d.add_(other.data, alpha=alpha), other, alpha=alpha)

    def mul_(self, other) -> Tensor:
        other = _wrap(other, self)
        return self._inplace("mul", lambda d: d.mul_(other.data), other)

    def zero_(self) -> Tensor:
        self._check_inplace()
        self.data.zero_()
        self._version_counter.value += 1
        return self

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

    # ------------------------------------------------------------ reductions
    def sum(self, dim=None, keepdim: bool = False) -> Tensor:
        if dim is None:
            return Tensor._record("sum", _ops.sum(self.data), (self,), self_sizes=tuple(self.shape))
        dims = _normalize_dims(dim, self.dim())
        return Tensor._record(
            "sum_dim",
            _ops.sum(self.data, dim=dims, keepdim=keepdim),
            (self,),
            self_sizes=tuple(self.shape),
            dim=dims,
            keepdim=keepdim,
        )

    def mean(self, dim=None, keepdim: bool = False) -> Tensor:
        if dim is None:
            return Tensor._record(
                "mean",
                _ops.mean(self.data),
                (self,),
                self_sizes=tuple(self.shape),
                numel=self.numel(),
            )
        dims = _normalize_dims(dim, self.dim())
        count = 1
        for d in dims:
            count *= self.shape[d]
        return Tensor._record(
            "mean_dim",
            _ops.mean(self.data, dim=dims, keepdim=keepdim),
            (self,),
            self_sizes=tuple(self.shape),
            dim=dims,
            keepdim=keepdim,
            count=count,
        )

    def max(self, dim: int | None = None, keepdim: bool = False):
        if dim is None:
            return Tensor._record(
                "max",
                _ops.amax(self.data, dim=tuple(range(self.dim()))),
                (self,),
                save={"self_": self},
                save_output="result",
            )
        values, indices = _ops.max(self.data, dim=dim, keepdim=keepdim)
        out = Tensor._record(
            "max_dim",
            values,
            (self,),
            self_sizes=tuple(self.shape),
            dim=dim % self.dim(),
            keepdim=keepdim,
            indices=indices,
        )
        return out, Tensor(indices)

    # ------------------------------------------------------------ shapes and views
    def _view_of(self, out: Tensor) -> Tensor:
        out._version_counter = self._version_counter  # views share the base's version counter
        return out

    def view(self, *shape) -> Tensor:
        shape = _shape_args(shape)
        return self._view_of(
            Tensor._record(
                "view", _ops.view(self.data, shape), (self,), self_sizes=tuple(self.shape)
            )
        )

    def reshape(self, *shape) -> Tensor:
        shape = _shape_args(shape)
        if _ops.is_contiguous(self.data):  # reshape is a view when it can be, a copy when it must
            return self.view(*shape)
        copy = Tensor._record("clone", _ops.clone(self.data), (self,))
        return Tensor._record(
            "unsafe_view", _ops.reshape(copy.data, shape), (copy,), self_sizes=tuple(copy.shape)
        )

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        return self._view_of(
            Tensor._record(
                "transpose", _ops.transpose(self.data, dim0, dim1), (self,), dim0=dim0, dim1=dim1
            )
        )

    def t(self) -> Tensor:
        return self._view_of(Tensor._record("t", _ops.transpose(self.data, 0, 1), (self,)))

    def permute(self, *dims) -> Tensor:
        dims = tuple(d % self.dim() for d in _shape_args(dims))
        return self._view_of(
            Tensor._record("permute", _ops.permute(self.data, dims), (self,), dims=dims)
        )

    def expand(self, *sizes) -> Tensor:
        sizes = _shape_args(sizes)
        return self._view_of(
            Tensor._record(
                "expand", _ops.expand(self.data, sizes), (self,), self_sizes=tuple(self.shape)
            )
        )

    def unsqueeze(self, dim: int) -> Tensor:
        dim = dim % (self.dim() + 1)
        return self._view_of(
            Tensor._record("unsqueeze", _ops.unsqueeze(self.data, dim), (self,), dim=dim)
        )

    def squeeze(self, dim: int | None = None) -> Tensor:
        if dim is None:
            return self._view_of(
                Tensor._record(
                    "squeeze", _ops.squeeze(self.data), (self,), self_sizes=tuple(self.shape)
                )
            )
        return self._view_of(
            Tensor._record(
                "squeeze_dim", _ops.squeeze(self.data, dim), (self,), self_sizes=tuple(self.shape)
            )
        )

    def __getitem__(self, key) -> Tensor:
        if isinstance(key, Tensor):  # integer-array indexing along dim 0: a gather, not a view
            return Tensor._record(
                "index",
                _ops.index_select(self.data, 0, key.data),
                (self,),
                self_sizes=tuple(self.shape),
                index=key.data,
            )
        keys = key if isinstance(key, tuple) else (key,)
        out = self
        dim = 0
        for k in keys:  # torch records one node per indexed dimension
            if isinstance(k, int):
                out = out._view_of(
                    Tensor._record(
                        "select",
                        _ops.select(out.data, dim, k),
                        (out,),
                        self_sizes=tuple(out.shape),
                        key=(slice(None),) * dim + (k,),
                    )
                )
            elif isinstance(k, slice):
                if k == slice(None):
                    dim += 1
                    continue
                key_d = (slice(None),) * dim + (k,)
                out = out._view_of(
                    Tensor._record(
                        "slice", out.data[key_d], (out,), self_sizes=tuple(out.shape), key=key_d
                    )
                )
                dim += 1
            else:
                raise TypeError(
                    f"retorch.autograd indexing supports ints, slices and 1-d index tensors, got {k!r}"
                )
        return out

    # ------------------------------------------------------------ linear algebra and friends
    def matmul(self, other: Tensor) -> Tensor:
        """``@`` as ``at::matmul`` decomposes it: dot, mv, mm, or a folded/batched mm."""
        a, b = self.dim(), other.dim()
        if a == 1 and b == 1:
            return Tensor._record(
                "dot",
                _ops.dot(self.data, other.data),
                (self, other),
                save={"self_": self, "tensor": other},
            )
        if a == 2 and b == 1:
            return Tensor._record(
                "mv",
                _ops.mv(self.data, other.data),
                (self, other),
                save={"self_": self, "vec": other},
            )
        if a == 2 and b == 2:
            return Tensor._record(
                "mm",
                _ops.mm(self.data, other.data),
                (self, other),
                save={"self_": self, "mat2": other},
            )
        if a >= 3 and b == 2:  # fold the batch dimensions into rows, one mm, unfold
            folded = self.reshape(-1, self.shape[-1])
            out = folded.matmul(other)
            shape = tuple(self.shape[:-1]) + (other.shape[-1],)
            return Tensor._record(
                "unsafe_view", _ops.reshape(out.data, shape), (out,), self_sizes=tuple(out.shape)
            )
        if a >= 3 and b >= 3 and self.shape[:-2] == other.shape[:-2]:
            batch = tuple(self.shape[:-2])
            x, y = self.reshape(-1, *self.shape[-2:]), other.reshape(-1, *other.shape[-2:])
            out = Tensor._record(
                "bmm", _ops.bmm(x.data, y.data), (x, y), save={"self_": x, "mat2": y}
            )
            shape = batch + tuple(out.shape[-2:])
            return Tensor._record(
                "unsafe_view", _ops.reshape(out.data, shape), (out,), self_sizes=tuple(out.shape)
            )
        raise RuntimeError(
            f"retorch.autograd matmul does not support shapes {tuple(self.shape)} @ {tuple(other.shape)}"
        )

    def softmax(self, dim: int) -> Tensor:
        return Tensor._record(
            "softmax", _ops.softmax(self.data, dim), (self,), save_output="result", dim=dim
        )

    def log_softmax(self, dim: int) -> Tensor:
        return Tensor._record(
            "log_softmax", _ops.log_softmax(self.data, dim), (self,), save_output="result", dim=dim
        )

    # ------------------------------------------------------------ helpers used by the formulas
    @staticmethod
    def _sum_to(t: Tensor, shape) -> Tensor:
        """Differentiably sum ``t`` down to ``shape`` (reverse broadcasting)."""
        if tuple(t.shape) == tuple(shape):
            return t
        lead = t.dim() - len(shape)
        dims = list(range(lead)) + [
            lead + i for i, n in enumerate(shape) if n == 1 and t.shape[lead + i] != 1
        ]
        out = t.sum(dims, keepdim=True)
        return out.reshape(*shape) if lead else out

    def _scatter_into_zeros(self, shape, key) -> Tensor:
        """The gradient of select/slice: zeros of ``shape`` with ``self`` at ``key``."""
        if grad_mode._enabled and self.requires_grad:
            return _SelectBackwardOp.apply(self, shape, key)
        return Tensor(_ops.scatter_into_zeros(shape, self.data, key, self.data))

    def _index_add_zeros(self, shape, dim, index) -> Tensor:
        out = _ops.index_add_zeros(shape, self.data, dim, index, self.data)
        if grad_mode._enabled and self.requires_grad:
            return _IndexBackwardOp.apply(self, shape, index)
        return Tensor(out)


def _normalize_dims(dim, ndim: int) -> tuple[int, ...]:
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(sorted(d % ndim for d in dims))


def _shape_args(shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def tensor(data, requires_grad: bool = False, dtype=None) -> Tensor:
    """``retorch.autograd.tensor(data, requires_grad=False)``: a leaf wrapping a torch tensor."""
    array = _ops.as_array(data)
    if dtype is not None:
        array = array.to(dtype)
    return Tensor(array, requires_grad=requires_grad)


def cross_entropy(logits: Tensor, target) -> Tensor:
    """Mean cross-entropy over class indices, as ``F.cross_entropy``: log_softmax, then nll_loss."""
    target = target.data if isinstance(target, Tensor) else _ops.as_array(target)
    logp = logits.log_softmax(1)
    return Tensor._record(
        "nll_loss",
        _ops.nll_loss(logp.data, target),
        (logp,),
        self_sizes=tuple(logp.shape),
        target=target,
    )


from .function import Function  # noqa: E402  (Function builds on Tensor)


class _SelectBackwardOp(Function):
    """Differentiable "scatter into zeros", so select/slice support double backward."""

    @staticmethod
    def forward(ctx, grad, shape, key):
        ctx.key = key
        return Tensor(_ops.scatter_into_zeros(shape, grad.data, key, grad.data))

    @staticmethod
    def backward(ctx, g):
        return g[ctx.key], None, None


class _IndexBackwardOp(Function):
    @staticmethod
    def forward(ctx, grad, shape, index):
        ctx.index = index
        return Tensor(_ops.index_add_zeros(shape, grad.data, 0, index, grad.data))

    @staticmethod
    def backward(ctx, g):
        return g[Tensor(ctx.index)], None, None

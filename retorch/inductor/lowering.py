"""Lowerings: each aten op becomes an IR node (a loop body over ``ops``), or falls back.

Mirrors torch/_inductor/lowering.py: ``lowerings`` maps an aten overload packet to a function
from IR nodes to an IR node; ``make_pointwise`` builds an elementwise op with broadcasting,
``make_reduction`` a reduction over dims; views only reindex. An op with no entry here runs in
eager torch as a ``FallbackKernel`` (graph.py), as ``make_fallback`` does in torch.
"""

from __future__ import annotations

import operator

import torch

from . import ir
from .virtualized import V, ops

aten = torch.ops.aten
prims = torch.ops.prims
lowerings: dict = {}


def register_lowering(*packets):
    def wrap(fn):
        for p in packets:
            lowerings[p] = fn
        return fn

    return wrap


def _size(x):
    return x.get_size() if isinstance(x, ir.IRNode) else []


def broadcast_index(index, size, out_size):
    """The index into a tensor of ``size`` for element ``index`` of its broadcast to ``out_size``."""
    index = list(index)[len(out_size) - len(size) :]
    return [("0" if s == 1 else i) for i, s in zip(index, size)]


def make_pointwise(fn, dtype=None):
    """An elementwise op: ``fn`` receives one ``ops`` value per input and returns the result."""

    def lower(*args, **kwargs):
        if kwargs:  # alpha=, rounding_mode=...: left to eager torch
            raise NotImplementedError(f"pointwise lowering takes no keyword arguments: {kwargs}")
        nodes = [a for a in args if isinstance(a, ir.IRNode)]
        out = list(torch.broadcast_shapes(*[tuple(_size(a)) for a in nodes]))
        cdtype = nodes[0].dtype if nodes else torch.float32

        def inner_fn(index):
            vals = []
            for a in args:
                if isinstance(a, ir.IRNode):
                    vals.append(a.make_loader()(broadcast_index(index, a.get_size(), out)))
                else:
                    vals.append(ops.constant(a, cdtype))
            return fn(*vals)

        return ir.Pointwise(out, inner_fn, dtype or cdtype)

    return lower


def _register_pointwise(packet, fn, dtype=None):
    lowerings[packet] = make_pointwise(fn, dtype)


for _p, _name in [(aten.add, "add"), (aten.sub, "sub"), (aten.mul, "mul"),
                  (aten.div, "truediv"), (aten.maximum, "maximum"), (aten.minimum, "minimum")]:  # fmt: skip
    _register_pointwise(_p, (lambda n: lambda a, b: getattr(ops, n)(a, b))(_name))
for _p, _name in [(aten.exp, "exp"), (aten.log, "log"), (aten.tanh, "tanh"), (aten.neg, "neg"),
                  (aten.sigmoid, "sigmoid"), (aten.relu, "relu"), (aten.rsqrt, "rsqrt"),
                  (aten.sqrt, "sqrt"), (aten.abs, "abs"), (aten.reciprocal, "reciprocal")]:  # fmt: skip
    _register_pointwise(_p, (lambda n: lambda a: getattr(ops, n)(a))(_name))
for _p, _name in [(aten.gt, "gt"), (aten.ge, "ge"), (aten.lt, "lt"), (aten.le, "le"),
                  (aten.eq, "eq"), (aten.ne, "ne")]:  # fmt: skip
    _register_pointwise(_p, (lambda n: lambda a, b: getattr(ops, n)(a, b))(_name), torch.bool)
_register_pointwise(aten.where, lambda c, a, b: ops.where(c, a, b))
_register_pointwise(aten.pow, lambda a, b: ops.pow(a, b))


@register_lowering(aten.clone, aten.detach, aten.alias, aten.lift_fresh_copy)
def clone(x, *args, **kwargs):
    return x


@register_lowering(aten.scalar_tensor)
def scalar_tensor(value, dtype=None, **kwargs):
    dtype = dtype or torch.float32
    return ir.Pointwise([], lambda index: ops.constant(value, dtype), dtype)


@register_lowering(aten._to_copy)
def to_copy(x, dtype=None, **kwargs):
    if dtype is None or dtype == x.dtype:
        return x
    loader = x.make_loader()
    return ir.Pointwise(x.get_size(), lambda i: ops.to_dtype(loader(i), dtype), dtype)


def make_reduction(reduction_type):
    def lower(x, dim=None, keepdim=False, *, dtype=None):
        size = x.get_size()
        dims = sorted({d % len(size) for d in dim}) if dim else list(range(len(size)))
        kept = [d for d in range(len(size)) if d not in dims]
        ranges = [1 if d in dims else size[d] for d in range(len(size))] if keepdim else [
            size[d] for d in kept]  # fmt: skip
        loader = x.make_loader()

        def inner_fn(index, rindex):
            full = [None] * len(size)
            for j, d in enumerate(kept):
                full[d] = index[d] if keepdim else index[j]
            for j, d in enumerate(dims):
                full[d] = rindex[j]
            return loader(full)

        rranges = [size[d] for d in dims]
        return ir.Reduction(ranges, rranges, reduction_type, inner_fn, dtype or x.dtype)

    return lower


lowerings[aten.sum] = make_reduction("sum")
lowerings[aten.amax] = make_reduction("max")
lowerings[aten.amin] = make_reduction("min")


def view_of(x, size, reindex, replay):
    return ir.View(x, list(size), reindex, replay)


@register_lowering(aten.expand)
def expand(x, sizes):
    old = x.get_size()
    new = [o if s == -1 else s for s, o in zip(sizes, [None] * (len(sizes) - len(old)) + old)]
    return view_of(x, new, lambda i: broadcast_index(i, old, new), (aten.expand.default, sizes))


@register_lowering(aten.permute)
def permute(x, dims):
    dims = [d % len(x.get_size()) for d in dims]
    size = [x.get_size()[d] for d in dims]
    inv = [dims.index(k) for k in range(len(dims))]
    return view_of(
        x, size, lambda i: [i[inv[k]] for k in range(len(inv))], (aten.permute.default, dims)
    )


@register_lowering(aten.t)
def t(x):
    return permute(x, list(range(len(x.get_size())))[::-1])


@register_lowering(aten.unsqueeze)
def unsqueeze(x, dim):
    size = x.get_size()
    dim = dim % (len(size) + 1)
    new = size[:dim] + [1] + size[dim:]
    return view_of(x, new, lambda i: i[:dim] + i[dim + 1 :], (aten.unsqueeze.default, dim))


@register_lowering(aten.squeeze)
def squeeze(x, dim=None):
    size = x.get_size()
    dims = range(len(size)) if dim is None else [dim] if isinstance(dim, int) else dim
    drop = {d % len(size) for d in dims if size[d % len(size)] == 1}
    keep = [d for d in range(len(size)) if d not in drop]

    def reindex(i):
        full = ["0"] * len(size)
        for j, d in enumerate(keep):
            full[d] = i[j]
        return full

    return view_of(x, [size[d] for d in keep], reindex, (aten.squeeze.dims, sorted(drop)))


@register_lowering(aten.view, aten._unsafe_view, aten.reshape)
def view(x, sizes):
    """A view that only adds or drops 1s reindexes; any other reads the realized buffer."""
    old, numel = x.get_size(), x.numel()
    new = list(sizes)
    if -1 in new:
        new[new.index(-1)] = numel // _prod(s for s in new if s != -1)
    if [s for s in old if s != 1] == [s for s in new if s != 1]:
        pos_old = [d for d, s in enumerate(old) if s != 1]
        pos_new = [d for d, s in enumerate(new) if s != 1]

        def reindex(i):
            full = ["0"] * len(old)
            for a, b in zip(pos_old, pos_new):
                full[a] = i[b]
            return full

        return view_of(x, new, reindex, (aten.view.default, new))
    buf = V.graph.realize(x)
    return ir.ReinterpretView(buf, new, (aten.view.default, new))


def _prod(xs):
    n = 1
    for x in xs:
        n *= x
    return n


@register_lowering(operator.getitem)
def getitem(x, i):
    return x[i]

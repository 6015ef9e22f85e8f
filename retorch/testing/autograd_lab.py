"""Graders for lab 3 (solutions/03_autograd_lab.md): the student's engine pieces against torch's.

Each ``check_*`` takes the comparisons object that :func:`retorch.testing.grading.check` passes
and the student's functions (and, for the mini engine, its ``Var`` class), runs them and torch on
the same inputs, and compares. The inputs are chosen so that the usual mistakes show: gradients
of another dtype, stored transposed, with size-0 dims or on the meta device; graphs with an input
that needs no gradient (an edge to ``None``), with two leaves ready at once, with a gradient that
is all zeros; leaves whose ``.grad`` already holds a tensor; a variable changed in place by an op
that leaves its values as they were.
"""

from __future__ import annotations

import re

import torch


def observed_order(loss, inputs=None):
    """The order torch's engine really runs the nodes, seen through a pre-hook on each, for
    ``loss.backward()`` or, given ``inputs``, for ``torch.autograd.grad(loss, inputs)``."""
    order, seen, stack = [], set(), [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is not None and fn not in seen:
            seen.add(fn)
            fn.register_prehook(lambda grads, fn=fn: order.append(type(fn).__name__))
            stack.extend(f for f, _ in fn.next_functions)
    if inputs is None:
        loss.backward()
    else:
        torch.autograd.grad(loss, inputs)
    return order


# The graphs the checks run, in torch and in the lab's mini engine (a and b: tensors or Vars).
def graph_1(a, b):  # Add's input 0 (s) was created after its input 1 (r): a stack pops r first
    r = a.exp() * b.tanh()
    s = b.exp()
    return (s + r).sum()


def graph_2(a, b):  # exp(a) and b feed two nodes each: their gradients must wait for both
    e = a.exp()
    u = e * b
    v = (e + b).tanh()
    return (v * u).sum()


def graph_3(a, b):  # a * a: one node with two edges to the same leaf
    u = a.tanh() * b
    e = (a * a).exp()
    return (e + u).sum()


def graph_4(a, b):  # many branches ready at once: only the sequence numbers fix the order
    return ((a.exp() * b) + (b.tanh() * a) + (a * b).exp() + (b.exp() + a).tanh()).sum()


def graph_5(a, b):  # a * b: both leaves' AccumulateGrad nodes are ready at once (a tie)
    return (a * b).sum()


def graph_6(a, b):  # b's gradient is the first gradient itself, expanded by SumBackward0
    return (a.exp() * a).sum() + b.sum()


def graph_7(a, b):  # h, a non-leaf: torch.autograd.grad(loss, [h]) stops at h's node
    h = a.exp() * b
    return (h.tanh() * a + h).sum(), h


def tensor(shape, dtype, layout, generator):
    """Random values of ``shape``: contiguous, stored transposed (dims reversed), or meta."""
    if layout == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    if layout == "transposed":
        stored = torch.randn(shape[::-1], generator=generator).to(dtype)
        return stored.permute(*reversed(range(len(shape))))
    return torch.randn(shape, generator=generator).to(dtype)


F32, F64 = torch.float32, torch.float64
SUM_TO_CASES = [  # (the gradient's shape, the input's shape, dtype, the gradient's layout)
    *[
        (big, small, F32, "contiguous")
        for big, small in [
            ((2, 3, 4), (3, 1)),
            ((2, 3, 4), (4,)),
            ((5, 1, 4), (1, 1, 4)),
            ((3, 4), (3, 4)),
            ((2, 3), ()),
            ((4, 3, 2), (3, 1)),
            ((2, 5, 3), (2, 1, 3)),
            ((3, 3), (1, 3)),  # repeated sizes: only positions tell
            ((2, 4, 4), (4, 1)),
        ]
    ],
    ((2, 3, 4), (3, 1), F64, "transposed"),
    ((4, 3), (1, 3), F64, "transposed"),
    ((5, 1, 4), (1, 1, 4), F32, "transposed"),
    ((2, 3, 4), (4,), F32, "transposed"),  # two leading dims that no view can merge
    ((3, 0), (3, 1), F32, "contiguous"),  # a size-1 dim broadcast to size 0: its sum is 0
    ((2, 0, 3), (0, 1), F64, "contiguous"),
    ((2, 3, 4), (3, 1), F64, "meta"),
]


def check_sum_to(cmp, sum_to):
    g = torch.Generator().manual_seed(0)
    hint = (
        "sum the missing leading dims, then keepdim-sum each dim where shape has size 1 and grad "
        "has not (size 0 too), found by its position (sizes can repeat, as in (3, 3) to (1, 3)); "
        "reduce grad itself (grad.sum), so the result keeps its dtype and device, and use ops "
        "that take any strides (sum, reshape), not view"
    )
    for big, small, dtype, layout in SUM_TO_CASES:
        grad = tensor(big, dtype, layout, g)
        leaf = torch.zeros(small, dtype=dtype, device=grad.device, requires_grad=True)
        leaf.expand(big).backward(grad)  # torch's engine reduces the broadcast gradient for us
        kind = f"{str(dtype).replace('torch.', '')} {layout}"
        what = f"sum_to a {kind} {big} gradient to {small}"
        got = cmp.call(lambda: sum_to(grad, small), what, hint)
        tol = 1e-6 if dtype == F32 else 1e-12
        cmp.tensor_like(got, leaf.grad, what, hint, rtol=tol, atol=tol)


ORDER_CASES = [  # (what, graph, the inputs asked for (None: backward), a needs grad)
    ("graph_1", graph_1, None, True),
    ("graph_2", graph_2, None, True),
    ("graph_3", graph_3, None, True),
    ("graph_5", graph_5, None, True),
    ("graph_2 with a constant a (edges to None)", graph_2, None, False),
    ("graph_1, inputs [b]", graph_1, "b", True),
    ("graph_1, inputs [a]", graph_1, "a", True),
    ("graph_2, inputs [a]", graph_2, "a", True),
    ("graph_4, inputs [a, b]", graph_4, "ab", True),
    ("graph_2 with a constant a, inputs [b]", graph_2, "b", False),
    ("graph_7, inputs [h] (a non-leaf)", graph_7, "h", True),
    ("graph_7, inputs [h, b]", graph_7, "hb", True),
]


def check_execution_order(cmp, execution_order):
    torch.manual_seed(0)
    hint = (
        "count incoming edges first, and decrement once per edge (a * a has two edges to the "
        "same leaf); skip edges to None (an input that needs no gradient) and read the edges "
        "after them; then always pop the ready node with the highest _sequence_nr() (not the "
        "last pushed, not the first pushed), with a tie-breaker that is never a node (two leaves' "
        "AccumulateGrad nodes have the same number)"
    )
    grad_hint = (
        "with inputs, a node runs only if a gradient flows from it to an input: through any of "
        "its edges, to a node that runs or to an input's own node (inp.grad_fn for a non-leaf, "
        "the AccumulateGrad whose .variable is the leaf), which receives the gradient but does "
        "not run"
    )
    for what, build, which, a_needs_grad in ORDER_CASES:
        a = torch.randn(3, requires_grad=a_needs_grad)
        b = torch.randn(3, requires_grad=True)
        out = build(a, b)
        loss, h = out if isinstance(out, tuple) else (out, None)
        inputs = None if which is None else [dict(a=a, b=b, h=h)[c] for c in which]
        why = hint if inputs is None else grad_hint
        got = cmp.call(
            lambda: execution_order(loss.grad_fn, inputs), f"execution_order({what})", why
        )
        cmp.equal(got, observed_order(loss, inputs), f"order of nodes for {what}", why)


BACKWARD_PASSES = [  # leaves: a, W (stored transposed), c (float64), d (needs no grad), e, f
    (
        "the first pass (f unused, c's gradient all zeros)",
        lambda l: (l[0] * l[3]).sum() + (l[1] * 2).sum() + (l[2] * 0).sum() + l[4].sum(),
    ),
    ("a second pass (c and e unused)", lambda l: (l[0] * l[0]).sum() + l[5].sum() + l[1].sum()),
    ("a third pass", lambda l: (l[5] * l[2].sum()).sum() + (l[0] @ l[1]).sum()),
]


def check_backward_into(cmp, backward_into):
    torch.manual_seed(0)
    data = [torch.randn(3), torch.randn(4, 3).t(), torch.randn(2, dtype=F64), torch.randn(3)]
    data += [torch.randn(0, 3), torch.randn(3)]
    needs = [True, True, True, False, True, True]
    ours = [x.clone().requires_grad_(r) for x, r in zip(data, needs)]
    theirs = [x.clone().requires_grad_(r) for x, r in zip(data, needs)]
    names = ["a", "W (stored transposed)", "c (float64)", "d (needs no gradient)", "e (0, 3)", "f"]
    hint = (
        "use torch.autograd.grad(..., allow_unused=True) on the leaves that require grad; skip "
        "a None gradient (leave .grad as it is), but store an all-zero one; the first time store "
        "a new tensor laid out like the leaf (torch.empty_like(leaf).copy_(g)), afterwards add "
        "into that same tensor in place"
    )
    for what, loss_of in BACKWARD_PASSES:
        before = [x.grad for x in ours], [x.grad for x in theirs]
        cmp.call(lambda: backward_into(loss_of(ours), ours), f"backward_into, {what}", hint)
        loss_of(theirs).backward()
        for i, name in enumerate(names):
            leaf = f"{name}.grad after {what}"
            if theirs[i].grad is None:
                got = ours[i].grad
                cmp.equal(
                    "None" if got is None else f"a tensor of shape {tuple(got.shape)}",
                    "None",
                    leaf,
                    hint,
                )
                continue
            cmp.tensor_like(ours[i].grad, theirs[i].grad, leaf, hint, 1e-6, 1e-6, strides=True)
            if before[1][i] is not None:
                cmp.equal(
                    ours[i].grad is before[0][i],
                    theirs[i].grad is before[1][i],
                    f"{leaf} is the tensor that .grad held before",
                    hint,
                )


def torch_message(before, after, shape=(3,), dtype=torch.float32):
    """torch's error when a tensor saved at version `before` is at version `after` at backward."""
    x = torch.ones(shape, dtype=dtype, requires_grad=True)
    y = x * 1  # a non-leaf, so it may change in place
    for _ in range(before):
        y.add_(1)
    z = y * y  # MulBackward0 saves y at version `before`
    for _ in range(after - before):
        y.add_(0)
    try:
        z.sum().backward()
    except RuntimeError as e:
        return str(e)


SAVED_CASES = [  # (version when saved, version at unpack, shape, dtype)
    (0, 1, (3,), torch.float32),
    (2, 5, (3,), torch.float32),
    (1, 3, (2, 3), torch.float64),
    (0, 2, (4,), torch.float16),
    (0, 1, (), torch.float32),
    (1, 2, (0, 3), torch.float64),
]


def check_saved_variable(cmp, SavedVariable, Var):  # noqa: N803  (the lab's class names)
    hint = "keep the version in __init__; in unpack compare it with var._version now"
    var = Var(torch.ones(3))
    saved = cmp.call(lambda: SavedVariable(var), "SavedVariable(var)", hint)
    cmp.equal(
        cmp.call(saved.unpack, "unpack() of an unchanged variable", hint) is var,
        True,
        "unpack() of an unchanged variable returns that very Var",
        "return self.var",
    )
    versions = r"is at version \d+; expected version \d+ instead\."
    for before, after, shape, dtype in SAVED_CASES:
        var = Var(torch.ones(shape, dtype=dtype))
        for _ in range(before):
            var.add_(1)
        saved = SavedVariable(var)
        for _ in range(after - before):
            var.add_(0)  # a new version, the same values
        what = f"a {dtype} {shape} saved at version {before}, unpacked at version {after}"
        cmp.raises(
            saved.unpack,
            RuntimeError,
            what + ": RuntimeError",
            hint + " (add_(0) changes no value, but it is a new version: torch raises)",
        )
        message = torch_message(before, after, shape, dtype)
        try:
            saved.unpack()
        except RuntimeError as e:
            got = re.search(versions, str(e))
            cmp.equal(
                got[0] if got else str(e),
                re.search(versions, message)[0],
                what + ": the versions, as torch says them",
                "first the version now (var._version), then the one saved",
            )
            start = message[: message.index("]]") + 2]  # torch then names the op that made y
            cmp.equal(
                str(e)[: len(start)],
                start,
                what + ": the start of torch's message",
                "copy the start of the message from the text above; the type from "
                "var.data.type() (any dtype: torch.HalfTensor for float16), every size of "
                "var.data.shape, joined by ', '",
            )
    var = Var(torch.ones(3))
    first = SavedVariable(var)  # two nodes save the same Var at different versions
    var.add_(1)
    second = SavedVariable(var)
    two = "a Var saved at version 0 and again at version 1"
    hint2 = "each SavedVariable keeps its own saved version (on self, not on the Var)"
    cmp.equal(
        cmp.call(second.unpack, two + ": the second unpacked", hint2) is var,
        True,
        two + ": the second unpack returns the Var",
        hint2,
    )
    cmp.raises(first.unpack, RuntimeError, two + ": the first unpack raises", hint2)
    hint3 = (
        "reset_data forgets the Var; unpack then raises RuntimeError with torch's message, "
        "before any version check (run .backward() twice on a small graph to read it)"
    )
    saved = SavedVariable(Var(torch.ones(3)))
    cmp.call(saved.reset_data, "reset_data()", hint3)
    cmp.raises(saved.unpack, RuntimeError, "unpack() after reset_data(): RuntimeError", hint3)
    try:
        saved.unpack()
    except RuntimeError as e:
        cmp.equal(str(e), freed_message(), "unpack() after reset_data(): torch's message", hint3)


def freed_message():
    """torch's error when a node's saved tensors are used after backward freed them."""
    x = torch.ones(3, requires_grad=True)
    z = (x * 1) * (x * 1)
    z.sum().backward()
    try:
        z.sum().backward()
    except RuntimeError as e:
        return str(e)


def check_run_backward(cmp, run_backward, Var):  # noqa: N803  (the lab's class name)
    torch.manual_seed(0)
    hint = (
        "count the edges into each node first; sum the gradients arriving for a node, zeros "
        "too; run it only when its count reaches 0; pop the highest sequence_nr first; call "
        "AccumulateGrad.apply for a leaf (it adds into .grad); start from "
        "torch.ones_like(output.data), the output's dtype and device"
    )
    none_hint = (
        "an input that needs no gradient has an edge to None: it keeps its place in "
        "next_functions, so zip all the edges with the gradients and skip that one"
    )
    cases = [  # (what, graph, a needs grad, b is all zeros, backward passes)
        ("graph_1", graph_1, True, False, 1),
        ("graph_2", graph_2, True, False, 1),
        ("graph_3", graph_3, True, False, 1),
        ("graph_4", graph_4, True, False, 1),
        ("graph_2 with a constant a", graph_2, False, False, 1),
        ("graph_2 with b all zeros (zero gradients)", graph_2, True, True, 1),
        ("graph_6", graph_6, True, False, 1),
        ("graph_4, two backward passes into the same leaves", graph_4, True, False, 2),
    ]
    for what, build, a_needs_grad, b_zero, passes in cases:
        data = torch.randn(3, dtype=F64), torch.randn(3, dtype=F64)
        data = (data[0], data[1] * 0) if b_zero else data
        needs = (a_needs_grad, True)
        mine = [Var(d.clone(), requires_grad=r) for d, r in zip(data, needs)]
        theirs = [d.clone().requires_grad_(r) for d, r in zip(data, needs)]
        why = hint if a_needs_grad else none_hint
        for k in range(passes):
            run = f"{what}, pass {k + 1}" if passes > 1 else what
            order = cmp.call(lambda: run_backward(build(*mine)), f"run_backward({run})", why)
            cmp.equal(order, observed_order(build(*theirs)), f"the order of nodes in {run}", why)
            for name, m, t in zip("ab", mine, theirs):
                if t.grad is None:
                    cmp.equal(m.grad, None, f"{name}.grad in {run} (it needs no gradient)", why)
                else:
                    cmp.tensor_like(m.grad, t.grad, f"{name}.grad in {run}", why, 1e-10, 1e-12)
    check_retain_graph(cmp, run_backward, Var)


def check_retain_graph(cmp, run_backward, Var):  # noqa: N803  (the lab's class name)
    hint = (
        "once a node has run, call node.release_variables() unless retain_graph is true (after "
        "apply, which still needs them): a graph run with retain_graph=True can run again"
    )
    data = torch.randn(3, dtype=F64), torch.randn(3, dtype=F64)
    mine = [Var(d.clone(), requires_grad=True) for d in data]
    theirs = [d.clone().requires_grad_() for d in data]
    out, loss = graph_2(*mine), graph_2(*theirs)
    for k, retain in enumerate([True, True, False], 1):
        run = f"run_backward(graph_2, retain_graph={retain}), run {k} through the same graph"
        cmp.call(lambda: run_backward(out, retain_graph=retain), run, hint)
        loss.backward(retain_graph=retain)
        for name, m, t in zip("ab", mine, theirs):
            cmp.tensor_like(m.grad, t.grad, f"{name}.grad after {run}", hint, 1e-10, 1e-12)
    cmp.raises(
        lambda: run_backward(out),
        RuntimeError,
        "run_backward a fourth time, through a graph freed by the third (torch raises)",
        hint,
    )

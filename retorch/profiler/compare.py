"""The same training step profiled by ``torch.profiler`` and by ``retorch.profiler``.

One step is profiled in three phases (forward with the loss, backward, optimizer step), each
in its own profile, on a torch model and its retorch copy (``to_retorch``). ``compare_counts``
lines up the op counts: an op both libraries record must have the same count; an op only one
records must have a reason in ``ONLY_TORCH`` or ``ONLY_RETORCH`` (what each library's design
does differently), or the row says ``unexplained``. tests/test_profiler.py keeps these reasons
honest: every one must still name something the other library does not record.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import os

#: Ranges torch records and retorch does not, and why (torch 2.13, CPU).
ONLY_TORCH = {
    "aten::transpose": "torch's t() calls transpose, which calls as_strided; "
    "retorch's t makes the view in its own kernel",
    "aten::as_strided": "views made by transpose and expand (see aten::transpose)",
    "aten::expand": "torch's addmm expands the bias over the batch before copying it; "
    "retorch's addmm adds the bias with retorch.tensor, below the dispatcher",
    "aten::copy_": "torch's addmm copies the expanded bias into its output (see aten::expand)",
    "aten::resolve_conj": "addmm and mm resolve a conjugate bit on their inputs (complex "
    "tensors); retorch has no conjugate bit",
    "aten::clamp_min": "torch's relu is clamp_min(0); retorch's relu is its own kernel",
    "aten::nll_loss_nd": "torch's nll_loss passes through nll_loss_nd",
    "Optimizer.step#SGD.step": "torch's Optimizer wraps each step in a record_function "
    "label (torch/optim/optimizer.py); retorch.optim does not",
    "Optimizer.step#Adam.step": "as Optimizer.step#SGD.step",
    "aten::detach": "AccumulateGrad detaches the gradient it stores, through the dispatcher; "
    "retorch's stores it below the dispatcher",
    "detach": "the range aten::detach opens inside itself",
    "aten::empty_like": "the ones_like of backward's first gradient",
    "aten::empty_strided": "as aten::empty_like",
    "aten::ones_like": "backward's first gradient (ones) is an op in torch; retorch's "
    "engine makes it with retorch.tensor, below the dispatcher",
    "aten::fill_": "the ones of backward's first gradient (inside ones_like), and the zeros "
    "sum starts from (the bias gradients)",
    "aten::to": "log_softmax's to(dtype) of its input, which changes nothing and returns it",
    "aten::item": "Adam reads its step counter, a 0-dim tensor, with .item(): an op in torch "
    "(aten::item -> _local_scalar_dense); retorch's item reads the storage without dispatching",
    "aten::_local_scalar_dense": "as aten::item",
}
#: The same name for another reason in one phase: (phase, name) -> why.
ONLY_TORCH_IN_PHASE = {
    ("step", "aten::to"): "step_t += 1 converts the wrapped number 1 to the counter's dtype "
    "(to -> _to_copy -> empty_strided + copy_); retorch's add_ takes the number as it is",
    ("step", "aten::_to_copy"): "as aten::to",
    ("step", "aten::empty_strided"): "as aten::to",
    ("step", "aten::copy_"): "as aten::to",
}
#: torch's backward formulas call aten ops through the dispatcher (each is recorded); chapter
#: 3's formulas compute on retorch.tensor below it: these are not ops there.
BACKWARD_ONLY_TORCH = "a derivative formula's op: torch's formulas call ops through the " \
    "dispatcher, retorch's (chapter 3) compute with retorch.tensor below it"  # fmt: skip

#: Ranges retorch records and torch does not.
ONLY_RETORCH = {}


@contextlib.contextmanager
def quiet_stderr():
    """Kineto writes start/stop lines to file descriptor 2: keep them off the page."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _counts(prof, phase: str) -> collections.Counter:
    return collections.Counter(e.name for e in prof.events() if e.name != "[memory]")


def profile_step(model, opt, x, y, profile, loss_fn) -> dict[str, collections.Counter]:
    """Op counts of one training step, phase by phase, under ``profile`` (torch's or ours)."""
    opt.zero_grad()
    with quiet_stderr():
        with profile() as forward:
            loss = loss_fn(model(x), y)
        with profile() as backward:
            loss.backward()
        with profile() as step:
            opt.step()
    return {name: _counts(p, name) for name, p in
            (("forward", forward), ("backward", backward), ("step", step))}  # fmt: skip


def both_steps(torch_model, optimizer: str, x, y, warmup: int = 1, **options):
    """Profile one step of ``torch_model`` and of its retorch copy, each with
    ``optimizer(**options)`` of its library, after ``warmup`` steps of each (the first step
    creates optimizer state: momentum buffers, Adam's moments)."""
    import torch
    import torch.nn.functional as F

    import retorch.optim
    import retorch.profiler as rp
    from retorch.dispatch import Tensor, to_retorch

    ours = to_retorch(copy.deepcopy(torch_model))
    t_opt = getattr(torch.optim, optimizer)(torch_model.parameters(), **options)
    r_opt = getattr(retorch.optim, optimizer)(ours.parameters(), **options)
    rx, ry = Tensor.from_numpy(x.numpy()), Tensor.from_numpy(y.numpy())
    for model, opt, a, b in ((torch_model, t_opt, x, y), (ours, r_opt, rx, ry)):
        for _ in range(warmup):
            opt.zero_grad()
            F.cross_entropy(model(a), b).backward()
            opt.step()
    got_torch = profile_step(torch_model, t_opt, x, y, torch.profiler.profile, F.cross_entropy)
    got_ours = profile_step(ours, r_opt, rx, ry, rp.profile, F.cross_entropy)
    return got_torch, got_ours


def compare_counts(torch_counts: dict, ours: dict) -> list[dict]:
    """One row per (phase, op): both counts and a verdict."""
    rows = []
    for phase in torch_counts:
        t, r = torch_counts[phase], ours[phase]
        for name in sorted(set(t) | set(r)):
            if name in t and name in r:
                verdict = "equal" if t[name] == r[name] else "DIFFERENT"
            elif name in t:
                reason = ONLY_TORCH_IN_PHASE.get((phase, name), ONLY_TORCH.get(name))
                if reason is None and phase == "backward" and name.startswith("aten::"):
                    reason = BACKWARD_ONLY_TORCH
                verdict = f"torch only: {reason}" if reason else "torch only: unexplained"
            else:
                reason = ONLY_RETORCH.get(name)
                verdict = f"retorch only: {reason}" if reason else "retorch only: unexplained"
            rows.append({"phase": phase, "op": name, "torch": t.get(name, 0),
                         "retorch": r.get(name, 0), "verdict": verdict})  # fmt: skip
    return rows


def _start(e) -> float:
    return e.start_us if hasattr(e, "start_us") else e.time_range.start


def op_tree(events) -> list[tuple[str, int, int, int]]:
    """``(name, depth, enter, leave)`` per range, in the order they start: ``enter`` and
    ``leave`` count the range boundaries passed so far (a walk of the children lists), so a
    drawing from them depends on the order of the ops only, never on their times."""
    roots = sorted((e for e in events if e.cpu_parent is None and e.name != "[memory]"),
                   key=_start)  # fmt: skip
    out, clock = [], 0

    def walk(e, depth):
        nonlocal clock
        row = [e.name, depth, clock, 0]
        out.append(row)
        clock += 1
        for c in e.cpu_children:
            if c.name != "[memory]":
                walk(c, depth + 1)
        row[3] = clock
        clock += 1

    for r in roots:
        walk(r, 0)
    return [tuple(r) for r in out]


def draw_op_tree(ax, events, title: str) -> None:
    """The profile as a trace viewer draws it, ranges nested downwards, on an axis of op
    order (each range from where it starts to where it ends, in boundaries passed)."""
    rows = op_tree(events)
    total = max(r[3] for r in rows) + 1
    width_in = ax.get_position().width * ax.figure.get_figwidth()
    ax.set_xlim(0, total)
    for name, depth, enter, leave in rows:
        ax.barh(depth, leave - enter, left=enter, height=0.8, color=f"C{depth}", alpha=0.8,
                edgecolor="black", linewidth=0.5)  # fmt: skip
        label = name.replace("aten::", "").replace("autograd::engine::evaluate_function: ", "")
        fits = int((leave - enter) / total * width_in / 0.085)  # characters of 10 pt
        if fits >= 3:
            ax.text(enter + 0.3, depth, label[:fits], va="center", fontsize=10)
    ax.set_ylim(max(r[1] for r in rows) + 0.6, -0.6)
    ax.set_ylabel("depth")
    ax.set_title(title, fontsize=10)

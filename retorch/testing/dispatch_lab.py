"""Graders for lab 5 (solutions/05_dispatch_lab.md), exercises 2 and 5: torch's dispatcher run
on the case the student computes, and the student's answer compared with what torch did.

Exercise 2 asks what an operator's dispatch table *holds* after registrations made in a given
order: torch recomputes only the rows a registration can change (``updateDispatchTable_`` in
``aten/src/ATen/core/dispatch/OperatorEntry.cpp``), so a row can keep a kernel that a fresh
computation would not pick. The grader registers the kernels on torch in that order, each
recording its key's name, and redispatches to one key at a time: the kernel that runs is the
row's content. Exercise 5 asks for the thread's key sets and a new tensor's keys under a stack
of modes (inference_mode, no_grad, autocast): the grader enters the same stack on torch and
reads ``torch._C._dispatch_tls_local_include_set()`` and ``_dispatch_keys``.

Both compare raw bits or key names computed by the torch that runs, so they hold on Colab's
torch too (whose key numbering may differ from the pinned 2.13's).
"""

from __future__ import annotations

import contextlib

import torch

from retorch.dispatch import dispatch_key as dk
from retorch.dispatch import dispatch_key_set as dks

D = torch._C.DispatchKey

# ------------------------------------------------------------------ exercise 2
ALIASES = (
    "Autograd",
    "CompositeImplicitAutograd",
    "CompositeExplicitAutograd",
    "CompositeExplicitAutogradNonFunctional",
)
#: The rows the check reads.
ROWS = ("Undefined", "CPU", "Meta", "XLA", "AutogradCPU", "AutogradMeta", "AutogradXLA")


def runtime_keys(key: str) -> set[str]:
    """The runtime keys among :data:`ROWS` that a registration to ``key`` is for: an alias's
    expansion (``getRuntimeDispatchKeySet``), a runtime key itself. Undefined is never in it."""
    ks = dks.get_runtime_dispatch_key_set(dk.DispatchKey[key])
    return {r for r in ROWS[1:] if ks.has(dk.DispatchKey[r])}


def autograd_key_of(key: str) -> str | None:
    """The autograd key of a backend key (``CPU`` -> ``AutogradCPU``, ``Meta`` ->
    ``AutogradMeta``), None for any other key (``isBackendDispatchKey``)."""
    k = dk.DispatchKey[key]
    if not dks.is_backend_dispatch_key(k):
        return None
    return dk.get_autograd_key_from_backend(dk.to_backend_component(k)).name


def fresh_row(registered, row: str) -> str:
    """What row ``row`` holds when computed now, with kernels at ``registered`` (the chapter's
    precedence): the registration key whose kernel wins, ``"fallback"`` or ``"missing"``."""
    from retorch.dispatch.dispatcher import get_dispatcher
    from retorch.dispatch.operator_entry import AnnotatedKernel, KernelFunction, OperatorEntry

    entry = OperatorEntry("lab5::fresh", get_dispatcher())
    for key in registered:
        entry.kernels[dk.DispatchKey[key]] = AnnotatedKernel(KernelFunction(None), key)
    kernel, why = entry.compute_dispatch_table_entry_with_debug(
        get_dispatcher(), dk.DispatchKey[row]
    )
    if kernel is None:
        return "missing"
    return "fallback" if why == "backend fallback" else kernel.debug


def torch_rows_after(registrations, rows=ROWS, ns: str = "lab5order") -> list[str]:
    """What torch's table holds at each row after ``registrations``, made in that order: the
    registration key whose kernel a call redispatched to that row alone runs, ``"fallback"``
    when a backend fallback runs there instead (it hands the call to another row, which the
    key set a kernel receives shows, or fails there), ``"missing"`` when the call fails at
    the row itself."""
    ran: list[tuple[str, str]] = []

    def kernel(name):
        def k(ks, x):
            ran.append((name, str(ks.highestPriorityTypeId()).split(".")[-1]))
            return x

        return k

    x = torch.ones(1)
    out = []
    with torch.library._scoped_library(ns, "DEF") as lib:
        lib.define("f(Tensor x) -> Tensor")
        for key in registrations:
            lib.impl("f", kernel(key), key, with_keyset=True)
        op = getattr(torch.ops, ns).f.default
        for row in rows:
            ran.clear()
            try:
                op.redispatch(torch._C.DispatchKeySet(getattr(D, row)), x)
            except NotImplementedError as e:  # the row, or the row a fallback handed on to
                out.append("missing" if _fails_at(str(e), row) else "fallback")
                continue
            out.append(ran[0][0] if ran and ran[0][1] == row else "fallback")
    return out


def _fails_at(message: str, row: str) -> bool:
    """Whether torch's error says the call failed at ``row`` itself (its row is empty), not
    at the row a backend fallback handed the call on to (an autograd fallback hands a call
    made with one key to Undefined: "no tensor arguments"; Meta's fallback raises its own)."""
    if row == "Undefined":
        return "There were no tensor arguments" in message
    return f"arguments from the '{row}' backend" in message


ORDER_CASES = [
    ["CPU"],
    ["CompositeImplicitAutograd", "CompositeExplicitAutograd"],
    ["CompositeImplicitAutograd", "Autograd", "CompositeExplicitAutograd"],
    ["CompositeImplicitAutograd", "Autograd", "CompositeExplicitAutogradNonFunctional"],
    ["Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd"],
    ["CompositeImplicitAutograd", "XLA", "CPU"],
    ["CompositeExplicitAutograd", "CompositeImplicitAutograd"],
    ["Autograd", "CompositeImplicitAutograd", "CPU", "CompositeExplicitAutograd"],
    ["CompositeExplicitAutogradNonFunctional", "CompositeImplicitAutograd", "Autograd"],
    ["CPU", "CompositeImplicitAutograd", "AutogradCPU"],
]

HINT_ORDER = (
    "start from the rows of an operator with no kernel (every row computed); after each "
    "registration recompute only the rows it can change: the runtime keys of the key it was "
    "made to (runtime_keys), Undefined too for the three Composite aliases, and for a backend "
    "key (CPU, Meta, XLA...) its autograd key (autograd_key_of); every other row keeps what it "
    "held, even where fresh_row would now give something else"
)


def check_rows_after(cmp, rows_after) -> None:
    for registrations in ORDER_CASES:
        expected = torch_rows_after(registrations)
        got = cmp.call(
            lambda: rows_after(list(registrations), list(ROWS)),
            f"rows_after({registrations}, ...) ran",
            HINT_ORDER,
        )
        cmp.equal(
            list(got),
            expected,
            f"the rows {list(ROWS)} after registering to {registrations} in that order",
            HINT_ORDER,
        )


# ------------------------------------------------------------------ exercise 5
def bits(*names: str) -> int:
    """The raw 64 bits of a key set holding the named keys, in the running torch's layout."""
    ks = torch._C.DispatchKeySet(D.Undefined)
    for name in names:
        ks = ks | torch._C.DispatchKeySet(getattr(D, name))
    return ks.raw_repr()


def names(raw: int) -> str:
    """A raw key set for messages: its keys as retorch names them (the pinned torch's layout)
    and its bits in hex (a bare functionality bit, such as AutogradFunctionality's, shows
    only there)."""
    return f"{dks.DispatchKeySet.from_raw_repr(raw)!r} = {raw:#x}"


def _enter(stack: contextlib.ExitStack, mode) -> None:
    name, args, kwargs = mode
    if name == "inference_mode":
        stack.enter_context(torch.inference_mode(*args, **kwargs))
    elif name == "no_grad":
        stack.enter_context(torch.no_grad())
    elif name == "autocast":
        stack.enter_context(torch.autocast(*args, **{"dtype": torch.bfloat16, **kwargs}))
    else:
        raise ValueError(name)


def torch_keys_under(modes, device: str, requires_grad: bool) -> tuple[int, int, int]:
    """(included, excluded, a new tensor's keys), raw, inside ``modes`` entered in order."""
    with contextlib.ExitStack() as stack:
        for mode in modes:
            _enter(stack, mode)
        t = torch.ones(2, device=device, requires_grad=requires_grad)
        return (
            torch._C._dispatch_tls_local_include_set().raw_repr(),
            torch._C._dispatch_tls_local_exclude_set().raw_repr(),
            torch._C._dispatch_keys(t).raw_repr(),
        )


INF, NO_GRAD = ("inference_mode", (), {}), ("no_grad", (), {})
MODE_CASES = [
    ([INF, ("inference_mode", (False,), {})], "cpu", True),
    ([INF, ("inference_mode", (), {"mode": False})], "cpu", False),
    ([("inference_mode", (False,), {}), INF], "meta", False),
    ([NO_GRAD], "cpu", False),
    ([NO_GRAD, INF], "meta", False),
    ([("autocast", ("cpu",), {})], "meta", True),
    ([("autocast", ("cpu",), {}), INF], "cpu", False),
    ([("autocast", (), {"device_type": "cpu", "enabled": False})], "cpu", False),
    ([INF, ("autocast", ("cpu",), {}), ("inference_mode", (), {"mode": False})], "cpu", True),
    ([], "meta", True),
]

HINT_MODES = (
    "start from the default sets (included {BackendSelect, ADInplaceOrView}, excluded: every "
    "Autocast key); inference_mode(mode) removes ADInplaceOrView from included and adds the "
    "autograd keys (AutogradFunctionality, AutogradOther, AutogradNestedTensor) to excluded, "
    "mode=False does the opposite; no_grad changes no key set; autocast(device_type, "
    "enabled=True) takes that device's Autocast key out of excluded (enabled=False puts it "
    "in). A new tensor has its device's keys (a meta tensor has no Autocast key), with or "
    "without requires_grad, minus ADInplaceOrView and its autograd key when made inside "
    "inference mode (the innermost inference_mode decides)"
)


def check_keys_under(cmp, keys_under) -> None:
    for modes, device, requires_grad in MODE_CASES:
        shown = [f"{n}{tuple(a)}{kw or ''}" for n, a, kw in modes]
        expected = torch_keys_under(modes, device, requires_grad)
        got = cmp.call(
            lambda: keys_under(list(modes), device, requires_grad),
            f"keys_under({shown}, {device!r}, {requires_grad}) ran",
            HINT_MODES,
        )
        got = tuple(got) if isinstance(got, (tuple, list)) else got
        what = f"(included, excluded, tensor keys) under {shown}, {device} tensor"
        if got != expected and isinstance(got, tuple) and len(got) == 3:
            got = tuple(names(g) if isinstance(g, int) else g for g in got)
            expected = tuple(names(e) for e in expected)
        cmp.equal(got, expected, what, HINT_MODES)

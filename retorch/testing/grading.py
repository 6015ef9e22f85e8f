"""Graded checks for the labs: compare a student's code with torch and say what went wrong.

A check cell calls :func:`check` with the exercise's label and a function that runs one or more
comparisons. The outcome is one of:

* passed: prints ``✓ Exercise 1 (name): passed (3 comparisons)``;
* not implemented: the student's function still raises the stub's ``NotImplementedError``;
  the check raises :class:`CheckFailed` saying so, and which line to replace;
* wrong: a comparison failed; the check raises :class:`CheckFailed` with what was expected,
  what came (for long values, where they first differ), and the hint written for that
  comparison;
* crashed: the student's code raised some other exception while the check ran; the check
  raises :class:`CheckFailed` naming it (use :meth:`_Comparisons.call` to attach a hint).

:class:`CheckFailed` is an ``AssertionError``, which is what nbgrader counts as a failed test.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import torch


class CheckFailed(AssertionError):
    """A graded check that did not pass; the message is written for the student."""


class _Comparisons:
    """Passed to the check function; each method is one comparison against torch."""

    def __init__(self, label: str):
        self.label, self.count = label, 0

    def _fail(self, what: str, expected: Any, got: Any, hint: str):
        where = first_difference(expected, got)
        raise CheckFailed(
            f"{self.label}: {what}\n"
            f"  expected: {_short(expected)}\n"
            f"  got:      {_short(got)}\n" + (f"  {where}\n" if where else "") + f"  hint: {hint}"
        )

    def call(self, fn: Callable[[], Any], what: str, hint: str) -> Any:
        """``fn()``'s result; if it raises (other than the stub's NotImplementedError), the check
        fails with the exception and ``hint`` instead of a traceback from deep inside torch."""
        try:
            return fn()
        except (NotImplementedError, CheckFailed):
            raise
        except Exception as e:  # noqa: BLE001  (any crash of the student's code is the finding)
            self.count += 1
            self._fail(what, "no exception", _one_line(e), hint)

    def equal(self, got: Any, expected: Any, what: str, hint: str):
        """Exact comparison: tensors with ``torch.equal`` (same shape, dtype, values); else ``==``."""
        self.count += 1
        if isinstance(expected, torch.Tensor):
            if not isinstance(got, torch.Tensor):
                self._fail(what + " should be a torch.Tensor", expected, got, hint)
            if got.shape != expected.shape or got.dtype != expected.dtype:
                self._fail(
                    what + " has the wrong shape or dtype",
                    f"shape {tuple(expected.shape)}, {expected.dtype}",
                    f"shape {tuple(got.shape)}, {got.dtype}",
                    hint,
                )
            if not torch.equal(got, expected):
                self._fail(what + " has the wrong values", expected, got, hint)
        elif got != expected:
            self._fail(what, expected, got, hint)

    def close(self, got, expected, what: str, hint: str, rtol: float = 1e-5, atol: float = 1e-6):
        """Tensors equal within ``|got - expected| <= atol + rtol * |expected|``."""
        self.count += 1
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            self._fail(what + " has the wrong shape", tuple(expected.shape), shape, hint)
        got_ = got.to(expected.dtype)
        if not torch.allclose(got_, expected, rtol=rtol, atol=atol):
            err = (got_ - expected).abs().max().item()
            bad = ~torch.isclose(got_, expected, rtol=rtol, atol=atol)
            first = tuple(torch.nonzero(bad)[0].tolist())
            self._fail(
                f"{what} differs (max abs error {err:.3g}, atol {atol}, rtol {rtol}; "
                f"{int(bad.sum())} of {bad.numel()} elements, the first at index {first}: "
                f"expected {expected[first].item():.6g}, got {got_[first].item():.6g})",
                expected,
                got,
                hint,
            )

    def tensor_like(
        self,
        got,
        expected: torch.Tensor,
        what: str,
        hint: str,
        rtol: float = 0.0,
        atol: float = 0.0,
        strides: bool = False,
    ):
        """``got`` is a tensor like ``expected``: the same dtype, device and shape (and strides,
        if asked), then the same values within ``rtol``/``atol`` (exactly when both are 0).
        Unlike :meth:`close`, a result of the wrong dtype or device fails here; a meta tensor
        has no values, so only its metadata is compared."""
        self.count += 1
        if not isinstance(got, torch.Tensor):
            self._fail(what + " should be a torch.Tensor", expected, got, hint)
        for prop in ("dtype", "device", "shape") + (("stride",) if strides else ()):
            want, have = getattr(expected, prop), getattr(got, prop)
            want, have = (want(), have()) if prop == "stride" else (want, have)
            if want != have:
                self._fail(f"{what} has the wrong {prop}", want, have, hint)
        if expected.is_meta:
            return
        if rtol == 0 and atol == 0:
            if not torch.equal(got, expected):
                self._fail(what + " has the wrong values", expected, got, hint)
        else:
            self.count -= 1
            self.close(got, expected, what, hint, rtol=rtol, atol=atol)

    def raises(self, fn: Callable[[], Any], exc_type: type[BaseException], what: str, hint: str):
        """``fn()`` must raise ``exc_type`` (what torch raises for the same misuse)."""
        self.count += 1
        try:
            fn()
        except exc_type:
            return
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001  (the wrong exception is the finding)
            self._fail(what, exc_type.__name__, f"{type(e).__name__}: {e}", hint)
        self._fail(what, f"{exc_type.__name__} raised", "no exception", hint)


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip()}"


def first_difference(expected: Any, got: Any, context: int = 40) -> str:
    """Where two long values first differ: an index for sequences, a character for text.

    Returns "" when the values are short (the expected/got lines show them whole) or not
    sequences of the same kind.
    """
    if isinstance(expected, str) and isinstance(got, str):
        if len(expected) + len(got) <= 120 or expected == got:
            return ""
        i = next((k for k, (a, b) in enumerate(zip(expected, got)) if a != b), None)
        i = min(len(expected), len(got)) if i is None else i
        if i < 60:  # near the start, the expected/got lines show it plainly
            return ""
        lo = max(0, i - context)
        return (
            f"first difference at character {i}: expected ...{expected[lo : i + context]!r}..., "
            f"got ...{got[lo : i + context]!r}..."
        )
    if isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)):
        if len(repr(expected)) + len(repr(got)) <= 120:
            return ""
        for k, (a, b) in enumerate(zip(expected, got)):
            if not (a is b or (type(a) is type(b) and not isinstance(a, torch.Tensor) and a == b)):
                return (
                    f"first difference at index {k}: expected {_short(a, 80)}, got {_short(b, 80)}"
                )
        if len(expected) != len(got):
            return f"lengths differ: expected {len(expected)} items, got {len(got)}"
    return ""


#: Numba's CUDA simulator re-raises a kernel's exception prefixed by the thread that raised it.
_SIM_THREAD = re.compile(r"^tid=(\[[^\]]*\]) ctaid=(\[[^\]]*\]):? ?")


def _without_thread_ids(e: BaseException) -> str:
    """The stub's own sentence first; the simulator's thread ids, if any, after it."""
    m = _SIM_THREAD.match(str(e))
    if not m:
        return str(e)
    return f"{str(e)[m.end() :]}; raised by thread {m[1]} of block {m[2]} under the simulator"


def check(label: str, run: Callable[[_Comparisons], None]) -> None:
    """Run one exercise's comparisons; print a pass line or raise :class:`CheckFailed`."""
    cmp = _Comparisons(label)
    try:
        run(cmp)
    except NotImplementedError as e:
        raise CheckFailed(
            f"{label}: not implemented yet. Your function still raises NotImplementedError "
            f"({_without_thread_ids(e)}). Replace the `raise NotImplementedError(...)` line "
            "under `# YOUR CODE HERE` with your code, run that cell, then run this check again."
        ) from None
    except CheckFailed:
        raise
    except Exception as e:  # noqa: BLE001  (the student's code crashed inside the check)
        raise CheckFailed(
            f"{label}: your code raised {_one_line(e)}\n"
            f"  (after {cmp.count} comparison{'s' if cmp.count != 1 else ''} passed; the "
            "traceback above this message shows where)"
        ) from e
    if cmp.count == 0:
        raise CheckFailed(
            f"{label}: the check ran no comparison (a bug in the lab, not in your code)"
        )
    print(f"✓ {label}: passed ({cmp.count} comparison{'s' if cmp.count != 1 else ''})")

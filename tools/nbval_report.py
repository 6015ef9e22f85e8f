"""pytest plugin for the notebook checks: count compared cells and demand a reason for the rest.

nbval (strict mode) compares every code cell's stored outputs with fresh ones. A cell may opt
out with the tag ``nbval-ignore-output`` (outputs not compared) or ``nbval-skip`` (not run), but
only when its first line says why: ``# Not compared: <reason>``. This plugin fails the run when
an opted-out cell gives no reason, and ends with one line counting the cells compared and not.

Used as ``pytest -p tools.nbval_report --nbval ...`` (see the Makefile's ``nbval`` target).
"""

from __future__ import annotations

import pytest

REASON = "# Not compared:"
OPT_OUT = {"nbval-ignore-output": "output not compared", "nbval-skip": "not run"}
COMMENTS = {"# NBVAL_IGNORE_OUTPUT": "output not compared", "# NBVAL_SKIP": "not run"}

_counts = {"compared": 0, "not": []}


def _opt_out(cell) -> str | None:
    for tag in cell.get("metadata", {}).get("tags", []):
        if tag in OPT_OUT:
            return OPT_OUT[tag]
    for marker, kind in COMMENTS.items():
        if marker in cell.source:
            return kind
    return None


def pytest_collection_modifyitems(session, config, items):
    missing = []
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None:
            continue
        kind = _opt_out(cell)
        if kind is None:
            _counts["compared"] += 1
            continue
        first = cell.source.lstrip().split("\n", 1)[0]
        if not first.startswith(REASON):
            missing.append(item.nodeid)
        _counts["not"].append((item.nodeid, kind, first.removeprefix(REASON).strip()))
    if missing:
        raise pytest.UsageError(
            "These notebook cells opt out of nbval without saying why; start them with "
            f"'{REASON} <reason>':\n  " + "\n  ".join(missing)
        )


def pytest_terminal_summary(terminalreporter):
    if not (_counts["compared"] or _counts["not"]):
        return
    tr = terminalreporter
    for nodeid, kind, reason in _counts["not"]:
        tr.write_line(f"not compared ({kind}): {nodeid}: {reason}")
    tr.write_line(
        f"nbval: {_counts['compared']} cells compared, {len(_counts['not'])} not compared"
    )

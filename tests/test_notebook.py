"""The helpers chapters use to show retorch's code and compare it with torch."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import retorch.environment as env
from retorch import notebook
from retorch.nn.modules.module import Module
from retorch.utils.data.sampler import RandomSampler

ROOT = Path(__file__).resolve().parent.parent


class _Example:
    def one_line_signature(self, x):
        y = x + 1
        if y > 2:
            return y
        return -y


def _code(markdown: str) -> list[str]:
    return markdown.split("```python\n", 1)[1].split("\n```", 1)[0].split("\n")


@pytest.mark.parametrize(
    "method",
    [_Example.one_line_signature, Module.__getattr__, RandomSampler.__iter__],
    ids=["example", "Module.__getattr__", "RandomSampler.__iter__"],
)
def test_show_keeps_the_body_indented_under_its_def(method):
    lines = _code(notebook.show(method, collapse=False).data)
    assert lines[0].startswith("def ")
    body = [line for line in lines[1:] if line.strip()]
    assert body and all(line.startswith("    ") for line in body), lines[:4]


def test_show_heads_a_listing_with_its_file_line_and_length():
    text = notebook.show(_Example.one_line_signature).data
    assert text.startswith("`tests/test_notebook.py`, line ")
    assert "`_Example.one_line_signature` (5 lines)" in text
    assert "{dropdown}" not in text  # short: stands open


def test_show_folds_a_long_listing_into_a_dropdown():
    text = notebook.show(Module._call_impl).data
    n = len(_code(text))
    assert n > notebook.OPEN_LINES
    assert text.startswith("::::{dropdown} Full listing: `retorch/nn/modules/module.py`")
    assert text.rstrip().endswith("::::")
    assert "{dropdown}" not in notebook.show(Module._call_impl, collapse=False).data


def test_excerpt_quotes_the_lines_between_markers_with_file_line_numbers():
    text = notebook.excerpt(_Example.one_line_signature, "if y > 2", "return y")
    assert _code(text.data) == ["if y > 2:", "    return y"]
    import inspect

    first = inspect.getsourcelines(_Example.one_line_signature)[1] + 2
    assert f"lines {first}-{first + 1} of `_Example.one_line_signature`" in text.data


def test_excerpt_fails_when_the_code_it_quotes_is_gone():
    with pytest.raises(ValueError, match="is not in the source"):
        notebook.excerpt(_Example.one_line_signature, "no such line")
    with pytest.raises(ValueError, match="does not follow"):
        notebook.excerpt(_Example.one_line_signature, "return -y", "if y > 2")


def test_side_by_side_shows_long_values_whole_and_escapes_html(capsys):
    shown = []
    import IPython.display

    orig = IPython.display.display
    IPython.display.display = shown.append
    try:
        message = "one of the variables needed for gradient computation <x> " * 8
        notebook.side_by_side(
            [
                ("message", message, message),
                ("values", torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5])),
            ]
        )
    finally:
        IPython.display.display = orig
    (table,) = shown
    html = table._repr_html_()
    assert html.count("&lt;x&gt;") == 16 and "<x>" not in html  # whole, escaped, both columns
    assert "white-space:pre-wrap" in html
    assert table.rows[1][3] == "NO" and table.verdict == "-> 2 comparisons, 1 DIFFER"
    text = repr(table)
    assert all(len(line) <= 4 * 40 + 6 for line in text.split("\n"))
    assert text.endswith("-> 2 comparisons, 1 DIFFER")


def test_side_by_side_says_equal_only_when_every_row_was_compared_exactly():
    import IPython.display

    shown = []
    orig, IPython.display.display = IPython.display.display, shown.append
    try:
        notebook.side_by_side([("same", 1, 1), ("count", 0, 36, True)])
        notebook.side_by_side([("same", 1, 1), ("count", 0, 36, False)])
        notebook.side_by_side([("same", 1, 1), ("also", 2, 2)])
    finally:
        IPython.display.display = orig
    assert [t.verdict for t in shown] == [
        "-> 2 checks, all as expected",
        "-> 2 comparisons, 1 DIFFER",
        "-> 2 comparisons, all equal",
    ]


def test_same_requires_dtype_and_values():
    assert notebook.same(torch.tensor([1.0]), torch.tensor([1.0]))
    assert not notebook.same(torch.tensor([1.0], dtype=torch.float64), torch.tensor([1.0]))
    assert not notebook.same([1, 2], [1, 2, 3])


def test_glue_returns_the_formatted_text():
    assert notebook.glue("x_ratio", 13.333, "{:.1f}x") == "13.3x"


def test_environment_check_passes_here(capsys):
    env.check()
    out = capsys.readouterr().out
    assert "Numba-CUDA kernel check: passed" in out and "Graphviz dot: found" in out


def test_environment_names_the_numpy_fix(monkeypatch):
    def broken(*args, **kwargs):
        raise AttributeError("module 'numpy' has no attribute 'row_stack'")

    monkeypatch.setattr(env.cuda, "to_device", broken)
    problem = env.kernel_problem()
    assert f"pip install numpy=={env.KNOWN_GOOD_NUMPY}" in problem
    assert "restart the runtime" in problem


def test_environment_says_how_to_install_dot(monkeypatch):
    monkeypatch.setattr(env.shutil, "which", lambda name: None)
    message = env.ensure_dot(install=False)
    assert message.startswith("Graphviz dot: MISSING") and "apt-get install graphviz" in message


def test_environment_reports_a_wrong_kernel_result(monkeypatch):
    class Wrong:
        def copy_to_host(self):
            return np.zeros(8, np.float32)

    monkeypatch.setattr(env.cuda, "to_device", lambda x: Wrong())
    monkeypatch.setattr(env, "_smoke_kernel", {(1, 32): lambda d: None})
    assert "computed [0.0" in env.kernel_problem()


@pytest.mark.parametrize(
    "make",
    [
        lambda t: t.t(),
        lambda t: t[1:, ::2],
        lambda t: t[1].expand(2, 4),
        lambda t: t.view(2, 6).unfold(1, 3, 2),
    ],
)
def test_storage_indices_are_where_each_element_reads(make):
    from retorch.notebook import draw_layout, storage_indices

    base = torch.arange(12).view(3, 4)  # each element's value is its storage index
    view = make(base)
    assert storage_indices(view) == view.flatten().tolist()
    fig = draw_layout({"view": view}, storage_size=12)
    assert len(fig.axes[0].patches) == 12 + view.numel()  # the storage row and the view's row


# A stored listing names its file and lines: "`path`, lines A-B of `qual`" (excerpt) or
# "`path`, line A: `qual` (N lines)" (show), then the code in a python fence.
_STORED_LISTING = re.compile(
    r"`(?P<path>[^`]+\.py)`, (?:lines (?P<a>\d+)-(?P<b>\d+) of `[^`]+`|line (?P<s>\d+): "
    r"`[^`]+` \((?P<n>\d+) lines\))\n\n```python\n(?P<code>.*?)\n```",
    re.S,
)


def _stored_listings():
    for nb in sorted([*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("solutions/*.ipynb")]):
        for cell in json.loads(nb.read_text())["cells"]:
            for out in cell.get("outputs", []):
                text = "".join(out.get("data", {}).get("text/markdown", ""))
                for m in _STORED_LISTING.finditer(text):
                    yield nb.relative_to(ROOT).as_posix(), m


def test_every_stored_listing_quotes_the_file_as_it_is_now():
    """A notebook stores its listings; editing the quoted file (a docstring above the quoted
    lines shifts them) makes the stored output stale, which nbval reports only after a full
    run. This catches it in seconds: re-execute the notebook (tools/execute.py)."""
    listings, stale = list(_stored_listings()), []
    for nb, m in listings:
        if m["path"].startswith("torch/") and not torch.__version__.startswith("2.13."):
            continue  # torch's own files quoted as the pinned torch 2.13 has them
        base = Path(torch.__file__).parent.parent if m["path"].startswith("torch/") else ROOT
        lines = (base / m["path"]).read_text().split("\n")
        first = int(m["a"] or m["s"])
        last = int(m["b"]) if m["a"] else first + int(m["n"]) - 1
        now = textwrap.dedent("\n".join(lines[first - 1 : last])).rstrip()
        if now != m["code"].rstrip():
            stale.append(f"{nb}: {m['path']} lines {first}-{last}")
    assert len(listings) > 50, "the pattern no longer finds the stored listings"
    assert not stale, "stored listings no longer match their files: " + "; ".join(stale)

"""What the chapter notebooks use to show retorch's code and compare it with torch.

The course keeps one source of truth: a function lives in ``retorch/`` and the notebook *shows*
it with :func:`show` (its source, read with ``inspect``) and then runs it. Notebooks never
redefine a retorch function by hand; ``tools/check_single_source.py`` enforces that in CI.
"""

from __future__ import annotations

import html
import inspect
import json
import textwrap
from pathlib import Path
from typing import Any, Iterable

import torch

ROOT = Path(__file__).resolve().parent.parent


def source_path(obj: Any) -> str:
    """The file of a retorch object, relative to the repository (``retorch/nn/modules/module.py``)."""
    path = Path(inspect.getsourcefile(obj)).resolve()
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return path.name


#: A listing longer than this stands behind a toggle; the prose walks its key lines instead.
OPEN_LINES = 25


def _source(obj: Any) -> tuple[list[str], int]:
    obj = getattr(obj, "py_func", obj)  # a Numba dispatcher shows the Python it compiles
    lines, start = inspect.getsourcelines(obj)
    # dedent, not cleandoc: cleandoc strips the first line on its own, so a method whose
    # signature fits on one line would show its body flush with ``def``.
    return textwrap.dedent("".join(lines)).rstrip().split("\n"), start


def _header(obj: Any, start: int, count: int) -> str:
    obj = getattr(obj, "py_func", obj)
    return f"`{source_path(obj)}`, line {start}: `{obj.__qualname__}` ({count} lines)"


def _listing(header: str, code: str, collapse: bool) -> str:
    fence = f"```python\n{code}\n```"
    if not collapse:
        return f"{header}\n\n{fence}"
    # A MyST dropdown (sphinx-design): closed in the book, its title says what is inside.
    return f"::::{{dropdown}} Full listing: {header}\n\n{fence}\n::::"


def show(*objs: Any, collapse: bool | None = None):
    """Display the source of retorch functions, methods or classes, headed by file and line.

    A listing over ``OPEN_LINES`` lines is put behind a toggle unless ``collapse=False``:
    walk its key lines with :func:`excerpt` in the prose around it.
    """
    from IPython.display import Markdown

    parts = []
    for obj in objs:
        lines, start = _source(obj)
        fold = len(lines) > OPEN_LINES if collapse is None else collapse
        parts.append(_listing(_header(obj, start, len(lines)), "\n".join(lines), fold))
    return Markdown("\n\n".join(parts))


def excerpt(obj: Any, first: str, last: str | None = None):
    """Display the lines of ``obj``'s source from the first containing ``first`` to the next
    containing ``last`` (or just that line), numbered as in the file.

    For walking a long listing a few lines at a time; raises ``ValueError`` when a marker is
    not in the source, so an excerpt cannot silently drift from the code it quotes.
    """
    from IPython.display import Markdown

    lines, start = _source(obj)
    begin = next((i for i, line in enumerate(lines) if first in line), None)
    if begin is None:
        raise ValueError(f"{first!r} is not in the source of {obj.__qualname__}")
    end = begin
    if last is not None:
        end = next((i for i in range(begin, len(lines)) if last in lines[i]), None)
        if end is None:
            raise ValueError(f"{last!r} does not follow {first!r} in {obj.__qualname__}")
    chunk = textwrap.dedent("\n".join(lines[begin : end + 1]))
    qual = getattr(obj, "py_func", obj).__qualname__
    where = f"`{source_path(getattr(obj, 'py_func', obj))}`, lines {start + begin}-{start + end}"
    return Markdown(f"{where} of `{qual}`\n\n```python\n{chunk}\n```")


def glue(name: str, value: Any, fmt: str = "{}") -> str:
    """Make ``value`` available to the prose as ``{glue:text}`name```, and return its text.

    Numbers in a chapter's prose come from the cell that computes them, never typed by hand.
    Where myst-nb is not installed (Colab), nothing is glued; the text is still returned.
    """
    text = fmt.format(value)
    try:
        from myst_nb import glue as _glue
    except ImportError:
        return text
    _glue(name, text, display=False)
    return text


def _fmt(value: Any) -> str:
    """A table cell: small tensors by value, large ones by shape and dtype, text whole."""
    if isinstance(value, torch.Tensor):
        if value.numel() <= 4:
            return "[" + ", ".join(f"{v:.4g}" for v in value.detach().flatten().tolist()) + "]"
        return f"tensor{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def same(ours: Any, theirs: Any) -> bool:
    """Exact equality, tensors by ``torch.equal``, sequences elementwise."""
    if isinstance(theirs, torch.Tensor):
        return (
            isinstance(ours, torch.Tensor)
            and ours.dtype == theirs.dtype
            and torch.equal(ours, theirs)
        )
    if isinstance(theirs, (list, tuple)) and isinstance(ours, (list, tuple)):
        return len(ours) == len(theirs) and all(same(a, b) for a, b in zip(ours, theirs))
    return ours == theirs


class Comparison:
    """A side-by-side table: HTML that wraps long values in the book, plain text elsewhere.

    ``rows`` are ``(what, ours, torch, equal?)`` as text; ``verdict`` is the summary line.
    """

    def __init__(self, headers, rows, verdict):
        self.headers, self.rows, self.verdict = tuple(headers), rows, verdict

    def _repr_html_(self) -> str:
        # Inline styles, so the table wraps the same way in the book, Jupyter and Colab.
        style = "text-align:left;vertical-align:top;white-space:pre-wrap;overflow-wrap:anywhere"

        def cells(tag, row):
            return "".join(f'<{tag} style="{style}">{html.escape(c)}</{tag}>' for c in row)

        body = "".join(
            f'<tr class="{"same" if r[3] == "yes" else "differ"}">{cells("td", r)}</tr>'
            for r in self.rows
        )
        return (
            '<table class="side-by-side" style="table-layout:fixed;width:100%"><thead><tr>'
            + cells("th", self.headers)
            + f"</tr></thead><tbody>{body}</tbody></table>"
            + f'<p class="side-by-side-verdict">{html.escape(self.verdict)}</p>'
        )

    def __repr__(self) -> str:
        # Plain text (terminals, text/plain): columns of at most 40 characters; longer values
        # wrap onto continuation lines rather than being cut.
        widths = [min(40, max(len(r[i]) for r in [self.headers, *self.rows])) for i in range(4)]
        lines = []
        for r in [self.headers, tuple("-" * w for w in widths), *self.rows]:
            wrapped = [
                textwrap.wrap(c, w, break_on_hyphens=False) or [""] for c, w in zip(r, widths)
            ]
            for k in range(max(len(c) for c in wrapped)):
                parts = [(c[k] if k < len(c) else "").ljust(w) for c, w in zip(wrapped, widths)]
                lines.append("  ".join(parts).rstrip())
        return "\n".join(lines) + "\n" + self.verdict


def side_by_side(rows: Iterable[tuple], headers=("", "retorch", "torch", "equal?")):
    """Display a comparison table: one row per (what, ours, torch[, equal]), then a verdict.

    Rows of three are compared exactly with :func:`same`; a fourth element overrides the verdict
    (for comparisons within a stated tolerance: say the tolerance in ``what``; or for checks
    whose columns are not meant to be equal). When no row differs, the last line says "all
    equal" only if every row was compared exactly, else "all as expected". In the book the table is HTML whose
    cells wrap, so long values (error messages) are shown whole.
    """
    from IPython.display import display

    table, exact = [], True
    for row in rows:
        what, ours, theirs, *verdict = row
        exact = exact and not verdict
        ok = verdict[0] if verdict else same(ours, theirs)
        table.append((str(what), _fmt(ours), _fmt(theirs), "yes" if ok else "NO"))
    differ = sum(r[3] != "yes" for r in table)
    if differ:
        verdict = f"-> {len(table)} comparisons, {differ} DIFFER"
    else:
        verdict = f"-> {len(table)} " + (
            "comparisons, all equal" if exact else "checks, all as expected"
        )
    display(Comparison(headers, table, verdict))


#: Units of time: a smaller value is better. A unit is read word by word (``"µs per call"``).
TIME_UNITS = {"ns", "us", "µs", "ms", "s"}


def higher_is_better(result: dict) -> bool:
    """Which way a stored benchmark ranks: ``True`` when a larger value is better.

    A result may say so itself (``"higher_is_better"``); otherwise its unit decides: a rate
    (any unit with ``/s``: GB/s, TB/s, GFLOP/s, samples/s) is better higher, a time (a word
    of the unit is one of :data:`TIME_UNITS`) is better lower. A unit that is neither, or both,
    raises ``ValueError``: the benchmark must then state its direction. A stated direction that
    contradicts the unit raises too (GB/s ranked as if it were a time)."""
    unit = str(result.get("unit", ""))
    words = unit.replace(",", " ").replace(":", " ").replace("(", " ").replace(")", " ").split()
    rate = any("/s" in w for w in words)
    time = any(w in TIME_UNITS for w in words)
    by_unit = True if rate and not time else False if time and not rate else None
    stated = result.get("higher_is_better")
    if stated is None:
        if by_unit is None:
            raise ValueError(
                f"the unit {unit!r} is neither a rate nor a time: say which way the benchmark "
                "ranks with 'higher_is_better'"
            )
        return by_unit
    if by_unit is not None and bool(stated) != by_unit:
        raise ValueError(f"higher_is_better={stated} contradicts the unit {unit!r}")
    return bool(stated)


def torch_note(data: dict) -> str:
    """Empty when ``data`` was measured with the torch installed here, else a warning."""
    measured = data.get("versions", {}).get("torch", "?")
    if measured.split("+")[0] == torch.__version__.split("+")[0]:
        return ""
    return f"measured with torch {measured}, not the {torch.__version__} of this book"


class BenchMissing(FileNotFoundError):
    """A stored benchmark result this installation does not have (shown as its sentence only)."""


def bench_results_dir() -> Path:
    """Where the stored benchmark results are: ``bench/results/`` in a checkout of the course
    (their one home, written by ``tools/bench.py``), else the copy a wheel ships inside the
    package (``retorch/_bench_results``, setup.py), so a pip-installed retorch (Colab) has them."""
    shipped = Path(__file__).resolve().parent / "_bench_results"
    return shipped if shipped.is_dir() else ROOT / "bench" / "results"


def stored_benches(gpu: bool = False) -> list[Path]:
    """The stored results (CPU, or the GPU sections with ``gpu=True``), sorted by name."""
    folder = bench_results_dir() / ("gpu" if gpu else "")
    return sorted(folder.glob("*.json"))


def load_bench(name: str) -> dict:
    """The stored results of ``bench/bench_<name>.py`` (written by ``make bench``); its GPU
    section, where a GPU machine measured one (``tools/bench.py --gpu``), under ``"gpu"``.
    Each carries ``higher_is_better`` (see :func:`higher_is_better`). A result this
    installation lacks raises :class:`BenchMissing`, which a notebook shows as one sentence."""
    results = bench_results_dir()
    if not (results / f"{name}.json").is_file():
        raise BenchMissing(
            f"No stored result of bench/bench_{name}.py here (looked in {results}): this "
            "retorch was installed without its benchmark results. In a checkout of the course, "
            f"`make bench` measures it; `pip install` of the course's wheel ships them."
        )
    data = json.loads((results / f"{name}.json").read_text())
    data["higher_is_better"] = higher_is_better(data)
    gpu = results / "gpu" / f"{name}.json"
    if gpu.is_file():
        data["gpu"] = json.loads(gpu.read_text())
        higher = data["gpu"]["higher_is_better"] = higher_is_better(data["gpu"])
        order = "higher" if higher else "lower"
        data["gpu"].setdefault(
            "title", f"bench_{name}.py, GPU section ({data['gpu']['unit']}, {order} is better)"
        )
    return data


def relative_to_best(data: dict) -> dict[str, dict[str, float]]:
    """``{case: {impl: ratio}}``: each value against the best of its case, as a factor >= 1
    (1.00 = the best: the fastest time or the highest rate)."""
    higher = higher_is_better(data)
    by_case: dict[str, dict[str, float]] = {}
    for row in data["rows"]:
        by_case.setdefault(row["case"], {})[row["impl"]] = row["value"]
    out = {}
    for case, values in by_case.items():
        best = max(values.values()) if higher else min(values.values())
        out[case] = {i: (best / v if higher else v / best) for i, v in values.items()}
    return out


def _where(data: dict) -> str:
    where = f"{data['device']} (host: {data['machine']})" if data.get("device") else data["machine"]
    torch_version = data.get("versions", {}).get("torch", "?")
    note = torch_note(data)
    return f"Measured on {where} at commit `{data.get('commit', '?')}` (torch {torch_version}" + (
        f"; **{note}**)" if note else ")"
    )


def bench_summary(name: str, gpu: bool = False):
    """A stored benchmark in words: its notes, where, with which torch and at which commit it
    was measured, and each implementation relative to the best in each case (1.00x = best;
    for a time the fastest, for a rate such as GB/s the highest). ``gpu=True``: its GPU section.
    """
    from IPython.display import Markdown

    data = load_bench(name)
    if gpu:
        data = data["gpu"]
    impls = list(dict.fromkeys(r["impl"] for r in data["rows"]))
    if higher_is_better(data):
        how = (
            f"Rates in {data['unit']}, higher is better: relative to the highest in each case "
            "(the highest divided by this one; 1.00x = fastest):"
        )
    else:
        how = "Relative to the fastest in each case (1.00x = fastest):"
    lines = [" ".join(data.get("notes", "").split()), ""] if data.get("notes") else []
    lines += [
        f"{_where(data)}. {how}",
        "",
        "| case | " + " | ".join(impls) + " |",
        "| --- |" + " --- |" * len(impls),
    ]
    for case, values in relative_to_best(data).items():
        cells = [f"{values[i]:.2f}x" if i in values else "-" for i in impls]
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    for r in data.get("reviewed", []):  # tools/bench.py --review: an edit that changes nothing
        lines += ["", f"`{r['file']}` changed since (reviewed at `{r['commit']}`): {r['why']}"]
    return Markdown("\n".join(lines))


def plot_bench(
    name: str, ax=None, log: bool | None = None, horizontal: bool = False, gpu: bool = False
):
    """Bar chart of a stored benchmark: one group per case, one bar per implementation.

    ``horizontal`` lays the groups out top to bottom, each case named on one line at its
    left: for many cases with long names. ``gpu=True`` plots its GPU section. The value axis
    says which way is better; the title names the machine (and GPU), the commit, and the torch
    version where it is not the one this book runs."""
    import matplotlib.pyplot as plt

    data = load_bench(name)
    if gpu:
        data = data["gpu"]
    cases = list(dict.fromkeys(r["case"] for r in data["rows"]))
    impls = list(dict.fromkeys(r["impl"] for r in data["rows"]))
    value = {(r["case"], r["impl"]): r["value"] for r in data["rows"]}
    if ax is None:  # horizontal: the case names stay inside the 8 inches (its text keeps its size)
        _, ax = plt.subplots(figsize=(8, 3.6), layout="constrained" if horizontal else None)
    width = 0.8 / len(impls)
    bars = ax.barh if horizontal else ax.bar
    for j, impl in enumerate(impls):
        xs = [i + j * width for i, c in enumerate(cases) if (c, impl) in value]
        ys = [value[(c, impl)] for c in cases if (c, impl) in value]
        bars(xs, ys, width, label=impl)
    ticks = [i + width * (len(impls) - 1) / 2 for i in range(len(cases))]
    label = f"{data['unit']} ({'higher' if higher_is_better(data) else 'lower'} is better)"
    if horizontal:
        ax.set_yticks(ticks, cases, fontsize=10)
        ax.invert_yaxis()  # the first case on top
        ax.set_xlabel(label)
    else:
        labels = [
            textwrap.fill(c, 11, break_long_words=False) for c in cases
        ]  # long case names on several lines
        ax.set_xticks(ticks, labels, fontsize=8)
        ax.set_ylabel(textwrap.fill(label, 40))  # a long unit on two lines, not past the top
    if data.get("log", True) if log is None else log:
        from matplotlib.ticker import LogFormatter

        (ax.set_xscale if horizontal else ax.set_yscale)("log")
        axis = ax.xaxis if horizontal else ax.yaxis  # plain numbers: "3" is narrower than 3x10^0
        axis.set_major_formatter(LogFormatter())
        axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))
    where = data["device"] if data.get("device") else data["machine"]
    note = torch_note(data)
    ax.set_title(
        f"{textwrap.fill(data['title'], 70)}\n{where}, measured at commit {data.get('commit', '?')}"
        + (f"\n{note}" if note else ""),
        fontsize=10,
    )
    ax.legend(fontsize=8)
    return ax


def module_tree(model, title: str = "") -> Any:
    """A graphviz drawing of a module tree: each module with its own parameters and buffers.

    Shared modules appear once with several incoming edges, which is what de-duplication in
    ``named_parameters`` and ``named_modules`` is about. Works for torch and retorch modules.
    """
    import graphviz

    g = graphviz.Digraph(
        graph_attr={"rankdir": "LR", "label": title, "fontsize": "11"},
        node_attr={"shape": "record", "fontname": "Helvetica", "fontsize": "10"},
    )
    ids: dict[int, str] = {}
    for name, module in model.named_modules():
        ids[id(module)] = f"m{len(ids)}"
        own = [
            f"param {k} {tuple(v.shape)}" for k, v in module._parameters.items() if v is not None
        ]
        own += [f"buffer {k} {tuple(v.shape)}" for k, v in module._buffers.items() if v is not None]
        label = (
            "{"
            + f"{name or '(root)'}: {type(module).__name__}"
            + "".join(f"|{x}" for x in own)
            + "}"
        )
        g.node(ids[id(module)], label)
    for _, module in model.named_modules():
        for child_name, child in module._modules.items():
            if child is not None:
                g.edge(ids[id(module)], ids[id(child)], label=child_name)
    return g


def storage_indices(t) -> list[int]:
    """The storage index each element of ``t`` reads, in logical (row-major) order:
    ``storage_offset + sum(index[d] * stride[d])``. Works on retorch and torch tensors."""
    import itertools

    strides, offset = t.stride(), t.storage_offset()
    return [
        offset + sum(i * s for i, s in zip(idx, strides))
        for idx in itertools.product(*(range(n) for n in t.shape))
    ]


def draw_layout(tensors: dict, storage_size: int | None = None):
    """One row per tensor: its elements in logical order, each box numbered with the storage
    index it reads and coloured by it; the storage itself is the top row. Shows at a glance
    which views share, skip or repeat bytes."""
    import matplotlib.pyplot as plt

    rows = {name: storage_indices(t) for name, t in tensors.items()}
    n = storage_size or 1 + max(max(r) for r in rows.values() if r)
    rows = {"storage": list(range(n)), **rows}
    width = max(len(r) for r in rows.values())
    fig, ax = plt.subplots(figsize=(min(12, 2.2 + 0.45 * width), 0.55 * len(rows) + 0.3))
    cmap = plt.get_cmap("tab20", max(n, 1))
    for y, (name, idx) in enumerate(rows.items()):
        ax.text(-0.3, -y, name, ha="right", va="center", fontsize=9, family="monospace")
        for k, s in enumerate(idx):
            ax.add_patch(plt.Rectangle((k, -y - 0.4), 0.9, 0.8, color=cmap(s % 20), alpha=0.8))
            ax.text(k + 0.45, -y, str(s), ha="center", va="center", fontsize=8)
    ax.set_xlim(-0.2, width)
    ax.set_ylim(-len(rows) + 0.4, 0.6)
    ax.axis("off")
    ax.set_title("storage index read by each element, in logical order", fontsize=9)
    fig.tight_layout()
    plt.close(fig)  # shown once, as the cell's value, not again by the inline backend
    return fig


def _show_bench_missing() -> None:
    """In IPython, a :class:`BenchMissing` prints its sentence instead of a traceback."""
    try:
        ip = get_ipython()  # type: ignore[name-defined]  # noqa: F821
    except NameError:
        return
    ip.set_custom_exc((BenchMissing,), lambda shell, etype, value, tb, tb_offset=None: print(value))


_show_bench_missing()

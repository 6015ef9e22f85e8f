"""What the chapter notebooks use to show retorch's code and compare it with torch.

The course keeps one source of truth: a function lives in ``retorch/`` and the notebook *shows*
it with :func:`show` (its source, read with ``inspect``) and then runs it. Notebooks never
redefine a retorch function by hand; ``tools/check_single_source.py`` enforces that in CI.
"""

from __future__ import annotations

import inspect
import json
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


def show(*objs: Any):
    """Display the source of retorch functions, methods or classes, headed by their file."""
    from IPython.display import Markdown

    parts = []
    for obj in objs:
        obj = getattr(obj, "py_func", obj)  # a Numba dispatcher shows the Python it compiles
        lines, start = inspect.getsourcelines(obj)
        code = inspect.cleandoc("".join(lines)) if lines[0].startswith(" ") else "".join(lines)
        header = f"`{source_path(obj)}`, line {start}: `{obj.__qualname__}`"
        parts.append(f"{header}\n\n```python\n{code.rstrip()}\n```")
    return Markdown("\n\n".join(parts))


def _fmt(value: Any, width: int = 48) -> str:
    """A short cell for a comparison table; long values are cut (the comparison uses them whole)."""
    if isinstance(value, torch.Tensor):
        if value.numel() <= 4:
            return "[" + ", ".join(f"{v:.4g}" for v in value.detach().flatten().tolist()) + "]"
        return f"tensor{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    text = f"{value:.6g}" if isinstance(value, float) else str(value).replace("\n", " ")
    if len(text) > width:
        text = text[: width - 14] + f"... ({len(text)} chars)"
    return text


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


def side_by_side(rows: Iterable[tuple], headers=("", "retorch", "torch", "equal?")) -> None:
    """Print a small comparison table: one row per (what, ours, torch[, equal]), then a verdict.

    Rows of three are compared exactly with :func:`same`; a fourth element overrides the verdict
    (for comparisons within a stated tolerance).
    """
    table = []
    for row in rows:
        what, ours, theirs, *verdict = row
        ok = verdict[0] if verdict else same(ours, theirs)
        table.append((str(what), _fmt(ours), _fmt(theirs), "yes" if ok else "NO"))
    widths = [max(len(r[i]) for r in [headers, *table]) for i in range(4)]
    for r in [headers, tuple("-" * w for w in widths), *table]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    differ = sum(r[3] != "yes" for r in table)
    print(f"-> {len(table)} comparisons, " + (f"{differ} DIFFER" if differ else "all equal"))


def load_bench(name: str) -> dict:
    """The stored results of ``bench/bench_<name>.py`` (written by ``make bench``)."""
    return json.loads((ROOT / "bench" / "results" / f"{name}.json").read_text())


def plot_bench(name: str, ax=None, log: bool | None = None):
    """Bar chart of a stored benchmark: one group per case, one bar per implementation."""
    import matplotlib.pyplot as plt

    data = load_bench(name)
    cases = list(dict.fromkeys(r["case"] for r in data["rows"]))
    impls = list(dict.fromkeys(r["impl"] for r in data["rows"]))
    value = {(r["case"], r["impl"]): r["value"] for r in data["rows"]}
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.8 / len(impls)
    for j, impl in enumerate(impls):
        xs = [i + j * width for i, c in enumerate(cases) if (c, impl) in value]
        ys = [value[(c, impl)] for c in cases if (c, impl) in value]
        ax.bar(xs, ys, width, label=impl)
    ax.set_xticks([i + width * (len(impls) - 1) / 2 for i in range(len(cases))], cases)
    ax.set_ylabel(data["unit"])
    if data.get("log", True) if log is None else log:
        ax.set_yscale("log")
    ax.set_title(f"{data['title']} ({data['machine']})", fontsize=10)
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

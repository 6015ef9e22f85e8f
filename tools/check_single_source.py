"""Check the course's one-source-of-truth rule: notebooks show retorch's code, never copy it.

Chapter notebooks (notebooks/) display a function with ``retorch.notebook.show(...)`` and run
the package's code. This check fails when a notebook or solution code cell defines a function
or class that retorch already has: the same name as a top-level retorch function/class, or the
same body (compared as syntax trees, names and docstrings aside). Lab exercises are written
fresh by students and so are compared by body only. It also keeps chapter code cells short
(at most MAX_LINES lines): longer code belongs in retorch/, and fails a listing whose value is
thrown away: ``show``/``excerpt`` return what the notebook displays, so one that is not the
last expression of its cell never reaches the page.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import jupytext

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.course import ROOT  # noqa: E402

MAX_LINES = 30
LISTINGS = ("show", "excerpt", "bench_summary")  # retorch.notebook functions that return a display
MIN_STATEMENTS = 3  # tiny helpers (one-liners) may coincide by chance


def _body_key(node: ast.AST) -> str | None:
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # docstring
    if sum(1 for _ in ast.walk(ast.Module(body=body, type_ignores=[]))) < 4 * MIN_STATEMENTS:
        return None
    return "\n".join(ast.dump(stmt, annotate_fields=False) for stmt in body)


def retorch_definitions():
    names, bodies = {}, {}
    for path in sorted((ROOT / "retorch").rglob("*.py")):
        tree = ast.parse(path.read_text())
        rel = path.relative_to(ROOT).as_posix()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not node.name.startswith("_"):
                    names.setdefault(node.name, rel)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                key = _body_key(node)
                if key:
                    bodies.setdefault(key, f"{rel}:{node.lineno} {node.name}")
    return names, bodies


def main() -> int:
    names, bodies = retorch_definitions()
    problems, cells = [], 0
    for folder in ("notebooks", "solutions"):
        for md in sorted((ROOT / folder).glob("*.md")):
            nb = jupytext.read(md)
            for i, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                cells += 1
                where = f"{md.relative_to(ROOT)} cell {i}"
                source = "\n".join(
                    line
                    for line in cell.source.split("\n")
                    if not line.lstrip().startswith(("%", "!"))
                )
                tree = ast.parse(source)
                for node in ast.walk(tree):
                    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        continue
                    key = _body_key(node)
                    if key in bodies:
                        problems.append(
                            f"{where}: {node.name} copies {bodies[key]}: show() it instead"
                        )
                    elif folder == "notebooks" and node.name in names and node.col_offset == 0:
                        problems.append(
                            f"{where}: defines {node.name}, which retorch has ({names[node.name]}): "
                            "show and use the package's version instead"
                        )
                for stmt in tree.body[:-1]:
                    call = stmt.value if isinstance(stmt, ast.Expr) else None
                    name = getattr(getattr(call, "func", None), "id", None)
                    if isinstance(call, ast.Call) and name in LISTINGS:
                        problems.append(
                            f"{where}: {name}(...) is not the cell's last expression, so its "
                            "listing is never displayed: give it its own cell or display() it"
                        )
                lines = len(cell.source.strip().split("\n"))
                if folder == "notebooks" and lines > MAX_LINES:
                    problems.append(
                        f"{where}: {lines} lines; keep cells under {MAX_LINES} (move code to retorch/)"
                    )
    if problems:
        print("\n".join(problems))
        return 1
    print(
        f"one source of truth: {cells} code cells checked against {len(names)} retorch definitions"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

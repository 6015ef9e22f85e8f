"""Facts about the course that tools share, read from their one home (`_config.yml`)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


@lru_cache
def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def repository_url() -> str:
    """The GitHub repository the book is published from, e.g. https://github.com/ORG/REPO."""
    return config()["repository"]["url"].rstrip("/")


def branch() -> str:
    return config()["repository"].get("branch", "main")


def colab_url(path: str) -> str:
    """Where Colab opens a notebook of this repository (path relative to the repository root)."""
    slug = repository_url().removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{slug}/blob/{branch()}/{path}"


def colab_badge(path: str) -> str:
    return (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"({colab_url(path)})"
    )


def number_cells(nb) -> None:
    """Give cells stable ids (``c000``, ``c001``...): jupytext invents random ones when it reads
    a .md, which would change every .ipynb on every run."""
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"c{i:03d}"

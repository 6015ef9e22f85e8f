"""The capstone deployed ahead of time: a trained model exported, compiled into a package, and
run by a fresh process that has none of the model's Python code, beside torch's AOTInductor.

- :func:`retorch_package`: ``retorch.export.export`` (chapter 6b) then
  ``retorch.inductor.package.aoti_compile_and_package`` (Numba kernels and weights in a .pt2
  zip laid out as torch's);
- :func:`torch_package`: ``torch.export.export`` then ``torch._inductor.aoti_compile_and_package``
  (torch's generated C++, compiled by the system's C++ compiler into a shared library);
- :func:`run_fresh`: load a package in a new Python process (``aoti_load_package`` of the
  library that made it) and run it on saved inputs; returns the outputs and the ``retorch``
  modules that process imported, to show that ``retorch.models`` was never among them.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import torch

_CHILD = {
    "retorch": """
        import sys
        import torch
        from retorch.inductor.package import aoti_load_package
        model = aoti_load_package(sys.argv[1], cache_dir=sys.argv[2])
        torch.save(model(torch.load(sys.argv[3])), sys.argv[4])
        print(" ".join(sorted(m for m in sys.modules if m.startswith("retorch"))))
    """,
    "torch": """
        import sys
        import torch
        model = torch._inductor.aoti_load_package(sys.argv[1])
        torch.save(model(torch.load(sys.argv[3])), sys.argv[4])
        print(" ".join(sorted(m for m in sys.modules if m.startswith("retorch"))))
    """,
}


def retorch_package(model, example: torch.Tensor, path) -> str:
    """Export ``model`` on ``example`` with retorch.export and package it with retorch.inductor."""
    import retorch.export
    from retorch.inductor.package import aoti_compile_and_package

    ep = retorch.export.export(model, (example,))
    return aoti_compile_and_package(ep, package_path=str(path))


def torch_package(model, example: torch.Tensor, path) -> str:
    """Export ``model`` with torch.export and package it with torch's AOTInductor."""
    # torch 2.13's export warns about its own pytree use, and a cold AOTInductor compile logs
    # one warning per `view` it hands to its proxy executor (with a time and a process id)
    quiet = logging.getLogger("torch._inductor.ir")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", ".*LeafSpec.*is deprecated", FutureWarning)
            ep = torch.export.export(model, (example,))
            return torch._inductor.aoti_compile_and_package(ep, package_path=str(path))
    finally:
        quiet.setLevel(level)


def run_fresh(library: str, package, inputs: torch.Tensor, folder, cache_dir=None, env=None):
    """Run ``package`` (made by ``library``: "retorch" or "torch") on ``inputs`` in a new
    process. Returns ``(outputs, retorch modules that process imported)``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(inputs, folder / "inputs.pt")
    cache = str(cache_dir if cache_dir is not None else folder / "numba_cache")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHILD[library]), str(package), cache,
         str(folder / "inputs.pt"), str(folder / "outputs.pt")],
        capture_output=True, text=True, cwd=folder, timeout=900,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(
            f"the {library} package failed in a fresh process:\n{proc.stderr[-3000:]}"
        )
    return torch.load(folder / "outputs.pt"), proc.stdout.split()

"""The capstone deployed ahead of time: a trained model exported, compiled into a package, and
run by a fresh process that has none of the model's Python code, beside torch's AOTInductor.

- :func:`retorch_package`: ``retorch.export.export`` (chapter 6b) then
  ``retorch.inductor.package.aoti_compile_and_package`` (Numba kernels and weights in a .pt2
  zip laid out as torch's);
- :func:`torch_package`: ``torch.export.export`` then ``torch._inductor.aoti_compile_and_package``
  (torch's generated C++, compiled by the system's C++ compiler into a shared library), the
  compile in a fresh process with a cache of its own;
- :func:`run_fresh`: load a package in a new Python process (``aoti_load_package`` of the
  library that made it) and run it on saved inputs; returns the outputs and the ``retorch``
  modules that process imported, to show that ``retorch.models`` was never among them.
"""

from __future__ import annotations

import os
import shutil
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


_TORCH_COMPILE = """
    import logging
    import sys
    import torch
    # a cold AOTInductor compile logs one warning per `view` it hands to its proxy executor
    logging.getLogger("torch._inductor.ir").setLevel(logging.ERROR)
    ep = torch.export.load(sys.argv[1])
    print(torch._inductor.aoti_compile_and_package(ep, package_path=sys.argv[2]))
"""


def torch_package(model, example: torch.Tensor, path) -> str:
    """Export ``model`` with torch.export, then package it with torch's AOTInductor in a new
    process with an Inductor cache of its own (next to ``path``, emptied first) and one compile
    thread: the compile depends on neither the caller's state nor an older cache. A failed
    compile raises ``RuntimeError`` with the end of torch's own report."""
    path = Path(path)
    work = path.with_name(path.stem + "_build")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    with warnings.catch_warnings():  # torch 2.13's export warns about its own pytree use
        warnings.filterwarnings("ignore", ".*LeafSpec.*is deprecated", FutureWarning)
        torch.export.save(torch.export.export(model, (example,)), work / "exported.pt2")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_TORCH_COMPILE), str(work / "exported.pt2"),
         str(path)],
        capture_output=True, text=True, cwd=work, timeout=1800,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor_cache"),
             "TORCHINDUCTOR_COMPILE_THREADS": "1"},
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"torch's AOTInductor compile failed:\n{proc.stderr[-3000:]}")
    return proc.stdout.split()[-1]


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

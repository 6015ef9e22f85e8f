"""A stored GPU result goes stale when code that ran during its measurement changes, not when a
file its process merely loaded does (tools/bench.py: ``ran_sources``, ``stale``)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tools import bench

KERNEL = (
    "import numba\nimport h7_helper\n\n@numba.njit\ndef twice(x):\n    return h7_helper.times(x)\n"
)
HELPER = "import numba\n\n@numba.njit\ndef times(x):\n    return x * {factor}\n"


def load(path, name, monkeypatch):
    monkeypatch.setitem(sys.modules, name, None)  # removed again after the test
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def make_tree(tmp_path, monkeypatch):
    """retorch/run.py calls a Numba function of retorch/kernel.py, which calls one of
    retorch/helper.py compiled into it (its Python code never called, as a device function
    inlined into a CUDA kernel); retorch/idle.py is imported and never called."""
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    pkg = tmp_path / "retorch"
    pkg.mkdir()
    (pkg / "helper.py").write_text(HELPER.format(factor=2))
    (pkg / "kernel.py").write_text(KERNEL)
    (pkg / "idle.py").write_text("def never():\n    return 0\n")
    (pkg / "run.py").write_text("import h7_kernel, h7_idle\n\ndef measure():\n"
                                "    return h7_kernel.twice(21)\n")  # fmt: skip
    for name in ("helper", "kernel", "idle", "run"):
        module = load(pkg / f"{name}.py", f"h7_{name}", monkeypatch)
    return pkg, module


@pytest.mark.slow  # seconds each: make unit runs it, check-fast stays under a minute
def test_ran_sources_names_called_and_compiled_code_not_merely_loaded(tmp_path, monkeypatch):
    pkg, run = make_tree(tmp_path, monkeypatch)
    value, ran = bench.ran_sources(run.measure)
    assert value == 42
    assert sorted(ran) == ["retorch/helper.py", "retorch/kernel.py", "retorch/run.py"]
    assert ran["retorch/helper.py"] == bench.file_hash(pkg / "helper.py")


def test_a_gpu_result_keeps_through_an_edit_of_loaded_code_that_did_not_run(tmp_path, monkeypatch):
    pkg, run = make_tree(tmp_path, monkeypatch)
    _, ran = bench.ran_sources(run.measure)
    names = ("helper", "kernel", "idle", "run")
    sources = {f"retorch/{n}.py": bench.file_hash(pkg / f"{n}.py") for n in names}
    result = {"sources": sources, "ran": ran}
    (pkg / "idle.py").write_text("def never():\n    return 1\n")  # loaded, never ran
    assert bench.stale(result) == []
    assert bench.stale({"sources": sources}) == ["retorch/idle.py"]  # the CPU rule: every file
    (pkg / "helper.py").write_text(HELPER.format(factor=3))  # compiled code that ran
    assert bench.stale(result) == ["retorch/helper.py"]

"""The set-up cell never changes the runtime's torch (issue 32): retorch/install.py's logic,
driven with fake pip reports, and the template cell itself."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

import retorch.install as inst
from tools.make_labs import setup_source


def report(*pairs: tuple[str, str]) -> dict:
    return {"install": [{"metadata": {"name": n, "version": v}} for n, v in pairs]}


BEFORE = {"torch": "2.11.0", "torch.version.cuda": "13.0", "nvidia-cublas": "13.1.0.3"}
#: what pip did in Colab with torch 2.11 (CUDA 13) and `numba-cuda[cu12]`: a torch downgrade
SWAP = report(("numba-cuda", "0.30.4"), ("torch", "2.10.0"), ("nvidia-cublas-cu12", "12.8.4.1"))


def test_refuses_a_torch_swap_and_says_what_would_change():
    why = inst.pip_refusal(SWAP, BEFORE)
    assert why is not None and "torch 2.11.0 -> 2.10.0" in why and "Nothing was changed" in why


@pytest.mark.parametrize(
    "pairs, refused",
    [
        ((("numba-cuda", "0.30.4"), ("llvmlite", "0.50.0")), False),
        ((("nvidia-nvvm", "13.0.88"),), False),  # a CUDA library the runtime lacks: added
        ((("nvidia_cublas", "13.0.0.1"),), True),  # one it has, at another version
        ((("triton", "3.5.0"),), True),
        ((("cuda-bindings", "12.9.0"),), False),  # absent before: added
    ],
)
def test_only_changes_to_protected_packages_are_refused(pairs, refused):
    assert (inst.pip_refusal(report(*pairs), BEFORE) is not None) == refused


def test_no_torch_is_refused_with_a_sentence():
    assert "has no torch" in inst.pip_refusal(report(), {"torch.version.cuda": None})


def fake_ensure(monkeypatch, wanted, pip_report):
    calls = []
    monkeypatch.setattr(inst, "lacking", lambda extra: wanted)
    done = types.SimpleNamespace(returncode=0, stderr="")
    ran = inst.ensure(run_pip=lambda *a: calls.append(a) or done, report_for=lambda w: pip_report)
    return ran, calls


def test_ensure_stops_before_pip_installs_anything(monkeypatch):
    with pytest.raises(inst.TorchWouldChange, match="torch .* -> 2.10.0"):
        fake_ensure(monkeypatch, ["numba-cuda[cu12]"], report(("torch", "2.10.0")))


def test_ensure_installs_exactly_what_pip_reported_without_deps(monkeypatch, capsys):
    ran, calls = fake_ensure(monkeypatch, ["torchviz"], report(("torchviz", "0.0.3")))
    assert ran == ["torchviz==0.0.3"] and calls == [("install", "-q", "--no-deps", *ran)]
    line = capsys.readouterr().out
    assert line.startswith("Installing torchviz (1 packages); torch ") and "stays as it is" in line


def test_ensure_notices_a_change_made_after_the_check(monkeypatch):
    states = iter([{"torch": "2.11.0", "torch.version.cuda": "13.0"}, {"torch": "2.10.0"}])
    monkeypatch.setattr(inst, "runtime_state", lambda: next(states))
    with pytest.raises(inst.TorchWouldChange, match="changed the runtime's torch"):
        fake_ensure(monkeypatch, ["x"], report(("x", "1")))


def test_a_protected_package_added_by_the_install_is_no_change(monkeypatch):
    t = {"torch": "2.13.0", "torch.version.cuda": None}
    states = iter([t, {**t, "cuda-bindings": "13.5.0"}])
    monkeypatch.setattr(inst, "runtime_state", lambda: next(states))
    monkeypatch.setattr(inst, "cuda_extra", lambda *a: "")
    assert fake_ensure(monkeypatch, ["x"], report(("cuda-bindings", "13.5.0")))[0]


def test_everything_present_prints_nothing(capsys):
    assert inst.ensure(report_for=lambda w: pytest.fail(f"asked pip for {w}")) == []
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "torch_cuda, driver, extra",
    [
        ("13.0", None, "[cu13]"),
        ("12.8", 13, "[cu12]"),
        (None, 13, "[cu13]"),
        (None, 12, "[cu12]"),
        (None, None, ""),
    ],
)
def test_numba_cuda_extra_follows_torch_then_driver(torch_cuda, driver, extra):
    assert inst.cuda_extra(torch_cuda, driver) == extra


def test_runtime_state_reads_torch_without_importing_it():
    import torch

    state = inst.runtime_state()
    assert state["torch"] == torch.__version__ and state["torch.version.cuda"] == torch.version.cuda


def test_set_up_cell_fits_and_says_what_to_do_when_the_url_fails(monkeypatch):
    source = setup_source()
    assert len(source.splitlines()) <= 25
    head = source.split("import retorch.install")[0]
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    monkeypatch.setattr(subprocess, "run", lambda cmd: types.SimpleNamespace(returncode=1))
    with pytest.raises(RuntimeError, match=r"Could not install the course from git\+https://"):
        exec(compile(head, "<set-up cell>", "exec"), {})
    with pytest.raises(RuntimeError, match="make publish-url URL="):
        exec(compile(head, "<set-up cell>", "exec"), {})


def test_a_pth_file_the_install_adds_runs_without_a_restart(tmp_path, monkeypatch):
    monkeypatch.setattr(inst, "site_dirs", lambda: [tmp_path])
    (tmp_path / "old.pth").write_text("import sys; sys._old_pth_ran = True\n")
    before = inst.pth_files()
    (tmp_path / "_numba_cuda_redirector.pth").write_text("import sys; sys._new_pth_ran = True\n")
    monkeypatch.setattr(sys, "_new_pth_ran", False, raising=False)
    assert inst.run_new_pth(before) == [tmp_path / "_numba_cuda_redirector.pth"]
    assert sys._new_pth_ran and not hasattr(sys, "_old_pth_ran")


def test_a_failed_kernel_check_names_the_extra_of_the_runtimes_torch(monkeypatch):
    import retorch.environment as env

    def broken(*args, **kwargs):
        raise RuntimeError("no CUDA toolkit")

    monkeypatch.setattr(env.cuda, "to_device", broken)
    monkeypatch.setattr(inst, "torch_cuda", lambda: "13.0")
    assert "`pip install --no-deps -U 'numba-cuda[cu13]'`" in env.kernel_problem()

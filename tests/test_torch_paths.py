"""Every torch source path the course cites exists in torch's tree at v2.13.0 (tools/torch_paths)."""

from __future__ import annotations

import pytest
import torch

from tools import torch_paths

pytestmark = pytest.mark.skipif(
    not torch.__version__.startswith(torch_paths.TORCH_VERSION),
    reason=f"paths are verified against the torch {torch_paths.TORCH_VERSION} wheel",
)


@pytest.mark.slow  # seconds long: make unit runs it, make check-fast does not
def test_every_cited_torch_path_exists_at_the_pinned_tag():
    cited = torch_paths.cited_paths()
    assert len(cited) > 100  # chapters, solutions, book pages and retorch docstrings are read
    assert torch_paths.unverified() == {}


@pytest.mark.parametrize(
    "wrong",
    [
        "aten/src/ATen/native/cuda/BinaryAddSubKernel.cu",  # cited once; not in 2.13's tree
        "torch/csrc/autograd/generated/VariableType.cpp",  # generated files are numbered
        "c10/core/TensorImp.h",
        "torch/optim/adam2.py",
        "aten/src/ATen/native/NoSuch*.cpp",
    ],
)
def test_a_wrong_path_is_rejected(wrong):
    assert torch_paths.verify(wrong) is None


@pytest.mark.parametrize(
    "path, how",
    [
        ("aten/src/ATen/TensorIterator.cpp", "so"),
        ("c10/core/TensorImpl.h", "include"),
        ("torch/csrc/autograd/function.h", "include"),
        ("torch/optim/adam.py", "py"),
        ("aten/src/ATen/native/native_functions.yaml", "torchgen"),
        ("torch/csrc/autograd/generated/VariableType_2.cpp", "generated"),
    ],
)
def test_each_kind_of_evidence_is_found(path, how):
    assert torch_paths.verify(path) == how


def test_a_wrong_path_in_a_chapter_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(torch_paths, "ROOT", tmp_path)
    md = tmp_path / "ch.md"
    md.write_text("Mirrors `aten/src/ATen/TensorIterator.cpp` and `c10/core/Storag.h`.")
    assert torch_paths.unverified([md]) == {"c10/core/Storag.h": ["ch.md"]}

"""Every path in torch's source tree that the course cites exists at the pinned tag (v2.13.0).

Chapters, labs, book pages and retorch's docstrings name the torch files they mirror
(``aten/src/ATen/TensorIterator.cpp``...). A path is verified, without a network, by the
installed torch 2.13.0 wheel, which carries four kinds of evidence:

- ``so``: the path is a ``__FILE__`` string in one of the wheel's shared libraries (the file
  was compiled from that tree: ``/__w/pytorch/pytorch/<path>``);
- ``include``: a header shipped under ``torch/include/`` (``aten/src/ATen/X`` ships as
  ``ATen/X``; ``c10/X`` and ``torch/csrc/X`` keep their paths);
- ``py``: a Python file or folder of the wheel (``torch/...``);
- ``torchgen``: the copy of ``aten/src/ATen/templates``, ``native/*.yaml`` and
  ``tools/autograd/templates`` in ``torchgen/packaged/``.

CUDA sources are absent from the CPU wheel: those few were read in pytorch/pytorch through
the course's source index and are listed in :data:`READ_IN_SOURCE` with what was checked.
Files torch's build generates are matched to the template they come from (:data:`GENERATED`).
"""

from __future__ import annotations

import fnmatch
import json
import re
from functools import lru_cache
from pathlib import Path

from tools.course import ROOT

TORCH_VERSION = "2.13.0"

#: CUDA-only sources, read in pytorch/pytorch (source index, 2026-11-22/23).
READ_IN_SOURCE = {
    "torch/csrc/cuda/memory_snapshot.cpp": "_record_memory_history's option checks and "
    "_memory_snapshot_pickled's keys (segments, blocks and their states, trace actions, "
    "allocator_settings)",
    "aten/src/ATen/native/ufunc/add.h": "named by native_functions.yaml (add.out ufunc_inner_loop)",
    "aten/src/ATen/native/cuda/CUDALoops.cuh": "gpu_kernel_impl, vectorized launch",
    "aten/src/ATen/native/cuda/ActivationGeluKernel.cu": "GeluCUDAKernelImpl and "
    "GeluBackwardCUDAKernelImpl: the tanh form in opmath, the backward from the saved input",
    "aten/src/ATen/native/cuda/Loops.cuh": "gpu_kernel, gpu_kernel_with_scalars",
    "aten/src/ATen/native/cuda/thread_constants.h": "num_threads(), thread_work_size()",
    "aten/src/ATen/native/cuda/MultiTensorApply.cuh": "multi_tensor_apply, depth_to_max_tensors",
    "aten/src/ATen/native/cuda/fused_adam_utils.cuh": "FusedAdamMathFunctor",
    "aten/src/ATen/native/cuda/fused_adam_impl.cu": "_fused_adam_cuda_impl_",
    "aten/src/ATen/cuda/CUDAContext.cpp": "getDeviceProperties caches cudaDeviceProp per device",
    "aten/src/ATen/native/cuda/Blas.cpp": "addmm_out_cuda_impl (cuBLAS gemm)",
    "c10/cuda/CUDACachingAllocator.cpp": "DeviceCachingAllocator, round_size, BlockPool",
    "c10/core/impl/LocalDispatchKeySet.cpp": "ExcludeDispatchKeyGuard's constructor/destructor",
    "torch/csrc/cuda/Module.cpp": "_cuda_memoryStats, memory_snapshot bindings",
    "torch/csrc/fx/node.cpp": "C++ map_aggregate/Node helpers of torch.fx (2.13)",
}

#: Files torch's build generates, as torch prints them, with the template each comes from.
GENERATED = {
    r"build/aten/src/ATen/Register\w+_\d+\.cpp": "aten/src/ATen/templates/RegisterDispatchKey.cpp",
    r"build/aten/src/ATen/UfuncCPUKernel_add\.cpp": "aten/src/ATen/templates/UfuncCPUKernel.cpp",
    r"build/aten/src/ATen/UfuncCUDA_add\.cu": "aten/src/ATen/templates/UfuncCUDA.cu",
    r"torch/csrc/autograd/generated/VariableType_(\d+|\*)\.cpp": (
        "tools/autograd/templates/VariableType.cpp"
    ),
    r"torch/csrc/autograd/generated/python_torch_functions_\d+\.cpp": (
        "tools/autograd/templates/python_torch_functions.cpp"
    ),
}

CITED = re.compile(
    r"(?<![\w/.])((?:build/)?(?:aten|c10|torch|tools)/[\w/.*-]*"
    r"(?:\.(?:cpp|h|cu|cuh|py|yaml)|/))(?![\w])"
)


def _torch_dir() -> Path:
    import torch

    return Path(torch.__file__).resolve().parent


@lru_cache
def compiled_files() -> frozenset[str]:
    """Source paths compiled into the wheel's shared libraries (their ``__FILE__`` strings)."""
    found = set()
    pattern = re.compile(rb"/pytorch/pytorch/((?:build/)?(?:aten|c10|torch|tools)/[\w/.+-]+)")
    for so in sorted((_torch_dir() / "lib").glob("*.so*")):
        found |= {m.group(1).decode() for m in pattern.finditer(so.read_bytes())}
    return frozenset(found)


def _in_wheel(path: str) -> str | None:
    torch_dir = _torch_dir()
    site = torch_dir.parent
    if "*" in path:  # a glob names a family of files: some compiled file must match it
        return "so" if fnmatch.filter(compiled_files(), path) else None
    if path.startswith("torch/") and (site / path).exists():
        return "py"
    for prefix, shipped in [("aten/src/", ""), ("c10/", "c10/"), ("torch/csrc/", "torch/csrc/"),
                            ("torch/headeronly/", "torch/headeronly/")]:  # fmt: skip
        if (
            path.startswith(prefix)
            and (torch_dir / "include" / shipped).joinpath(path.removeprefix(prefix)).exists()
        ):
            return "include"
    for prefix, packaged in [("aten/src/ATen/", "ATen/"), ("tools/autograd/", "autograd/")]:
        if (
            path.startswith(prefix)
            and (site / "torchgen/packaged" / packaged).joinpath(path.removeprefix(prefix)).exists()
        ):
            return "torchgen"
    if path in compiled_files() or (
        path.endswith("/") and any(f.startswith(path) for f in compiled_files())
    ):
        return "so"
    return None


def verify(path: str) -> str | None:
    """How ``path`` is known to exist in torch's tree at v2.13.0, or None if it is not."""
    if path in READ_IN_SOURCE:
        return "source index"
    for pattern, template in GENERATED.items():
        if re.fullmatch(pattern, path):
            return "generated" if verify(template) else None
    return _in_wheel(path)


def _texts(md: Path) -> list[str]:
    texts = [md.read_text()]
    nb = md.with_suffix(".ipynb")
    if nb.exists():
        for cell in json.loads(nb.read_text())["cells"]:
            for out in cell.get("outputs", []):
                for value in [out.get("text", "")] + list(out.get("data", {}).values()):
                    texts.append("".join(value) if isinstance(value, list) else str(value))
    return texts


def course_files() -> list[Path]:
    """Where the course cites torch: chapters and solutions (with their stored outputs), book
    pages and retorch's modules. ``labs/`` is generated from ``solutions/``."""
    files = [*sorted((ROOT / "notebooks").glob("*.md")), *sorted((ROOT / "solutions").glob("*.md"))]
    files += sorted((ROOT / "book").glob("*.md")) + sorted((ROOT / "retorch").rglob("*.py"))
    return files


def cited_paths(files=None) -> dict[str, set[str]]:
    """Each torch path cited, with the course files citing it. Paths of this repository's own
    tools (``tools/make_labs.py``) are not torch's."""
    cited: dict[str, set[str]] = {}
    for f in course_files() if files is None else files:
        texts = _texts(f) if f.suffix == ".md" else [f.read_text()]
        for text in texts:
            for path in CITED.findall(text):
                if path.startswith("tools/") and (ROOT / path).exists():
                    continue
                cited.setdefault(path, set()).add(str(f.relative_to(ROOT)))
    return cited


def unverified(files=None) -> dict[str, list[str]]:
    return {p: sorted(fs) for p, fs in sorted(cited_paths(files).items()) if not verify(p)}


if __name__ == "__main__":
    bad = unverified()
    for path, where in bad.items():
        print(f"{path}  (cited in {', '.join(where)})")
    raise SystemExit(1 if bad else 0)

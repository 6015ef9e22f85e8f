"""The layers of PyTorch, the torch source files chapter 0 cites, and the course's map.

The layering is the one ezyang's "PyTorch internals" describes; every path is a path in
torch's source tree at the pinned release (``retorch.TORCH_TAG``), checked against that tree
by ``tests/test_overview.py``. Files that torch's build generates are cited by the template
they are generated from (their generated names appear only where torch itself prints them).
"""

from __future__ import annotations

import re

#: (layer, what it does, where it lives in torch's source tree: paths joined by ", ")
LAYERS = [
    (
        "Python front end",
        "torch.add, nn.Module, optim, autograd API",
        "torch/nn/modules/module.py, torch/optim/optimizer.py, torch/autograd/__init__.py",
    ),
    (
        "Bindings",
        "parse Python args, call C++ (generated)",
        "tools/autograd/templates/python_torch_functions.cpp, "
        "torch/csrc/utils/python_arg_parser.cpp",
    ),
    (
        "Dispatcher",
        "pick a kernel by the tensors' dispatch keys",
        "aten/src/ATen/core/dispatch/Dispatcher.h, "
        "aten/src/ATen/core/dispatch/DispatchKeyExtractor.h",
    ),
    (
        "ATen",
        "the operator library: declarations and kernels",
        "aten/src/ATen/native/native_functions.yaml",
    ),
    (
        "c10",
        "core types: TensorImpl, Storage, DispatchKeySet",
        "c10/core/TensorImpl.h, c10/core/DispatchKeySet.h",
    ),
    (
        "Kernels",
        "the loops that compute: CPU vectorised, CUDA",
        "aten/src/ATen/native/ufunc/add.h",
    ),
]

#: Every other torch file the chapter cites, with what it holds.
SOURCES = {
    "c10/core/DispatchKey.h": "the dispatch keys, in priority order",
    "c10/core/impl/LocalDispatchKeySet.h": "the thread-local include and exclude sets",
    "aten/src/ATen/autocast_mode.cpp": "autocast's kernels, and its fallthrough for other ops",
    "aten/src/ATen/core/VariableFallbackKernel.cpp": "ADInplaceOrView's fallthrough",
    "aten/src/ATen/core/BackendSelectFallbackKernel.cpp": "BackendSelect's fallthrough",
    "tools/autograd/templates/VariableType.cpp": "template of the autograd kernels",
    "aten/src/ATen/templates/RegisterDispatchKey.cpp": "template of RegisterCPU_*.cpp",
    "aten/src/ATen/templates/UfuncCPUKernel.cpp": "template of the CPU add kernel",
    "aten/src/ATen/templates/UfuncCUDA.cu": "template of the CUDA add kernel",
    "aten/src/ATen/native/cpu/Loops.h": "cpu_kernel_vec: the vectorised CPU loop",
    "aten/src/ATen/cpu/vec/functional.h": "vec::fmadd and friends",
    "aten/src/ATen/native/cuda/Loops.cuh": "gpu_kernel: the CUDA elementwise launcher",
    "aten/src/ATen/native/cuda/CUDALoops.cuh": "launch_vectorized_kernel: the launch's grid",
    "aten/src/ATen/native/cuda/thread_constants.h": "threads per block, elements per thread",
    "torch/utils/_python_dispatch.py": "TorchDispatchMode",
    "torch/_meta_registrations.py": "Meta kernels written in Python",
}

#: (chapter, layer it rebuilds, retorch package, torch files it mirrors); chapters that are
#: not written yet say "(planned)".
COURSE_MAP = [
    ("0 Overview", "all (looked at, not rebuilt)", "retorch.overview", "-"),
    (
        "1 nn.Module & data",
        "Python front end",
        "retorch.nn, retorch.utils.data",
        "torch/nn/modules/module.py, torch/utils/data/dataloader.py",
    ),
    (
        "2 Optimizers",
        "Python front end + fused kernels",
        "retorch.optim",
        "torch/optim/adam.py, torch/optim/optimizer.py",
    ),
    (
        "3 Autograd",
        "autograd engine (C++)",
        "retorch.autograd",
        "torch/csrc/autograd/engine.cpp, torch/csrc/autograd/function.h",
    ),
    (
        "4 Tensors",
        "c10, TensorIterator, kernels",
        "retorch.tensor",
        "c10/core/TensorImpl.h, c10/core/StorageImpl.h",
    ),
    (
        "5 Dispatch",
        "Dispatcher",
        "retorch.dispatch",
        "c10/core/DispatchKeySet.h, aten/src/ATen/core/dispatch/Dispatcher.cpp",
    ),
    (
        "6a Graph capture",
        "torch.compile front end",
        "retorch.fx, retorch.dynamo",
        "torch/fx/, torch/_dynamo/",
    ),
    (
        "6b Codegen",
        "torch.compile back end, export",
        "retorch.aot, retorch.inductor, retorch.export",
        "torch/_functorch/, torch/_inductor/, torch/export/",
    ),
    ("7 Distributed", "collectives, DDP, FSDP", "retorch.distributed", "torch/distributed/"),
    (
        "8 Runtime",
        "half precision, autocast, profiler, streams, CUDA graphs",
        "retorch.tensor.half, retorch.amp, retorch.profiler, retorch.cuda_streams",
        "c10/util/Half.h, torch/amp/, torch/profiler/, torch/cuda/streams.py",
    ),
    (
        "9 Capstone",
        "the whole stack: a Transformer, a device, deployment",
        "retorch.models",
        "torch/nn/functional.py, torch/_inductor/package/package.py",
    ),
]

#: Which chapter rebuilds each layer; "planned" where that chapter is not written yet.
CHAPTER_OF_LAYER = {
    "Python front end": "ch 1-2",
    "Bindings": "not rebuilt (generated code)",
    "Dispatcher": "ch 5",
    "ATen": "ch 4 (TensorIterator, ops); ch 5 (operators)",
    "c10": "ch 4",
    "Kernels": "ch 2 (fused Adam); ch 4",
}

_PATH = re.compile(r"^[\w.-]+(/[\w.*-]+)*/?$")


def cited_paths() -> list[str]:
    """Every torch path that LAYERS, SOURCES and COURSE_MAP print, once each, in order."""
    texts = [where for _, _, where in LAYERS] + list(SOURCES)
    texts += [files for *_, files in COURSE_MAP]
    paths = []
    for text in texts:
        for part in text.split(", "):
            if "/" in part and _PATH.match(part) and part not in paths:
                paths.append(part)
    return paths


def layers_diagram():
    """The layers as a graphviz drawing, each box labelled with the chapter that rebuilds it."""
    import graphviz

    g = graphviz.Digraph(
        "layers",
        graph_attr={"rankdir": "TB", "fontsize": "10"},
        node_attr={
            "shape": "box",
            "style": "rounded,filled",
            "fillcolor": "#eef3fb",
            "fontname": "Helvetica",
            "fontsize": "11",
        },
    )
    for i, (layer, what, _) in enumerate(LAYERS):
        g.node(f"L{i}", f"{layer}\n{what}\nrebuilt in: {CHAPTER_OF_LAYER[layer]}")
        if i:
            g.edge(f"L{i - 1}", f"L{i}")
    g.node(
        "AG",
        "Autograd engine\n(records the graph on the way down,\nruns it backward)\nrebuilt in: ch 3",
        fillcolor="#fdf1e0",
    )
    g.edge("L2", "AG", label=" Autograd key", style="dashed")
    g.edge("AG", "L2", label=" redispatch", style="dashed")
    return g

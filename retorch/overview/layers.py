"""The layers of PyTorch and the course's map of them.

The layering is the one the source documents and ezyang's "PyTorch internals" describe; the
file paths are at the pinned release (``retorch.TORCH_TAG``).
"""

from __future__ import annotations

#: (layer, what it does, where it lives in torch's source tree)
LAYERS = [
    (
        "Python front end",
        "torch.add, nn.Module, optim, autograd API",
        "torch/*.py, torch/nn, torch/optim",
    ),
    (
        "Bindings",
        "parse Python args, call C++ (generated)",
        "torch/csrc/autograd/generated/python_torch_functions*.cpp",
    ),
    (
        "Dispatcher",
        "pick a kernel by the tensors' dispatch keys",
        "aten/src/ATen/core/dispatch/Dispatcher.h",
    ),
    (
        "ATen",
        "the operator library: declarations and kernels",
        "aten/src/ATen/native/native_functions.yaml",
    ),
    ("c10", "core types: TensorImpl, Storage, DispatchKeySet, allocators", "c10/core/TensorImpl.h"),
    (
        "Kernels",
        "the loops that compute: CPU vectorised, CUDA",
        "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp",
    ),
]

#: (chapter, layer it rebuilds, retorch package, torch files it mirrors)
COURSE_MAP = [
    ("0 Overview", "all (looked at, not rebuilt)", "retorch.overview", "-"),
    (
        "1 nn.Module & data",
        "Python front end",
        "retorch.nn, retorch.utils.data",
        "torch/nn/modules/module.py, torch/utils/data/",
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
        "torch/csrc/autograd/engine.cpp, function.h",
    ),
    (
        "4 Tensor & storage",
        "c10",
        "retorch.tensor",
        "c10/core/TensorImpl.h, c10/core/StorageImpl.h",
    ),
    (
        "5 Dispatch",
        "Dispatcher",
        "retorch.dispatch",
        "c10/core/DispatchKeySet.h, aten/src/ATen/core/dispatch/",
    ),
    (
        "6 Compiler",
        "torch.compile stack",
        "retorch.compiler",
        "torch/fx/, torch/_dynamo/, torch/_inductor/",
    ),
]

_CHAPTER_OF_LAYER = {
    "Python front end": "ch 1-2",
    "Bindings": "(generated code)",
    "Dispatcher": "ch 5",
    "ATen": "ch 4-5",
    "c10": "ch 4",
    "Kernels": "ch 2, 4 (Numba)",
}


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
        g.node(f"L{i}", f"{layer}\n{what}\nrebuilt in: {_CHAPTER_OF_LAYER[layer]}")
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

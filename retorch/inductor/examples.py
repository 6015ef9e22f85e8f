"""Three generated CUDA kernels, made when this module is imported, for the PTX check.

Kernels that retorch.inductor generates exist only once a graph is compiled, so
``tools/check_ptx.py`` (which imports every retorch module and compiles every kernel declared
through :func:`retorch.cuda.kernel`) would not see any. Importing this module compiles three
representative graphs for ``device="cuda"``: a tanh-GELU written as separate ops (one
pointwise kernel), softmax over rows and LayerNorm over rows (one block-per-row reduction
kernel each). Their kernels register themselves like every other.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from .compile_fx import compile_graph
from .decomposition import select_decomp_table


def gelu(x):
    y = x * x * x
    y = x + y * 0.044715
    return x * ((torch.tanh(y * 0.7978845608) + 1.0) * 0.5)


def softmax(x):
    return F.softmax(x, dim=-1)


def layer_norm(x):
    return F.layer_norm(x, x.shape[-1:])


def compile_example(fn, shape=(64, 256), device="cuda"):
    """The CompiledGraph of ``fn`` on a float32 tensor of ``shape`` (not kept for last_compile)."""
    x = torch.zeros(shape)
    gm = make_fx(fn, decomposition_table=select_decomp_table())(x)
    return compile_graph(gm, [x], device, name=f"examples.{fn.__name__}", record=False)


EXAMPLES = {fn.__name__: compile_example(fn) for fn in (gelu, softmax, layer_norm)}

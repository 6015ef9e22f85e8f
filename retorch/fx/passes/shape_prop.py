"""ShapeProp: run the graph on sample inputs and store each node's TensorMetadata.

Mirrors torch/fx/passes/shape_prop.py at torch v2.13.0 (`TensorMetadata`,
`_extract_tensor_metadata`, `ShapeProp.run_node`, `propagate`), without the fake-tensor mode:
the sample inputs are real tensors.
"""

from typing import Any, NamedTuple

import torch

from ..interpreter import Interpreter
from ..node import map_aggregate


class TensorMetadata(NamedTuple):
    shape: torch.Size
    dtype: torch.dtype
    requires_grad: bool
    stride: tuple
    memory_format: torch.memory_format | None
    is_quantized: bool
    qparams: dict


def _extract_tensor_metadata(result: torch.Tensor) -> TensorMetadata:
    formats = (torch.contiguous_format, torch.channels_last, torch.channels_last_3d)
    memory_format = next((f for f in formats if _is_contiguous(result, f)), None)
    return TensorMetadata(result.shape, result.dtype, result.requires_grad, result.stride(),
                          memory_format, result.is_quantized, {})  # fmt: skip


def _is_contiguous(t: torch.Tensor, fmt) -> bool:
    try:
        return t.is_contiguous(memory_format=fmt)
    except RuntimeError:  # channels_last asked of a tensor of the wrong rank
        return False


class ShapeProp(Interpreter):
    """Interpreter that records `meta['tensor_meta']` (and `meta['type']`) on every node."""

    def run_node(self, n) -> Any:
        result = super().run_node(n)
        found_tensor = False

        def extract(obj):
            nonlocal found_tensor
            if isinstance(obj, torch.Tensor):
                found_tensor = True
                return _extract_tensor_metadata(obj)
            return obj

        meta = map_aggregate(result, extract)
        if found_tensor:
            n.meta["tensor_meta"] = meta
        n.meta["type"] = type(result)
        return result

    def propagate(self, *args) -> Any:
        return super().run(*args)

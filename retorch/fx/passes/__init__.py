"""Graph passes (torch/fx/passes and torch/fx/experimental): shape propagation, CSE, const folding.

Dead-code elimination is `Graph.eliminate_dead_code` (graph.py) and pattern replacement is
`retorch.fx.subgraph_rewriter.replace_pattern`, where torch keeps them.
"""

from .const_fold import split_const_subgraphs
from .cse_pass import CSEPass
from .shape_prop import ShapeProp, TensorMetadata

__all__ = ["CSEPass", "ShapeProp", "TensorMetadata", "split_const_subgraphs"]

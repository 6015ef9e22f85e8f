"""The capstone's models, written once for torch and for the rebuilt stack (issue 30).

``gpt``: a decoder-only Transformer; ``functional``: the operators it needs on
``retorch.Tensor`` (embedding, layer_norm, gelu, transpose, narrow), reached through
``__torch_function__``; ``attention``: ``scaled_dot_product_attention`` with its backward;
``data``: the synthetic task and the character corpus it trains on.
"""

from .gpt import GPT, GPTConfig, build_gpt, load_torch_state_dict, to_retorch, torch_state_dict

__all__ = [
    "GPT",
    "GPTConfig",
    "build_gpt",
    "load_torch_state_dict",
    "to_retorch",
    "torch_state_dict",
]

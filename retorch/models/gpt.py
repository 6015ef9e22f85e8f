"""A decoder-only Transformer (GPT), written once, for torch and for the rebuilt stack.

The model is the one of GPT-2 (Radford et al. 2019) at toy size: token and position
embeddings, ``n_layer`` pre-LayerNorm blocks of multi-head causal self-attention and a GELU
MLP with residual connections, a final LayerNorm, and an output layer tied to the token
embedding. Its code calls torch's functions only (``F.embedding``, ``F.layer_norm``,
``F.gelu``, ``torch.transpose``, ``torch.narrow``, ``F.scaled_dot_product_attention``,
``F.cross_entropy``), so that the same modules run

- on torch, with torch tensors as parameters (``GPT(config)`` or ``build_gpt(config, torch.nn)``),
- on the rebuilt stack, once :func:`to_retorch` has swapped every parameter for a
  ``retorch.Tensor``: each call then reaches retorch's operators through
  ``retorch.Tensor.__torch_function__`` (``retorch.models.functional``), and backward runs
  chapter 3's engine over chapter 4's kernels.

``build_gpt(config, nn)`` makes the classes over ``nn``: ``retorch.nn`` (chapter 1's modules, the
default) or ``torch.nn`` itself, so a checkpoint moves between the rebuilt stack and an
unmodified torch model (``load_state_dict`` on both sides, torch's key names).
The layer names are nanoGPT's (karpathy/nanoGPT, ``model.py``), whose checkpoints use them.
"""

from __future__ import annotations

import copy
import dataclasses

import torch
import torch.nn.functional as F

from . import functional as _functional

_functional.install()


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 16
    block_size: int = 16
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32


def build_gpt(config: GPTConfig, nn=None):
    """A ``GPT`` over ``nn`` (``retorch.nn`` by default, or ``torch.nn``)."""
    if nn is None:
        from retorch import nn
    return _classes(nn)(config)


_CLASSES: dict = {}


def _classes(nn):
    if id(nn) in _CLASSES:
        return _CLASSES[id(nn)]

    class CausalSelfAttention(nn.Module):
        """``n_head`` heads of causal attention over ``n_embd // n_head`` dimensions each."""

        def __init__(self, config):
            super().__init__()
            c = config.n_embd
            self.n_head = config.n_head
            self.q_proj, self.k_proj, self.v_proj = (nn.Linear(c, c) for _ in range(3))
            self.c_proj = nn.Linear(c, c)

        def forward(self, x):
            b, t, c = x.shape
            h = self.n_head

            def heads(y):  # (B, T, C) -> (B, H, T, C/H): a view, then a transpose
                return torch.transpose(y.view(b, t, h, c // h), 1, 2)

            q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(torch.transpose(y, 1, 2).reshape(b, t, c))

    class MLP(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
            self.gelu = nn.GELU(approximate="tanh")
            self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.ln_1 = nn.LayerNorm(config.n_embd)
            self.attn = CausalSelfAttention(config)
            self.ln_2 = nn.LayerNorm(config.n_embd)
            self.mlp = MLP(config)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        """Token ids (B, T) -> logits (B, T, vocab_size); with targets, also the loss."""

        def __init__(self, config):
            super().__init__()
            self.config = config
            self.wte = nn.Embedding(config.vocab_size, config.n_embd)
            self.wpe = nn.Embedding(config.block_size, config.n_embd)
            self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
            self.ln_f = nn.LayerNorm(config.n_embd)
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.lm_head.weight = self.wte.weight  # weight tying (Press & Wolf 2017)
            for name, p in self.named_parameters():  # GPT-2's initialization (nanoGPT's)
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                elif p.dim() == 2:
                    nn.init.normal_(p, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            t = idx.shape[1]
            if t > self.config.block_size:
                raise ValueError(
                    f"Cannot forward sequence of length {t}, block size is only "
                    f"{self.config.block_size}"
                )
            pos = torch.narrow(self.wpe.weight, 0, 0, t)  # the first t position vectors
            x = self.wte(idx) + pos
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            if targets is None:
                return logits
            v = logits.shape[-1]
            return logits, F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1))

    _CLASSES[id(nn)] = GPT
    return GPT


def GPT(config: GPTConfig):  # noqa: N802  (a constructor)
    """``build_gpt(config)``: the model over chapter 1's ``retorch.nn``."""
    return build_gpt(config)


def to_retorch(model, device: str = "cpu"):
    """A copy of ``model`` whose parameters are ``retorch.Tensor``s with the same values.

    Unlike ``retorch.dispatch.to_retorch``, a parameter shared by two modules (the tied
    embedding and output layer) stays one tensor: ``named_parameters`` lists it once and the
    optimizer steps it once with the sum of both uses' gradients, as in torch."""
    from retorch.dispatch import from_torch

    out = copy.deepcopy(model)
    made: dict[int, object] = {}
    for sub in out.modules():
        for key, p in sub._parameters.items():
            if p is None:
                continue
            if id(p) not in made:
                made[id(p)] = from_torch(p, requires_grad=p.requires_grad, device=device)
            sub._parameters[key] = made[id(p)]
    return out


def load_torch_state_dict(model, state_dict: dict):
    """Copy a state_dict of torch tensors (torch's format) into a model on retorch."""
    from retorch.dispatch import from_torch

    params = dict(model.named_parameters(remove_duplicate=False))
    missing = sorted(set(params) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(params))
    if missing or unexpected:
        raise RuntimeError(
            f"Error(s) in loading state_dict for {type(model).__name__}: Missing key(s): "
            f"{missing}. Unexpected key(s): {unexpected}."
        )
    for name, p in params.items():
        if tuple(p.shape) != tuple(state_dict[name].shape):
            raise RuntimeError(
                f"size mismatch for {name}: copying a param with shape "
                f"{torch.Size(state_dict[name].shape)} from checkpoint, the shape in current "
                f"model is {torch.Size(p.shape)}."
            )
        p.data = from_torch(state_dict[name]).data
    return model


def torch_state_dict(model) -> dict:
    """The state_dict of a model on retorch in torch's format: torch tensors by torch's names
    (tied weights under both names, as ``torch.nn.Module.state_dict`` lists them)."""
    return {
        name: p.to_torch() if hasattr(p, "to_torch") else p.detach().clone()
        for name, p in model.named_parameters(remove_duplicate=False)
    }

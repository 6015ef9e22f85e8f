"""Utilities mirroring ``torch/nn/utils`` (chapter 2 adds ``clip_grad_norm_``)."""

"""Module-scope `wrap` calls for tests/test_fx.py (wrap must run at module scope)."""

import torch.fx as tfx

import retorch.fx as rfx


def clipped(x):
    return x if x.abs().max() < 10 else x.clamp(-10, 10)  # control flow: must not be traced


rfx.wrap("clipped")
tfx.wrap("clipped")
rfx.wrap("len")
tfx.wrap("len")


def ours(x):
    return clipped(x) * len(x)


def theirs(x):
    return clipped(x) * len(x)

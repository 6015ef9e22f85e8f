"""Small, seeded training loops that the chapters run on torch and retorch side by side."""

from __future__ import annotations

import torch


def batch(step: int, features: int = 8, size: int = 16):
    """The batch for ``step``: the same on every run and for every optimizer."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size, features, generator=g)
    return x, torch.sin(x.sum(dim=1, keepdim=True))


def train(model, opt, steps: int, start: int = 0) -> list[float]:
    """``steps`` steps of mean-squared-error regression; returns the losses."""
    losses = []
    for step in range(start, start + steps):
        x, y = batch(step, model[0].in_features)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def lr_schedule(optim_lib, make_scheduler, steps: int, lr: float = 0.5) -> list[float]:
    """The learning rates a scheduler from ``optim_lib`` (torch.optim or retorch.optim) yields."""
    opt = optim_lib.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    sched = make_scheduler(optim_lib.lr_scheduler, opt)
    lrs = []
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    return lrs

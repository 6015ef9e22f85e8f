"""One training loop for both libraries: AdamW with linear warm-up then cosine decay.

``optim`` is ``torch.optim`` or ``retorch.optim`` (chapter 2's rebuild, whose
``SequentialLR(LinearLR, CosineAnnealingLR)`` mirrors ``torch/optim/lr_scheduler.py``); the
model is a ``retorch.models.gpt`` model on torch or on retorch tensors; the batches come from
a ``DataLoader`` of the same library. Nothing here knows which library runs it.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def make_optimizer(optim, params, lr: float, warmup: int, steps: int, weight_decay=0.01):
    """``AdamW`` and its schedule: the rate rises linearly from ``lr / warmup`` to ``lr`` over
    ``warmup`` steps, then falls along half a cosine to 0 at ``steps``."""
    opt = optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    sched = optim.lr_scheduler
    warm = sched.LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0, total_iters=warmup)
    decay = sched.CosineAnnealingLR(opt, T_max=steps - warmup)
    return opt, sched.SequentialLR(opt, [warm, decay], milestones=[warmup])


def sort_loss(model, x, y, n: int):
    """Cross-entropy on the sorted half only: positions ``n - 1 ..`` of the targets."""
    logits = model(x)
    v = logits.shape[-1]
    part = torch.narrow(logits, 1, n - 1, n).reshape(-1, v)
    return F.cross_entropy(part, torch.narrow(y, 1, n - 1, n).reshape(-1))


def lm_loss(model, x, y):
    """Next-character cross-entropy over every position."""
    return model(x, y)[1]


def train(model, opt, sched, batches, loss_fn) -> list[float]:
    """A step per batch (``loss_fn(model, x, y)``); returns the losses."""
    losses = []
    for x, y in batches:
        loss = loss_fn(model, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def _numpy(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


def sort_accuracy(model, x, y, n: int) -> float:
    """The share of sorted tokens predicted right (argmax, the true prefix given)."""
    pred = _numpy(model(x)).argmax(-1)[:, n - 1 :]
    return float((pred == _numpy(y)[:, n - 1 :]).mean())


def sort_greedy(model, unsorted, make) -> np.ndarray:
    """Sort by generation: feed the unsorted digits, append the argmax ``n`` times.
    ``make`` turns an int64 NumPy array into the model's library's tensor."""
    seq = np.asarray(unsorted, dtype=np.int64)
    n = seq.shape[1]
    for _ in range(n):
        logits = _numpy(model(make(seq)))
        seq = np.concatenate([seq, logits[:, -1].argmax(-1)[:, None]], axis=1)
    return seq[:, n:]

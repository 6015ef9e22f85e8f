"""A corpus of modules and functions traced by retorch.fx and torch.fx, side by side.

Shared by tests/test_fx.py and tests/test_fx_passes.py. Every entry is a factory, so each tracer
gets a fresh instance (tracing stores `_tensor_constant0` on the root) with the same weights,
and a function making the inputs.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv(x))))
        return self.head(torch.flatten(x, 1))


class ResidualBlock(nn.Module):
    def __init__(self, c=4):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


class Attention(nn.Module):
    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Scale(nn.Module):
    """A user module (traced through) holding a parameter and a buffer."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.full((4,), 0.5))
        self.register_buffer("shift", torch.arange(4.0))

    def forward(self, x):
        return x * self.scale + self.shift


class SubmoduleParams(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.inner = Scale()
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Tanh()])
        self.seq = nn.Sequential(nn.Linear(4, 4), Scale())

    def forward(self, x):
        y = x @ self.lin.weight.t() + self.lin.bias
        for block in self.blocks:
            y = block(y)
        return self.seq(self.inner(y)) + self.seq[0].weight.sum()


def methods(x):
    y = x.view(-1).sum(dim=0, keepdim=True).mean()
    return x.t().contiguous().abs().clamp(min=0.1) + y, x.size(0), x.dim()


def kwargs_calls(x, y=2, *, z=3):
    a = torch.sum(x, dim=1, keepdim=True)
    b = F.softmax(x, dim=-1)
    c = torch.clamp(x, min=-1.0, max=1.0)
    return a * y + b * z + c.flatten(start_dim=0)[0]


def constants(x):
    t = torch.tensor([1.0, 2.0, 3.0, 4.0])
    return (x * 2.5 + t - torch.ones(4)).clamp(max=float("inf")) + math.pi


def torch_calls(x, y):
    z = torch.cat([x, y], dim=1)
    s = torch.stack((x, y))
    w = torch.where(x > 0, x, y)
    return torch.tanh(torch.matmul(z, z.t())), s.sum(0), w, torch.max(x, dim=1)


def operator_chain(x, y):
    a = (x + y) * x - y / 2
    b = -(a**2) % 3
    c = x[:, 1:] @ y[..., :3].t()
    d = (x > 0) & (y < 0) | ~(x == y)
    return a // 1.5, b, c, d, +x, x[0, 0] != y[0, 0], x >= y, x <= y


def reflected(x):
    return 1 - x, 2 * x, 3 / (x.abs() + 1), 2**x, 1 + x, 7 // (x.abs() + 1), 5 % (x.abs() + 1)


class Annotated(nn.Module):
    def forward(self, x: torch.Tensor, n: int = 2) -> torch.Tensor:
        return x.repeat(n, 1)


class NestedOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        return {"out": h, "pair": (h.relu(), [x, h.sigmoid()])}


def inplace_method(x):
    y = x.clone()
    y.add_(1)
    return y * 2


def four(*shape):
    return lambda: (torch.randn(*shape),)


CORPUS = {
    "mlp": (MLP, four(3, 8)),
    "convnet": (ConvNet, four(2, 3, 8, 8)),
    "residual": (ResidualBlock, four(2, 4, 6, 6)),
    "attention": (Attention, four(2, 5, 8)),
    "submodule_params": (SubmoduleParams, four(3, 4)),
    "methods": (lambda: methods, four(3, 4)),
    "kwargs": (lambda: kwargs_calls, four(3, 4)),
    "constants": (lambda: constants, four(3, 4)),
    "torch_calls": (lambda: torch_calls, lambda: (torch.randn(4, 4), torch.randn(4, 4))),
    "operator_chain": (lambda: operator_chain, lambda: (torch.randn(4, 4), torch.randn(4, 4))),
    "reflected": (lambda: reflected, four(3, 4)),
    "annotated": (Annotated, four(2, 3)),
    "nested_output": (NestedOutput, four(2, 4)),
    "inplace_method": (lambda: inplace_method, four(3)),
}


def make(name):
    """A fresh root (seeded, in eval mode) for `name`."""
    factory, _ = CORPUS[name]
    torch.manual_seed(0)
    root = factory()
    return root.eval() if isinstance(root, nn.Module) else root


def inputs(name):
    torch.manual_seed(1)
    return CORPUS[name][1]()

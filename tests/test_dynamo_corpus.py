"""Functions captured by retorch.dynamo and torch._dynamo side by side (tests/test_dynamo.py).

Each entry: name, function, a function making its arguments from a seed, and `torch_agrees`:
False where torch captures what the rebuild breaks on (a `with` block, an f-string), with the
kinds of break the rebuild reports instead.
"""

import torch
from torch import nn

SCALE = 2.5


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) + 1


torch.manual_seed(0)
mlp = MLP()


def straight(x, y):
    return (x * y + x).sin() - y


def torch_calls(x, y):
    return torch.relu(torch.matmul(x, y.t())).sum(dim=0)


def methods(x, y):
    return x.view(-1).exp().mean() + y.abs().max()


def module_forward(x, y):
    return mlp(x) * y


def with_print(x, y):
    z = x + y
    print("between the graphs")
    return z * 2


def branch(x, y):
    if x.sum() > 0:
        return x + y
    return x - y


def loop(x, y):
    for i in range(3):
        x = x * y + i
    return x


def global_constant(x, y):
    return x * SCALE + y


def lists_and_tuples(x, y):
    a = [x, y + 1]
    t = (a[0], a[1] * 2)
    return torch.cat(list(t)), t[1]


def unsupported_call(x, y):
    z = (x + y).tolist()
    return torch.tensor(z) + 1


def item(x, y):
    s = x.sum().item()
    return y + s


def helper(a):
    return a.relu() * 3


def calls_helper(x, y):
    return helper(x + y) - 1


def shapes(x, y):
    return x.view(x.shape[0], -1).sum(1) * y.size(1)


def unpack(x, y):
    a, b = x.chunk(2)
    return torch.stack([b, a, y[:2]]).sum(0)


def with_block(x, y):
    z = x * 2
    with torch.no_grad():
        w = z + y
    return w - z


def fstring(x, y):
    z = x + y
    s = f"{z.shape}"
    return z * len(s)


def args_4x4(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)


# name -> (function, torch agrees?, our break kinds when it does not)
CORPUS = {
    f.__name__: (f, agrees, kinds)
    for f, agrees, kinds in [
        (straight, True, None),
        (torch_calls, True, None),
        (methods, True, None),
        (module_forward, True, None),
        (with_print, True, None),
        (branch, True, None),
        (loop, True, None),
        (global_constant, True, None),
        (lists_and_tuples, True, None),
        (unsupported_call, True, None),
        (item, True, None),
        (calls_helper, True, None),
        (shapes, True, None),
        (unpack, True, None),
        (with_block, False, ["call", "opcode"]),
        (fstring, False, ["opcode"]),
    ]
}

"""Functions captured by retorch.dynamo and torch._dynamo side by side (tests/test_dynamo.py).

Each entry: name, function, and `torch_agrees`: False where torch captures what the rebuild
does not (a graph break inside a `with` block; a try block; a graph break in a function with
cell variables; a side effect on a global list), with what the rebuild reports instead:
(graph count, kinds of break).
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


def print_kwargs(x, y):
    z = x + y
    print("between", "the graphs", sep=" | ", end=" ")
    return z * 2


def make_closure():
    k = torch.full((4, 4), 0.5)

    def uses_closure(x, y):
        return x * k + y

    return uses_closure


uses_closure = make_closure()


def defines_closure(x, y):
    def inner(a):
        return a * y

    return inner(x) + 1


def lambda_default(x, y):
    f = lambda a, b=3: a * b + y  # noqa: E731 - the lambda is the point
    return f(x) - f(y, b=2)


def list_comprehension(x, y):
    return torch.stack([t * 2 for t in (x, y)]).sum(0)


def generator_expression(x, y):
    return sum(t * 2 for t in (x, y))


def dict_of_tensors(x, y):
    d = {"a": x + 1, "b": y * 2}
    return d["a"] - d["b"]


def dict_comprehension(x, y):
    d = {k: torch.sin(v) for k, v in zip("ab", (x, y))}
    d["c"] = d["a"] * d["b"]
    return sum(d.values()), len(d), "c" in d


def nonlocal_counter(x, y):
    acc = x

    def add(v):
        nonlocal acc
        acc = acc + v

    add(y)
    add(y)
    return acc


def break_inside_with(x, y):
    z = x * 2
    with torch.no_grad():
        w = z + y
        print("inside")
    return w - z


def try_except(x, y):
    try:
        z = x + y
    except RuntimeError:
        z = x
    return z * 2


def closure_then_break(x, y):
    def inner(a):
        return a * y

    z = inner(x)
    print("break")
    return inner(z) + 1


def writes_into_input_dict(x, y):
    d = {"x": x}
    _store(d, y)
    return d["x"] + d["y"]


def _store(d, y):
    d["y"] = torch.cos(y)


LOG = []


def appends_to_a_global_list(x, y):
    z = x * y
    LOG.append(z.shape)
    return z + 1


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
        (fstring, True, None),
        (print_kwargs, True, None),
        (uses_closure, True, None),
        (defines_closure, True, None),
        (lambda_default, True, None),
        (list_comprehension, True, None),
        (generator_expression, True, None),
        (dict_of_tensors, True, None),
        (dict_comprehension, True, None),
        (nonlocal_counter, True, None),
        (writes_into_input_dict, True, None),
        (with_block, True, None),
        (break_inside_with, False, (1, ["opcode"])),
        (try_except, False, (0, ["opcode"])),
        (closure_then_break, False, (0, [])),
        (appends_to_a_global_list, False, (2, ["call"])),
    ]
}

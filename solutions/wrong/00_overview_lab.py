"""Wrong answers a student would plausibly write for lab 0; each must fail its graded check.

Run: .venv/bin/python tools/check_wrong_answers.py 00_overview_lab
"""

_LOG = """
class Log(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append({record})
        {ret}func(*args, **(kwargs or {{}}))

with Log() as log:
    fn(*args)
return {result}
"""


def _log(record="str(func)", ret="return ", result="log.names"):
    return _LOG.format(record=record, ret=ret, result=result)


_FIRST_KEY = """
def names(keyset):
    text = str(keyset)
    return [k for k in text[text.index("(") + 1 : -1].split(", ") if k]

union = functools.reduce(operator.or_, [torch._C._dispatch_keys(t) for t in {tensors}])
{include}
excluded = set(names(torch._C._dispatch_tls_local_exclude_set())) if {exclude} else set()
return [k for k in names(union) if k not in excluded][{pick}]
"""


def _first_key(tensors="tensors", include=True, exclude=True, pick="-1"):
    inc = "union = union | torch._C._dispatch_tls_local_include_set()" if include else ""
    return _FIRST_KEY.format(tensors=tensors, include=inc, exclude=exclude, pick=pick)


_WALK = """
seen, stack, names = set(), [t.grad_fn], []
while stack:
    node = stack.pop()
    {skip}
    {mark}
    names.append(type(node).__name__)
    {push}
return names
"""


def _walk(
    skip="if node is None or node in seen:\n        continue",
    mark="seen.add(node)",
    push="stack.extend(next_node for next_node, _ in node.next_functions)",
):
    return _WALK.format(skip=skip, mark=mark, push=push)


WRONG = {
    "ex1_aten_ops": [
        (
            "drops repeated ops (keeps each name once)",
            _log(result="list(dict.fromkeys(log.names))"),
        ),
        (
            "records the overload packet (aten.addmm) instead of the overload",
            _log(record="str(func.overloadpacket)"),
        ),
        ("forgets to return func's result, so the function's computation breaks", _log(ret="")),
        (
            "returns the ops sorted by name instead of in call order",
            _log(result="sorted(log.names)"),
        ),
    ],
    "ex2_graph_node_names": [
        (
            "no seen-set: shared nodes are counted once per path to them",
            _walk(skip="if node is None:\n        continue", mark="pass"),
        ),
        (
            "de-duplicates by name, so the second AddmmBackward0 is lost",
            _walk(
                skip="if node is None or type(node).__name__ in seen:\n        continue",
                mark="seen.add(type(node).__name__)",
            ),
        ),
        (
            "does not skip None (an input that needs no gradient)",
            _walk(skip="if node in seen:\n        continue"),
        ),
        (
            "only goes one level down from grad_fn",
            "return [type(t.grad_fn).__name__] + [type(n).__name__ for n, _ in "
            "t.grad_fn.next_functions if n is not None]",
        ),
        (
            "leaves out the leaves (AccumulateGrad nodes)",
            _walk(
                skip="if node is None or node in seen or not node.next_functions:\n        continue"
            ),
        ),
    ],
    "ex3_first_key": [
        (
            "takes the key set of the last tensor instead of the union",
            _first_key(tensors="tensors[-1:]"),
        ),
        (
            "takes the key set of the first tensor instead of the union",
            _first_key(tensors="tensors[:1]"),
        ),
        ("ignores the thread's exclude set (autocast's key wins)", _first_key(exclude=False)),
        (
            "ignores the thread's include set (misses a dispatch mode's keys)",
            _first_key(include=False),
        ),
        ("returns the lowest-priority key (the first one listed)", _first_key(pick="0")),
    ],
    "ex4_relu_kernel": [
        (
            "no bounds check: threads past the end write out of range",
            "i = cuda.grid(1)\nout[i] = x[i] if x[i] > 0 else 0.0",
        ),
        (
            "uses the thread index in the block only, not the block",
            "i = cuda.threadIdx.x\nif i < out.size:\n    out[i] = x[i] if x[i] > 0 else 0.0",
        ),
        (
            "off by one in the bounds check",
            "i = cuda.grid(1)\nif i <= out.size:\n    out[i] = x[i] if x[i] > 0 else 0.0",
        ),
        (
            "keeps the negative values and zeroes the positive ones",
            "i = cuda.grid(1)\nif i < out.size:\n    out[i] = 0.0 if x[i] > 0 else x[i]",
        ),
        ("copies x without the max", "i = cuda.grid(1)\nif i < out.size:\n    out[i] = x[i]"),
    ],
}

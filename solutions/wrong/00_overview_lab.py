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
        (
            "keeps the log in a global list that is never cleared between calls",
            "global _ALL_OPS\n_ALL_OPS = globals().get('_ALL_OPS', [])\n"
            + _log(result="log.names").replace(
                "return log.names", "_ALL_OPS += log.names\nreturn _ALL_OPS"
            ),
        ),
        (
            "drops kwargs when calling func (func(*args)), so keyword arguments such as dtype are lost",
            _log(ret="return ").replace("func(*args, **(kwargs or {}))", "func(*args)"),
        ),
        (
            "records func.__name__ ('addmm.default') instead of str(func)",
            _log(record="func.__name__"),
        ),
        (
            "records the schema name ('aten::addmm') instead of str(func)",
            _log(record="func._schema.name"),
        ),
        (
            "uses a TorchFunctionMode: logs torch-level calls, not ATen ops",
            _log()
            .replace("TorchDispatchMode", "TorchFunctionMode")
            .replace("__torch_dispatch__", "__torch_function__")
            .replace("class Log", "from torch.overrides import TorchFunctionMode\n\nclass Log"),
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
        (
            "leaves out the root: starts from t.grad_fn's next_functions",
            _walk().replace("[t.grad_fn]", "[n for n, _ in t.grad_fn.next_functions]"),
        ),
        (
            "follows only the first entry of next_functions (a chain, not a graph)",
            _walk(push="stack.extend(n for n, _ in node.next_functions[:1])"),
        ),
        (
            "checks None only for the children, so a tensor without grad_fn gives ['NoneType']",
            "seen, stack, names = {t.grad_fn}, [t.grad_fn], []\n"
            "while stack:\n"
            "    node = stack.pop()\n"
            "    names.append(type(node).__name__)\n"
            "    for n, _ in getattr(node, 'next_functions', ()):\n"
            "        if n is not None and n not in seen:\n"
            "            seen.add(n)\n"
            "            stack.append(n)\n"
            "return names",
        ),
        (
            "reads t.grad_fn.next_functions without checking that t has a grad_fn",
            "seen, names = set(), [type(t.grad_fn).__name__]\n"
            "stack = [n for n, _ in t.grad_fn.next_functions]\n"
            "while stack:\n"
            "    node = stack.pop()\n"
            "    if node is None or node in seen:\n"
            "        continue\n"
            "    seen.add(node)\n"
            "    names.append(type(node).__name__)\n"
            "    stack.extend(n for n, _ in node.next_functions)\n"
            "return names",
        ),
        (
            "uses node.name() instead of type(node).__name__",
            _walk().replace("type(node).__name__", "node.name()"),
        ),
        (
            "returns a set of names, so repeated names collapse",
            _walk().replace("return names", "return set(names)"),
        ),
    ],
    "ex3_first_key": [
        (
            "compares printed key names (the exclude set's repr leaves out autograd without a "
            "backend)",
            _first_key(),
        ),
        (
            "key-set arithmetic, but removes the excluded keys before adding the include set",
            """
keys = functools.reduce(operator.or_, [torch._C._dispatch_keys(t) for t in tensors])
keys = (keys - torch._C._dispatch_tls_local_exclude_set()) | (
    torch._C._dispatch_tls_local_include_set())
return keys.highestPriorityTypeId().name
""",
        ),
        (
            "key-set arithmetic, but returns str() of the key, not its name",
            """
keys = functools.reduce(operator.or_, [torch._C._dispatch_keys(t) for t in tensors])
keys = (keys | torch._C._dispatch_tls_local_include_set()) - (
    torch._C._dispatch_tls_local_exclude_set())
return str(keys.highestPriorityTypeId())
""",
        ),
        (
            "key-set arithmetic, but subtracts the exclude set from each tensor's keys only",
            """
excluded = torch._C._dispatch_tls_local_exclude_set()
keys = functools.reduce(operator.or_, [torch._C._dispatch_keys(t) - excluded for t in tensors])
keys = keys | torch._C._dispatch_tls_local_include_set()
return keys.highestPriorityTypeId().name
""",
        ),
        (
            "key-set arithmetic on the tensors' keys only (the thread's sets left out)",
            """
keys = functools.reduce(operator.or_, [torch._C._dispatch_keys(t) for t in tensors])
return keys.highestPriorityTypeId().name
""",
        ),
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
        (
            "removes the excluded keys before adding the include set (wrong order)",
            _first_key(include=False).replace(
                "return [k for k in names(union) if k not in excluded][-1]",
                "kept = [k for k in names(union) if k not in excluded]\n"
                "included = names(torch._C._dispatch_tls_local_include_set())\n"
                "return [k for k in names(union | torch._C._dispatch_tls_local_include_set()) "
                "if k in kept or k in included][-1]",
            ),
        ),
        (
            "returns a DispatchKey, not its name",
            _first_key().replace(
                "return [k for k in names(union) if k not in excluded][-1]",
                "return torch._C._parse_dispatch_key([k for k in names(union) if k not in excluded][-1])",
            ),
        ),
        (
            "picks the alphabetically last key instead of the last listed",
            _first_key().replace(
                "return [k for k in names(union) if k not in excluded][-1]",
                "return max(k for k in names(union) if k not in excluded)",
            ),
        ),
        (
            "intersection of the tensors' key sets instead of the union",
            _first_key().replace("operator.or_", "operator.and_"),
        ),
        (
            "hard-codes the exclusion of every Autocast key instead of reading the exclude set",
            _first_key().replace(
                "excluded = set(names(torch._C._dispatch_tls_local_exclude_set())) if True else set()",
                "excluded = {k for k in names(union) if k.startswith('Autocast')}",
            ),
        ),
        (
            "reads the thread's sets once, on the first call, and keeps them",
            _first_key(include=False, exclude=False).replace(
                "\n\nexcluded = set(names(torch._C._dispatch_tls_local_exclude_set())) if False else set()",
                "\ninclude, exclude = first_key.__dict__.setdefault(\n"
                "    'sets',\n"
                "    (torch._C._dispatch_tls_local_include_set(),\n"
                "     set(names(torch._C._dispatch_tls_local_exclude_set()))),\n"
                ")\n"
                "union = union | include\n"
                "excluded = exclude",
            ),
        ),
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
        (
            "computes the ReLU in place in x, then copies it to out (mutates its input)",
            "i = cuda.grid(1)\nif i < out.size:\n    if x[i] < 0:\n        x[i] = 0.0\n    out[i] = x[i]",
        ),
        (
            "hard-codes 32 threads per block in the index",
            "i = cuda.blockIdx.x * 32 + cuda.threadIdx.x\nif i < out.size:\n    out[i] = x[i] if x[i] > 0 else 0.0",
        ),
        (
            "forgets to multiply the block index by the block size",
            "i = cuda.blockIdx.x + cuda.threadIdx.x\nif i < out.size:\n    out[i] = x[i] if x[i] > 0 else 0.0",
        ),
        (
            "off by one the other way: skips the last element",
            "i = cuda.grid(1)\nif i < out.size - 1:\n    out[i] = x[i] if x[i] > 0 else 0.0",
        ),
        (
            "early return with > instead of >=: the thread i == out.size writes past the end",
            "i = cuda.grid(1)\nif i > out.size:\n    return\nout[i] = x[i] if x[i] > 0 else 0.0",
        ),
        (
            "a leaky ReLU: scales the negative values instead of zeroing them",
            "i = cuda.grid(1)\nif i < out.size:\n    out[i] = x[i] if x[i] > 0 else 0.01 * x[i]",
        ),
    ],
}

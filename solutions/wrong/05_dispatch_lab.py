"""Wrong answers a student could plausibly write for lab 5; each must fail its graded check.

Used by ``tools/check_wrong_answers.py 05_dispatch_lab``. Each entry replaces the BEGIN/END
SOLUTION region of the exercise's solution cell.
"""

_HIGHEST = """\
nb = len(BACKENDS)
top = raw.bit_length()
if top <= nb:
    return "Undefined"
functionality = FUNCTIONALITIES[top - nb]
if functionality not in PER_BACKEND:
    return functionality
backend = (raw & ((1 << nb) - 1)).bit_length()
if backend == 0:
    return "StartOf" + PER_BACKEND[functionality][0] + "Backends"
return PER_BACKEND[functionality][1] + BACKENDS[backend - 1]
"""

_ROWS = """\
registered = set()
table = {row: fresh_row(registered, row) for row in rows}
for key in registrations:
    registered.add(key)
    changed = set(runtime_keys(key))
    if key.startswith("Composite"):
        changed.add("Undefined")
    if autograd_key_of(key) is not None:
        changed.add(autograd_key_of(key))
    for row in changed & set(rows):
        table[row] = fresh_row(registered, row)
return [table[row] for row in rows]
"""

_REACHED = """\
ks = (tensor_raw | included_raw) & ~(excluded_raw & ~BACKEND_MASK)
while True:
    k = top_key(ks)
    if k not in fallthrough:
        return k
    ks &= ~(key_bits(k) & ~BACKEND_MASK)
"""

_SCALE = """\
lib.define("scale(Tensor self, float factor) -> Tensor")
lib.impl("scale", lambda self, factor: self * factor, "CPU")
"""

_MODES = """\
autograd = bits("AutogradFunctionality", "AutogradOther", "AutogradNestedTensor")
included, excluded, inference = DEFAULT_INCLUDED, DEFAULT_EXCLUDED, False
for name, args, kwargs in modes:
    if name == "inference_mode":
        inference = kwargs.get("mode", args[0] if args else True)
        if inference:
            included, excluded = included & ~bits("ADInplaceOrView"), excluded | autograd
        else:
            included, excluded = included | bits("ADInplaceOrView"), excluded & ~autograd
    elif name == "autocast":
        device_type = kwargs.get("device_type", args[0] if args else None)
        key = bits("Autocast" + device_type.upper())
        excluded = excluded & ~key if kwargs.get("enabled", True) else excluded | key
if device == "cpu":
    keys = bits("CPU", "ADInplaceOrView", "AutogradCPU", "AutocastCPU")
else:
    keys = bits("Meta", "ADInplaceOrView", "AutogradMeta")
if inference:
    keys &= ~(bits("ADInplaceOrView") | autograd)
return included, excluded, keys
"""


def _sub(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


WRONG = {
    "ex1_highest_priority_key": [
        (
            "the lowest backend bit instead of the highest",
            _sub(
                _HIGHEST,
                "backend = (raw & ((1 << nb) - 1)).bit_length()",
                "low = raw & ((1 << nb) - 1)\nbackend = (low & -low).bit_length()",
            ),
        ),
        (
            "functionality f taken at bit 16 + f (Undefined given a bit of its own)",
            _sub(
                _HIGHEST,
                "functionality = FUNCTIONALITIES[top - nb]",
                "functionality = FUNCTIONALITIES[top - nb - 1]",
            ),
        ),
        (
            "every functionality takes the backend's name, per-backend or not",
            _sub(
                _HIGHEST,
                "if functionality not in PER_BACKEND:\n    return functionality\n",
                "if functionality not in PER_BACKEND:\n"
                "    backend = (raw & ((1 << nb) - 1)).bit_length()\n"
                "    return functionality + (BACKENDS[backend - 1] if backend else '')\n",
            ),
        ),
        (
            "a per-backend functionality without a backend bit is Undefined",
            _sub(
                _HIGHEST,
                'return "StartOf" + PER_BACKEND[functionality][0] + "Backends"',
                'return "Undefined"',
            ),
        ),
    ],
    "ex3_reached_key": [
        (
            "the thread-local exclude set ignored",
            _sub(
                _REACHED,
                "ks = (tensor_raw | included_raw) & ~(excluded_raw & ~BACKEND_MASK)",
                "ks = tensor_raw | included_raw",
            ),
        ),
        (
            "excluded keys removed with their backend bits",
            _sub(
                _REACHED,
                "ks = (tensor_raw | included_raw) & ~(excluded_raw & ~BACKEND_MASK)",
                "ks = (tensor_raw | included_raw) & ~excluded_raw",
            ),
        ),
        (
            "a fallthrough key removed with its backend bit",
            _sub(_REACHED, "ks &= ~(key_bits(k) & ~BACKEND_MASK)", "ks &= ~key_bits(k)"),
        ),
        (
            "the thread-local include set ignored",
            _sub(
                _REACHED,
                "ks = (tensor_raw | included_raw) & ~(excluded_raw & ~BACKEND_MASK)",
                "ks = tensor_raw & ~(excluded_raw & ~BACKEND_MASK)",
            ),
        ),
        (
            "included applied after excluded (an included key comes back)",
            _sub(
                _REACHED,
                "ks = (tensor_raw | included_raw) & ~(excluded_raw & ~BACKEND_MASK)",
                "ks = (tensor_raw & ~(excluded_raw & ~BACKEND_MASK)) | included_raw",
            ),
        ),
    ],
    "ex4_register_scale": [
        (
            "the kernel registered to CompositeExplicitAutograd (it then serves SparseCPU too)",
            _sub(_SCALE, '"CPU")', '"CompositeExplicitAutograd")'),
        ),
        (
            "no key given: torch's default, CompositeImplicitAutograd",
            _sub(_SCALE, ', "CPU")', ")"),
        ),
        (
            "the kernel registered to AutogradCPU",
            _sub(_SCALE, '"CPU")', '"AutogradCPU")'),
        ),
        (
            "the kernel adds the factor",
            _sub(_SCALE, "self * factor", "self + factor"),
        ),
    ],
}

# New wrong answers (a second round of plausible student mistakes).
WRONG["ex1_highest_priority_key"] += [
    (
        "a set of backend bits only is named after its highest backend",
        _sub(
            _HIGHEST,
            'if top <= nb:\n    return "Undefined"',
            'if top <= nb:\n    return BACKENDS[top - 1] if top else "Undefined"',
        ),
    ),
    (
        "functionality f taken at bit 14 + f (one bit too low)",
        _sub(
            _HIGHEST,
            "functionality = FUNCTIONALITIES[top - nb]",
            "functionality = FUNCTIONALITIES[min(top - nb + 1, len(FUNCTIONALITIES) - 1)]",
        ),
    ),
    (
        "the marker key spelt with the prefix instead of the functionality's name",
        _sub(
            _HIGHEST,
            'return "StartOf" + PER_BACKEND[functionality][0] + "Backends"',
            'return "StartOf" + PER_BACKEND[functionality][1] + "Backends"',
        ),
    ),
    (
        "the lowest functionality bit decides",
        _sub(
            _HIGHEST,
            "functionality = FUNCTIONALITIES[top - nb]",
            "high = raw >> nb\nfunctionality = FUNCTIONALITIES[(high & -high).bit_length()]",
        ),
    ),
    (
        "a per-backend key named without its prefix (AutogradCPU read as CPU)",
        _sub(
            _HIGHEST,
            "return PER_BACKEND[functionality][1] + BACKENDS[backend - 1]",
            "return BACKENDS[backend - 1]",
        ),
    ),
]

WRONG["ex3_reached_key"] += [
    (
        "only one fallthrough skipped (no loop)",
        """\
ks = (tensor_raw | included_raw) & ~(excluded_raw & ~BACKEND_MASK)
k = top_key(ks)
if k in fallthrough:
    k = top_key(ks & ~(key_bits(k) & ~BACKEND_MASK))
return k
""",
    ),
    (
        "the exclude set applied to the included keys only, not to the tensor's",
        _sub(
            _REACHED,
            "ks = (tensor_raw | included_raw) & ~(excluded_raw & ~BACKEND_MASK)",
            "ks = tensor_raw | (included_raw & ~(excluded_raw & ~BACKEND_MASK))",
        ),
    ),
    (
        "a skipped fallthrough removed from the tensor's keys only (the included set brings "
        "it back)",
        """\
tensor = tensor_raw
for _ in range(64):
    ks = (tensor | included_raw) & ~(excluded_raw & ~BACKEND_MASK)
    k = top_key(ks)
    if k not in fallthrough:
        return k
    tensor &= ~(key_bits(k) & ~BACKEND_MASK)
return k
""",
    ),
    (
        "the default include set (BackendSelect, ADInplaceOrView) assumed, included_raw unread",
        _sub(
            _REACHED,
            "ks = (tensor_raw | included_raw) & ~(excluded_raw & ~BACKEND_MASK)",
            "ks = (tensor_raw | key_bits('BackendSelect') | key_bits('ADInplaceOrView'))"
            " & ~(excluded_raw & ~BACKEND_MASK)",
        ),
    ),
    (
        "the excluded bits toggled with ^ instead of cleared",
        _sub(
            _REACHED,
            "ks = (tensor_raw | included_raw) & ~(excluded_raw & ~BACKEND_MASK)",
            "ks = (tensor_raw | included_raw) ^ (excluded_raw & ~BACKEND_MASK)",
        ),
    ),
]

WRONG["ex4_register_scale"] += [
    (
        "factor declared int in the schema",
        _sub(_SCALE, "float factor", "int factor"),
    ),
    (
        "factor given a default in the schema",
        _sub(_SCALE, "float factor)", "float factor=1.0)"),
    ),
    (
        "the kernel registered to CPU and SparseCPU",
        _SCALE + 'lib.impl("scale", lambda self, factor: self * factor, "SparseCPU")\n',
    ),
    (
        "the kernel registered to CompositeExplicitAutogradNonFunctional",
        _sub(_SCALE, '"CPU")', '"CompositeExplicitAutogradNonFunctional")'),
    ),
    (
        "the kernel scales its input in place",
        _sub(_SCALE, "self * factor", "self.mul_(factor)"),
    ),
    (
        "the kernel returns a torch.Tensor",
        _sub(_SCALE, "self * factor", "torch.tensor(self.numpy()) * factor"),
    ),
]

WRONG["ex2_rows_after"] = [
    (
        "every row recomputed at every registration (no stale rows)",
        _sub(_ROWS, "for row in changed & set(rows):", "for row in rows:"),
    ),
    (
        "a backend registration does not refresh its autograd row",
        _sub(_ROWS, "if autograd_key_of(key) is not None:", "if False:"),
    ),
    (
        "the Composite aliases do not refresh Undefined",
        _sub(_ROWS, 'if key.startswith("Composite"):', "if False:"),
    ),
    (
        "device ignored: only CPU's autograd row refreshed (Meta, XLA forgotten)",
        _sub(_ROWS, "if autograd_key_of(key) is not None:", 'if key == "CPU":'),
    ),
    (
        "an alias refreshes no row of its expansion, only a row named like itself",
        _sub(_ROWS, "changed = set(runtime_keys(key))", "changed = {key}"),
    ),
    (
        "the table starts empty ('missing') instead of computed for no kernel",
        _sub(
            _ROWS,
            "table = {row: fresh_row(registered, row) for row in rows}",
            'table = {row: "missing" for row in rows}',
        ),
    ),
    (
        "hard-coded: the rows of the visible example, CompositeImplicitAutograd everywhere",
        'return ["CompositeImplicitAutograd"] * len(rows)\n',
    ),
]

WRONG["ex5_keys_under"] = [
    (
        "device ignored: a meta tensor given CPU's keys",
        _sub(_MODES, 'if device == "cpu":', "if True:"),
    ),
    (
        "keyword arguments ignored (mode=False read as True, enabled=False as True)",
        _sub(
            _sub(
                _MODES, 'kwargs.get("mode", args[0] if args else True)', "args[0] if args else True"
            ),
            'kwargs.get("enabled", True)',
            "True",
        ),
    ),
    (
        "a tensor that needs no gradient given no autograd keys",
        _sub(
            _MODES, "if inference:\n    keys &=", "if inference or not requires_grad:\n    keys &="
        ),
    ),
    (
        "inference_mode(False) treated as inference mode (the flag ignored)",
        _sub(
            _MODES, 'inference = kwargs.get("mode", args[0] if args else True)', "inference = True"
        ),
    ),
    (
        "the autograd keys removed by name (AutogradCPU clears the CPU backend bit too)",
        _sub(
            _MODES,
            'keys &= ~(bits("ADInplaceOrView") | autograd)',
            'keys &= ~bits("ADInplaceOrView", "AutogradCPU", "AutogradMeta")',
        ),
    ),
    (
        "no_grad treated as inference mode",
        _sub(
            _MODES,
            'if name == "inference_mode":\n        inference = kwargs.get("mode", args[0] if args else True)',
            'if name in ("inference_mode", "no_grad"):\n        inference = kwargs.get("mode", args[0] if args else True)',
        ),
    ),
    (
        "hard-coded: the visible example's CPU inference tensor keys whatever the stack",
        "return DEFAULT_INCLUDED & ~bits('ADInplaceOrView'), DEFAULT_EXCLUDED, bits('CPU', 'AutocastCPU')\n",
    ),
]

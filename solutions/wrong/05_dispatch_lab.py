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

_TABLE = """\
if key in registered:
    return "kernel"
for alias in ("CompositeExplicitAutogradNonFunctional", "CompositeExplicitAutograd"):
    if alias in registered and key in ALIAS_ROWS[alias]:
        return "default backend kernel"
cia = "CompositeImplicitAutograd"
if cia in registered and key in ALIAS_ROWS[cia]:
    if key == "AutogradOther" and registered & AUTOGRAD_BACKENDS["AutogradOther"]:
        return "ambiguous autogradother"
    own = registered & AUTOGRAD_BACKENDS.get(key, set())
    if not own and "CompositeExplicitAutograd" not in registered:
        return "math kernel"
if "Autograd" in registered and key in ALIAS_ROWS["Autograd"]:
    return "autograd kernel"
if key in FALLBACK_ROWS:
    return "backend fallback"
return "missing"
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

_AUTOCAST = """\
def eligible(dt):
    return dt.is_floating_point and dt != torch.float64

if op in policies["lower_precision_fp"]:
    target = torch.bfloat16
elif op in policies["fp32"]:
    target = torch.float32
elif op in policies["promote"]:
    wide = any(eligible(dt) and dt == torch.float32 for dt in dtypes)
    target = torch.float32 if wide else torch.bfloat16
else:
    return list(dtypes)
return [target if eligible(dt) else dt for dt in dtypes]
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
    "ex2_table_entry": [
        (
            "CompositeImplicitAutograd before CompositeExplicitAutograd",
            """\
if key in registered:
    return "kernel"
cia = "CompositeImplicitAutograd"
if cia in registered and key in ALIAS_ROWS[cia]:
    if key == "AutogradOther" and registered & AUTOGRAD_BACKENDS["AutogradOther"]:
        return "ambiguous autogradother"
    if not registered & AUTOGRAD_BACKENDS.get(key, set()):
        return "math kernel"
for alias in ("CompositeExplicitAutogradNonFunctional", "CompositeExplicitAutograd"):
    if alias in registered and key in ALIAS_ROWS[alias]:
        return "default backend kernel"
if "Autograd" in registered and key in ALIAS_ROWS["Autograd"]:
    return "autograd kernel"
if key in FALLBACK_ROWS:
    return "backend fallback"
return "missing"
""",
        ),
        (
            "the math kernel wins even where the backend has its own kernel",
            _sub(
                _TABLE,
                '    if not own and "CompositeExplicitAutograd" not in registered:\n'
                '        return "math kernel"',
                '    return "math kernel"',
            ),
        ),
        (
            "no ambiguous AutogradOther row",
            _sub(
                _TABLE,
                '    if key == "AutogradOther" and registered & AUTOGRAD_BACKENDS["AutogradOther"]:\n'
                '        return "ambiguous autogradother"\n',
                "",
            ),
        ),
        (
            "the Autograd alias before the composites",
            _sub(
                _TABLE,
                'if key in registered:\n    return "kernel"\n',
                'if key in registered:\n    return "kernel"\n'
                'if "Autograd" in registered and key in ALIAS_ROWS["Autograd"]:\n'
                '    return "autograd kernel"\n',
            ),
        ),
        (
            "CompositeExplicitAutogradNonFunctional ignored",
            _sub(
                _TABLE,
                '("CompositeExplicitAutogradNonFunctional", "CompositeExplicitAutograd")',
                '("CompositeExplicitAutograd",)',
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
    "ex5_autocast_dtypes": [
        (
            "float64 inputs cast too",
            _sub(_AUTOCAST, "dt.is_floating_point and dt != torch.float64", "dt.is_floating_point"),
        ),
        (
            "integer inputs cast too",
            _sub(_AUTOCAST, "dt.is_floating_point and dt != torch.float64", "dt != torch.float64"),
        ),
        (
            "promote always lowers to bfloat16",
            _sub(
                _AUTOCAST,
                "target = torch.float32 if wide else torch.bfloat16",
                "target = torch.bfloat16",
            ),
        ),
        (
            "lower_precision_fp casts float32 only (float16 left as it is)",
            _sub(
                _AUTOCAST,
                "return [target if eligible(dt) else dt for dt in dtypes]",
                "if target == torch.bfloat16 and op in policies['lower_precision_fp']:\n"
                "    return [target if dt == torch.float32 else dt for dt in dtypes]\n"
                "return [target if eligible(dt) else dt for dt in dtypes]",
            ),
        ),
        (
            "fp32 ops left alone (only lower-precision ops cast)",
            _sub(_AUTOCAST, "    target = torch.float32\nelif", "    return list(dtypes)\nelif"),
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

WRONG["ex2_table_entry"] += [
    (
        "CompositeExplicitAutograd serves every row, autograd rows included",
        _sub(
            _TABLE,
            '    if alias in registered and key in ALIAS_ROWS[alias]:\n'
            '        return "default backend kernel"',
            '    if alias in registered:\n        return "default backend kernel"',
        ),
    ),
    (
        "a CompositeExplicitAutogradNonFunctional kernel also keeps the math kernel away",
        _sub(
            _TABLE,
            'if not own and "CompositeExplicitAutograd" not in registered:',
            'if not own and not registered & {"CompositeExplicitAutograd",'
            ' "CompositeExplicitAutogradNonFunctional"}:',
        ),
    ),
    (
        "the math kernel is kept away only by a kernel at the row itself",
        _sub(
            _TABLE,
            'own = registered & AUTOGRAD_BACKENDS.get(key, set())',
            'own = registered & {key}',
        ),
    ),
    (
        "any backend kernel anywhere keeps the math kernel away",
        _sub(
            _TABLE,
            'own = registered & AUTOGRAD_BACKENDS.get(key, set())',
            'own = registered - set(ALIASES)',
        ),
    ),
    (
        "the backend fallback before the Autograd alias",
        _sub(
            _TABLE,
            'if "Autograd" in registered and key in ALIAS_ROWS["Autograd"]:\n'
            '    return "autograd kernel"\n'
            'if key in FALLBACK_ROWS:\n    return "backend fallback"\n',
            'if key in FALLBACK_ROWS:\n    return "backend fallback"\n'
            'if "Autograd" in registered and key in ALIAS_ROWS["Autograd"]:\n'
            '    return "autograd kernel"\n',
        ),
    ),
    (
        "ambiguous at every autograd row whose backend has a kernel",
        _sub(
            _TABLE,
            '    if key == "AutogradOther" and registered & AUTOGRAD_BACKENDS["AutogradOther"]:',
            '    if registered & AUTOGRAD_BACKENDS.get(key, set()):',
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

WRONG["ex5_autocast_dtypes"] += [
    (
        "lower_precision_fp casts to float16",
        _sub(_AUTOCAST, "    target = torch.bfloat16\nelif", "    target = torch.float16\nelif"),
    ),
    (
        "promote counts a float64 input as wide",
        _sub(
            _AUTOCAST,
            "wide = any(eligible(dt) and dt == torch.float32 for dt in dtypes)",
            "wide = any(dt in (torch.float32, torch.float64) for dt in dtypes)",
        ),
    ),
    (
        "ops on no list lowered to bfloat16",
        _sub(_AUTOCAST, "else:\n    return list(dtypes)", "else:\n    target = torch.bfloat16"),
    ),
    (
        "fp32 ops cast float64 down to float32",
        _sub(
            _AUTOCAST,
            "return [target if eligible(dt) else dt for dt in dtypes]",
            "if op in policies['fp32']:\n"
            "    return [target if dt.is_floating_point else dt for dt in dtypes]\n"
            "return [target if eligible(dt) else dt for dt in dtypes]",
        ),
    ),
    (
        "promote widens only when every eligible input is float32",
        _sub(
            _AUTOCAST,
            "wide = any(eligible(dt) and dt == torch.float32 for dt in dtypes)",
            "wide = all(dt == torch.float32 for dt in dtypes if eligible(dt))",
        ),
    ),
    (
        "promote looks at the first input only",
        _sub(
            _AUTOCAST,
            "wide = any(eligible(dt) and dt == torch.float32 for dt in dtypes)",
            "wide = dtypes[0] == torch.float32",
        ),
    ),
]

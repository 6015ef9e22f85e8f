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

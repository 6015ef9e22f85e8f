"""Resume functions: `__resume_at_N`, the rest of a frame from offset N, as a new function.

Mirrors torch/_dynamo/resume_execution.py (`ContinueExecutionCache.generate`) and the pieces
of torch/_dynamo/bytecode_transformation.py it needs, at torch v2.13.0. After a graph break
at offset N with k values on the stack, the rest of the frame must run with that stack and
those locals. Torch writes a new code object whose arguments are the stack values
(`___stack0`...) and the live locals, with a prologue that pushes the stack back and jumps to
N inside a copy of the original bytecode. This does the same on CPython 3.11 and 3.12, where
every jump is relative, so the original bytecode can follow the prologue unchanged:

    RESUME 0; LOAD_FAST ___stack0 ... (PUSH_NULL where the stack held a NULL); JUMP_FORWARD N

then the original code. Only the exception table (absolute offsets) and the line table (one
"no location" entry for the prologue) are rewritten, and the cell/free-variable indices,
which move up by the number of new locals. The resume function takes *every* local of the
original (None for the unbound ones; torch passes only the live ones).
"""

import dis
import inspect
import types

from .exc import unimplemented

_OP = dis.opmap


def _emit(out: list, op: str, arg: int = 0) -> None:
    """Append one instruction, with EXTENDED_ARG prefixes for an argument over 255."""
    for shift in (24, 16, 8):
        if arg >> shift:
            out += [_OP["EXTENDED_ARG"], (arg >> shift) & 0xFF]
    out += [_OP[op], arg & 0xFF]


def _varint(value: int, first: bool) -> bytes:
    """One exception-table number: 6-bit chunks, most significant first, 0x40 = more follow."""
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    out = [c | 0x40 for c in chunks[:-1]] + [chunks[-1]]
    if first:
        out[0] |= 0x80
    return bytes(out)


def _shift_exception_table(code: types.CodeType, units: int) -> bytes:
    out = b""
    for e in dis._parse_exception_table(code):
        depth_lasti = (e.depth << 1) | int(e.lasti)
        out += _varint(e.start // 2 + units, True) + _varint((e.end - e.start) // 2, False)
        out += _varint(e.target // 2 + units, False) + _varint(depth_lasti, False)
    return out


def _no_location(units: int) -> bytes:
    out = b""
    while units:
        n = min(8, units)
        out += bytes([0x80 | (15 << 3) | (n - 1)])
        units -= n
    return out


def generate_resume_code(code: types.CodeType, offset: int, null_idxes: list[int],
                         nstack: int) -> types.CodeType:  # fmt: skip
    """The code of `__resume_at_{offset}`: args = code's locals, then the non-NULL stack."""
    flags = code.co_flags
    if flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        unimplemented("cannot resume a generator or coroutine", kind="opcode")
    if code.co_cellvars:
        unimplemented("cannot resume a frame with cell variables", kind="opcode")
    nvalues = nstack - len(null_idxes)
    stack_names = tuple(f"___stack{i}" for i in range(nvalues))
    varnames = code.co_varnames + stack_names
    prologue: list = []
    if code.co_freevars:
        _emit(prologue, "COPY_FREE_VARS", len(code.co_freevars))
    _emit(prologue, "RESUME", 0)
    j = 0
    for i in range(nstack):
        if i in null_idxes:
            _emit(prologue, "PUSH_NULL")
        else:
            _emit(prologue, "LOAD_FAST", len(code.co_varnames) + j)
            j += 1
    # The jump is the prologue's last instruction, so its relative target is N itself.
    _emit(prologue, "JUMP_FORWARD", offset // 2)
    body = bytearray(code.co_code)
    if code.co_freevars:  # free-variable slots follow the locals: they move up by nvalues
        prev_ext = False
        for inst in dis.get_instructions(code):
            if inst.opcode in dis.hasfree and inst.opname != "COPY_FREE_VARS":
                if prev_ext or inst.arg + nvalues > 0xFF:
                    unimplemented("too many locals to resume this frame", kind="opcode")
                body[inst.offset + 1] = inst.arg + nvalues
            prev_ext = inst.opname == "EXTENDED_ARG"
    units = len(prologue) // 2
    return code.replace(
        co_argcount=len(varnames),
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_nlocals=len(varnames),
        co_varnames=varnames,
        co_flags=flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS),
        co_name=f"__resume_at_{offset}",
        co_qualname=f"__resume_at_{offset}",
        co_code=bytes(prologue) + bytes(body),
        co_linetable=_no_location(units) + code.co_linetable,
        co_exceptiontable=_shift_exception_table(code, units),
        co_stacksize=max(code.co_stacksize, nstack) + 1,
    )


def make_resume_function(fn: types.FunctionType, offset: int, null_idxes, nstack: int):
    """A real Python function running `fn`'s code from `offset` (torch: `__resume_at_N`)."""
    new_code = generate_resume_code(fn.__code__, offset, list(null_idxes), nstack)
    return types.FunctionType(new_code, fn.__globals__, new_code.co_name, None, fn.__closure__)

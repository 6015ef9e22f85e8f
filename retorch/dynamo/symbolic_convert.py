"""InstructionTranslator: a symbolic interpreter over CPython 3.11/3.12 bytecode.

Mirrors torch/_dynamo/symbolic_convert.py at torch v2.13.0. `InstructionTranslatorBase` steps
through `dis` instructions with a stack of VariableTrackers and a dict of symbolic locals, one
method per opcode, named after the opcode, as torch's are (`LOAD_FAST`, `CALL`, `BINARY_OP`,
`POP_JUMP_IF_FALSE` via `generic_jump`...). Tensor operations become nodes of the OutputGraph.
`InstructionTranslator` translates a frame and stops at RETURN_VALUE or at the first graph
break; `InliningInstructionTranslator` traces a called Python function (a helper, an
nn.Module's forward) into the same graph, as torch inlines.

The opcode subset (an opcode outside it is a graph break that names it):
  both:  NOP RESUME CACHE EXTENDED_ARG PRECALL PUSH_NULL KW_NAMES CALL CALL_FUNCTION_EX
         LOAD_FAST STORE_FAST DELETE_FAST LOAD_CONST LOAD_GLOBAL LOAD_DEREF COPY_FREE_VARS
         LOAD_ATTR LOAD_METHOD BINARY_OP BINARY_SUBSCR STORE_SUBSCR BUILD_SLICE COMPARE_OP
         IS_OP CONTAINS_OP UNARY_NEGATIVE UNARY_POSITIVE UNARY_INVERT UNARY_NOT BUILD_TUPLE
         BUILD_LIST LIST_APPEND LIST_EXTEND LIST_TO_TUPLE UNPACK_SEQUENCE POP_TOP COPY SWAP
         GET_ITER FOR_ITER JUMP_FORWARD JUMP_BACKWARD JUMP_BACKWARD_NO_INTERRUPT RETURN_VALUE
  3.11:  POP_JUMP_{FORWARD,BACKWARD}_IF_{TRUE,FALSE,NONE,NOT_NONE},
         JUMP_IF_{TRUE,FALSE}_OR_POP
  3.12:  POP_JUMP_IF_{TRUE,FALSE,NONE,NOT_NONE} RETURN_CONST LOAD_FAST_CHECK
         LOAD_FAST_AND_CLEAR END_FOR BINARY_SLICE STORE_SLICE CALL_INTRINSIC_1 (list->tuple, +x)
Outside it, among others: with/try (BEFORE_WITH, PUSH_EXC_INFO), BUILD_MAP and dicts,
MAKE_FUNCTION (lambdas, comprehensions on 3.11), FORMAT_VALUE/BUILD_STRING (f-strings),
STORE_ATTR, STORE_GLOBAL, IMPORT_NAME, RAISE_VARARGS, YIELD_VALUE. An instruction inside a
try block's range is never traced: the rest of the frame runs in Python from there.
"""

import builtins
import dis
import inspect
import operator
import sys
import types

from .exc import Unsupported, unimplemented
from .source import (
    AttrSource,
    ClosureSource,
    GetItemSource,
    GlobalSource,
    LocalSource,
    ModuleGlobalSource,
)
from .variables import (
    NULL,
    BaseListVariable,
    ConstantVariable,
    LazyVariable,
    ListIteratorVariable,
    ListVariable,
    TensorVariable,
    TupleVariable,
    VariableTracker,
    wrap,
    wrap_fx_proxy,
)

PY312 = sys.version_info >= (3, 12)
SUPPORTED_VERSIONS = ((3, 11), (3, 12))
MAX_INLINE_DEPTH = 16

BINARY_OPS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "@": operator.matmul,
    "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift,
    ">>": operator.rshift, "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul,
    "/=": operator.itruediv, "//=": operator.ifloordiv, "%=": operator.imod,
    "**=": operator.ipow, "@=": operator.imatmul, "&=": operator.iand, "|=": operator.ior,
    "^=": operator.ixor, "<<=": operator.ilshift, ">>=": operator.irshift,
}  # fmt: skip
COMPARE_OPS = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
               ">": operator.gt, ">=": operator.ge}  # fmt: skip
CALL_OPS = {"CALL", "CALL_FUNCTION_EX"}


def check_python_version() -> None:
    if sys.version_info[:2] not in SUPPORTED_VERSIONS:
        raise RuntimeError(
            f"retorch.dynamo reads CPython 3.11 and 3.12 bytecode; this is Python "
            f"{sys.version_info.major}.{sys.version_info.minor}. Run the function uncompiled."
        )


def is_jump(inst) -> bool:
    return "JUMP" in inst.opname and "_IF_" in inst.opname


class InstructionTranslatorBase:
    def __init__(self, code: types.CodeType, output, symbolic_locals: dict, depth: int = 0):
        check_python_version()
        self.code, self.output, self.depth = code, output, depth
        self.instructions = list(dis.get_instructions(code))
        self.index_of = {inst.offset: i for i, inst in enumerate(self.instructions)}
        self.stack: list = []
        self.symbolic_locals = symbolic_locals
        self.kw_names: tuple = ()
        self.ip = 0
        self.return_value: VariableTracker | None = None

    # ----- helpers
    def push(self, v) -> None:
        self.stack.append(v)

    def pop(self):
        return self.stack.pop()

    def popn(self, n: int) -> list:
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    def jump_to(self, offset: int) -> None:
        self.ip = self.index_of[offset]

    def step(self) -> None:
        inst = self.instructions[self.ip]
        self.ip += 1
        handler = getattr(self, inst.opname, None)
        if handler is None:
            unimplemented(f"opcode {inst.opname} is outside the supported subset", kind="opcode")
        handler(inst)

    def read_local(self, name):
        raise NotImplementedError

    def load_global(self, name):
        raise NotImplementedError

    def load_closure(self, name):
        raise NotImplementedError

    def inline_user_function(self, fn, fn_source, args, kwargs):
        if self.depth >= MAX_INLINE_DEPTH:
            unimplemented("inlining went too deep (recursion?)", kind="inline")
        return InliningInstructionTranslator.inline_call(self, fn, fn_source, args, kwargs)

    # ----- opcodes that do nothing here
    def NOP(self, inst):
        pass

    RESUME = CACHE = EXTENDED_ARG = PRECALL = COPY_FREE_VARS = NOP

    # ----- locals, constants, globals, attributes
    def LOAD_FAST(self, inst):
        self.push(self.read_local(inst.argval))

    LOAD_FAST_CHECK = LOAD_FAST

    def LOAD_FAST_AND_CLEAR(self, inst):  # 3.12 inlined comprehensions save the outer value
        self.push(self.symbolic_locals.pop(inst.argval, NULL))

    def STORE_FAST(self, inst):
        v = self.pop()
        if v is NULL:
            self.symbolic_locals.pop(inst.argval, None)
        else:
            self.symbolic_locals[inst.argval] = v

    def DELETE_FAST(self, inst):
        self.read_local(inst.argval)
        del self.symbolic_locals[inst.argval]

    def LOAD_CONST(self, inst):
        if isinstance(inst.argval, types.CodeType):
            unimplemented("a nested code object (lambda, comprehension)", kind="opcode")
        self.push(ConstantVariable(inst.argval))

    def RETURN_CONST(self, inst):
        self.return_value = ConstantVariable(inst.argval)

    def RETURN_VALUE(self, inst):
        self.return_value = self.pop()

    def LOAD_GLOBAL(self, inst):
        if inst.arg & 1:
            self.push(NULL)
        self.push(self.load_global(inst.argval))

    def LOAD_DEREF(self, inst):
        if inst.argval not in self.code.co_freevars:
            unimplemented(f"LOAD_DEREF of cell variable {inst.argval!r}", kind="opcode")
        self.push(self.load_closure(inst.argval))

    def LOAD_ATTR(self, inst):
        obj = self.pop()
        if PY312 and inst.arg & 1:  # 3.12 folded LOAD_METHOD into LOAD_ATTR's low bit
            self.push(NULL)
        self.push(obj.var_getattr(self, inst.argval))

    def LOAD_METHOD(self, inst):  # 3.11: [NULL, bound attribute] calls the same as [meth, self]
        obj = self.pop()
        self.push(NULL)
        self.push(obj.var_getattr(self, inst.argval))

    # ----- calls
    def PUSH_NULL(self, inst):
        self.push(NULL)

    def KW_NAMES(self, inst):
        self.kw_names = self.code.co_consts[inst.arg]

    def CALL(self, inst):
        args = self.popn(inst.arg)
        fn_or_self, meth_or_null = self.pop(), self.pop()
        if meth_or_null is NULL:
            fn = fn_or_self
        else:
            fn, args = meth_or_null, [fn_or_self, *args]
        kw, self.kw_names = self.kw_names, ()
        kwargs = dict(zip(kw, args[len(args) - len(kw) :]))
        args = args[: len(args) - len(kw)]
        self.push(fn.call_function(self, args, kwargs))

    def CALL_FUNCTION_EX(self, inst):
        if inst.arg & 1:
            unimplemented("f(*args, **kwargs): keyword-argument dicts are outside the subset")
        args = self.pop().unpack(self)
        fn = self.pop()
        self.pop()  # the NULL below the callable
        self.push(fn.call_function(self, args, {}))

    # ----- operators
    def _binop(self, op, a, b):
        if a.is_python_constant() and b.is_python_constant():
            try:
                return ConstantVariable(op(a.as_python_constant(), b.as_python_constant()))
            except Exception as e:
                unimplemented(f"{op.__name__} on constants raised {type(e).__name__}")
        if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
            return wrap_fx_proxy(self, "call_function", op, [a, b], {})
        if isinstance(a, BaseListVariable) and isinstance(b, BaseListVariable):
            if op in (operator.add, operator.iadd) and type(a) is type(b):
                if op is operator.iadd and isinstance(a, ListVariable):
                    a.call_method(self, "extend", [b], {})  # `l += m` mutates l
                    return a
                return type(a)(a.items + b.items, owner=self)
        if isinstance(a, BaseListVariable) and op is operator.mul and b.is_python_constant():
            return type(a)(a.items * b.as_python_constant(), owner=self)
        unimplemented(f"{op.__name__} on {a} and {b}")

    def BINARY_OP(self, inst):
        b, a = self.pop(), self.pop()
        self.push(self._binop(BINARY_OPS[inst.argrepr], a, b))

    def _getitem(self, obj, index):
        if isinstance(obj, TensorVariable):
            return wrap_fx_proxy(self, "call_function", operator.getitem, [obj, index], {})
        if isinstance(obj, BaseListVariable):
            return obj.getitem(self, index)
        if obj.is_python_constant() and index.is_python_constant():
            return self._binop(operator.getitem, obj, index)
        unimplemented(f"indexing {obj}")

    def BINARY_SUBSCR(self, inst):
        index, obj = self.pop(), self.pop()
        self.push(self._getitem(obj, index))

    def _setitem(self, obj, index, value):
        if isinstance(obj, TensorVariable):
            wrap_fx_proxy(self, "call_function", operator.setitem, [obj, index, value], {})
        elif isinstance(obj, ListVariable) and obj.source is None and obj.owner is self:
            obj.items[index.as_python_constant()] = value
        else:
            unimplemented(f"item assignment into {obj}")

    def STORE_SUBSCR(self, inst):
        index, obj, value = self.pop(), self.pop(), self.pop()
        self._setitem(obj, index, value)

    def BINARY_SLICE(self, inst):
        end, start, obj = self.pop(), self.pop(), self.pop()
        self.push(self._getitem(obj, self._slice([start, end])))

    def STORE_SLICE(self, inst):
        end, start, obj, value = self.pop(), self.pop(), self.pop(), self.pop()
        self._setitem(obj, self._slice([start, end]), value)

    def _slice(self, parts):
        if not all(p.is_python_constant() for p in parts):
            unimplemented("a slice with non-constant bounds")
        return ConstantVariable(slice(*[p.as_python_constant() for p in parts]))

    def BUILD_SLICE(self, inst):
        self.push(self._slice(self.popn(inst.arg)))

    def COMPARE_OP(self, inst):
        b, a = self.pop(), self.pop()
        op = COMPARE_OPS[inst.argval.removeprefix("bool(").removesuffix(")")]
        self.push(self._binop(op, a, b))

    def IS_OP(self, inst):
        b, a = self.pop(), self.pop()
        if a.is_python_constant() and b.is_python_constant():
            result = a.as_python_constant() is b.as_python_constant()
        elif a is b:
            result = True
        elif any(isinstance(v, ConstantVariable) and v.value is None for v in (a, b)):
            result = False  # None against a tensor, a module, a list...: never the same object
        else:
            unimplemented(f"`is` between {a} and {b}")
        self.push(ConstantVariable(result != bool(inst.arg)))

    def CONTAINS_OP(self, inst):
        container, item = self.pop(), self.pop()
        if not (item.is_python_constant() and container.is_python_constant()):
            unimplemented(f"`in` on {container}")
        found = item.as_python_constant() in container.as_python_constant()
        self.push(ConstantVariable(found != bool(inst.arg)))

    def _unary(self, op):
        v = self.pop()
        if v.is_python_constant():
            self.push(ConstantVariable(op(v.as_python_constant())))
        elif isinstance(v, TensorVariable):
            self.push(wrap_fx_proxy(self, "call_function", op, [v], {}))
        else:
            unimplemented(f"{op.__name__} of {v}")

    def UNARY_NEGATIVE(self, inst):
        self._unary(operator.neg)

    def UNARY_POSITIVE(self, inst):
        self._unary(operator.pos)

    def UNARY_INVERT(self, inst):
        self._unary(operator.invert)

    def UNARY_NOT(self, inst):
        v = self.pop()
        self.push(ConstantVariable(not v.truth()))

    def CALL_INTRINSIC_1(self, inst):
        if inst.argrepr == "INTRINSIC_LIST_TO_TUPLE":
            self.LIST_TO_TUPLE(inst)
        elif inst.argrepr == "INTRINSIC_UNARY_POSITIVE":
            self._unary(operator.pos)
        else:
            unimplemented(f"opcode CALL_INTRINSIC_1 ({inst.argrepr})", kind="opcode")

    # ----- containers
    def BUILD_TUPLE(self, inst):
        self.push(TupleVariable(self.popn(inst.arg), owner=self))

    def BUILD_LIST(self, inst):
        self.push(ListVariable(self.popn(inst.arg), owner=self))

    def LIST_APPEND(self, inst):
        v = self.pop()
        self.stack[-inst.arg].items.append(v)

    def LIST_EXTEND(self, inst):
        items = self.stack[-1].unpack(self)
        self.pop()
        self.stack[-inst.arg].items.extend(items)

    def LIST_TO_TUPLE(self, inst):
        self.push(TupleVariable(self.pop().unpack(self), owner=self))

    def UNPACK_SEQUENCE(self, inst):
        items = self.stack[-1].unpack(self)
        if len(items) != inst.arg:
            unimplemented(f"unpacking {len(items)} values into {inst.arg}")
        self.pop()
        self.stack.extend(reversed(items))

    # ----- stack shuffles
    def POP_TOP(self, inst):
        self.pop()

    def COPY(self, inst):
        self.push(self.stack[-inst.arg])

    def SWAP(self, inst):
        self.stack[-1], self.stack[-inst.arg] = self.stack[-inst.arg], self.stack[-1]

    # ----- iteration and jumps
    def GET_ITER(self, inst):
        v = self.stack[-1]
        if isinstance(v, ListIteratorVariable):
            if v.owner is not self:
                unimplemented("iterating an iterator another frame built")
            return
        it = ListIteratorVariable(v.unpack(self), owner=self)
        self.stack[-1] = it

    def FOR_ITER(self, inst):
        v = self.stack[-1].next_variable(self)
        if v is not None:
            self.push(v)
            return
        self.pop()
        self.jump_to(inst.argval)
        if PY312:  # 3.12: an exhausted FOR_ITER also skips the END_FOR it jumps to
            self.ip += 1

    def END_FOR(self, inst):
        self.popn(2)

    def JUMP_FORWARD(self, inst):
        self.jump_to(inst.argval)

    JUMP_BACKWARD = JUMP_BACKWARD_NO_INTERRUPT = JUMP_FORWARD

    def generic_jump(self, inst):
        """POP_JUMP_*_IF_{TRUE,FALSE,NONE,NOT_NONE} and JUMP_IF_{TRUE,FALSE}_OR_POP."""
        v = self.stack[-1]
        name = inst.opname
        if name.endswith("_NONE"):
            is_none = v.as_python_constant() is None if v.is_python_constant() else False
            taken = is_none != name.endswith("NOT_NONE")
        else:
            truth = v.truth()  # a tensor raises here: data-dependent control flow
            taken = truth if "IF_TRUE" in name else not truth
        if name.endswith("_OR_POP"):
            if not taken:
                self.pop()
        else:
            self.pop()
        if taken:
            self.jump_to(inst.argval)

    POP_JUMP_IF_TRUE = POP_JUMP_IF_FALSE = POP_JUMP_IF_NONE = POP_JUMP_IF_NOT_NONE = generic_jump
    POP_JUMP_FORWARD_IF_TRUE = POP_JUMP_FORWARD_IF_FALSE = generic_jump
    POP_JUMP_FORWARD_IF_NONE = POP_JUMP_FORWARD_IF_NOT_NONE = generic_jump
    POP_JUMP_BACKWARD_IF_TRUE = POP_JUMP_BACKWARD_IF_FALSE = generic_jump
    POP_JUMP_BACKWARD_IF_NONE = POP_JUMP_BACKWARD_IF_NOT_NONE = generic_jump
    JUMP_IF_TRUE_OR_POP = JUMP_IF_FALSE_OR_POP = generic_jump


class InstructionTranslator(InstructionTranslatorBase):
    """Translates one frame from its first instruction (or a resume function's) to a stop."""

    def __init__(self, fn, frame, output):
        code = fn.__code__
        nargs = code.co_argcount + code.co_kwonlyargcount
        nargs += bool(code.co_flags & inspect.CO_VARARGS) + bool(
            code.co_flags & inspect.CO_VARKEYWORDS
        )
        symbolic_locals = {
            name: LazyVariable(frame.f_locals[name], LocalSource(name))
            for name in code.co_varnames[:nargs]
            if name in frame.f_locals
        }
        super().__init__(code, output, symbolic_locals)
        self.fn, self.frame = fn, frame
        self.try_ranges = [(e.start, e.end) for e in dis._parse_exception_table(code)]

    def read_local(self, name):
        if name not in self.symbolic_locals:
            unimplemented(f"local {name!r} read before assignment", kind="opcode")
        v = self.symbolic_locals[name]
        if isinstance(v, LazyVariable):
            v = self.symbolic_locals[name] = wrap(self, v.value, v.source)
        return v

    def load_global(self, name):
        g = self.frame.f_globals
        if name not in g and not hasattr(builtins, name):
            unimplemented(f"global {name!r} is not defined", kind="opcode")
        source = GlobalSource(name)
        return wrap(self, source.get(self.frame), source, guard=name in g)

    def load_closure(self, name):
        i = self.code.co_freevars.index(name)
        source = ClosureSource(name, i)
        return wrap(self, source.get(self.frame), source)

    def in_try_block(self, offset: int) -> bool:
        return any(start <= offset < end for start, end in self.try_ranges)

    def run(self):
        """Trace until RETURN_VALUE or a graph break; return (instruction, Unsupported | None)."""
        while True:
            inst = self.instructions[self.ip]
            if self.in_try_block(inst.offset):
                return inst, Unsupported("a try/with block: the rest runs in Python", "opcode")
            state = (list(self.stack), dict(self.symbolic_locals), self.kw_names, self.ip)
            checkpoint = self.output.checkpoint()
            try:
                self.step()
            except Unsupported as e:
                self.stack, self.symbolic_locals, self.kw_names, self.ip = state
                self.output.restore(checkpoint)
                return inst, e
            if self.return_value is not None:
                return inst, None


class InliningInstructionTranslator(InstructionTranslatorBase):
    """Traces a called Python function into the caller's graph; any break aborts the inlining."""

    @classmethod
    def inline_call(cls, parent, fn, fn_source, args, kwargs):
        code = fn.__code__
        if code.co_flags & (
            inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
        ):
            unimplemented(f"inlining generator {fn.__qualname__}", kind="inline")
        if code.co_cellvars:
            unimplemented(f"inlining {fn.__qualname__}, which has cell variables", kind="inline")
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as e:
            unimplemented(f"calling {fn.__qualname__}: {e}", kind="inline")
        symbolic_locals = {}
        for p in inspect.signature(fn).parameters.values():
            if p.name in bound.arguments:
                v = bound.arguments[p.name]
                if p.kind is p.VAR_POSITIONAL:
                    v = TupleVariable(list(v))
                elif p.kind is p.VAR_KEYWORD:
                    if v:
                        unimplemented("inlining a call with **kwargs", kind="inline")
                    unimplemented("inlining a function taking **kwargs", kind="inline")
            elif p.default is not p.empty:
                v = wrap(parent, p.default, None, guard=False)
            else:
                v = None
            if v is not None:
                symbolic_locals[p.name] = v
        tx = cls(parent, fn, fn_source, symbolic_locals)
        while tx.return_value is None:
            tx.step()
        return tx.return_value

    def __init__(self, parent, fn, fn_source, symbolic_locals):
        super().__init__(fn.__code__, parent.output, symbolic_locals, parent.depth + 1)
        self.fn, self.fn_source = fn, fn_source
        # torch's own functions (nn.Linear.forward reading F) are not guarded, as in torch.
        self.guarded = not (getattr(fn, "__module__", "") or "").startswith("torch")

    def read_local(self, name):
        if name not in self.symbolic_locals:
            unimplemented(f"local {name!r} read before assignment", kind="inline")
        return self.symbolic_locals[name]

    def load_global(self, name):
        source = ModuleGlobalSource(self.fn.__globals__, name)
        try:
            value = source.get(None)
        except AttributeError:
            unimplemented(f"global {name!r} is not defined", kind="inline")
        return wrap(self, value, source, guard=self.guarded and name in self.fn.__globals__)

    def load_closure(self, name):
        i = self.code.co_freevars.index(name)
        value = self.fn.__closure__[i].cell_contents
        source = None
        if self.fn_source is not None:
            cell = GetItemSource(AttrSource(self.fn_source, "__closure__"), i)
            source = AttrSource(cell, "cell_contents")
        return wrap(self, value, source, guard=self.guarded)

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
         MAKE_FUNCTION MAKE_CELL LOAD_CLOSURE STORE_DEREF BUILD_MAP BUILD_CONST_KEY_MAP MAP_ADD
         DICT_UPDATE FORMAT_VALUE BUILD_STRING; in an inlined generator RETURN_GENERATOR and
         YIELD_VALUE
  3.11:  POP_JUMP_{FORWARD,BACKWARD}_IF_{TRUE,FALSE,NONE,NOT_NONE},
         JUMP_IF_{TRUE,FALSE}_OR_POP
  3.12:  POP_JUMP_IF_{TRUE,FALSE,NONE,NOT_NONE} RETURN_CONST LOAD_FAST_CHECK
         LOAD_FAST_AND_CLEAR END_FOR BINARY_SLICE STORE_SLICE CALL_INTRINSIC_1 (list->tuple, +x)
Outside it, among others: with/try (BEFORE_WITH, PUSH_EXC_INFO), DICT_MERGE (`f(**d)`),
STORE_ATTR, STORE_GLOBAL, IMPORT_NAME, RAISE_VARARGS, YIELD_VALUE in the traced frame itself.
An instruction inside a try block's range is never traced: the rest of the frame runs in
Python from there. Nested functions (closures, lambdas, comprehensions, generator
expressions) are inlined when called; a frame that holds one, or a generator, or has cell
variables, when its graph breaks cannot be resumed, and runs uncompiled (torch rebuilds them
in the resume function).
"""

import builtins
import copy
import dis
import inspect
import operator
import sys
import types

import torch

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
    CellVariable,
    ConstantVariable,
    ConstDictVariable,
    GeneratorObjectVariable,
    GradModeVariable,
    LazyVariable,
    ListIteratorVariable,
    ListVariable,
    NestedUserFunctionVariable,
    SymNodeVariable,
    TensorVariable,
    TupleVariable,
    VariableTracker,
    WithExitVariable,
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
        self.with_stack: list = []  # (BEFORE_WITH offset, GradModeVariable) of open blocks
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

    def may_mutate(self, container) -> bool:
        """Whether this frame or a caller being traced built `container` (a list or dict);
        if so, log its items so that an instruction that fails can take the change back
        (torch: side_effects.py tracks mutations of objects created during tracing)."""
        tx = self
        while tx is not None and container.owner is not tx:
            tx = getattr(tx, "parent", None)
        if tx is None:
            return False
        root = self
        while getattr(root, "parent", None) is not None:
            root = root.parent
        root.undo_log.append((container, copy.copy(container.items)))
        return True

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
        self.push(ConstantVariable(inst.argval))

    def RETURN_CONST(self, inst):
        self.return_value = ConstantVariable(inst.argval)

    def RETURN_VALUE(self, inst):
        self.return_value = self.pop()

    def LOAD_GLOBAL(self, inst):
        if inst.arg & 1:
            self.push(NULL)
        self.push(self.load_global(inst.argval))

    # ----- cells and nested functions (torch: MAKE_FUNCTION, LOAD_CLOSURE, *_DEREF)
    def read_deref(self, name):
        """A cell of this frame is kept as a symbolic local; a free variable is the closure's."""
        if name in self.code.co_cellvars:
            return self.read_local(name)
        return self.load_closure(name)

    def write_deref(self, name, value):
        if name in self.code.co_cellvars:
            self.symbolic_locals[name] = value
        else:
            self.store_closure(name, value)

    def store_closure(self, name, value):
        unimplemented(f"assigning to the free variable {name!r} (a side effect)")

    def MAKE_CELL(self, inst):
        pass

    def LOAD_DEREF(self, inst):
        self.push(self.read_deref(inst.argval))

    def STORE_DEREF(self, inst):
        self.write_deref(inst.argval, self.pop())

    def LOAD_CLOSURE(self, inst):
        self.push(CellVariable(self, inst.argval))

    def MAKE_FUNCTION(self, inst):
        code = self.pop().as_python_constant()
        closure = self.pop() if inst.arg & 0x08 else None
        if inst.arg & 0x04:
            self.pop()  # annotations: not needed to call it
        kwdefaults = self.pop() if inst.arg & 0x02 else None
        defaults = self.pop() if inst.arg & 0x01 else None
        globals_ = self.fn.__globals__
        self.push(NestedUserFunctionVariable(code, globals_, defaults, kwdefaults, closure))

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
        if any(isinstance(v, (TensorVariable, SymNodeVariable)) for v in (a, b)):
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
        if isinstance(obj, (BaseListVariable, ConstDictVariable)):
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
        elif isinstance(obj, ListVariable) and obj.source is None and self.may_mutate(obj):
            obj.items[index.as_python_constant()] = value
        elif isinstance(obj, ConstDictVariable):
            obj.setitem(self, index, value)
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
        if isinstance(container, ConstDictVariable):
            found = container.call_method(self, "__contains__", [item], {}).value
            self.push(ConstantVariable(found != bool(inst.arg)))
            return
        if not (item.is_python_constant() and container.is_python_constant()):
            unimplemented(f"`in` on {container}")
        found = item.as_python_constant() in container.as_python_constant()
        self.push(ConstantVariable(found != bool(inst.arg)))

    def _unary(self, op):
        v = self.pop()
        if v.is_python_constant():
            self.push(ConstantVariable(op(v.as_python_constant())))
        elif isinstance(v, (TensorVariable, SymNodeVariable)):
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

    # ----- with blocks (torch: SETUP_WITH / BEFORE_WITH and variables/ctx_manager.py)
    def BEFORE_WITH(self, inst):
        ctx = self.stack[-1]
        if not isinstance(ctx, GradModeVariable):
            unimplemented(f"BEFORE_WITH on {ctx}: only torch.no_grad() and torch.enable_grad() "
                          "blocks are traced", kind="opcode")  # fmt: skip
        self.pop()
        self.push(WithExitVariable(ctx))
        self.push(ctx.enter(self))
        self.with_stack.append((inst.offset, ctx))

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

    def BUILD_MAP(self, inst):
        items = self.popn(2 * inst.arg)
        pairs = {ConstDictVariable.key(k): v for k, v in zip(items[::2], items[1::2])}
        self.push(ConstDictVariable(pairs, owner=self))

    def BUILD_CONST_KEY_MAP(self, inst):
        keys = self.pop().as_python_constant()
        self.push(ConstDictVariable(dict(zip(keys, self.popn(inst.arg))), owner=self))

    def MAP_ADD(self, inst):
        value, key = self.pop(), self.pop()
        self.stack[-inst.arg].setitem(self, key, value)

    def DICT_UPDATE(self, inst):
        other = self.pop()
        self.stack[-inst.arg].call_method(self, "update", [other], {})

    def FORMAT_VALUE(self, inst):
        spec = self.pop().as_python_constant() if inst.arg & 0x04 else ""
        v = self.pop()
        if not v.is_python_constant():
            unimplemented(f"formatting {v} into a string")
        value = v.as_python_constant()
        value = {0: lambda x: x, 1: str, 2: repr, 3: ascii}[inst.arg & 0x03](value)
        self.push(ConstantVariable(format(value, spec)))

    def BUILD_STRING(self, inst):
        parts = self.popn(inst.arg)
        self.push(ConstantVariable("".join(p.as_python_constant() for p in parts)))

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

    def __init__(self, fn, frame, output, stop_at=None):
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
        self.fn, self.frame, self.parent, self.undo_log = fn, frame, None, []
        self.stop_at, self.stop_reason = stop_at, ""  # a with block that broke: stop before it
        self.try_ranges = [(e.start, e.end, self._is_with_handler(e.target))
                           for e in dis._parse_exception_table(code)]  # fmt: skip

    def _is_with_handler(self, target: int) -> bool:
        """A with block's cleanup starts PUSH_EXC_INFO, WITH_EXCEPT_START (a try's does not)."""
        i = self.index_of[target]
        return self.instructions[i + 1].opname == "WITH_EXCEPT_START"

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
        """Inside a try block, or a with block that is not one the translator entered."""
        return any(start <= offset < end and not (is_with and self.with_stack)
                   for start, end, is_with in self.try_ranges)  # fmt: skip

    def run(self):
        """Trace until RETURN_VALUE or a graph break; return (instruction, Unsupported | None)."""
        while True:
            inst = self.instructions[self.ip]
            if inst.offset == self.stop_at:
                return inst, Unsupported(
                    f"BEFORE_WITH: a graph break inside the block ({self.stop_reason}); "
                    "it runs in Python",
                    "opcode",
                )
            if self.in_try_block(inst.offset):
                return inst, Unsupported(
                    f"{inst.opname} inside a try block (or a with block "
                    "not traced): the rest runs in Python",
                    "opcode",
                )
            state = (list(self.stack), dict(self.symbolic_locals), self.kw_names, self.ip)
            checkpoint, logged = self.output.checkpoint(), len(self.undo_log)
            grad, opened = torch.is_grad_enabled(), len(self.with_stack)
            try:
                self.step()
            except Unsupported as e:
                self.stack, self.symbolic_locals, self.kw_names, self.ip = state
                torch._C._set_grad_enabled(grad)
                del self.with_stack[opened:]
                self.output.restore(checkpoint)
                for container, items in reversed(self.undo_log[logged:]):
                    container.items = items
                del self.undo_log[logged:]
                return inst, e
            if self.return_value is not None:
                return inst, None


class InliningInstructionTranslator(InstructionTranslatorBase):
    """Traces a called Python function into the caller's graph; any break aborts the inlining."""

    @classmethod
    def inline_call(cls, parent, fn, fn_source, args, kwargs):
        closure = None
        if isinstance(fn, NestedUserFunctionVariable):
            fn, closure = _function_for_binding(fn), fn
        code = fn.__code__
        if code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
            unimplemented(f"inlining coroutine {fn.__qualname__}", kind="inline")
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as e:
            unimplemented(f"calling {fn.__qualname__}: {e}", kind="inline")
        symbolic_locals = {}
        for p in inspect.signature(fn).parameters.values():
            # a comprehension's iterator argument is `.0`; inspect calls it `implicit0`
            local = p.name if p.name in code.co_varnames else "." + p.name[len("implicit") :]
            if p.name in bound.arguments:
                v = bound.arguments[p.name]
                if p.kind is p.VAR_POSITIONAL:
                    v = TupleVariable(list(v))
                elif p.kind is p.VAR_KEYWORD:
                    v = ConstDictVariable(v)
            elif isinstance(p.default, _Default):
                v = p.default.vt
            elif p.default is not p.empty:
                v = wrap(parent, p.default, None, guard=False)
            else:
                v = None
            if v is not None:
                symbolic_locals[local] = v
        generator = bool(code.co_flags & inspect.CO_GENERATOR)
        tx = (InliningGeneratorInstructionTranslator if generator else cls)(
            parent, fn, fn_source, symbolic_locals, closure
        )
        # An iterator the caller made (a comprehension's `.0`) is advanced on a copy that the
        # callee owns; the caller's is synced when the call returns, so a break in between
        # leaves the caller's untouched.
        moved = {}
        for name, v in symbolic_locals.items():
            if type(v) is ListIteratorVariable and v.owner is parent:
                moved[name] = v
                symbolic_locals[name] = ListIteratorVariable(v.items[v.index :], owner=tx)
        if generator:
            for v in moved.values():
                v.owner = None  # given to the generator: the caller may no longer use it
            return GeneratorObjectVariable(tx, owner=parent)
        while tx.return_value is None:
            tx.step()
        for name, v in moved.items():
            v.index += symbolic_locals[name].index
        _give_to(tx.return_value, tx, parent)
        return tx.return_value

    def __init__(self, parent, fn, fn_source, symbolic_locals, closure=None):
        super().__init__(fn.__code__, parent.output, symbolic_locals, parent.depth + 1)
        self.fn, self.fn_source, self.closure, self.parent = fn, fn_source, closure, parent
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

    def _cell(self, name):
        return self.closure.closure.items[self.code.co_freevars.index(name)]

    def load_closure(self, name):
        if self.closure is not None:  # a function made in the traced code: its cells are ours
            return self._cell(name).get()
        i = self.code.co_freevars.index(name)
        value = self.fn.__closure__[i].cell_contents
        source = None
        if self.fn_source is not None:
            cell = GetItemSource(AttrSource(self.fn_source, "__closure__"), i)
            source = AttrSource(cell, "cell_contents")
        return wrap(self, value, source, guard=self.guarded)

    def store_closure(self, name, value):
        if self.closure is None:
            super().store_closure(name, value)
        self._cell(name).set(value)


class InliningGeneratorInstructionTranslator(InliningInstructionTranslator):
    """A generator's frame, stepped from one YIELD_VALUE to the next by its consumer (torch's
    InliningGeneratorInstructionTranslator with enable_faithful_generator_behavior)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.yielded = None

    def RETURN_GENERATOR(self, inst):
        self.push(ConstantVariable(None))  # the value the first next() sends; POP_TOP drops it

    def YIELD_VALUE(self, inst):
        self.yielded = self.pop()
        self.push(ConstantVariable(None))  # what the yield expression evaluates to

    def run_to_yield(self):
        """The next yielded value, or None when the generator returns."""
        while self.return_value is None:
            self.step()
            if self.yielded is not None:
                value, self.yielded = self.yielded, None
                return value
        return None


class _Default:
    """A default argument of a nested function, as the VariableTracker it was made from."""

    def __init__(self, vt):
        self.vt = vt


def wrap_const(v):
    return v if isinstance(v, VariableTracker) else ConstantVariable(v)


def _function_for_binding(nested) -> types.FunctionType:
    """A real function with the nested one's signature, only for inspect.signature().bind."""
    defaults = tuple(map(_Default, nested.defaults.unpack(None))) if nested.defaults else None
    cells = tuple(types.CellType() for _ in nested.code.co_freevars)
    fn = types.FunctionType(nested.code, nested.f_globals, nested.code.co_name, defaults, cells)
    if nested.kwdefaults is not None:
        kw = nested.kwdefaults
        items = kw.items if isinstance(kw, ConstDictVariable) else kw.as_python_constant()
        fn.__kwdefaults__ = {k: _Default(wrap_const(v)) for k, v in items.items()}
    fn.__qualname__ = nested.code.co_qualname
    return fn


def _give_to(vt, child, parent) -> None:
    """Containers a callee built and returned become the caller's to mutate."""
    if isinstance(vt, (BaseListVariable, ConstDictVariable)) and vt.owner is child:
        vt.owner = parent
        for v in vt.children():
            _give_to(v, child, parent)

"""convert_frame: on a cache miss, translate the frame, compile its graph, build the code to run.

Mirrors torch/_dynamo/convert_frame.py (`convert_frame` -> `_compile` -> `transform`) and the
cache of torch/csrc/dynamo/cache_entry.h and eval_frame.c at torch v2.13.0. Torch writes new
bytecode for the frame: call the compiled graph, rebuild the stack and locals from its
outputs, run the instruction that broke the graph, and call `__resume_at_N`. Here that
bytecode is `CompiledFrame.__call__`, a Python function doing the same four steps:

- return: the frame reached RETURN_VALUE inside the graph; build the return value;
- call break (print, `.item()`, an unsupported function): make the call in Python, push its
  result, continue in the captured resume function after the CALL;
- jump break (`if x.sum() > 0:`): take the branch in Python on the real value, continue in
  the captured resume function at the chosen target;
- rest in Python (an opcode outside the subset, a try block): call the *uncaptured* resume
  function at the breaking instruction, so CPython runs the rest of the frame.
A frame that cannot be resumed (a generator, cell variables) runs eagerly whole ("skip").
"""

import dataclasses
import dis
import types
from typing import Any

import torch

from .exc import Unsupported
from .guards import GRAD_MODE, GuardManager
from .output_graph import OutputGraph
from .symbolic_convert import CALL_OPS, InstructionTranslator, is_jump
from .variables import NULL, _ValueVariable

RECOMPILE_LIMIT = 8  # torch: config.recompile_limit


@dataclasses.dataclass
class GraphBreak:
    """Why a graph ended early (torch: GraphCompileReason with graph_break=True)."""

    reason: str
    kind: str
    opname: str
    offset: int
    lineno: int | None

    def __str__(self) -> str:
        return f"{self.reason} (at {self.opname}, offset {self.offset}, line {self.lineno})"


class Reconstructor:
    """The concrete value of each VariableTracker, from graph outputs and the frame (codegen.py)."""

    def __init__(self, values: dict, frame):
        self.values, self.frame, self.memo = values, frame, {}

    def __call__(self, vt):
        from .variables import (
            BaseListVariable,
            BoundMethodVariable,
            ConstantVariable,
            ConstDictVariable,
            GradModeVariable,
            ListIteratorVariable,  # fmt: skip
            NestedUserFunctionVariable,
            SymNodeVariable,
            TensorVariable,
            UserMethodVariable,
        )

        if id(vt) in self.memo:
            return self.memo[id(vt)]
        if isinstance(vt, (TensorVariable, SymNodeVariable)):
            return self.values[vt.proxy.node]
        if isinstance(vt, ConstantVariable):
            return vt.value
        if isinstance(vt, BaseListVariable):
            if vt.source is not None:  # the caller's own list: never rebuilt as a copy
                return vt.source.get(self.frame)
            if vt.python_type() is list:
                out = self.memo[id(vt)] = []  # one list per variable: aliases stay aliases
                out.extend(self(v) for v in vt.items)
                return out
            return tuple(self(v) for v in vt.items)
        if isinstance(vt, ConstDictVariable):
            if vt.source is not None:
                return vt.source.get(self.frame)
            out = self.memo[id(vt)] = {}
            out.update((k, self(v)) for k, v in vt.items.items())
            return out
        if isinstance(vt, GradModeVariable):
            return torch.enable_grad() if vt.target else torch.no_grad()
        if isinstance(vt, NestedUserFunctionVariable):  # only one without a closure (checked)
            fn = types.FunctionType(vt.code, vt.f_globals, vt.code.co_name,
                                    self(vt.defaults) if vt.defaults else None)  # fmt: skip
            fn.__kwdefaults__ = self(vt.kwdefaults) if vt.kwdefaults else None
            fn.__qualname__ = vt.code.co_qualname
            self.memo[id(vt)] = fn
            return fn
        if isinstance(vt, ListIteratorVariable):
            out = self.memo[id(vt)] = iter([self(v) for v in vt.items[vt.index :]])
            return out
        if isinstance(vt, BoundMethodVariable):
            return getattr(self(vt.obj), vt.name)
        if isinstance(vt, UserMethodVariable):
            return types.MethodType(vt.fn, self(vt.obj))
        if isinstance(vt, _ValueVariable):
            return vt.source.get(self.frame) if vt.source is not None else vt.value
        raise AssertionError(f"cannot reconstruct {vt}")


@dataclasses.dataclass
class CompiledFrame:
    """The transformed code of one cache entry."""

    compiled_fn: Any
    input_sources: list
    input_nodes: list
    output_nodes: list
    action: str  # "return" | "call" | "jump" | "python" | "skip"
    return_vt: Any = None
    stack: list = dataclasses.field(default_factory=list)
    local_vts: list = dataclasses.field(default_factory=list)  # one per co_varnames, or None
    inst: Any = None
    kw_names: tuple = ()
    resume: dict = dataclasses.field(default_factory=dict)  # offset -> function to continue in
    fn: Any = None

    def __call__(self, frame, args, kwargs):
        if self.action == "skip":
            return self.fn(*args, **kwargs)
        inputs = [s.get(frame) for s in self.input_sources]
        outs = self.compiled_fn(*inputs) if self.compiled_fn is not None else ()
        values = dict(zip(self.input_nodes, inputs))
        values.update(zip(self.output_nodes, outs))
        rt = Reconstructor(values, frame)
        if self.action == "return":
            return rt(self.return_vt)
        stack = [NULL if v is NULL else rt(v) for v in self.stack]
        local_values = [None if v is None else rt(v) for v in self.local_vts]
        inst = self.inst
        if self.action == "call":
            stack = _do_call(inst, stack, self.kw_names)
            target = inst.offset + 2 * (1 + _cache_entries(inst))
        elif self.action == "jump":
            target = _do_jump(inst, stack)
        else:
            target = inst.offset
        live = [v for v in stack if v is not NULL]
        return self.resume[target](*local_values, *live)


def unreconstructible(vts) -> str | None:
    """What in `vts` the frame cannot rebuild as a Python value: a generator the graph
    advanced, a cell, a nested function with a closure, an iterator handed to a callee
    (torch writes bytecode to rebuild these; the rebuild runs such a frame uncompiled)."""
    from .variables import (
        CellVariable,
        GeneratorObjectVariable,
        ListIteratorVariable,
        NestedUserFunctionVariable,
        WithExitVariable,
    )

    todo, seen = list(vts), set()
    while todo:
        vt = todo.pop()
        if vt is NULL or vt is None or id(vt) in seen:
            continue
        seen.add(id(vt))
        if isinstance(vt, (GeneratorObjectVariable, CellVariable, WithExitVariable)):
            return f"a live {type(vt).__name__} at the break"
        if isinstance(vt, NestedUserFunctionVariable) and vt.closure is not None:
            return f"a live closure ({vt.code.co_qualname}) at the break"
        if isinstance(vt, ListIteratorVariable) and vt.owner is None:
            return "an iterator handed to a generator"
        todo.extend(vt.children())
    return None


def _cache_entries(inst) -> int:
    return dis._inline_cache_entries[inst.opcode]


def _do_call(inst, stack, kw_names):
    """Run the CALL that broke the graph, on real values, as CPython would."""
    if inst.opname == "CALL_FUNCTION_EX":
        args = stack.pop()
        fn = stack.pop()
        stack.pop()
        stack.append(fn(*args))
        return stack
    n = inst.arg
    args = stack[len(stack) - n :]
    del stack[len(stack) - n :]
    fn_or_self, meth_or_null = stack.pop(), stack.pop()
    if meth_or_null is NULL:
        fn = fn_or_self
    else:
        fn, args = meth_or_null, [fn_or_self, *args]
    kwargs = dict(zip(kw_names, args[len(args) - len(kw_names) :]))
    args = args[: len(args) - len(kw_names)]
    stack.append(fn(*args, **kwargs))
    return stack


def _jump_taken(inst, value) -> bool:
    name = inst.opname
    if name.endswith("_NONE"):
        return (value is None) != name.endswith("NOT_NONE")
    return bool(value) if "IF_TRUE" in name else not bool(value)


def _do_jump(inst, stack) -> int:
    """Take the data-dependent branch on the real value; the offset to continue at."""
    value = stack[-1]
    taken = _jump_taken(inst, value)
    if not (inst.opname.endswith("_OR_POP") and taken):
        stack.pop()
    if taken:
        return inst.argval
    return inst.offset + 2 * (1 + _cache_entries(inst))


def _jump_targets(inst) -> list:
    return [inst.argval, inst.offset + 2 * (1 + _cache_entries(inst))]


def _plan_resume(tx, inst, err, ctx, fn) -> tuple[str, dict]:
    """What runs after the graph: the action, and the resume function of each target offset."""
    if err is None:
        return "return", {}
    stack = tx.stack
    if inst.opname in CALL_OPS:
        popped = inst.arg + 2 if inst.opname == "CALL" else 3
        n = len(stack) - popped + 1  # the call's result replaces callable and arguments
        target = inst.offset + 2 * (1 + _cache_entries(inst))
        nulls = [i for i, v in enumerate(stack[: n - 1]) if v is NULL]
        return "call", {target: ctx.resume_function(fn, target, nulls, n, captured=True)}
    if is_jump(inst) and err.kind == "jump":
        resume = {}
        for target in _jump_targets(inst):
            keep = inst.opname.endswith("_OR_POP") and target == inst.argval
            n = len(stack) - (0 if keep else 1)
            nulls = [i for i, v in enumerate(stack[:n]) if v is NULL]
            resume[target] = ctx.resume_function(fn, target, nulls, n, captured=True)
        return "jump", resume
    nulls = [i for i, v in enumerate(stack) if v is NULL]
    return "python", {inst.offset: ctx.resume_function(fn, inst.offset, nulls, len(stack),
                                                       captured=False)}  # fmt: skip


def compile_frame(opt_fn, frame, ctx) -> tuple[GuardManager, CompiledFrame]:
    """Translate the frame of `opt_fn.fn` bound to `frame`; compile; the new cache entry."""
    fn = opt_fn.fn
    output = OutputGraph(ctx.dynamic, ctx.frame_state)
    tx = InstructionTranslator(fn, frame, output)
    inst, err = tx.run()
    if err is not None and tx.with_stack:
        # The graph broke inside a with block: a resume function cannot start inside one.
        # Restart and stop before the outermost block instead (torch re-enters the block in
        # its resume function).
        offset, manager = tx.with_stack[0]
        torch._C._set_grad_enabled(manager.prior)
        output = OutputGraph(ctx.dynamic, ctx.frame_state)
        tx = InstructionTranslator(fn, frame, output, stop_at=offset)
        tx.stop_reason = err.reason.splitlines()[0]
        inst, err = tx.run()
    guards = GuardManager([*output.guards.values(), *output.shape_env.produce_guards(),
                           GRAD_MODE()])  # fmt: skip
    try:
        action, resume = _plan_resume(tx, inst, err, ctx, fn)
        kept = [tx.return_value] if err is None else [*tx.stack, *tx.symbolic_locals.values()]
        why = unreconstructible(kept)
        if why is not None:
            raise Unsupported(why, "opcode")
    except Unsupported as e:  # torch: skip_frame; the whole frame runs uncompiled
        ctx.skipped.append(f"{fn.__qualname__}: {e.reason}")
        return guards, CompiledFrame(None, [], [], [], "skip", fn=fn)
    live = list(tx.stack) + list(tx.symbolic_locals.values())
    if err is None:
        live.append(tx.return_value)
    compiled_fn, sources, in_nodes, out_nodes, gm = output.compile_subgraph(
        [v for v in live if v is not NULL], ctx.backend, frame
    )
    brk = None
    if err is not None:
        line = inst.positions.lineno if inst.positions else None
        brk = GraphBreak(err.reason, err.kind, inst.opname, inst.offset, line)
    ctx.record(gm, brk, guards, fn)
    local_vts = [tx.symbolic_locals.get(n) for n in fn.__code__.co_varnames]
    return guards, CompiledFrame(
        compiled_fn, sources, in_nodes, out_nodes, action, return_vt=tx.return_value,
        stack=list(tx.stack), local_vts=local_vts, inst=inst, kw_names=tx.kw_names,
        resume=resume, fn=fn,
    )  # fmt: skip

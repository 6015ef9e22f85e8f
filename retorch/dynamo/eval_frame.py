"""optimize/compile: wrap a function so each call checks its cache and compiles on a miss.

Mirrors torch/_dynamo/eval_frame.py (`optimize`, `_TorchDynamoContext`, `OptimizedModule`)
and the C frame hook under it (torch/csrc/dynamo/eval_frame.c) at torch v2.13.0.

How torch hooks frames: PEP 523 lets a C extension replace CPython's frame evaluator
(`_PyInterpreterState_SetEvalFrameFunc`). Torch's `set_eval_frame(callback)` installs
`dynamo__custom_eval_frame`, which sees *every* Python frame about to run while the callback
is set: it looks up the frame's code object in its cache (a linked list of cache entries
stored on the code object through `_PyCode_SetExtra`), runs the first entry whose guards pass
with the frame's locals, and otherwise calls the Python callback (`convert_frame`), which
translates the frame's bytecode and returns new bytecode to run instead. Resume functions and
any function the compiled code calls are frames too, so they get the same treatment.

How the rebuild hooks them instead: a plain function wrapper. `OptimizedFunction.__call__`
binds the arguments into a frame's locals, checks the cache entries (newest first, as torch
does), and on a miss calls `convert_frame.compile_frame`. Only the wrapped function and the
resume functions made from it are captured (each resume function is itself wrapped, sharing
the context); a function it calls is inlined into its graph, or, after a graph break, runs
plainly. A C hook would also need a frame-evaluation C API that differs from 3.11 to 3.12;
a wrapper needs none.
"""

import inspect
import types
import warnings

from ..fx import GraphModule
from . import convert_frame
from .resume_execution import make_resume_function
from .source import Frame
from .symbolic_convert import check_python_version


def _eager_backend(gm: GraphModule, example_inputs):
    return gm.forward


BACKENDS = {"eager": _eager_backend}


class CompileContext:
    """What one optimize() call shares with its resume functions: backend, records, resumes."""

    def __init__(self, backend, dynamic=None):
        if isinstance(backend, str):
            if backend not in BACKENDS:
                raise ValueError(f"unknown backend {backend!r}: use one of {sorted(BACKENDS)} or "
                                 "pass a callable (gm, example_inputs) -> callable")  # fmt: skip
            backend = BACKENDS[backend]
        if not callable(backend):
            raise TypeError(f"backend must be a string or a callable, not {type(backend).__name__}")
        if dynamic not in (None, True, False):
            raise TypeError(f"dynamic must be None (automatic), True or False, not {dynamic!r}")
        self.backend, self.dynamic = backend, dynamic
        self.frame_state: dict = {}  # sizes seen per input source (torch: pgo.py frame state)
        self.graphs: list = []  # (GraphModule | None, GraphBreak | None, GuardManager, fn)
        self.skipped: list[str] = []
        self.recompiles: list[str] = []
        self._resume: dict = {}

    def record(self, gm, brk, guards, fn) -> None:
        self.graphs.append((gm, brk, guards, fn))

    def resume_function(self, fn, offset, nulls, nstack, captured):
        key = (fn.__code__, offset, tuple(nulls), nstack, captured, id(fn.__closure__))
        if key not in self._resume:
            plain = make_resume_function(fn, offset, nulls, nstack)
            self._resume[key] = OptimizedFunction(plain, self) if captured else plain
        return self._resume[key]


class OptimizedFunction:
    """`fn` wrapped: a guarded cache of compiled frames, compiled on a miss."""

    def __init__(self, fn, ctx: CompileContext):
        if isinstance(fn, torch_nn_Module()):
            fn = fn.forward
        if isinstance(fn, types.MethodType):
            raise TypeError("optimize() takes a function or an nn.Module; for a bound method "
                            "wrap the function and pass self explicitly")  # fmt: skip
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"optimize() needs a Python function, got {type(fn).__name__}")
        check_python_version()
        self.fn, self.ctx = fn, ctx
        self.cache: list = []  # [(GuardManager, CompiledFrame)], newest first
        self.compile_count = 0
        code = fn.__code__
        self._fast = not (code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
                          or code.co_kwonlyargcount)  # fmt: skip
        self._names = code.co_varnames[: code.co_argcount]
        self._sig = None
        self.__name__ = fn.__name__
        self.__wrapped__ = fn

    def _bind(self, args, kwargs) -> dict:
        if self._fast and not kwargs and len(args) == len(self._names):
            return dict(zip(self._names, args))
        if self._sig is None:
            self._sig = inspect.signature(self.fn)
        bound = self._sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def __call__(self, *args, **kwargs):
        frame = Frame(self._bind(args, kwargs), self.fn.__globals__, self.fn.__closure__ or ())
        for guards, compiled in self.cache:
            if guards.check(frame):
                return compiled(frame, args, kwargs)
        if self.cache:
            reason = self.cache[0][0].check_verbose(frame)
            self.ctx.recompiles.append(f"{self.fn.__qualname__}: guard failed: {reason}")
            if len(self.cache) >= RECOMPILE_LIMIT:
                warnings.warn(f"retorch.dynamo: {self.fn.__qualname__} hit the recompile limit "
                              f"({RECOMPILE_LIMIT}); running it uncompiled", stacklevel=2)  # fmt: skip
                return self.fn(*args, **kwargs)
        entry = convert_frame.compile_frame(self, frame, self.ctx)
        self.compile_count += 1
        self.cache.insert(0, entry)
        return entry[1](frame, args, kwargs)


RECOMPILE_LIMIT = convert_frame.RECOMPILE_LIMIT


def torch_nn_Module():
    import torch

    return torch.nn.Module


def optimize(backend="eager", *, dynamic=None):
    """`optimize(backend)(fn)`: fn captured into graphs handed to `backend(gm, example_inputs)`.

    `dynamic`, as torch.compile's: None makes a size dynamic once it is seen to change (a
    recompile), True makes every size dynamic from the start, False keeps them all static."""
    ctx_args = (backend, dynamic)

    def decorator(fn):
        return OptimizedFunction(fn, CompileContext(*ctx_args))

    return decorator


def compile(fn, *, backend="eager", dynamic=None):  # noqa: A001 - torch.compile's name
    """`compile(fn, backend=..., dynamic=...)`, as torch.compile."""
    return optimize(backend, dynamic=dynamic)(fn)

"""symbolic_trace: run a module's forward on Proxies and keep the Graph they record.

Mirrors torch/fx/_symbolic_trace.py at torch v2.13.0: `Tracer` (`create_arg` turning parameters,
buffers and constant tensors into get_attr nodes, `is_leaf_module`, `path_of_module`,
`call_module`, `getattr`, `create_args_for_root` with `concrete_args` and `PH`, `trace`, which
patches `torch.nn.Module.__call__` and `__getattr__` for the duration) and `symbolic_trace`.
`wrap` and the autowrapping of `math` functions (`math.sqrt(proxy)` becomes a call_function
node) patch module globals the same way. Left out: pytree codegen for nested inputs, scopes,
stack traces and the `param_shapes_constant` ParameterProxy.
"""

import builtins
import collections
import functools
import inspect
import math
from types import FunctionType

import torch

from .graph import Graph
from .graph_module import GraphModule
from .node import map_aggregate
from .proxy import Proxy, TracerBase, base_types

HAS_VARSTUFF = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS
_orig_module_call = torch.nn.Module.__call__
_orig_module_getattr = torch.nn.Module.__getattr__


_wrapped_fns_to_patch: dict = {}  # (id(globals), name) -> globals holding a leaf function


def wrap(fn_or_name):
    """Declare, at module scope, a function to record as one call_function node (a leaf)."""
    name = fn_or_name if isinstance(fn_or_name, str) else fn_or_name.__name__
    f_globals = inspect.currentframe().f_back.f_globals
    _wrapped_fns_to_patch[(id(f_globals), name)] = f_globals
    return fn_or_name


def _create_wrapped_func(orig_fn):
    @functools.wraps(orig_fn)
    def wrapped(*args, **kwargs):
        proxies = []
        map_aggregate((args, kwargs), lambda a: proxies.append(a) if isinstance(a, Proxy) else a)
        if not proxies:
            return orig_fn(*args, **kwargs)
        proxy = proxies[0].tracer.create_proxy("call_function", orig_fn, args, kwargs)
        proxy.node.meta["is_wrapped"] = True
        return proxy

    return wrapped


class _Patcher:
    """Swaps entries of dicts (module globals, class dicts) and puts them all back on exit."""

    def __init__(self):
        self.undo = []

    def patch(self, frame_dict: dict, name: str, new_fn) -> None:
        self.undo.append((frame_dict, name, frame_dict.get(name, _MISSING)))
        frame_dict[name] = new_fn

    def patch_method(self, cls: type, name: str, new_fn) -> None:
        orig = getattr(cls, name)
        self.undo.append((None, name, lambda: setattr(cls, name, orig)))
        setattr(cls, name, new_fn)

    def autowrap(self, frame_dict: dict, function_ids: set) -> None:
        for name, value in list(frame_dict.items()):
            if not name.startswith("_") and callable(value) and id(value) in function_ids:
                self.patch(frame_dict, name, _create_wrapped_func(value))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for frame_dict, name, orig in reversed(self.undo):
            if frame_dict is None:
                orig()  # a class attribute: put the original back
            elif orig is _MISSING:
                del frame_dict[name]
            else:
                frame_dict[name] = orig


_MISSING = object()


class PHBase:
    """Marks an entry of `concrete_args` that should stay a placeholder."""

    def __repr__(self) -> str:
        return "PH"


PH = PHBase()


def _assert_is_none(value, msg):
    assert value is None, msg


def _patch_function(fn: FunctionType, nargs: int) -> FunctionType:
    """Re-make `fn` so that *args/**kwargs/keyword-only parameters are taken positionally."""
    co = fn.__code__
    co = co.replace(co_argcount=nargs, co_posonlyargcount=0, co_kwonlyargcount=0,
                    co_flags=co.co_flags & ~HAS_VARSTUFF)  # fmt: skip
    return FunctionType(co, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


class Tracer(TracerBase):
    """Traces through user code; stops at leaf modules (those defined in torch.nn)."""

    _qualname_counter: dict = collections.defaultdict(int)

    def __init__(self, autowrap_modules=(math,), autowrap_functions=()):
        self.submodule_paths = None
        self.tensor_attrs: dict = {}
        self._autowrap_function_ids = {
            id(v) for m in autowrap_modules for k, v in m.__dict__.items()
            if not k.startswith("_") and callable(v)
        } | {id(f) for f in autowrap_functions}  # fmt: skip
        self._autowrap_search = list(autowrap_modules)

    def get_fresh_qualname(self, prefix: str) -> str:
        qualname = f"{prefix}0"
        if not hasattr(self.root, qualname):
            self._qualname_counter[prefix] = 0
            return qualname
        i = self._qualname_counter[prefix]
        while hasattr(self.root, qualname := f"{prefix}{i}"):
            i += 1
        self._qualname_counter[prefix] = i + 1
        return qualname

    def create_arg(self, a):
        """Parameters, buffers and submodules become get_attr; other tensors, stored constants."""
        if isinstance(a, torch.nn.Parameter):
            for n, p in self.root.named_parameters():
                if a is p:
                    return self.create_node("get_attr", n, (), {})
            raise NameError("parameter is not a member of this module")
        if isinstance(a, torch.Tensor):
            for n, b in self.root.named_buffers():
                if a is b:
                    return self.create_node("get_attr", n, (), {})
        elif isinstance(a, torch.nn.Module):
            for n, m in self.root.named_modules():
                if a is m:
                    return self.create_node("get_attr", n, (), {})
        if isinstance(a, tuple) and hasattr(a, "_fields"):
            return self.create_node(
                "call_function", type(a), tuple(self.create_arg(e) for e in a), {}
            )
        if isinstance(a, torch.Tensor):
            qualname = self.tensor_attrs.get(a)
            if not qualname:
                qualname = self.get_fresh_qualname("_tensor_constant")
                self.tensor_attrs[a] = qualname
                setattr(self.root, qualname, a)
            return self.create_node("get_attr", qualname, (), {})
        return super().create_arg(a)

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        """torch.nn's own modules are leaves (recorded as call_module), except Sequential."""
        return (
            m.__module__.startswith("torch.nn") or m.__module__.startswith("torch.ao.nn")
        ) and not isinstance(m, torch.nn.Sequential)

    def path_of_module(self, mod: torch.nn.Module) -> str:
        if self.submodule_paths:
            path = self.submodule_paths.get(mod)
        else:
            path = next((n for n, p in self.root.named_modules() if p is mod), None)
        if path is None:
            raise NameError("module is not installed as a submodule")
        return path

    def call_module(self, m, forward, args, kwargs):
        """A leaf becomes one call_module node; any other module is traced through."""
        name = self.path_of_module(m)
        if not self.is_leaf_module(m, name):
            return forward(*args, **kwargs)
        return self.create_proxy("call_module", name, args, kwargs)

    def getattr(self, attr: str, attr_val, parameter_proxy_cache: dict):
        """`self.weight` of a Parameter -> one get_attr node per parameter, reused."""
        if isinstance(attr_val, torch.nn.Parameter):
            for n, p in self.root.named_parameters():
                if attr_val is p:
                    if n not in parameter_proxy_cache:
                        parameter_proxy_cache[n] = self.create_proxy("get_attr", n, (), {})
                    return parameter_proxy_cache[n]
        return attr_val

    def _proxy_placeholder(self, name, concrete_args, sig, fn):
        if concrete_args is not None and name in concrete_args:
            x = concrete_args[name]
            param = sig.parameters[name]
            default = () if param.default is inspect.Parameter.empty else (param.default,)
            out = self.create_proxy("placeholder", f"{name}_1", default, {})
            if isinstance(x, PHBase):
                return out
            msg = f"{name} has been specialized to have value {x} but got another value"
            if type(x) is bool or (type(x) in base_types and type(x) is not torch.Tensor):
                torch._assert(out == x, msg)
            elif x is None:
                self.create_proxy("call_function", _assert_is_none, (out, msg), {})
            return x
        if name[0] == "*":
            default = ()
        else:
            param = sig.parameters[name]
            default = () if param.default is inspect.Parameter.empty else (param.default,)
        type_expr = fn.__annotations__.get(name)
        return self.create_proxy("placeholder", name, default, {}, type_expr=type_expr)

    def create_args_for_root(self, root_fn, is_module, concrete_args=None):
        """One placeholder per parameter of forward (self skipped), in signature order."""
        fn = inspect.unwrap(root_fn)
        co = fn.__code__
        total_args = co.co_argcount + co.co_kwonlyargcount
        names_iter = iter(co.co_varnames)
        args = []
        if is_module:
            next(names_iter)  # self
            args.append(self.root)
        sig = inspect.signature(fn)
        arg_names = [next(names_iter) for _ in range(int(is_module), total_args)]
        if isinstance(concrete_args, tuple):
            if len(arg_names) != len(concrete_args):
                raise RuntimeError(f"Tracing expected {len(arg_names)} arguments but got "
                                   f"{len(concrete_args)} concrete arguments")  # fmt: skip
            concrete_args = dict(zip(arg_names, concrete_args))
        args.extend(self._proxy_placeholder(n, concrete_args, sig, fn) for n in arg_names)
        if co.co_kwonlyargcount > 0 or co.co_flags & HAS_VARSTUFF:
            if co.co_flags & inspect.CO_VARARGS:
                args.append(self._proxy_placeholder("*" + next(names_iter), None, sig, fn))
            if co.co_flags & inspect.CO_VARKEYWORDS:
                args.append(self._proxy_placeholder("**" + next(names_iter), None, sig, fn))
            root_fn = _patch_function(root_fn, len(args))
        return root_fn, args

    def trace(self, root, concrete_args=None) -> Graph:
        """Run `root` (a Module's forward, or a function) on Proxies; return the Graph."""
        if isinstance(root, torch.nn.Module):
            self.root = root
            fn = type(root).forward
            self.submodule_paths = {mod: name for name, mod in root.named_modules()}
        else:
            self.root = torch.nn.Module()
            fn = root
        if not isinstance(fn, FunctionType):
            raise AssertionError(
                f"Expected FunctionType, got {type(fn)}: symbolic_trace takes an nn.Module or a "
                "Python function"
            )
        self.graph = Graph()
        self.tensor_attrs = {}

        def collect_tensor_attrs(m, prefix_atoms):
            for k, v in m.__dict__.items():
                if isinstance(v, torch.Tensor):
                    self.tensor_attrs[v] = ".".join(prefix_atoms + [k])
            for k, v in m.named_children():
                collect_tensor_attrs(v, prefix_atoms + [k])

        collect_tensor_attrs(self.root, [])
        fn, args = self.create_args_for_root(fn, isinstance(root, torch.nn.Module), concrete_args)
        parameter_proxy_cache: dict = {}

        @functools.wraps(_orig_module_getattr)
        def module_getattr_wrapper(mod, attr):
            return self.getattr(attr, _orig_module_getattr(mod, attr), parameter_proxy_cache)

        @functools.wraps(_orig_module_call)
        def module_call_wrapper(mod, *args, **kwargs):
            forward = lambda *a, **k: _orig_module_call(mod, *a, **k)
            mod_globals = getattr(getattr(mod, "forward", mod), "__globals__", {})
            patcher.autowrap(mod_globals, self._autowrap_function_ids)  # its module's math imports
            return self.call_module(mod, forward, args, kwargs)

        # Every module call and attribute read inside forward now goes through this tracer;
        # wrapped and math functions record themselves.
        fn_globals = fn.__globals__
        with _Patcher() as patcher:
            patcher.patch_method(torch.nn.Module, "__getattr__", module_getattr_wrapper)
            patcher.patch_method(torch.nn.Module, "__call__", module_call_wrapper)
            for (_, name), f_globals in list(_wrapped_fns_to_patch.items()):
                orig_fn = f_globals[name] if name in f_globals else getattr(builtins, name)
                patcher.patch(f_globals, name, _create_wrapped_func(orig_fn))
            patcher.autowrap(fn_globals, self._autowrap_function_ids)
            for module in self._autowrap_search:
                patcher.autowrap(module.__dict__, self._autowrap_function_ids)
            ret = self.create_arg(fn(*args))
            return_type = inspect.get_annotations(inspect.unwrap(fn)).get("return")
            self.create_node("output", "output", (ret,), {}, type_expr=return_type)
        self.submodule_paths = None
        return self.graph


def symbolic_trace(root, concrete_args=None) -> GraphModule:
    """Trace `root` into a GraphModule named after its class (or function)."""
    tracer = Tracer()
    graph = tracer.trace(root, concrete_args)
    name = type(root).__name__ if isinstance(root, torch.nn.Module) else root.__name__
    return GraphModule(tracer.root, graph, name)

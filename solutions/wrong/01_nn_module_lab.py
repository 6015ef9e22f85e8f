"""Plausible wrong answers to lab 1; each must fail its graded check with CheckFailed.

Run: ``.venv/bin/python tools/check_wrong_answers.py 01_nn_module_lab``.
"""

import textwrap

# Lab 1's solution to exercise 5 in its three parts; most wrong answers change one place.
_CHILDREN = """for child in module.children():
    apply_(child, fn)
"""
_PARAMS = """for param in module._parameters.values():
    if param is None:
        continue
    with torch.no_grad():
        param.data = fn(param)
        if param.grad is not None:
            param.grad.data = fn(param.grad)
"""
_BUFFERS = """for name, buf in module._buffers.items():
    if buf is not None:
        module._buffers[name] = fn(buf)
"""
_APPLY = "\n" + _CHILDREN + _PARAMS + _BUFFERS + "return module\n"

WRONG = {
    "ex1_setattr": [
        (
            "files any tensor (a plain tensor too) as a parameter",
            """
params, modules = self.__dict__["_parameters"], self.__dict__["_modules"]
if isinstance(value, torch.Tensor):
    self.__dict__.pop(name, None)
    modules.pop(name, None)
    params[name] = value
elif isinstance(value, (MiniModule, nn.Module)):
    self.__dict__.pop(name, None)
    params.pop(name, None)
    modules[name] = value
else:
    object.__setattr__(self, name, value)
""",
        ),
        (
            "recognises nn.Module children but not the lab's own MiniModule",
            """
params, modules = self.__dict__["_parameters"], self.__dict__["_modules"]
if isinstance(value, nn.Parameter):
    self.__dict__.pop(name, None)
    modules.pop(name, None)
    params[name] = value
elif name in params:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as parameter {name}")
    params[name] = None
elif isinstance(value, nn.Module):
    self.__dict__.pop(name, None)
    params.pop(name, None)
    modules[name] = value
elif name in modules:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as module {name}")
    modules[name] = None
else:
    object.__setattr__(self, name, value)
""",
        ),
        (
            "never removes the name from the other places",
            """
params, modules = self.__dict__["_parameters"], self.__dict__["_modules"]
if isinstance(value, nn.Parameter):
    params[name] = value
elif name in params:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as parameter {name}")
    params[name] = None
elif isinstance(value, (MiniModule, nn.Module)):
    modules[name] = value
elif name in modules:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as module {name}")
    modules[name] = None
else:
    object.__setattr__(self, name, value)
""",
        ),
        (
            "removes the name from every place, its own dict too (a re-assigned parameter moves"
            " to the end)",
            """
params, modules = self.__dict__["_parameters"], self.__dict__["_modules"]
if isinstance(value, nn.Parameter):
    for place in (self.__dict__, params, modules):
        place.pop(name, None)
    params[name] = value
elif name in params:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as parameter {name}")
    params[name] = None
elif isinstance(value, (MiniModule, nn.Module)):
    for place in (self.__dict__, params, modules):
        place.pop(name, None)
    modules[name] = value
elif name in modules:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as module {name}")
    modules[name] = None
else:
    object.__setattr__(self, name, value)
""",
        ),
        (
            "lets a plain value replace a parameter silently (no TypeError)",
            """
params, modules = self.__dict__["_parameters"], self.__dict__["_modules"]
for place in (self.__dict__, params, modules):
    if name in place and not (place is params and isinstance(value, nn.Parameter)):
        del place[name]
if isinstance(value, nn.Parameter):
    params[name] = value
elif isinstance(value, (MiniModule, nn.Module)):
    modules[name] = value
else:
    object.__setattr__(self, name, value)
""",
        ),
        (
            "checks the value's type before the name's current role (a module replaces a"
            " parameter instead of raising TypeError)",
            """
params, modules = self.__dict__["_parameters"], self.__dict__["_modules"]
if isinstance(value, nn.Parameter):
    self.__dict__.pop(name, None)
    modules.pop(name, None)
    params[name] = value
elif isinstance(value, (MiniModule, nn.Module)):
    self.__dict__.pop(name, None)
    params.pop(name, None)
    modules[name] = value
elif name in params:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as parameter {name}")
    params[name] = None
elif name in modules:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as module {name}")
    modules[name] = None
else:
    object.__setattr__(self, name, value)
""",
        ),
        (
            "None to a module's name drops the module and makes a plain attribute",
            """
params, modules = self.__dict__["_parameters"], self.__dict__["_modules"]
if isinstance(value, nn.Parameter):
    self.__dict__.pop(name, None)
    modules.pop(name, None)
    params[name] = value
elif name in params:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as parameter {name}")
    params[name] = None
elif isinstance(value, (MiniModule, nn.Module)):
    self.__dict__.pop(name, None)
    params.pop(name, None)
    modules[name] = value
elif name in modules:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as module {name}")
    del modules[name]
    object.__setattr__(self, name, None)
else:
    object.__setattr__(self, name, value)
""",
        ),
        (
            "type(value) is nn.Parameter: a subclass of Parameter becomes a plain attribute",
            """
params, modules = self.__dict__["_parameters"], self.__dict__["_modules"]
if type(value) is nn.Parameter:
    self.__dict__.pop(name, None)
    modules.pop(name, None)
    params[name] = value
elif name in params:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as parameter {name}")
    params[name] = None
elif isinstance(value, (MiniModule, nn.Module)):
    self.__dict__.pop(name, None)
    params.pop(name, None)
    modules[name] = value
elif name in modules:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as module {name}")
    modules[name] = None
else:
    object.__setattr__(self, name, value)
""",
        ),
        (
            "a Parameter does not clear a plain attribute of the same name",
            """
params, modules = self.__dict__["_parameters"], self.__dict__["_modules"]
if isinstance(value, nn.Parameter):
    modules.pop(name, None)
    params[name] = value
elif name in params:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as parameter {name}")
    params[name] = None
elif isinstance(value, (MiniModule, nn.Module)):
    self.__dict__.pop(name, None)
    params.pop(name, None)
    modules[name] = value
elif name in modules:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as module {name}")
    modules[name] = None
else:
    object.__setattr__(self, name, value)
""",
        ),
        (
            "a module's name accepts only None (re-assigning a module raises TypeError)",
            """
params, modules = self.__dict__["_parameters"], self.__dict__["_modules"]
if isinstance(value, nn.Parameter):
    self.__dict__.pop(name, None)
    modules.pop(name, None)
    params[name] = value
elif name in params:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as parameter {name}")
    params[name] = None
elif name in modules:
    if value is not None:
        raise TypeError(f"cannot assign {type(value).__name__} as module {name}")
    modules[name] = None
elif isinstance(value, (MiniModule, nn.Module)):
    self.__dict__.pop(name, None)
    params.pop(name, None)
    modules[name] = value
else:
    object.__setattr__(self, name, value)
""",
        ),
    ],
    "ex2_named_parameters": [
        (
            "post-order: the children's parameters before the module's own",
            """
seen_modules, seen_params = set(), set()

def walk(mod, pre):
    if mod in seen_modules:
        return
    seen_modules.add(mod)
    for name, child in mod._modules.items():
        if child is not None:
            yield from walk(child, (pre + "." if pre else "") + name)
    for name, p in mod._parameters.items():
        if p is not None and p not in seen_params:
            seen_params.add(p)
            yield (pre + "." if pre else "") + name, p

yield from walk(module, prefix)
""",
        ),
        (
            "breadth-first: a queue instead of recursion",
            """
from collections import deque

seen_modules, seen_params = set(), set()
queue = deque([(module, prefix)])
while queue:
    mod, pre = queue.popleft()
    if mod in seen_modules:
        continue
    seen_modules.add(mod)
    for name, p in mod._parameters.items():
        if p is not None and p not in seen_params:
            seen_params.add(p)
            yield (pre + "." if pre else "") + name, p
    for name, child in mod._modules.items():
        if child is not None:
            queue.append((child, (pre + "." if pre else "") + name))
""",
        ),
        (
            "de-duplicates modules but not parameters (a tied weight twice)",
            """
seen_modules = set()

def walk(mod, pre):
    if mod in seen_modules:
        return
    seen_modules.add(mod)
    for name, p in mod._parameters.items():
        if p is not None:
            yield (pre + "." if pre else "") + name, p
    for name, child in mod._modules.items():
        if child is not None:
            yield from walk(child, (pre + "." if pre else "") + name)

yield from walk(module, prefix)
""",
        ),
        (
            "yields None entries (bias=False)",
            """
seen_modules, seen_params = set(), set()

def walk(mod, pre):
    if mod in seen_modules:
        return
    seen_modules.add(mod)
    for name, p in mod._parameters.items():
        if p not in seen_params:
            seen_params.add(p)
            yield (pre + "." if pre else "") + name, p
    for name, child in mod._modules.items():
        if child is not None:
            yield from walk(child, (pre + "." if pre else "") + name)

yield from walk(module, prefix)
""",
        ),
        (
            "always joins with a dot (a leading '.' when the prefix is empty)",
            """
seen_modules, seen_params = set(), set()

def walk(mod, pre):
    if mod in seen_modules:
        return
    seen_modules.add(mod)
    for name, p in mod._parameters.items():
        if p is not None and p not in seen_params:
            seen_params.add(p)
            yield pre + "." + name, p
    for name, child in mod._modules.items():
        if child is not None:
            yield from walk(child, pre + "." + name)

yield from walk(module, prefix)
""",
        ),
        (
            "the seen sets live on the function (state kept between calls)",
            """
seen = named_parameters.__dict__.setdefault("seen", (set(), set()))
seen_modules, seen_params = seen

def walk(mod, pre):
    if mod in seen_modules:
        return
    seen_modules.add(mod)
    for name, p in mod._parameters.items():
        if p is not None and p not in seen_params:
            seen_params.add(p)
            yield (pre + "." if pre else "") + name, p
    for name, child in mod._modules.items():
        yield from walk(child, (pre + "." if pre else "") + name)

yield from walk(module, prefix)
""",
        ),
        (
            "does not skip a None child (nn.Sequential slot set to None)",
            """
seen_modules, seen_params = set(), set()

def walk(mod, pre):
    if mod in seen_modules:
        return
    seen_modules.add(mod)
    for name, p in mod._parameters.items():
        if p is not None and p not in seen_params:
            seen_params.add(p)
            yield (pre + "." if pre else "") + name, p
    for name, child in mod._modules.items():
        yield from walk(child, (pre + "." if pre else "") + name)

yield from walk(module, prefix)
""",
        ),
        (
            "a child's names start from the child's own name, not the full dotted path",
            """
seen_modules, seen_params = set(), set()

def walk(mod, pre):
    if mod in seen_modules:
        return
    seen_modules.add(mod)
    for name, p in mod._parameters.items():
        if p is not None and p not in seen_params:
            seen_params.add(p)
            yield (pre + "." if pre else "") + name, p
    for name, child in mod._modules.items():
        if child is not None:
            yield from walk(child, name)

yield from walk(module, prefix)
""",
        ),
        (
            "de-duplicates by name instead of by object (a tied weight twice)",
            """
seen_modules, seen_names = set(), set()

def walk(mod, pre):
    if mod in seen_modules:
        return
    seen_modules.add(mod)
    for name, p in mod._parameters.items():
        full = (pre + "." if pre else "") + name
        if p is not None and full not in seen_names:
            seen_names.add(full)
            yield full, p
    for name, child in mod._modules.items():
        if child is not None:
            yield from walk(child, (pre + "." if pre else "") + name)

yield from walk(module, prefix)
""",
        ),
    ],
    "ex3_call_with_hooks": [
        (
            "forward hooks get the original args, not the ones the pre-hooks replaced",
            """
original = args
for hook in pre_hooks:
    result = hook(module, args)
    if result is not None:
        args = result if isinstance(result, tuple) else (result,)
out = module.forward(*args)
for hook in hooks:
    result = hook(module, original, out)
    if result is not None:
        out = result
return out
""",
        ),
        (
            "a pre-hook's single value replaces args without being wrapped in a tuple",
            """
for hook in pre_hooks:
    result = hook(module, args)
    if result is not None:
        args = result
out = module.forward(*args)
for hook in hooks:
    result = hook(module, args, out)
    if result is not None:
        out = result
return out
""",
        ),
        (
            "a hook's None result replaces the output too",
            """
for hook in pre_hooks:
    result = hook(module, args)
    if result is not None:
        args = result if isinstance(result, tuple) else (result,)
out = module.forward(*args)
for hook in hooks:
    out = hook(module, args, out)
return out
""",
        ),
        (
            "every pre-hook sees the original args; only the last replacement counts",
            """
new_args = args
for hook in pre_hooks:
    result = hook(module, args)
    if result is not None:
        new_args = result if isinstance(result, tuple) else (result,)
args = new_args
out = module.forward(*args)
for hook in hooks:
    result = hook(module, args, out)
    if result is not None:
        out = result
return out
""",
        ),
        (
            "forward hooks run in reverse order",
            """
for hook in pre_hooks:
    result = hook(module, args)
    if result is not None:
        args = result if isinstance(result, tuple) else (result,)
out = module.forward(*args)
for hook in reversed(hooks):
    result = hook(module, args, out)
    if result is not None:
        out = result
return out
""",
        ),
        (
            "a pre-hook's single value is wrapped in a list, not a tuple",
            """
for hook in pre_hooks:
    result = hook(module, args)
    if result is not None:
        args = result if isinstance(result, (tuple, list)) else [result]
out = module.forward(*args)
for hook in hooks:
    result = hook(module, args, out)
    if result is not None:
        out = result
return out
""",
        ),
        (
            "calls module(*args) instead of module.forward(*args) (its registered hooks run too)",
            """
for hook in pre_hooks:
    result = hook(module, args)
    if result is not None:
        args = result if isinstance(result, tuple) else (result,)
out = module(*args)
for hook in hooks:
    result = hook(module, args, out)
    if result is not None:
        out = result
return out
""",
        ),
        (
            "stops at the first forward hook that returns a value",
            """
for hook in pre_hooks:
    result = hook(module, args)
    if result is not None:
        args = result if isinstance(result, tuple) else (result,)
out = module.forward(*args)
for hook in hooks:
    result = hook(module, args, out)
    if result is not None:
        out = result
        break
return out
""",
        ),
        (
            "tests the hook's result for truth instead of `is not None`",
            """
for hook in pre_hooks:
    result = hook(module, args)
    if result:
        args = result if isinstance(result, tuple) else (result,)
out = module.forward(*args)
for hook in hooks:
    result = hook(module, args, out)
    if result:
        out = result
return out
""",
        ),
        (
            "turns args into a list up front (hooks see a list, not a tuple)",
            """
args = list(args)
for hook in pre_hooks:
    result = hook(module, args)
    if result is not None:
        args = list(result) if isinstance(result, tuple) else [result]
out = module.forward(*args)
for hook in hooks:
    result = hook(module, args, out)
    if result is not None:
        out = result
return out
""",
        ),
    ],
    "ex4_state_dict": [
        (
            "clones the tensors instead of sharing their storage",
            """
out = OrderedDict()
for name, p in module._parameters.items():
    if p is not None:
        out[prefix + name] = p.detach().clone()
for name, b in module._buffers.items():
    if b is not None and name not in module._non_persistent_buffers_set:
        out[prefix + name] = b.detach().clone()
for name, child in module._modules.items():
    if child is not None:
        out.update(state_dict(child, prefix + name + "."))
return out
""",
        ),
        (
            "stores the parameters without detaching them",
            """
out = OrderedDict()
for name, p in module._parameters.items():
    if p is not None:
        out[prefix + name] = p
for name, b in module._buffers.items():
    if b is not None and name not in module._non_persistent_buffers_set:
        out[prefix + name] = b
for name, child in module._modules.items():
    if child is not None:
        out.update(state_dict(child, prefix + name + "."))
return out
""",
        ),
        (
            "saves non-persistent buffers too",
            """
out = OrderedDict()
for name, p in module._parameters.items():
    if p is not None:
        out[prefix + name] = p.detach()
for name, b in module._buffers.items():
    if b is not None:
        out[prefix + name] = b.detach()
for name, child in module._modules.items():
    if child is not None:
        out.update(state_dict(child, prefix + name + "."))
return out
""",
        ),
        (
            "buffers before parameters",
            """
out = OrderedDict()
for name, b in module._buffers.items():
    if b is not None and name not in module._non_persistent_buffers_set:
        out[prefix + name] = b.detach()
for name, p in module._parameters.items():
    if p is not None:
        out[prefix + name] = p.detach()
for name, child in module._modules.items():
    if child is not None:
        out.update(state_dict(child, prefix + name + "."))
return out
""",
        ),
        (
            "de-duplicates a shared module (saved under its first name only)",
            """
def walk(mod, pre, seen):
    if mod in seen:
        return OrderedDict()
    seen.add(mod)
    out = OrderedDict()
    for name, p in mod._parameters.items():
        if p is not None:
            out[pre + name] = p.detach()
    for name, b in mod._buffers.items():
        if b is not None and name not in mod._non_persistent_buffers_set:
            out[pre + name] = b.detach()
    for name, child in mod._modules.items():
        if child is not None:
            out.update(walk(child, pre + name + ".", seen))
    return out

return walk(module, prefix, set())
""",
        ),
        (
            "keeps None entries (bias=False)",
            """
out = OrderedDict()
for name, p in module._parameters.items():
    out[prefix + name] = None if p is None else p.detach()
for name, b in module._buffers.items():
    if b is not None and name not in module._non_persistent_buffers_set:
        out[prefix + name] = b.detach()
for name, child in module._modules.items():
    if child is not None:
        out.update(state_dict(child, prefix + name + "."))
return out
""",
        ),
        (
            "does not skip a None buffer",
            """
out = OrderedDict()
for name, p in module._parameters.items():
    if p is not None:
        out[prefix + name] = p.detach()
for name, b in module._buffers.items():
    if name not in module._non_persistent_buffers_set:
        out[prefix + name] = b if b is None else b.detach()
for name, child in module._modules.items():
    if child is not None:
        out.update(state_dict(child, prefix + name + "."))
return out
""",
        ),
        (
            "checks every buffer against the top module's non-persistent set",
            """
root = module

def walk(mod, pre):
    out = OrderedDict()
    for name, p in mod._parameters.items():
        if p is not None:
            out[pre + name] = p.detach()
    for name, b in mod._buffers.items():
        if b is not None and name not in root._non_persistent_buffers_set:
            out[pre + name] = b.detach()
    for name, child in mod._modules.items():
        if child is not None:
            out.update(walk(child, pre + name + "."))
    return out

return walk(module, prefix)
""",
        ),
        (
            "a child's keys start from its own name (no parent path)",
            """
out = OrderedDict()
for name, p in module._parameters.items():
    if p is not None:
        out[prefix + name] = p.detach()
for name, b in module._buffers.items():
    if b is not None and name not in module._non_persistent_buffers_set:
        out[prefix + name] = b.detach()
for name, child in module._modules.items():
    if child is not None:
        out.update(state_dict(child, name + "."))
return out
""",
        ),
        (
            "the children before the module's own entries",
            """
out = OrderedDict()
for name, child in module._modules.items():
    if child is not None:
        out.update(state_dict(child, prefix + name + "."))
for name, p in module._parameters.items():
    if p is not None:
        out[prefix + name] = p.detach()
for name, b in module._buffers.items():
    if b is not None and name not in module._non_persistent_buffers_set:
        out[prefix + name] = b.detach()
return out
""",
        ),
        (
            "looks the buffer's name up in _parameters, not _non_persistent_buffers_set",
            """
out = OrderedDict()
for name, p in module._parameters.items():
    if p is not None:
        out[prefix + name] = p.detach()
for name, b in module._buffers.items():
    if b is not None and name not in module._parameters:
        out[prefix + name] = b.detach()
for name, child in module._modules.items():
    if child is not None:
        out.update(state_dict(child, prefix + name + "."))
return out
""",
        ),
    ],
    "ex5_apply": [
        (
            "walks _modules itself: a child registered twice under one parent is visited twice",
            _APPLY.replace(
                "for child in module.children():\n",
                "for child in (c for c in module._modules.values() if c is not None):\n",
            ),
        ),
        (
            "makes a new Parameter (the old object, an optimizer's, is left behind)",
            _APPLY.replace(
                _PARAMS,
                """for name, param in module._parameters.items():
    if param is not None:
        with torch.no_grad():
            new = nn.Parameter(fn(param), param.requires_grad)
            if param.grad is not None:
                new.grad = fn(param.grad)
        module._parameters[name] = new
""",
            ),
        ),
        (
            "stores the converted plain tensor in _parameters",
            _APPLY.replace(
                _PARAMS,
                """for name, param in module._parameters.items():
    if param is not None:
        with torch.no_grad():
            module._parameters[name] = fn(param)
""",
            ),
        ),
        (
            "forgets the gradients",
            _APPLY.replace(
                "        if param.grad is not None:\n            param.grad.data = fn(param.grad)\n",
                "",
            ),
        ),
        ("forgets the buffers", _APPLY.replace(_BUFFERS, "")),
        (
            "converts the module itself before its children",
            "\n" + _PARAMS + _BUFFERS + _CHILDREN + "return module\n",
        ),
        ("does not recurse into the children", _APPLY.replace(_CHILDREN, "")),
        (
            "does not skip a None buffer (fn(None))",
            _APPLY.replace(
                "    if buf is not None:\n        module._buffers[name] = fn(buf)\n",
                "    module._buffers[name] = fn(buf)\n",
            ),
        ),
        (
            "does not skip a None parameter (bias=False)",
            _APPLY.replace("    if param is None:\n        continue\n", ""),
        ),
        (
            "replaces the .grad by a new tensor instead of filling the existing one",
            _APPLY.replace("param.grad.data = fn(param.grad)", "param.grad = fn(param.grad)"),
        ),
        (
            "visits a shared module only once",
            """
def walk(mod, seen):
    if mod in seen:
        return
    seen.add(mod)
    for child in mod._modules.values():
        if child is not None:
            walk(child, seen)
"""
            + textwrap.indent((_PARAMS + _BUFFERS).replace("module._", "mod._"), "    ")
            + "\nwalk(module, set())\nreturn module\n",
        ),
        (
            "converts a tied weight only once",
            """
seen = set()

def walk(mod):
    for child in mod._modules.values():
        if child is not None:
            walk(child)
    for param in mod._parameters.values():
        if param is None or param in seen:
            continue
        seen.add(param)
        with torch.no_grad():
            param.data = fn(param)
            if param.grad is not None:
                param.grad.data = fn(param.grad)
    for name, buf in mod._buffers.items():
        if buf is not None:
            mod._buffers[name] = fn(buf)

walk(module)
return module
""",
        ),
        (
            "converts each buffer in place with .data instead of replacing it",
            _APPLY.replace(
                _BUFFERS,
                "for buf in module._buffers.values():\n    if buf is not None:\n        buf.data = fn(buf)\n",
            ),
        ),
    ],
}

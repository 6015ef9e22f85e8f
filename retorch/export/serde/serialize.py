"""save and load: an ExportedProgram as one small JSON document, weights included.

Mirrors the idea of torch/_export/serde/serialize.py at torch v2.13.0 (`GraphModuleSerializer`
writes each node as op name + typed arguments, `ExportedProgramSerializer` adds the signature,
range constraints and a schema version; torch/_export/serde/schema.py is the schema) without
its thrift/dataclass schema and its zip archive (torch/export/pt2_archive). The format:

    {"format": "retorch.export", "version": 1,
     "inputs": [{"name": "x", "shape": ["s0", 4], "dtype": "float32"}],
     "range_constraints": {"s0": [2, 64]},          # max null: unbounded
     "signature": {"inputs": [{"kind": "PARAMETER", "name": "p_l_weight",
                               "target": "l.weight", "persistent": null}, ...],
                   "outputs": [{"kind": "USER_OUTPUT", "name": "relu", "target": null}]},
     "single_output": true,
     "nodes": [{"name": "addmm", "op": "call_function",
                "target": "torch.ops.aten.addmm.default",
                "args": [{"node": "p_l_bias"}, {"node": "x"}, {"node": "t"}], "kwargs": {},
                "meta": {"shape": [5, 3], "dtype": "float32"}}, ...],
     "outputs": [{"node": "relu"}],
     "state_dict": {"l.weight": {"dtype": "float32", "shape": [3, 4], "data": "<base64>"}}}

An argument is a JSON value, or a one-key object for what JSON lacks: `{"node": name}`,
`{"dtype": "float32"}`, `{"device": "cpu"}`, `{"layout": ...}`, `{"memory_format": ...}`,
`{"float": "inf"}`. Weights are their raw bytes (native, little-endian on every machine the
course runs on) in base64: loading gives back the same bits.
"""

import base64
import json
import math
import operator

import torch

from ...fx import Graph, GraphModule, Node
from ..exported_program import ExportedProgram
from ..graph_signature import ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec

FORMAT_VERSION = 1
_ENUMS = {"layout": torch.layout, "memory_format": torch.memory_format}


def _dtype(name: str) -> torch.dtype:
    d = getattr(torch, name, None)
    if not isinstance(d, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in a serialized program")
    return d


def _encode(a):
    if isinstance(a, Node):
        return {"node": a.name}
    if isinstance(a, (list, tuple)):
        return [_encode(x) for x in a]
    if isinstance(a, float) and not math.isfinite(a):
        return {"float": str(a)}
    if a is None or isinstance(a, (bool, int, float, str)):
        return a
    if isinstance(a, torch.dtype):
        return {"dtype": str(a).removeprefix("torch.")}
    if isinstance(a, torch.device):
        return {"device": str(a)}
    for key, kind in _ENUMS.items():
        if isinstance(a, kind):
            return {key: str(a).removeprefix("torch.")}
    raise TypeError(f"save: cannot serialize an argument of type {type(a).__name__}: {a!r}")


def _decode(a, env):
    if isinstance(a, list):
        return [_decode(x, env) for x in a]
    if not isinstance(a, dict):
        return a
    (key, v), = a.items()  # fmt: skip
    if key == "node":
        return env[v]
    if key == "float":
        return float(v)
    if key == "dtype":
        return _dtype(v)
    if key == "device":
        return torch.device(v)
    return getattr(torch, v)  # a layout or a memory format


def _target_name(t) -> str:
    if t is operator.getitem:
        return "_operator.getitem"
    if isinstance(t, torch._ops.OpOverload):
        return f"torch.ops.{t.namespace}.{t._opname}.{t._overloadname}"
    raise TypeError(f"save: only aten ops and getitem are serializable, not {t}")


def _resolve(name: str):
    if name == "_operator.getitem":
        return operator.getitem
    parts = name.split(".")
    if len(parts) != 5 or parts[:2] != ["torch", "ops"]:
        raise ValueError(f"load: {name!r} is not an op name torch.ops.<ns>.<op>.<overload>")
    return getattr(getattr(getattr(torch.ops, parts[2]), parts[3]), parts[4])


def _tensor(t: torch.Tensor) -> dict:
    raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    d = str(t.dtype).removeprefix("torch.")
    return {"dtype": d, "shape": list(t.shape), "data": base64.b64encode(raw).decode()}


def _untensor(d: dict) -> torch.Tensor:
    raw = bytearray(base64.b64decode(d["data"]))
    dtype = _dtype(d["dtype"])
    if not raw:
        return torch.empty(d["shape"], dtype=dtype)
    return torch.frombuffer(raw, dtype=dtype).reshape(d["shape"]).clone()


def to_json(ep: ExportedProgram) -> dict:
    """The program as a JSON-ready dict (the format in this module's docstring)."""
    nodes = []
    for n in ep.graph.nodes:
        if n.op == "output":
            outputs = _encode(list(n.args[0]))
            continue
        val = n.meta.get("val")
        meta = {} if val is None else {"shape": list(val.shape),
                                       "dtype": str(val.dtype).removeprefix("torch.")}  # fmt: skip
        item = {"name": n.name, "op": n.op}
        if n.op == "call_function":
            item.update(target=_target_name(n.target), args=_encode(n.args),
                        kwargs={k: _encode(v) for k, v in n.kwargs.items()})  # fmt: skip
        elif n.op != "placeholder":
            raise TypeError(f"save: a {n.op} node ({n.name}) has no place in an export graph")
        nodes.append({**item, "meta": meta})
    sig = ep.graph_signature
    ins = [{"kind": s.kind.name, "name": s.name, "target": s.target, "persistent": s.persistent}
           for s in sig.input_specs]  # fmt: skip
    outs = [{"kind": s.kind.name, "name": s.name, "target": s.target} for s in sig.output_specs]
    users = zip(sig.user_inputs, ep.input_shapes, ep.input_dtypes)
    return {
        "format": "retorch.export", "version": FORMAT_VERSION,
        "inputs": [{"name": n, "shape": list(s), "dtype": str(d).removeprefix("torch.")}
                   for n, s, d in users],
        "range_constraints": {s: list(r) for s, r in ep.range_constraints.items()},
        "signature": {"inputs": ins, "outputs": outs},
        "single_output": bool(ep.graph_module.meta.get("single_output")),
        "nodes": nodes, "outputs": outputs,
        "state_dict": {k: _tensor(v) for k, v in ep.state_dict.items()},
    }  # fmt: skip


def from_json(doc: dict) -> ExportedProgram:
    """Rebuild the program from `to_json`'s dict; refuse another format or version."""
    if doc.get("format") != "retorch.export" or doc.get("version") != FORMAT_VERSION:
        raise ValueError(f"load: expected a retorch.export document of version {FORMAT_VERSION},"
                         f" got format {doc.get('format')!r} version {doc.get('version')!r}")  # fmt: skip
    graph, env = Graph(), {}
    for item in doc["nodes"]:
        if item["op"] == "placeholder":
            node = graph.placeholder(item["name"])
        else:
            args = tuple(_decode(item["args"], env))
            kwargs = {k: _decode(v, env) for k, v in item["kwargs"].items()}
            node = graph.call_function(_resolve(item["target"]), args, kwargs, name=item["name"])
        if node.name != item["name"]:
            raise ValueError(f"load: node {item['name']!r} came back as {node.name!r}")
        if item["meta"]:
            m = item["meta"]
            node.meta["val"] = torch.empty(m["shape"], dtype=_dtype(m["dtype"]), device="meta")
        env[node.name] = node
    graph.output(tuple(_decode(doc["outputs"], env)))
    gm = GraphModule(torch.nn.Module(), graph)
    gm.meta["single_output"] = doc["single_output"]
    sig = ExportGraphSignature(
        [InputSpec(InputKind[s["kind"]], s["name"], s["target"], s["persistent"])
         for s in doc["signature"]["inputs"]],
        [OutputSpec(OutputKind[s["kind"]], s["name"], s["target"])
         for s in doc["signature"]["outputs"]],
    )  # fmt: skip
    state = {k: _untensor(v) for k, v in doc["state_dict"].items()}
    ranges = {s: tuple(r) for s, r in doc["range_constraints"].items()}
    shapes = [tuple(i["shape"]) for i in doc["inputs"]]
    return ExportedProgram(
        gm, sig, state, ranges, shapes, [_dtype(i["dtype"]) for i in doc["inputs"]]
    )


def dumps(doc: dict) -> str:
    """JSON with one line per top-level entry and per node, spec or tensor: diffable."""

    def block(v, pad):
        if isinstance(v, list) and v and isinstance(v[0], dict):
            return "[\n" + ",\n".join(pad + json.dumps(x) for x in v) + "]"
        if isinstance(v, dict) and v and all(isinstance(x, (dict, list)) for x in v.values()):
            items = (f"{pad}{json.dumps(k)}: {block(x, pad + ' ')}" for k, x in v.items())
            return "{\n" + ",\n".join(items) + "}"
        return json.dumps(v)

    return "{\n" + ",\n".join(f" {json.dumps(k)}: {block(v, '  ')}" for k, v in doc.items()) + "}\n"


def save(ep: ExportedProgram, f) -> None:
    """Write `ep` to a path or a text file object as JSON (torch.export.save's role)."""
    text = dumps(to_json(ep))
    if hasattr(f, "write"):
        f.write(text)
    else:
        with open(f, "w") as fh:
            fh.write(text)


def load(f) -> ExportedProgram:
    """Read a program written by `save` from a path or a text file object."""
    if hasattr(f, "read"):
        return from_json(json.loads(f.read()))
    with open(f) as fh:
        return from_json(json.loads(fh.read()))

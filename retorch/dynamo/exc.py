"""Unsupported: raised when the tracer meets something a graph cannot hold (a graph break).

Mirrors torch/_dynamo/exc.py at torch v2.13.0 (`Unsupported`, `unimplemented`). `kind` sorts
breaks the way the tests compare them with torch's reasons: "builtin" (print), "jump"
(data-dependent control flow), "call" (an unsupported function or Tensor method), "opcode"
(bytecode outside the subset), "inline" (a break inside an inlined function).
"""


class Unsupported(Exception):
    def __init__(self, reason: str, kind: str = "call"):
        super().__init__(reason)
        self.reason, self.kind = reason, kind


def unimplemented(reason: str, kind: str = "call"):
    raise Unsupported(reason, kind)

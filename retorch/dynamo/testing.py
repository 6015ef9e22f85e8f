"""CompileCounter: a backend that counts compiled frames and ops (torch/_dynamo/testing.py)."""


class CompileCounter:
    def __init__(self):
        self.frame_count = 0
        self.op_count = 0

    def __call__(self, gm, example_inputs):
        self.frame_count += 1
        self.op_count += sum(n.op.startswith("call_") for n in gm.graph.nodes)
        return gm.forward

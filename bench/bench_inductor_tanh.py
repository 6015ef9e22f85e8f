"""Where the GELU's difference between Inductor's C++ and retorch.inductor's Numba comes from.

The GELU of bench_inductor (nine ops, one fused loop in both compilers) split in two: the same
chain without its tanh, and tanh alone, each compiled by torch.compile with Inductor and with
retorch.inductor, forward only (under no_grad), on 1M and 10M float32. If the kernels differed
in their loads, stores, threads or arithmetic, the chain without tanh would show it; if they
differ in tanh (Inductor's loop calls at::vec's Vectorized<float>::tanh, which is Sleef's
tanh; ours is 1 - 2 / (exp(2x) + 1) through a polynomial exp), tanh alone shows it. Both run
on one thread (torch.set_num_threads(1): Inductor then writes a serial loop; Numba's prange
runs on one thread too), so that the times are each loop's work per element and not how the
two thread pools share a busy machine. Times are CPU time of the process
(time.process_time: time the machine gave to other programs is not counted), the fastest of
25 interleaved samples, in ms (a sample is 10 calls at 1M, 1 at 10M). The result also
stores the vector ISA Inductor picked on the machine and the widest vector register in the
machine code of our GELU kernel, so that a reader sees whether both used the same width.
"""

from __future__ import annotations

import re
import sys
import time

import numba
import torch

import retorch.inductor as ri
from bench.bench_inductor import gelu

IMPLS = ("torch.compile (inductor)", "retorch.inductor")


def gelu_without_tanh(x):
    y = x * x * x
    y = y * 0.044715
    y = x + y
    y = y * 0.7978845608
    y = y + 1.0
    y = y * 0.5
    return x * y


def tanh_alone(x):
    return torch.tanh(x)


CASES = {"gelu (9 ops)": gelu, "gelu without its tanh (8 ops)": gelu_without_tanh,
         "tanh alone": tanh_alone}  # fmt: skip


def _compile(fn, x, backend):
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend, dynamic=False)
    compiled(x)
    return compiled


def widest_register(compiled_graph) -> str:
    """`zmm`, `ymm` or `xmm`: the widest vector register our first kernel's machine code uses."""
    dispatcher = compiled_graph.call.__globals__[next(iter(compiled_graph.kernels))]
    asm = "".join(dispatcher.inspect_asm().values())
    return next((r for r in ("zmm", "ymm", "xmm") if re.search(rf"%{r}\d", asm)), "none")


def run(quick: bool = False) -> dict:
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    rows, register = [], None
    threads = torch.get_num_threads(), numba.get_num_threads()
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    torch.manual_seed(0)
    for n in [1_000_000] if quick else [1_000_000, 10_000_000]:
        x = torch.randn(n)
        for name, fn in CASES.items():
            with torch.no_grad():
                impls = dict(zip(IMPLS, (_compile(fn, x, "inductor"),
                                         _compile(fn, x, ri.compile_fx))))  # fmt: skip
                if name == "gelu (9 ops)":
                    register = widest_register(ri.last_compile())
                samples = {impl: [] for impl in impls}
                number = max(1, 10_000_000 // n)
                for _ in range(3 if quick else 25):
                    for impl, f in impls.items():  # interleaved, so drifts hit both
                        t0 = time.process_time()
                        for _ in range(number):
                            f(x)
                        samples[impl].append((time.process_time() - t0) / number * 1e3)
            rows += [{"case": f"{name}, {n // 10**6}M", "impl": impl,
                      "value": min(ms)} for impl, ms in samples.items()]  # fmt: skip
    torch._dynamo.reset()
    torch.set_num_threads(threads[0])
    numba.set_num_threads(threads[1])
    return {
        "name": "inductor_tanh",
        "title": "The GELU split: Inductor's C++ against retorch.inductor (ms, lower is better)",
        "unit": "ms",
        "rows": rows,
        "inductor_vec_isa": str(pick_vec_isa()),
        "numba_widest_register": register,
        "notes": " ".join(__doc__.split("\n\n")[1].split()),
    }


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    for row in result["rows"]:
        print(f"{row['case']:36} {row['impl']:26} {row['value']:9.3f} ms")
    print(result["inductor_vec_isa"], result["numba_widest_register"])

"""Compile every Numba-CUDA kernel of the course to PTX for sm_75, sm_80 and sm_90.

The tests and notebooks run kernels under the CUDA simulator, which accepts Python that real
Numba-CUDA rejects. This check compiles the same Python functions with the real compiler
(``numba.cuda.compile_ptx``, no GPU needed) so such code is caught. It finds kernels in

* retorch/: every module is imported; kernels register themselves through retorch.cuda.kernel;
* notebooks/ and solutions/: code cells that declare a kernel (``@kernel(...)`` or
  ``@device_function(...)``) are run on their own, so a kernel cell must be self-contained;

and fails if any kernel anywhere is written with a bare ``cuda.jit`` (which would escape it).
Each kernel's PTX is then assembled for each target (:func:`resources`: ptxas through
nvJitLink), which prints its registers per thread, one figure per signature, and fails if a
kernel uses local memory (spilled registers, or a stack frame): code that is correct but slow.
Run with NUMBA_ENABLE_CUDASIM=0 (``make ptx`` does).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import sys
from pathlib import Path

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jupytext  # noqa: E402

import retorch  # noqa: E402
import retorch.cuda as rcuda  # noqa: E402
from tools.course import ROOT  # noqa: E402

_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame")
_PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def resources(spec: rcuda.KernelSpec, cc: tuple[int, int], max_registers: int | None = None):
    """What the assembler made of each signature of a kernel for ``cc``: registers per thread
    and bytes of local memory (ptxas's ``-v`` report, through nvJitLink, the linker Numba-CUDA
    itself uses, so no GPU and no CUDA toolkit is needed). A kernel that needs more registers
    than ptxas gives it (``max_registers``, at most 255) *spills*: it stores values to slow
    local memory and loads them back; a ``cuda.local.array`` that ptxas cannot keep in
    registers lives in that memory too, as the thread's stack frame. Registers per thread also
    bound how many threads an SM can hold at once."""
    from cuda.bindings import nvjitlink

    found = []
    for sig in spec.signatures:
        ptx = rcuda.compile_ptx(rcuda.KernelSpec(spec.pyfunc, (sig,), spec.device), cc).encode()
        options = [f"-arch=sm_{cc[0]}{cc[1]}", "-Xptxas=-v"]
        if max_registers:
            options.append(f"-maxrregcount={max_registers}")
        handle = nvjitlink.create(len(options), options)
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, ptx, len(ptx), spec.name)
            nvjitlink.complete(handle)
            log = bytearray(nvjitlink.get_info_log_size(handle))
            nvjitlink.get_info_log(handle, log)
        finally:
            nvjitlink.destroy(handle)
        text = log.decode(errors="replace")
        spills = [int(x) for pair in _PTXAS_SPILL.findall(text) for x in pair]
        found.append({"signature": sig, "registers": max(map(int, _PTXAS_USED.findall(text))),
                      "stack_bytes": sum(map(int, _PTXAS_STACK.findall(text))),
                      "spilled_bytes": sum(spills)})  # fmt: skip
    return found


BARE_JIT = re.compile(r"\bcuda\.jit\b")
DECLARES = re.compile(r"^\s*@(retorch\.cuda\.|rcuda\.)?(kernel|device_function)\(", re.M)


def bare_jit_uses() -> list[str]:
    found = []
    for path in sorted((ROOT / "retorch").rglob("*.py")):
        if path.name == "cuda.py" and path.parent.name == "retorch":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if BARE_JIT.search(line) and not line.lstrip().startswith("#"):
                found.append(f"{path.relative_to(ROOT)}:{n}")
    for folder in ("notebooks", "solutions", "labs"):
        for md in sorted((ROOT / folder).glob("*.md")):
            for i, cell in enumerate(jupytext.read(md).cells):
                if cell.cell_type == "code" and any(
                    BARE_JIT.search(line) and not line.lstrip().startswith("#")
                    for line in cell.source.splitlines()
                ):
                    found.append(f"{md.relative_to(ROOT)} cell {i}")
    return found


def load_kernels() -> None:
    for info in pkgutil.walk_packages(retorch.__path__, "retorch."):
        importlib.import_module(info.name)
    for folder in ("notebooks", "solutions"):
        for md in sorted((ROOT / folder).glob("*.md")):
            for i, cell in enumerate(jupytext.read(md).cells):
                if cell.cell_type == "code" and DECLARES.search(cell.source):
                    name = f"{md.relative_to(ROOT)}[cell {i}]"
                    exec(compile(cell.source, name, "exec"), {"__name__": name})


def main() -> int:
    bare = bare_jit_uses()
    if bare:
        print("Kernels must be declared with retorch.cuda.kernel / device_function (so this check")
        print("compiles them), not a bare cuda.jit:\n  " + "\n  ".join(bare))
        return 1
    load_kernels()
    failures = spilling = 0
    for spec in rcuda.KERNELS:
        sizes, local_memory = [], False
        for cc in rcuda.PTX_TARGETS:
            target = f"sm_{cc[0]}{cc[1]}"
            try:
                if spec.device:  # a device function is assembled inside the kernels calling it
                    ptx = rcuda.compile_ptx(spec, cc)
                    sizes.append(f"{target} {ptx.count(chr(10))} lines")
                    continue
                used = resources(spec, cc)
                local = sum(u["stack_bytes"] + u["spilled_bytes"] for u in used)
                local_memory |= local > 0
                regs = "/".join(str(u["registers"]) for u in used)
                sizes.append(
                    f"{target} {regs} regs" + (f" LOCAL MEMORY {local} B" if local else "")
                )
            except Exception as e:  # noqa: BLE001  (report every kernel, then fail)
                failures += 1
                sizes.append(f"{target} FAILED: {type(e).__name__}: {str(e).splitlines()[0]}")
        spilling += local_memory
        kind = "device fn" if spec.device else "kernel"
        print(f"{kind:9} {spec.name}: " + ", ".join(sizes))
    print(
        f"PTX: {len(rcuda.KERNELS)} kernels x {len(rcuda.PTX_TARGETS)} targets, {failures} failures"
    )
    if spilling:
        print(
            f"{spilling} kernel(s) use local memory (LOCAL MEMORY above): registers spilled, or "
            "a cuda.local.array indexed with values the compiler cannot make constants. Give "
            "the kernel fewer live values (smaller tiles, fewer accumulators) or constant indices"
        )
    if not rcuda.KERNELS:
        print("no kernels found: the check would prove nothing")
        return 1
    return 1 if failures or spilling else 0


if __name__ == "__main__":
    sys.exit(main())

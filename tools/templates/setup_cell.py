# Set-up: install only what this runtime lacks (torch is never pinned or reinstalled), then
# check that a Numba-CUDA kernel runs here and that Graphviz's `dot` is present.
import importlib.util
import subprocess
import sys

pip = [sys.executable, "-m", "pip", "install", "-q"]
lacking = [
    pkg
    for mod, pkg in [("numba_cuda", "numba-cuda[cu12]"), ("torchviz", "torchviz")]
    if importlib.util.find_spec(mod) is None
]
if lacking:
    subprocess.run(pip + lacking, check=True)
if importlib.util.find_spec("retorch") is None:
    course = "git+{repository_url}"
    subprocess.run(pip + ["--no-deps", course], check=True)

import retorch.environment  # noqa: E402  (chooses the simulator before numba.cuda is imported)

retorch.environment.check()

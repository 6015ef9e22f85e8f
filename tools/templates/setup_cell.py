# Set-up: install the course (retorch) and what this runtime lacks (numba-cuda with the CUDA of
# its torch, torchviz), never changing its torch or CUDA libraries (retorch/install.py), then
# check that a Numba-CUDA kernel runs here and that Graphviz's `dot` is present.
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("retorch") is None:
    course = "git+{repository_url}"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", course]
    if subprocess.run(pip).returncode:
        raise RuntimeError(
            f"Could not install the course from {course}. If that address is wrong or "
            "private, install retorch from your copy (`pip install --no-deps <path or URL>`)"
            " and run this cell again; whoever publishes the course sets it with "
            "`make publish-url URL=...`."
        )

import retorch.install  # noqa: E402  (imports neither torch nor numba)

retorch.install.ensure()  # one line if it installs; stops if torch would change

import retorch.environment  # noqa: E402  (chooses the simulator before numba.cuda is imported)

retorch.environment.check()

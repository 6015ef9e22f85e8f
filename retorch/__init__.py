"""retorch: PyTorch's internals rebuilt in Python and Numba, one chapter at a time.

Each subpackage mirrors a part of PyTorch and names, in its module docstrings, the
torch source file it mirrors (paths at the pinned release tag ``TORCH_TAG``):

- ``retorch.overview``   chapter 0: tools to look inside real torch (dispatch keys, op logs)
- ``retorch.nn``         chapter 1: ``torch/nn/modules/module.py`` and friends
- ``retorch.utils.data`` chapter 1: ``torch/utils/data`` (Dataset, Sampler, DataLoader)
- ``retorch.optim``      chapter 2: ``torch/optim``
- ``retorch.autograd``   chapter 3: ``torch/csrc/autograd`` (Node, Edge, engine)

Subpackages are imported on demand (``from retorch import nn``), so ``import retorch``
stays cheap. Each chapter's package depends only on earlier chapters' packages and torch.
"""

import ctypes.util as _ctypes_util
import os as _os

__version__ = "0.1.0"

# Numba reads these when numba.cuda is first imported, so they are settled here, before any
# retorch module can import it: with no NVIDIA driver, run kernels on the CUDA simulator
# (an explicit NUMBA_ENABLE_CUDASIM=0 or 1 is respected); the small teaching launches would
# otherwise warn about GPU occupancy on every call.
if "NUMBA_ENABLE_CUDASIM" not in _os.environ and not (
    _os.path.exists("/dev/nvidia0") or _ctypes_util.find_library("cuda")
):
    _os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
_os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

# Numba's on-disk cache (cache=True) stamps a compiled function with its own source file only;
# retorch's locators (retorch/_numba_cache.py) add every retorch module it can inline from, so
# an edit to one (scalar_ops.py inlined into cpu_kernels.py) is never masked by a stale kernel.
_NUMBA_LOCATORS = ",".join(
    [
        f"retorch._numba_cache.{n}"
        for n in ("UserProvidedLocator", "InTreeLocator", "UserWideLocator")
    ]
    + ["UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator"]
    + ["IPythonCacheLocator", "ZipCacheLocator"]  # Numba's defaults, for everything else
)
_os.environ.setdefault("NUMBA_CACHE_LOCATOR_CLASSES", _NUMBA_LOCATORS)
if "numba.core.config" in __import__("sys").modules:  # Numba read its settings already
    __import__("sys").modules["numba.core.config"].CACHE_LOCATOR_CLASSES = _os.environ[
        "NUMBA_CACHE_LOCATOR_CLASSES"
    ]

#: The PyTorch release whose source files the docstrings and chapters cite.
TORCH_TAG = "v2.13.0"
#: Base URL for citing torch's source at that tag.
TORCH_SOURCE = f"https://github.com/pytorch/pytorch/blob/{TORCH_TAG}/"

# The global switches (torch.use_deterministic_algorithms, set_num_threads, set_default_dtype,
# set_default_device and the device context):
# retorch/_switches.py imports Numba and retorch.tensor only when a switch is used.
from . import _switches  # noqa: E402

use_deterministic_algorithms = _switches.use_deterministic_algorithms
are_deterministic_algorithms_enabled = _switches.are_deterministic_algorithms_enabled
is_deterministic_algorithms_warn_only_enabled = (
    _switches.is_deterministic_algorithms_warn_only_enabled
)
set_num_threads = _switches.set_num_threads
get_num_threads = _switches.get_num_threads
set_default_dtype = _switches.set_default_dtype
get_default_dtype = _switches.get_default_dtype
set_default_device = _switches.set_default_device
get_default_device = _switches.get_default_device
device = _switches.device

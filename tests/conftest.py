"""Shared test settings: hypothesis profiles sized for a 2-core CI machine, and tests that
need Numba's CUDA simulator (marker ``simulator``) run in a subprocess that has it on."""

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, settings

# Under CI (CI=true) and in `make test` (which sets HYPOTHESIS_DERANDOMIZE=1) the examples are
# drawn from a fixed seed, so a submission's CI run tests exactly what its author ran; `make
# unit` and `make check-fast` draw fresh examples on every run, to find new failing cases.
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=30,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=bool(os.environ.get("CI") or os.environ.get("HYPOTHESIS_DERANDOMIZE")),
)
settings.register_profile("dev", deadline=None, max_examples=10)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_ignore_collect(collection_path, config):
    """Under ``-m "not slow"`` (make check-fast), skip importing modules marked slow as a
    whole: importing them (torch._dynamo, torch.distributed, Numba kernels) costs more than
    the fast tests themselves. ``make unit`` collects and runs them all."""
    if config.getoption("markexpr", "") != "not slow" or collection_path.suffix != ".py":
        return None
    text = collection_path.read_text(errors="ignore")
    return True if "\npytestmark = pytest.mark.slow\n" in text else None


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A test marked ``simulator`` (it runs the CUDA path on CPU tensors) needs Numba's CUDA
    simulator, which a process settles once, when numba.cuda is first imported. Where it is
    off (``make test-gpu``: NUMBA_ENABLE_CUDASIM=0), run that one test again in a fresh
    process with the simulator on, and pass or fail with it, its output passed through."""
    if pyfuncitem.get_closest_marker("simulator") is None:
        return None
    import retorch  # noqa: F401  (settles NUMBA_ENABLE_CUDASIM before numba.cuda is imported)
    from retorch.cuda import simulator_enabled

    if simulator_enabled():
        return None
    if os.environ.get("RETORCH_SIMULATOR_SUBPROCESS"):
        pytest.fail("the simulator is still off in the subprocess started to turn it on")
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "RETORCH_SIMULATOR_SUBPROCESS": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", pyfuncitem.nodeid]
    done = subprocess.run(
        command, cwd=pyfuncitem.config.rootpath, env=env, capture_output=True, text=True
    )
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        pytest.fail(
            f"{pyfuncitem.nodeid} failed with the simulator on, in a subprocess (exit code "
            f"{done.returncode}):\n{done.stdout}{done.stderr}",
            pytrace=False,
        )
    return True


@pytest.fixture(autouse=True)
def _array_backend_restored(request):
    """Chapter 3's array backend is process-wide: a test that leaves it on "retorch" changes
    every later test (test_tensor_autograd asserts "torch" at its start). Restore it after
    each test, and name the test that left it changed in a warning, so the leak is found."""
    import warnings

    from retorch.autograd.backend import get_array_backend, set_array_backend

    before = get_array_backend()
    yield
    after = get_array_backend()
    if after != before:
        set_array_backend(before)
        warnings.warn(f"{request.node.nodeid} left chapter 3's array backend on {after!r}")

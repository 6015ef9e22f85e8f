"""Shared test settings: hypothesis profiles sized for a 2-core CI machine."""

import os

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

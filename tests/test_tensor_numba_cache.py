"""Numba's on-disk cache never masks an edit (retorch/_numba_cache.py).

``cpu_kernels.unary_loop`` inlines the op bodies of ``scalar_ops.py``. Numba's own cache
stamps the compiled loop with ``cpu_kernels.py`` alone, so after an edit to ``scalar_ops.py``
it would load the old machine code. These tests edit a copy of retorch in a temporary
directory and run it in fresh processes sharing one cache directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import retorch
from retorch import _numba_cache

ROOT = Path(retorch.__file__).resolve().parent
NEG_OF_1_2_3 = "import retorch.tensor as rt; print(rt.neg(rt.tensor([1, 2, 3])).tolist())"
NUMBAS_OWN = "UserProvidedCacheLocator,InTreeCacheLocator,UserWideCacheLocator"


def _copy_of_retorch(tmp_path: Path) -> Path:
    shutil.copytree(ROOT, tmp_path / "retorch", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "retorch"


def _run(tmp_path: Path, locators: str | None) -> str:
    env = dict(os.environ, PYTHONPATH=str(tmp_path), NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_CACHE_LOCATOR_CLASSES", None)
    if locators is not None:
        env["NUMBA_CACHE_LOCATOR_CLASSES"] = locators
    done = subprocess.run(
        [sys.executable, "-c", NEG_OF_1_2_3], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def _edit_neg(copy: Path) -> None:
    ops = copy / "tensor" / "scalar_ops.py"
    text = ops.read_text()
    old = "def unary_int(op, x):\n    if op == NEG:\n        return -x\n"
    assert old in text
    ops.write_text(text.replace(old, old.replace("return -x", "return -x - 1")))


@pytest.mark.slow
@pytest.mark.parametrize("locators", [None, NUMBAS_OWN], ids=["retorch's", "numba's own"])
def test_an_edit_to_an_inlined_module_is_not_masked_by_the_cache(tmp_path, locators):
    copy = _copy_of_retorch(tmp_path)
    assert _run(tmp_path, locators) == "[-1, -2, -3]"
    assert list((tmp_path / "cache").rglob("cpu_kernels.unary_loop*.nbi")), "nothing was cached"
    _edit_neg(copy)  # cpu_kernels.py itself is unchanged
    after = _run(tmp_path, locators)
    if locators is None:  # retorch's locators (what `import retorch` installs)
        assert after == "[-2, -3, -4]"
    else:  # Numba's own keep the stale kernel: the failure retorch's locators prevent
        assert after == "[-1, -2, -3]"


def test_the_locators_cover_cpu_kernels_and_what_it_inlines():
    from retorch.tensor import cpu_kernels

    names = {p.name for p in _numba_cache.dependency_files(vars(cpu_kernels))}
    assert "scalar_ops.py" in names
    assert os.environ["NUMBA_CACHE_LOCATOR_CLASSES"] == retorch._NUMBA_LOCATORS
    assert retorch._NUMBA_LOCATORS == _numba_cache.LOCATORS
    impl = cpu_kernels.binary_loop._cache._impl
    assert isinstance(impl.locator, _numba_cache.UserProvidedLocator | _numba_cache.InTreeLocator)
    _, digests = impl.locator.get_source_stamp()
    assert "scalar_ops.py" in dict(digests)

"""Chapter 0's helpers against torch itself, and every torch path the chapter cites."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from retorch import cuda as rcuda
from retorch import overview
from retorch.overview import introspect
from tools import torch_paths

needs_torch_2_13 = pytest.mark.skipif(
    not torch.__version__.startswith(torch_paths.TORCH_VERSION),
    reason=f"paths are verified against the torch {torch_paths.TORCH_VERSION} wheel",
)

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "notebooks" / "00_overview.md"
LAB = ROOT / "solutions" / "00_overview_lab.md"


def printed_paths() -> set[str]:
    """Every torch path that retorch.overview prints: layers, sources, map, dispatch tables."""
    paths = set(overview.cited_paths())
    a = torch.ones(2)
    for op in ("aten::add.Tensor", "aten::mm"):
        for *_, where in overview.dispatch_path(op, a, a):
            paths.add(where.rsplit(":", 1)[0])
    paths.discard("")
    return {p for p in paths if not p.startswith("retorch/")}


@pytest.mark.slow  # seconds long: make unit runs it, make check-fast does not
@needs_torch_2_13
def test_every_path_overview_prints_is_verified_in_torch_2_13():
    unverified = sorted(p for p in printed_paths() if not torch_paths.verify(p))
    assert not unverified, f"not in torch's tree at v2.13.0: {unverified}"


@needs_torch_2_13
def test_chapter_0_cites_add_h_and_every_path_it_cites_is_verified():
    found = torch_paths.cited_paths([CHAPTER, LAB])
    assert "aten/src/ATen/native/ufunc/add.h" in found  # the regex finds the chapter's paths
    assert not torch_paths.unverified([CHAPTER, LAB])


def test_dispatch_keys_highest_priority_first():
    keys = overview.dispatch_keys(torch.ones(2))
    assert keys == ["AutocastCPU", "AutogradCPU", "ADInplaceOrView", "CPU"]
    assert keys[0] == torch._C._dispatch_keys(torch.ones(2)).highestPriorityTypeId().name


@pytest.mark.parametrize(
    "raw, short",
    [
        (
            "/__w/pytorch/pytorch/build/aten/src/ATen/RegisterCPU_0.cpp",
            "build/aten/src/ATen/RegisterCPU_0.cpp",
        ),
        ("/pytorch/build/aten/src/ATen/RegisterCPU_0.cpp", "build/aten/src/ATen/RegisterCPU_0.cpp"),
        (
            "/pytorch/torch/csrc/autograd/generated/VariableType_2.cpp",
            "torch/csrc/autograd/generated/VariableType_2.cpp",
        ),
        (
            "/var/lib/jenkins/pytorch/aten/src/ATen/autocast_mode.cpp",
            "aten/src/ATen/autocast_mode.cpp",
        ),
        (
            "/x/lib/python3.12/site-packages/torch/_meta_registrations.py",
            "torch/_meta_registrations.py",
        ),
        (
            "aten/src/ATen/core/VariableFallbackKernel.cpp",
            "aten/src/ATen/core/VariableFallbackKernel.cpp",
        ),
    ],
)
def test_short_path_cuts_any_build_prefix(raw, short):
    assert introspect._short_path(raw) == short


def test_dispatch_table_matches_torch_has_kernel():
    rows = dict(
        (k, kind)
        for k, kind, _ in overview.dispatch_table(
            "aten::add.Tensor", ["CPU", "Meta", "AutogradCPU", "Nope"]
        )
    )
    assert rows["CPU"] == "kernel" and torch._C._dispatch_has_kernel_for_dispatch_key(
        "aten::add.Tensor", "CPU"
    )
    assert rows["AutogradCPU"] == "autograd kernel"
    assert rows["Nope"] == "no kernel"
    for _, _, where in overview.dispatch_table("aten::add.Tensor", ["CPU", "AutogradCPU"]):
        assert not where.startswith("/"), where  # build-machine prefixes are cut, any build
        assert re.match(r"(build/)?(aten|torch)/", where), where


def test_excluded_and_included_keys_are_torchs_tls_sets():
    assert "AutocastCPU" in overview.excluded_keys()
    assert "BackendSelect" in overview.included_keys()
    with torch.autocast("cpu"):
        assert "AutocastCPU" not in overview.excluded_keys()
    with overview.OpLog():
        assert "Python" in overview.included_keys()


def _first_runs(rows):
    return next(key for key, _, what, _ in rows if "runs first" in what)


def test_dispatch_path_matches_the_key_torch_calls_first():
    a = torch.ones(2)
    rows = overview.dispatch_path("aten::add.Tensor", a, a)
    what = {key: w for key, _, w, _ in rows}
    assert what["AutocastCPU"].startswith("excluded")  # autocast off: never reached
    assert what["ADInplaceOrView"].startswith("fallthrough")
    assert _first_runs(rows) == "AutogradCPU"
    with torch.autocast("cpu"):
        mm = overview.dispatch_path("aten::mm", torch.ones(2, 2), torch.ones(2, 2))
        add = overview.dispatch_path("aten::add.Tensor", a, a)
    assert _first_runs(mm) == "AutocastCPU"  # mm has an autocast kernel
    assert dict((k, w) for k, _, w, _ in add)["AutocastCPU"].startswith("fallthrough")

    with torch.inference_mode():
        t = torch.ones(2)
    assert _first_runs(overview.dispatch_path("aten::add.Tensor", t, t)) == "CPU"


def test_dispatch_keys_order_is_torchs_priority():
    names = ["CPU", "AutocastCPU", "BackendSelect", "AutogradCPU"]
    assert overview.dispatch_keys_order(names) == [
        "AutocastCPU",
        "AutogradCPU",
        "BackendSelect",
        "CPU",
    ]


def test_op_log_matches_make_fx_and_keeps_repeats():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x, w):
        return (x @ w).relu().sum() + x.mean() + x.mean()

    args = (torch.randn(3, 4), torch.randn(4, 2))
    with overview.OpLog() as log:
        f(*args)
    expected = [str(n.target) for n in make_fx(f)(*args).graph.nodes if n.op == "call_function"]
    assert log.names() == expected
    assert log.names().count("aten.mean.default") == 2


def test_op_log_counts_by_phase():
    with overview.OpLog() as log:
        log.phase = "one"
        torch.ones(2).add(1)
        log.phase = "two"
        torch.ones(2).add(1)
    assert ("one", "aten.add.Tensor", 1) in log.counts()
    assert ("two", "aten.add.Tensor", 1) in log.counts()
    assert log.names("two") == ["aten.ones.default", "aten.add.Tensor"]


def test_profile_summary_counts_calls_without_timings():
    with overview.profile() as prof:
        torch.ones(3).add(1).add(2)
    rows = dict(overview.profile_summary(prof))
    assert rows["aten::add"] == 2


def _fma_exact(x: np.float32, y: np.float32, z: np.float32) -> np.float32:
    """x * y + z rounded once to float32 (nearest, ties to even), from exact rationals."""
    exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
    near = np.float32(float(exact))
    cands = [np.nextafter(near, np.float32(-np.inf)), near, np.nextafter(near, np.float32(np.inf))]
    best = min(abs(Fraction(float(c)) - exact) for c in cands)
    ties = [c for c in cands if abs(Fraction(float(c)) - exact) == best]
    even = [c for c in ties if int(np.array(c).view(np.uint32)) % 2 == 0]
    return (even or ties)[0]


# float32 values, and near-ties: x = 1 + (n + d) * 2**-23 and y = (1 - n * 2**-23) * 2**(e - 24)
# multiply to half an ulp of z = (1 + k * 2**-23) * 2**e plus or minus a sliver when
# n * (n + d) is close to d * 2**23; the float64 sum then often lands exactly on a tie.
_f32 = st.floats(-1e6, 1e6, width=32, allow_subnormal=False)


def _near_tie(d: int, offset: int, e: int, k: int, sign: int):
    n = int(math.sqrt(d * 2**23) - d / 2) + offset
    x = np.float32(1 + (n + d) * 2.0**-23)
    y = np.float32(sign * (1 - n * 2.0**-23) * 2.0 ** (e - 24))
    return x, y, np.float32((1 + k * 2.0**-23) * 2.0**e)


_ties = st.builds(
    _near_tie,
    d=st.integers(1, 64),
    offset=st.integers(-16, 16),
    e=st.integers(-20, 20),
    k=st.integers(0, 1024),
    sign=st.sampled_from([1, -1]),
)


def _rounded_twice(x, y, z):
    return np.float32(np.float64(x) * np.float64(y) + np.float64(z))


@given(x=_f32, y=_f32, z=_f32)
def test_fma32_rounds_once_on_random_values(x, y, z):
    x, y, z = np.float32(x), np.float32(y), np.float32(z)
    assert overview.fma32(x, y, z) == _fma_exact(x, y, z)


@given(case=_ties)
def test_fma32_rounds_once_near_ties(case):
    assert overview.fma32(*case) == _fma_exact(*case)


def test_near_ties_do_catch_rounding_twice():
    # The near-tie inputs above would fail a float64 shortcut: the test can fail.
    rng = np.random.default_rng(0)
    cases = [
        _near_tie(
            int(rng.integers(1, 65)),
            int(rng.integers(-16, 17)),
            int(rng.integers(-20, 21)),
            int(rng.integers(0, 1025)),
            1,
        )
        for _ in range(300)
    ]
    wrong = sum(_rounded_twice(*c) != _fma_exact(*c) for c in cases)
    assert wrong > 10
    assert all(overview.fma32(*c) == _fma_exact(*c) for c in cases)


@pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() == "DEFAULT",
    reason="torch's DEFAULT (no AVX) add rounds twice; vec::fmadd is an FMA on AVX2/AVX-512",
)
@pytest.mark.parametrize("d, offset", [(1, 0), (3, -5), (17, 3)])
def test_launch_add_equals_torch_add_near_ties(d, offset):
    cases = [
        _near_tie(d, offset, e, k, s) for e in (-3, 0, 5) for k in range(0, 40, 3) for s in (1, -1)
    ]
    alpha = float(cases[0][0])
    b = torch.tensor([float(y) for _, y, _ in cases])
    a = torch.tensor([float(z) for _, _, z in cases])
    theirs = torch.add(a, b, alpha=alpha)
    twice = torch.tensor([float(_rounded_twice(np.float32(alpha), y, z)) for _, y, z in cases])
    assert not torch.equal(twice, theirs)  # these inputs tell one rounding from two
    assert torch.equal(overview.launch_add(a, b, alpha), theirs)
    out = np.empty(len(cases), np.float32)
    overview.add_cpu(a.numpy(), b.numpy(), np.float32(alpha), out)
    assert torch.equal(torch.from_numpy(out), theirs)


# A case where rounding the float64 sum to float32 (rounding twice) is wrong: the float64 sum
# is exactly 1 + 2**-24, halfway between two float32 values; the exact sum is a little above.
TIE_ALPHA = overview.TIE[2]
TIE_B = overview.TIE[1]


def test_fma32_is_not_float64_rounded_twice():
    a, al, b = np.float32(1.0), np.float32(TIE_ALPHA), np.float32(TIE_B)
    twice = np.float32(np.float64(a) + np.float64(al) * np.float64(b))
    assert overview.fma32(al, b, a) == np.float32(1 + 2.0**-23) != twice


@pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() == "DEFAULT",
    reason="torch's DEFAULT (no AVX) add rounds twice; vec::fmadd is an FMA on AVX2/AVX-512",
)
def test_launch_add_equals_torch_add_on_the_tie():
    a, b = torch.ones(40), torch.full((40,), TIE_B)
    assert torch.equal(overview.launch_add(a, b, TIE_ALPHA), torch.add(a, b, alpha=TIE_ALPHA))


@pytest.mark.slow  # hypothesis over simulated CUDA launches; make unit runs it
@given(n=st.integers(1, 300), alpha=st.floats(-4, 4, width=32))
def test_add_kernel_equals_torch_add(n, alpha):
    torch.manual_seed(n)
    a, b = torch.randn(n), torch.randn(n)
    assert torch.equal(overview.launch_add(a, b, alpha=alpha), torch.add(a, b, alpha=alpha))


@pytest.mark.parametrize(
    "n, blocks, threads", [(300, 2, 32), (1000, 3, 64), (5, 4, 32), (0, 1, 32)]
)
def test_grid_stride_covers_any_size_with_any_grid(n, blocks, threads):
    torch.manual_seed(n)
    a, b = torch.randn(n), torch.randn(n)
    out = overview.launch_add(a, b, 0.5, blocks=blocks, threads=threads)
    assert torch.equal(out, torch.add(a, b, alpha=0.5))


def test_launch_geometry():
    sms = overview.sm_count()
    assert overview.launch_geometry(1000) == (4, 256)  # never more blocks than needed
    blocks, threads = overview.launch_geometry(64 * 2**20)
    assert threads == 256 and blocks == overview.BLOCKS_PER_SM * sms and blocks % sms == 0
    assert overview.launch_geometry(0) == (1, 256)


def test_add_cpu_equals_torch_add():
    a, b = torch.randn(1000), torch.randn(1000)
    out = np.empty(1000, np.float32)
    overview.add_cpu(a.numpy(), b.numpy(), np.float32(0.5), out)
    assert torch.equal(torch.from_numpy(out), torch.add(a, b, alpha=0.5))


def test_launch_add_rejects_what_it_does_not_do():
    cases = [
        ((torch.ones(2), torch.ones(3)), RuntimeError, "no broadcasting"),
        ((torch.ones(2), torch.ones(2, device="meta")), RuntimeError, "one device"),
    ]
    for args, error, message in cases:  # the same exception type as torch.add's
        with pytest.raises(error):
            torch.add(*args)
        with pytest.raises(error, match=message):
            overview.launch_add(*args)
    with pytest.raises(TypeError, match="float32"):
        overview.launch_add(torch.ones(2, dtype=torch.float64), torch.ones(2))


def test_kernels_are_registered_for_the_ptx_check():
    names = [k.name for k in rcuda.KERNELS]
    assert "retorch.overview.kernels.add_kernel" in names
    assert "retorch.overview.kernels.fma32" in names
    with pytest.raises(TypeError, match="signature"):
        rcuda.kernel()(lambda: None)


def test_course_map_marks_unwritten_chapters_planned():
    written = {p.name.split("_")[0] for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.md")}
    for chapter, *_ in overview.COURSE_MAP:
        head = re.fullmatch(r"(\d+)([a-z]?)", chapter.split()[0])
        number = f"{int(head[1]):02d}{head[2]}"
        assert ("(planned)" in chapter) == (number not in written), chapter
    for layer, chapter in overview.layers.CHAPTER_OF_LAYER.items():
        for n in re.findall(r"ch (\d)", chapter):
            if f"0{n}" not in written:
                assert "planned" in chapter, (layer, chapter)


def test_layers_diagram_names_every_layer():
    source = overview.layers_diagram().source
    for layer, _, _ in overview.LAYERS:
        assert layer in source


@pytest.mark.slow  # fresh interpreters with torch: seconds
def test_torchs_default_cpu_path_rounds_twice_and_the_vector_path_once():
    # What chapter 0 says about torch's CPU add, checked in fresh processes.
    import os
    import subprocess
    import sys

    _, b, alpha = overview.TIE
    code = (
        f"import torch; print(torch.add(torch.ones(9), torch.full((9,), {b!r}), "
        f"alpha={alpha!r})[0].item())"
    )
    got = {}
    for capability in ("default", "avx2"):
        env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        got[capability] = float(run.stdout.split()[-1])
    assert got["default"] == 1.0  # rounded twice: the tie goes to even
    assert got["avx2"] == float(np.float32(1 + 2.0**-23))  # one rounding (vec::fmadd)

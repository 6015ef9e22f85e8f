"""Deploy ahead of time: retorch.export -> retorch.inductor -> a .pt2 package a fresh process runs,
beside torch's AOTInductor package of the same model (retorch/inductor/package.py).

The fast tests use a two-layer MLP, whose package is written and opened without running a
kernel (Numba compiles a kernel at its first call: 15-40 s for the GPT's 27 kernels on
this machine). The slow ones run the capstone's SORT GPT (an unmodified torch.nn model): in a
fresh process that never imports retorch.models, in process on random inputs, and beside
torch's own package (``torch._inductor.aoti_compile_and_package``: 70-75 s of gcc here, cold).

Tolerance against eager torch: the package's logits differ from eager torch's by at most
8.9e-8 (measured on the fixed input below; |logits| < 0.3); the tests allow 1e-6 absolute,
1e-5 relative. Against torch's AOTI package the measured difference is the same 8.9e-8
(torch's package equals eager torch to 8.9e-8 as well).
"""

import io
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import retorch.export
from retorch.inductor.package import aoti_compile_and_package, aoti_load_package, load_package

ATOL, RTOL = 1e-6, 1e-5
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


@pytest.fixture(scope="module")
def mlp_package(tmp_path_factory):
    torch.manual_seed(0)
    model = MLP().eval()
    path = tmp_path_factory.mktemp("mlp") / "mlp.pt2"
    aoti_compile_and_package(retorch.export.export(model, (torch.randn(3, 8),)),
                             package_path=str(path))  # fmt: skip
    return model, path


def _rewrite(src, dst, change):
    """Copy the zip ``src`` to ``dst`` with ``change(name, data)`` -> new data, or None to drop."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            data = change(name, zin.read(name))
            if data is not None:
                zout.writestr(name, data)
    return dst


def test_package_layout_is_torchs_pt2_archive(mlp_package):
    """The zip's entries follow torch/export/pt2_archive/constants.py; one weight per state
    tensor, in the order the graph takes them; the metadata holds the input specs."""
    model, path = mlp_package
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        assert z.read("mlp/archive_format") == b"pt2"
        meta = json.loads(z.read("mlp/data/aotinductor/model/model_metadata.json"))
        config = json.loads(z.read("mlp/data/weights/model_weights_config.json"))
    assert "mlp/data/aotinductor/model/model.py" in names
    assert meta["inputs"] == [{"name": "x", "shape": [3, 8], "dtype": "float32"}]
    assert meta["weights"] == list(config) == [k for k, _ in model.named_parameters()]
    assert {f"mlp/data/weights/{c['file']}" for c in config.values()} <= names
    kinds = [what for _, what in meta["call_order"]]
    assert "kernel" in kinds and "aten.mm.default" in kinds  # fused kernels and extern mm
    loaded = load_package(path, cache_dir=False)
    assert loaded.get_constant_fqns() == meta["weights"]
    for fqn, t in model.state_dict().items():
        assert torch.equal(loaded._constants[fqn], t)  # the weights' bits come back
    buffer = io.BytesIO()  # torch's package_path may be a buffer too
    aoti_compile_and_package(retorch.export.export(model, (torch.randn(3, 8),)),
                             package_path=buffer)  # fmt: skip
    again = load_package(io.BytesIO(buffer.getvalue()), cache_dir=False)
    assert again.source == loaded.source and again.get_metadata()["inputs"] == meta["inputs"]


def test_misuse_raises_what_torchs_package_raises(mlp_package):
    """torch's loaded package, with AOTI_RUNTIME_CHECK_INPUTS=1 (measured with the GPT's
    package, input (4, 11) int64), raises RuntimeError with these messages; without it it
    does not check, and a wrong shape reads out of bounds (the process aborts)."""
    _, path = mlp_package
    model = aoti_load_package(str(path), cache_dir=False)
    cases = [
        ((torch.zeros(3, 7),), "input_handles[0]: unmatched dim value at 1, expected: 8, but got: 7"),
        ((torch.zeros(2, 8),), "input_handles[0]: unmatched dim value at 0, expected: 3, but got: 2"),
        ((torch.zeros(3, 8, dtype=torch.float64),),
         "input_handles[0]: unmatched dtype, expected: 6(at::kFloat), but got: 7"),
        ((torch.zeros(3, 8, 1),), "expected ndim 2 but got 3"),
        ((torch.zeros(3, 8),) * 2, "expected inputs vector size to be 1, but got 2"),
    ]  # fmt: skip
    for args, message in cases:
        with pytest.raises(RuntimeError) as info:
            model(*args)
        assert str(info.value) == message


def test_compile_rejects_what_it_cannot_package(tmp_path):
    """A path not ending in .pt2 (torch asserts it: AssertionError), dynamic shapes (retorch
    .inductor compiles static shapes), and torch's own ExportedProgram."""
    model, x = MLP(), torch.randn(3, 8)
    ep = retorch.export.export(model, (x,))
    with pytest.raises(AssertionError, match="ending in .pt2"):
        aoti_compile_and_package(ep, package_path=str(tmp_path / "m.zip"))
    dyn = retorch.export.export(
        model, (x,), dynamic_shapes={"x": {0: torch.export.Dim("batch", min=2, max=64)}}
    )
    with pytest.raises(NotImplementedError, match="static shapes"):
        aoti_compile_and_package(dyn, package_path=str(tmp_path / "d.pt2"))
    with pytest.raises(TypeError, match="retorch.export.ExportedProgram"):
        aoti_compile_and_package(torch.export.export(model, (x,)), package_path="t.pt2")


def test_corrupted_or_missing_parts_are_named(mlp_package, tmp_path):
    """One flipped bit in a weight, a missing weight, a truncated weight, an edited kernel
    source: each refuses to load, naming the part."""
    _, path = mlp_package
    w = "mlp/data/weights/weight_4"  # norm.weight

    def flip(name, data):
        return bytes([data[0] ^ 1]) + data[1:] if name == w else data

    cases = [
        (flip, r"weight 'norm.weight' \(mlp/data/weights/weight_4\) is corrupted"),
        (lambda n, d: None if n == w else d, r"no weight 'norm.weight' \(mlp/data/weights/wei"),
        (lambda n, d: d[:-4] if n == w else d, r"60 bytes .* recorded 64 bytes"),
        (lambda n, d: d.replace(b"max", b"min", 1) if n.endswith("model.py") else d,
         r"source .*model.py is corrupted"),
        (lambda n, d: None if n.endswith("archive_format") else d, "not a PT2 archive"),
    ]  # fmt: skip
    for i, (change, message) in enumerate(cases):
        bad = _rewrite(path, tmp_path / f"bad{i}.pt2", change)
        with pytest.raises(RuntimeError, match=message):
            load_package(str(bad), cache_dir=False)


# -- the capstone's GPT: slow (Numba compiles its kernels; torch's AOTI runs gcc) --

N = 6


def _gpt():
    from retorch.models import GPTConfig, build_gpt

    sort = GPTConfig(vocab_size=10, block_size=2 * N - 1, n_layer=2, n_head=2, n_embd=32)
    torch.manual_seed(0)
    model = build_gpt(sort, torch.nn).eval()
    idx = torch.randint(0, 10, (4, sort.block_size))
    return model, idx


@pytest.fixture(scope="module")
def gpt_package(tmp_path_factory):
    model, idx = _gpt()
    folder = tmp_path_factory.mktemp("gpt")
    path = aoti_compile_and_package(retorch.export.export(model, (idx,)),
                                    package_path=str(folder / "gpt.pt2"))  # fmt: skip
    return model, idx, path, folder / "numba_cache"


def _run_child(path, cache, idx, folder):
    from retorch.models.deploy import run_fresh  # (the chapter's helper: this tests it too)

    return run_fresh("retorch", path, idx, folder, cache_dir=cache)


@pytest.mark.slow
def test_package_loads_in_a_fresh_process_without_the_models_code(gpt_package, tmp_path):
    """A fresh process that imports only retorch.inductor.package runs the GPT's package: it
    never imports retorch.models (the GPT's class is defined there) and gives eager torch's
    logits within 1e-6 (measured 8.9e-8). A second process loads Numba's cached machine code
    (first call about 1 s instead of 15-40 s here) and gives the same bits."""
    model, idx, path, cache = gpt_package
    out, modules = _run_child(path, cache, idx, tmp_path)
    assert "retorch.inductor.package" in modules
    assert not [m for m in modules if m.startswith("retorch.models")], modules
    torch.testing.assert_close(out, model(idx).detach(), atol=ATOL, rtol=RTOL)
    indexes = list(cache.rglob("*.nbi"))
    if os.environ.get("NUMBA_CACHE_DIR"):  # `make` sets it; Numba then caches in
        # NUMBA_CACHE_DIR/<source folder's name>_<hash of its path> (_UserProvidedCacheLocator)
        for source in cache.iterdir():
            indexes += Path(os.environ["NUMBA_CACHE_DIR"]).glob(f"{source.name}_*/*.nbi")
    assert indexes, "Numba wrote no cache index for the kernels"
    again, _ = _run_child(path, cache, idx, tmp_path)
    assert torch.equal(again, out)


@pytest.mark.slow
@given(st.lists(st.integers(0, 9), min_size=4 * (2 * N - 1), max_size=4 * (2 * N - 1)))
def test_loaded_package_equals_eager_torch_on_random_tokens(gpt_package, tokens):
    """Any tokens of the package's shape: the loaded package equals eager torch within 1e-6."""
    model, idx, path, cache = gpt_package
    loaded = _loaded(path, cache)
    x = torch.tensor(tokens).reshape(idx.shape)
    torch.testing.assert_close(loaded(x), model(x).detach(), atol=ATOL, rtol=RTOL)


_LOADED = {}


def _loaded(path, cache):
    if path not in _LOADED:
        _LOADED[path] = aoti_load_package(path, cache_dir=cache)
    return _LOADED[path]


TORCH_CHILD = textwrap.dedent("""
    import sys
    import torch

    model = torch._inductor.aoti_load_package(sys.argv[1])
    torch.save(model(torch.load(sys.argv[2])), sys.argv[3])
    for bad in ([torch.zeros(4, 10, dtype=torch.int64)], [torch.zeros(4, 11, dtype=torch.int32)],
                [torch.zeros(4, 11, 1, dtype=torch.int64)], [torch.zeros(4, 11).long()] * 2):
        try:
            model(*bad)
            print("no error")
        except RuntimeError as e:
            print(str(e).strip().splitlines()[0])
""")


@pytest.mark.slow
def test_torchs_aoti_package_of_the_same_model_agrees(gpt_package, tmp_path):
    """torch's AOTInductor package of the same exported GPT (gcc: 70-75 s here, 25-40 s from
    torch's cache), loaded in a fresh process with AOTI_RUNTIME_CHECK_INPUTS=1: its logits
    equal ours within 1e-6 (measured 8.9e-8), and it raises the messages our package raises
    on misuse; retorch's loader refuses torch's package, naming what it lacks."""
    from retorch.models.deploy import torch_package  # (the chapter's helper: tested here)

    model, idx, path, cache = gpt_package
    torch_path = torch_package(model, idx, tmp_path / "torch_gpt.pt2")
    torch.save(idx, tmp_path / "idx.pt")
    proc = subprocess.run(
        [sys.executable, "-c", TORCH_CHILD, torch_path, str(tmp_path / "idx.pt"),
         str(tmp_path / "out.pt")],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "AOTI_RUNTIME_CHECK_INPUTS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = torch.load(tmp_path / "out.pt")
    ours = _loaded(path, cache)
    torch.testing.assert_close(ours(idx), theirs, atol=ATOL, rtol=RTOL)
    expected = []
    for bad in ([torch.zeros(4, 10, dtype=torch.int64)], [torch.zeros(4, 11, dtype=torch.int32)],
                [torch.zeros(4, 11, 1, dtype=torch.int64)], [torch.zeros(4, 11).long()] * 2):  # fmt: skip
        with pytest.raises(RuntimeError) as info:
            ours(*bad)
        expected.append(str(info.value))
    assert proc.stdout.split("\n")[:4] == expected
    with pytest.raises(RuntimeError, match="no model metadata"):
        load_package(torch_path, cache_dir=False)  # torch's package is not ours to run


@pytest.mark.slow  # (13 s: a fresh process imports torch and exports before gcc is looked for)
def test_a_failed_torch_compile_names_torchs_own_report(tmp_path, monkeypatch):
    """The chapter's ``torch_package`` compiles in a fresh process; when that compile fails
    (here: no C++ compiler where Inductor looks, ``CXX``), the caller gets torch's report,
    not a bare exit status."""
    from retorch.models.deploy import torch_package

    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(RuntimeError, match="(?s)AOTInductor compile failed.*no-such-compiler"):
        torch_package(MLP().eval(), torch.randn(2, 8), tmp_path / "mlp.pt2")

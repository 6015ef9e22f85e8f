"""retorch.profiler against torch.profiler: op counts on the same training step (3 models),
the table's columns, the Chrome trace's schema, nesting, memory, and the hook switched off."""

import json
import sys

import pytest
import torch

import retorch.profiler as rp
from retorch.dispatch import dispatcher
from retorch.dispatch import tensor as rtensor
from retorch.profiler import compare
from retorch.profiler.compare import quiet_stderr


def _mlp(*hidden):
    torch.manual_seed(0)
    sizes, layers = (10, *hidden, 4), []
    for a, b in zip(sizes[:-1], sizes[1:], strict=False):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).double()


MODELS = {
    "mlp-sgd-momentum": (lambda: _mlp(32), "SGD", {"lr": 0.1, "momentum": 0.9}),
    "mlp-adam": (lambda: _mlp(32), "Adam", {"lr": 0.01}),
    "deep-sgd": (lambda: _mlp(16, 8, 8), "SGD", {"lr": 0.1}),
}


@pytest.fixture(scope="module")
def rows():
    torch.manual_seed(1)
    x, y = torch.randn(16, 10, dtype=torch.float64), torch.randint(0, 4, (16,))
    out = {}
    for name, (make, opt, options) in MODELS.items():
        got = compare.both_steps(make(), opt, x, y, foreach=False, **options)
        out[name] = compare.compare_counts(*got)
    return out


@pytest.mark.parametrize("model", list(MODELS))
def test_ops_both_record_have_equal_counts_and_the_rest_is_explained(rows, model):
    bad = [r for r in rows[model] if r["verdict"] == "DIFFERENT" or "unexplained" in r["verdict"]]
    assert not bad, bad
    equal = [r for r in rows[model] if r["verdict"] == "equal"]
    phases = {r["phase"] for r in equal}
    assert phases == {"forward", "backward", "step"}, phases  # each phase compared something
    assert len(equal) >= 15


def test_every_listed_difference_is_still_a_difference(rows):
    """A reason that no longer names a one-sided row is stale: torch changed, or retorch did."""
    one_sided = {r["op"] for rs in rows.values() for r in rs if r["verdict"] != "equal"}
    stale = set(compare.ONLY_TORCH) - one_sided
    stale |= {name for _, name in compare.ONLY_TORCH_IN_PHASE} - one_sided
    stale |= set(compare.ONLY_RETORCH) - one_sided
    assert not stale, stale


def _small_program(lib):
    if lib == "torch":
        a, b = torch.ones(16, 8, dtype=torch.float64), torch.ones(8, 4, dtype=torch.float64)
        return lambda: (torch.mm(a, b) + 1.0).relu()
    a, b = rtensor([[1.0] * 8] * 16, dtype="float64"), rtensor([[1.0] * 4] * 8, dtype="float64")
    return lambda: (rp_mm(a, b) + 1.0).relu()


def rp_mm(a, b):
    from retorch.dispatch import aten

    return aten.mm(a, b)


def _profiles(**options):
    out = {}
    for lib, profile in (("torch", torch.profiler.profile), ("retorch", rp.profile)):
        run = _small_program(lib)
        run()
        with quiet_stderr(), profile(**options) as p:
            run()
        out[lib] = p
    return out


def _columns(table: str) -> list[str]:
    header = table.splitlines()[1]
    return [c for c in header.strip().split("  ") if c.strip()]


@pytest.mark.parametrize("memory", [False, True])
def test_table_has_torchs_columns(memory):
    p = _profiles(record_shapes=True, profile_memory=memory)
    for group in (False, True):
        t = p["torch"].key_averages(group_by_input_shape=group).table(sort_by="count")
        r = p["retorch"].key_averages(group_by_input_shape=group).table(sort_by="count")
        assert [c.strip() for c in _columns(r)] == [c.strip() for c in _columns(t)]
        assert r.splitlines()[-1].startswith("Self CPU time total: ")


def test_table_rows_agree_with_torch_on_calls_shapes_and_memory():
    p = _profiles(record_shapes=True, profile_memory=True)
    rows = {}
    for lib in p:
        for e in p[lib].key_averages(group_by_input_shape=True):
            rows.setdefault(lib, {})[e.key] = (e.count, e.input_shapes, e.cpu_memory_usage)
    for op in ("aten::mm", "aten::add", "aten::relu"):
        count, shapes, memory = rows["retorch"][op]
        assert (count, memory) == rows["torch"][op][::2], op
        assert shapes == rows["torch"][op][1], op
    assert rows["retorch"]["aten::mm"][2] == 16 * 4 * 8  # the output's bytes


def test_chrome_trace_has_torchs_event_shape(tmp_path):
    p = _profiles(record_shapes=True, profile_memory=True)
    traces = {}
    for lib in p:
        p[lib].export_chrome_trace(str(tmp_path / f"{lib}.json"))
        traces[lib] = json.loads((tmp_path / f"{lib}.json").read_text())
    ops = {lib: [e for e in t["traceEvents"] if e.get("cat") == "cpu_op"] for lib, t in
           traces.items()}  # fmt: skip
    assert [e["name"] for e in ops["retorch"]] == ["aten::mm", "aten::add", "aten::relu"]
    for t, r in zip(ops["torch"][:1] * 3, ops["retorch"], strict=True):
        assert set(r) == set(t)
        assert r["ph"] == "X" and isinstance(r["ts"], float) and r["dur"] >= 0
        assert set(r["args"]) <= set(t["args"])
    assert ops["retorch"][0]["args"]["Input Dims"] == [[16, 8], [8, 4]]
    mem = [e for e in traces["retorch"]["traceEvents"] if e["name"] == "[memory]"]
    torch_mem = [e for e in traces["torch"]["traceEvents"] if e["name"] == "[memory]"]
    assert (
        mem
        and set(mem[0]) == set(torch_mem[0])
        and set(mem[0]["args"]) <= set(torch_mem[0]["args"])
    )
    assert mem[0]["args"]["Bytes"] == 16 * 4 * 8


def test_nested_ops_are_children_as_in_torch():
    x, w, b = rtensor([[1.0] * 3] * 2), rtensor([[1.0] * 3] * 4), rtensor([1.0] * 4)
    from retorch.dispatch import aten

    with rp.profile(profile_memory=True) as p:
        aten.linear(x, w, b)
    with torch.profiler.profile() as tp:
        torch.ops.aten.linear(torch.ones(2, 3), torch.ones(4, 3), torch.ones(4))
    torch_linear = next(e for e in tp.events() if e.name == "aten::linear")
    linear = p.events()[0]
    assert linear.name == "aten::linear" and linear.cpu_parent is None
    names = [c.name for c in linear.cpu_children]
    assert names == [c.name for c in torch_linear.cpu_children] == ["aten::t", "aten::addmm"]
    addmm = linear.cpu_children[1]
    assert addmm.cpu_parent is linear and not addmm.cpu_children  # (its mm is below the dispatcher)
    # bytes go to the innermost open range: the output (2 x 4 float32) is addmm's own
    assert addmm.self_cpu_memory_usage == 2 * 4 * 4
    assert linear.cpu_children[0].self_cpu_memory_usage == 0 and linear.self_cpu_memory_usage <= 0
    for e in p.events():
        assert e.start_us <= e.end_us
        for c in e.cpu_children:
            assert e.start_us <= c.start_us and c.end_us <= e.end_us
        assert e.self_cpu_time_total == pytest.approx(
            e.cpu_time_total - sum(c.cpu_time_total for c in e.cpu_children)
        )
    # torch records the same tree for its linear's own first child
    t = torch.nn.functional
    with quiet_stderr(), torch.profiler.profile() as tp:
        t.linear(torch.ones(2, 3), torch.ones(4, 3), torch.ones(4))
    tl = next(e for e in tp.events() if e.name == "aten::linear")
    assert tl.cpu_children[0].name == linear.cpu_children[0].name == "aten::t"


def test_backward_nodes_are_recorded_as_torchs_engine_records_them():
    a = rtensor([1.0, 2.0], requires_grad=True)
    loss = (a * a).sum()
    with rp.profile() as p:
        loss.backward()
    names = [e.name for e in p.events()]
    assert names[:2] == ["autograd::engine::evaluate_function: SumBackward0", "SumBackward0"]
    outer = p.events()[0]
    assert outer.cpu_children[0].name == "SumBackward0"


def test_record_function_labels_a_range():
    a = rtensor([1.0])
    with rp.profile() as p:
        with rp.record_function("my_block"):
            a + a
    assert [e.name for e in p.events()] == ["my_block", "aten::add"]
    assert p.events()[1].cpu_parent is p.events()[0]


def test_hook_off_records_nothing_and_restores_everything():
    from retorch.autograd import engine
    from retorch.tensor.storage import Storage

    before = (engine.call_function, Storage.__dict__["allocate"])
    a = rtensor([1.0])
    with pytest.raises(ZeroDivisionError):
        with rp.profile(profile_memory=True) as p:
            a + a
            _ = 1 / 0
    assert dispatcher.step_callbacks is None
    assert (engine.call_function, Storage.__dict__["allocate"]) == before
    n = len(p.events())
    a + a
    assert len(p.events()) == n
    assert [e.name for e in p.events() if e.name != "[memory]"] == ["aten::add"]
    with rp.profile():
        with pytest.raises(RuntimeError, match="already enabled"):
            rp.profile().__enter__()


def test_hook_off_runs_no_profiler_code():
    """With no profile, a call runs none of retorch.profiler's functions (one global read)."""
    a = rtensor([1.0])
    seen = set()

    def tracer(frame, event, arg):
        if event == "call":
            seen.add(frame.f_code.co_filename)

    a + a
    sys.setprofile(tracer)
    try:
        a + a
    finally:
        sys.setprofile(None)
    assert not [f for f in seen if "profiler" in f]
    assert any(f.endswith("dispatcher.py") for f in seen)
    with rp.profile():
        sys.setprofile(tracer)
        try:
            a + a
        finally:
            sys.setprofile(None)
    assert [f for f in seen if f.endswith("record_function.py")]


def test_cuda_activity_says_when_device_time_is_not_measured():
    from numba import config

    a = rtensor([1.0], device="cuda")
    with rp.profile(activities=[rp.ProfilerActivity.CPU, rp.ProfilerActivity.CUDA]) as p:
        a + a
    table = p.key_averages().table()
    if config.ENABLE_CUDASIM:
        assert "not measured (CUDA simulator" in table
    else:
        assert "Self CUDA time total" in table and p.events()[0].device_time_total > 0


def test_misuse_raises_as_torch():
    for lib in (torch.profiler, rp):
        with pytest.raises(TypeError):
            lib.profile(not_an_option=True)

"""retorch.dynamo against torch._dynamo: graphs, breaks, ops, guards, recompiles, results."""

import contextlib
import io
import sys

import pytest
import torch
import torch._dynamo
from hypothesis import given
from hypothesis import strategies as st

import retorch.dynamo as rd
from retorch.dynamo.resume_execution import make_resume_function
from retorch.dynamo.source import Frame
from tests import test_dynamo_corpus as corpus

# Multi-second randomized or multi-process tests: in make unit, not in make check-fast.
pytestmark = pytest.mark.slow


def torch_kind(reason: str) -> str:
    """The kind of one of torch's break reasons, in the rebuild's words."""
    if reason.startswith("Failed to trace builtin operator"):
        return "builtin"
    if reason.startswith("generic_jump"):
        return "jump"
    return "call"


@pytest.fixture(scope="module")
def torch_explains():
    out = {}
    for name, (fn, agrees, _) in corpus.CORPUS.items():
        if agrees:
            torch._dynamo.reset()
            out[name] = torch._dynamo.explain(fn)(*corpus.args_4x4(0))
    torch._dynamo.reset()
    return out


def test_corpus_size():
    assert len(corpus.CORPUS) >= 10


def reason_head(reason: str) -> str:
    """A break reason's type and its explanation (torch adds hints and a link below them)."""
    lines = reason.splitlines()
    if len(lines) > 1 and lines[1].startswith("  Explanation:"):
        return "\n".join(lines[:2])
    return lines[0]


@pytest.mark.parametrize("name", [n for n, v in corpus.CORPUS.items() if v[1]])
def test_explain_agrees_with_torch(name, torch_explains, capsys):
    fn = corpus.CORPUS[name][0]
    ours, theirs = rd.explain(fn)(*corpus.args_4x4(0)), torch_explains[name]
    assert ours.graph_count == theirs.graph_count
    assert ours.graph_break_count == theirs.graph_break_count
    assert [r.kind for r in ours.break_reasons] == [
        torch_kind(r.reason) for r in theirs.break_reasons
    ]
    # the reasons themselves, in torch's words: the argument types and has_kwargs of a print
    assert [reason_head(r.reason) for r in ours.break_reasons] == [
        reason_head(r.reason) for r in theirs.break_reasons
    ]
    assert ours.ops_per_graph == theirs.ops_per_graph  # the very same call_function targets


@pytest.mark.parametrize("name", [n for n, v in corpus.CORPUS.items() if not v[1]])
def test_known_divergences_are_still_divergences(name, capsys):
    """Where torch captures what the rebuild does not, the rebuild reports what the corpus says,
    torch (run here) still differs, and both return eager's values."""
    fn, _, (graphs, kinds) = corpus.CORPUS[name]
    ours = rd.explain(fn)(*corpus.args_4x4(0))
    torch._dynamo.reset()
    theirs = torch._dynamo.explain(fn)(*corpus.args_4x4(0))
    torch._dynamo.reset()
    assert (ours.graph_count, [b.kind for b in ours.all_breaks]) == (graphs, kinds)
    assert (ours.graph_count, ours.ops_per_graph) != (theirs.graph_count, theirs.ops_per_graph)
    for b in ours.all_breaks:
        if b.kind == "opcode":
            assert b.opname in b.reason  # the reason names the opcode


@given(seed=st.integers(0, 2**31 - 1))
def test_captured_functions_equal_eager(seed):
    args = corpus.args_4x4(seed)
    for name, (fn, _, _) in corpus.CORPUS.items():
        with contextlib.redirect_stdout(io.StringIO()):
            got, want = _compiled(name)(*args), fn(*args)
        got, want = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
        assert len(got) == len(want), name
        for a, b in zip(got, want, strict=True):
            assert type(a) is type(b), name
            assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b, name


_COMPILED = {}


def _compiled(name):
    if name not in _COMPILED:
        _COMPILED[name] = rd.optimize("eager")(corpus.CORPUS[name][0])
    return _COMPILED[name]


def test_data_dependent_branch_takes_both_ways():
    opt = rd.optimize()(corpus.branch)
    pos, neg = torch.ones(3, 3), -torch.ones(3, 3)
    for x in (pos, neg, pos, neg):
        assert torch.equal(opt(x, x), corpus.branch(x, x))
    targets = {off for _, cf in opt.cache for off in cf.resume}
    assert len(targets) == 2  # a resume function per branch target


def _frame_counts(compile_fn, make_cnt, fn, calls):
    counts = []
    cnt = make_cnt()
    opt = compile_fn(fn, cnt)
    for call in calls:
        call(opt)
        counts.append(cnt.frame_count)
    return counts


GUARD_CASES = {
    "dtype": [lambda f: f(torch.ones(4), torch.ones(4)),
              lambda f: f(torch.ones(4, dtype=torch.float64), torch.ones(4)),
              lambda f: f(torch.ones(4, dtype=torch.float64), torch.ones(4))],
    "shape": [lambda f: f(torch.ones(4), torch.ones(4)),
              lambda f: f(torch.ones(5), torch.ones(5)),
              lambda f: f(torch.ones(5), torch.ones(5))],
    "global": [lambda f: f(torch.ones(4), torch.ones(4)),
               lambda f: (setattr(corpus, "SCALE", 3.5), f(torch.ones(4), torch.ones(4))),
               lambda f: f(torch.ones(4), torch.ones(4))],
}  # fmt: skip


@pytest.mark.parametrize("case", list(GUARD_CASES))
def test_guard_failure_recompiles_once_like_torch(case, monkeypatch):
    calls = GUARD_CASES[case]
    monkeypatch.setattr(corpus, "SCALE", 2.5)
    ours = _frame_counts(lambda f, c: rd.optimize(c)(f), rd.CompileCounter,
                         corpus.global_constant, calls)  # fmt: skip
    monkeypatch.setattr(corpus, "SCALE", 2.5)
    torch._dynamo.reset()
    theirs = _frame_counts(lambda f, c: torch.compile(f, backend=c, dynamic=False),
                           torch._dynamo.testing.CompileCounter, corpus.global_constant, calls)  # fmt: skip
    torch._dynamo.reset()
    assert ours == theirs == [1, 2, 2]


def test_changed_global_gives_the_new_result(monkeypatch):
    monkeypatch.setattr(corpus, "SCALE", 2.5)
    opt, x = rd.optimize()(corpus.global_constant), torch.ones(2)
    assert torch.equal(opt(x, x), x * 2.5 + x)
    monkeypatch.setattr(corpus, "SCALE", -1.0)
    assert torch.equal(opt(x, x), x * -1.0 + x)
    assert "CONSTANT_MATCH: G['SCALE'] == 2.5" in opt.ctx.recompiles[0]


def test_guards_print_and_match_torchs_sources(torch_explains):
    ours = rd.explain(corpus.global_constant)(*corpus.args_4x4(0))
    text = [str(g) for g in ours.out_guards]
    assert (
        "TENSOR_MATCH: L['x'] Tensor float32 cpu (4, 4) stride=(4, 1) requires_grad=False" in text
    )
    assert "CONSTANT_MATCH: G['SCALE'] == 2.5" in text
    theirs = torch_explains["global_constant"]
    pairs = {(g.name, g.create_fn_name()) for g in theirs.out_guards if g.name}
    assert {("L['x']", "TENSOR_MATCH"), ("L['y']", "TENSOR_MATCH"),
            ("G['SCALE']", "CONSTANT_MATCH")} <= pairs  # fmt: skip
    assert {(g.name, g.kind) for g in ours.out_guards if g.name} == {
        ("L['x']", "TENSOR_MATCH"), ("L['y']", "TENSOR_MATCH"), ("G['SCALE']", "CONSTANT_MATCH")}  # fmt: skip
    module = rd.explain(corpus.module_forward)(*corpus.args_4x4(0))
    assert "ID_MATCH" in {g.kind for g in module.out_guards if g.name == "G['mlp']"}


class _Namespace:
    a = 0


def sets_an_attribute(x):
    y = x + 1
    _Namespace.a = 1
    return y * 2


def uses_try(x):
    y = x.cos()
    try:
        y = y / 0
    except ZeroDivisionError:
        y = y - 1
    return y


@pytest.mark.parametrize("fn, opname", [(sets_an_attribute, "STORE_ATTR"), (uses_try, None)])
def test_opcode_outside_subset_breaks_and_stays_right(fn, opname):
    x = torch.randn(3)
    e = rd.explain(fn)(x)
    assert e.graph_count == 1 and len(e.all_breaks) == 1
    brk = e.all_breaks[0]
    assert brk.kind == "opcode"
    if opname:
        assert brk.opname == opname and f"opcode {opname} is outside" in brk.reason
    else:
        assert "try" in brk.reason
    assert torch.equal(rd.optimize()(fn)(x), fn(x))


def print_in_loop(x, n):
    acc = []
    for i in range(n):
        x = x * 2 + i
        print(i)
        acc.append(x.sum())
    return x, acc


def test_break_inside_a_loop_resumes_with_the_iterator(capsys):
    x = torch.randn(3)
    got, want = rd.optimize()(print_in_loop)(x, 3), print_in_loop(x, 3)
    assert torch.equal(got[0], want[0]) and all(map(torch.equal, got[1], want[1]))
    assert capsys.readouterr().out == "0\n1\n2\n" * 2


def appends_then_breaks(acc, x):
    acc.append(1)
    print("break")
    return x + len(acc)


def test_side_effect_on_an_input_list_happens_once(capsys):
    acc = []
    rd.optimize()(appends_then_breaks)(acc, torch.zeros(1))
    assert acc == [1]


def test_resume_function_runs_the_rest_of_the_frame():
    def f(a, b):
        c = a + b
        return c * 10 + len([a, b])

    import dis

    call = next(i for i in dis.get_instructions(f) if i.opname == "BINARY_OP" and i.argrepr == "*")
    resume = make_resume_function(f, call.offset, [], 2)  # the stack holds c and 10
    assert resume.__name__ == f"__resume_at_{call.offset}"
    assert resume(1, 2, None, 3, 10) == 32


def test_misuse_raises_clear_errors():
    with pytest.raises(ValueError, match="unknown backend"):
        rd.optimize("inductorr")(corpus.straight)
    with pytest.raises(TypeError, match="backend must be"):
        rd.optimize(3)(corpus.straight)
    with pytest.raises(TypeError, match="Python function"):
        rd.optimize()(len)
    with pytest.raises(TypeError, match="dynamic must be None"):
        rd.compile(corpus.straight, dynamic="auto")


def test_running_python_is_supported():
    assert sys.version_info[:2] in ((3, 11), (3, 12))


def sum_of_list(xs, scale):
    return torch.stack([x * scale for x in xs]).sum(0)


def test_a_longer_list_fails_the_length_guard():
    """A list's length is guarded: a graph for two tensors must not run on three."""
    opt, a = rd.optimize()(sum_of_list), torch.ones(3)
    assert torch.equal(opt([a, a], 2), a * 4)
    assert torch.equal(opt([a, a, a], 2), a * 6)
    assert torch.equal(opt([a], 2), a * 2)
    assert opt.compile_count == 3
    assert "LIST_LENGTH: L['xs'] list of length 2" in opt.ctx.recompiles[0]


def test_a_dict_with_other_keys_fails_its_guard():
    def pick(d, y):
        return d["a"] * y

    opt, a = rd.optimize()(pick), torch.ones(2)
    assert torch.equal(opt({"a": a, "b": a}, a), a)
    assert torch.equal(opt({"a": 2 * a}, a), 2 * a)
    assert opt.compile_count == 2
    assert "DICT_KEYS_MATCH" in opt.ctx.recompiles[0]


def breaks_with_keywords(x, y):
    z = (x + y).sum(dim=1).tolist()
    top = sorted(z, key=abs, reverse=True)
    print("z", "top", sep="|", end="!")
    return y * top[0]


def test_a_breaking_call_keeps_its_keyword_arguments(capsys):
    x, y = corpus.args_4x4(3)
    want = breaks_with_keywords(x, y)
    assert capsys.readouterr().out == "z|top!"
    got = rd.optimize()(breaks_with_keywords)(x, y)
    assert capsys.readouterr().out == "z|top!"
    assert torch.equal(got, want)


@given(
    calls=st.lists(
        st.tuples(
            st.integers(1, 3), st.sampled_from([2, 3]), st.sampled_from(["float32", "float64"])
        ),
        min_size=1,
        max_size=5,
    )
)
def test_random_call_sequences_recompile_like_torch(calls):
    """Random lists of lengths, scalars and dtypes through both caches: eager's values, and a
    recompile exactly where torch (dynamic=False) recompiles."""
    ours_cnt, theirs_cnt = rd.CompileCounter(), torch._dynamo.testing.CompileCounter()
    ours = rd.optimize(ours_cnt)(sum_of_list)
    torch._dynamo.reset()
    theirs = torch.compile(sum_of_list, backend=theirs_cnt, dynamic=False)
    for n, scale, dtype in calls:
        xs = [torch.full((2,), i + 1.0, dtype=getattr(torch, dtype)) for i in range(n)]
        want = sum_of_list(xs, scale)
        assert torch.equal(ours(xs, scale), want)
        assert torch.equal(theirs(xs, scale), want)
        assert ours_cnt.frame_count == theirs_cnt.frame_count, (n, scale, dtype)
    torch._dynamo.reset()


def test_a_with_block_sets_grad_mode_in_the_graph_and_restores_it(capsys):
    x, y = corpus.args_4x4(4)
    x.requires_grad_()
    for fn in (corpus.with_block, corpus.break_inside_with):
        opt = rd.optimize()(fn)
        got, want = opt(x, y), fn(x, y)
        assert torch.is_grad_enabled(), fn.__name__  # tracing left grad mode as it found it
        assert torch.equal(got, want) and got.requires_grad == want.requires_grad, fn.__name__
        with torch.no_grad():  # the GRAD_MODE guard fails: a new entry, traced without grad
            got, want = opt(x, y), fn(x, y)
        assert torch.equal(got, want) and got.requires_grad == want.requires_grad, fn.__name__
        assert torch.is_grad_enabled()
    graph = rd.explain(corpus.with_block)(x, y).graphs[0]
    assert [n.args for n in graph.graph.nodes if n.target is torch._C._set_grad_enabled] == [
        (False,),
        (True,),
    ]


def scaled_by_length(x, y):
    return x * corpus.SCALE + y.sum(0) * x.shape[0] + x.view(len(x), -1).sum(1, keepdim=True)


SIZE_SEQUENCES = [(4, 5, 6, 1, 7), (3, 3, 8, 2, 9), (5, 1, 1, 6, 7)]


@pytest.mark.parametrize("sizes", SIZE_SEQUENCES)
def test_automatic_dynamic_recompiles_where_torch_does(sizes, monkeypatch):
    """dynamic=None: static first; a size seen to change becomes a symbol (sizes 0 and 1
    stay specialized); every call equals eager, and the graph count is torch's after each."""
    monkeypatch.setattr(corpus, "SCALE", 2.5)
    ours_cnt, theirs_cnt = rd.CompileCounter(), torch._dynamo.testing.CompileCounter()
    ours = rd.optimize(ours_cnt)(scaled_by_length)
    torch._dynamo.reset()
    theirs = torch.compile(scaled_by_length, backend=theirs_cnt)
    for n in sizes:
        x, y = torch.randn(n, 3), torch.randn(2, 3)
        want = scaled_by_length(x, y)
        assert torch.equal(ours(x, y), want) and torch.equal(theirs(x, y), want), n
        assert ours_cnt.frame_count == theirs_cnt.frame_count, n
    torch._dynamo.reset()


def test_a_dynamic_size_is_a_symbol_with_guards():
    opt, y = rd.optimize()(scaled_by_length), torch.ones(2, 3)
    opt(torch.ones(4, 3), y)
    opt(torch.ones(5, 3), y)
    guards = [str(g) for g in opt.cache[0][0]]
    assert (
        "TENSOR_MATCH: L['x'] Tensor float32 cpu [None, 3] stride=(3, 1) requires_grad=False"
        in guards
    )
    assert "SHAPE_ENV: s0: 2 <= L['x'].size()[0]" in guards

    def check(x):
        return opt.cache[0][0].check_verbose(Frame({"x": x, "y": y}, scaled_by_length.__globals__))

    assert check(torch.ones(60, 3)) is None
    assert check(torch.ones(1, 3)) == "SHAPE_ENV: s0: 2 <= L['x'].size()[0]"  # 1 is specialized
    assert check(torch.ones(6, 4)).startswith("TENSOR_MATCH: L['x']")


def test_duck_sizing_guards_equal_sizes_equal():
    def add(x, y):
        return x + y

    opt = rd.optimize(dynamic=True)(add)
    opt(torch.ones(3), torch.ones(3))
    assert "SHAPE_ENV: s0: 2 <= L['x'].size()[0], L['y'].size()[0] == L['x'].size()[0]" in [
        str(g) for g in opt.cache[0][0]
    ]
    assert torch.equal(opt(torch.ones(5), torch.ones(1)), torch.full((5,), 2.0))
    assert opt.compile_count == 2  # (5,) + (1,) broadcasts: a new entry, not the duck-sized one

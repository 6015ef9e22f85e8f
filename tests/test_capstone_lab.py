"""Lab 9's graders (retorch/testing/capstone_lab.py): what they read from torch, what they switch
off, and the capstone's own attention (retorch/models/attention.py) on the lab's cases, which
the chapter's model never meets (L != S, Ev != E, a given scale, leading dims)."""

from __future__ import annotations

import runpy

import jupytext
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import bias

from retorch.dispatch import from_torch
from retorch.models import attention
from retorch.testing import capstone_lab as lab
from retorch.testing import grading
from retorch.testing.grading import CheckFailed
from tools.check_wrong_answers import replace_regions
from tools.course import ROOT


def test_torch_is_causal_is_top_left_for_every_lab_size():
    """The oracle read from SDPA is ``tril(ones(L, S))``: queries and keys counted from the
    start, also when S > L (not the bottom-right mask of ``causal_lower_right``)."""
    for L, S in lab.MASK_SIZES:
        want = torch.ones(L, S, dtype=torch.bool).tril()
        assert torch.equal(lab.torch_causal_mask(L, S), want), (L, S)
    lower_right = bias.causal_lower_right(3, 7)._materialize()
    assert not torch.equal(lab.torch_causal_mask(3, 7), lower_right)


def test_retorch_causal_mask_is_torchs_complement_for_l_ne_s():
    """The chapter's ``causal_mask`` marks the masked keys (True: in the future)."""
    for L, S in lab.MASK_SIZES:
        got = torch.from_numpy(attention.causal_mask(L, S).numpy())
        assert torch.equal(got, ~lab.torch_causal_mask(L, S)), (L, S)


def test_retorch_attention_backward_equals_torch_on_the_lab_cases():
    """retorch's math backward (one autograd node) against torch's autograd, within the
    tolerances the lab grants a student (float64 1e-12, float32 2e-6, relative to
    1 + |value|)."""
    gen = lab._gen(5)
    for lead, L, S, E, Ev, causal, scale, dtype, tol in lab.BACKWARD_CASES:
        q, k, v = (lab._randn(lead + (n, e), gen, dtype) for n, e in ((L, E), (S, E), (S, Ev)))
        d_out = lab._randn(lead + (L, Ev), gen, dtype)
        want = lab._torch_grads(q, k, v, d_out, causal, scale)
        rq, rk, rv = (from_torch(t, requires_grad=True) for t in (q, k, v))
        out = attention.scaled_dot_product_attention(rq, rk, rv, is_causal=causal, scale=scale)
        out.backward(from_torch(d_out))
        for name, r, w in zip("qkv", (rq, rk, rv), want):
            torch.testing.assert_close(r.grad.to_torch(), w, rtol=tol, atol=tol, msg=name)


def test_switched_off_raises_inside_and_restores_after_an_exception():
    off = dict(functions=lab._autograd_engines(), attributes=lab._sdpa_attributes())
    q = torch.randn(1, 2, 3, 4, requires_grad=True)
    with pytest.raises(ZeroDivisionError), lab.switched_off(**off):
        with pytest.raises(RuntimeError, match="switched off"):
            torch.autograd.grad(q.sum(), q)
        with pytest.raises(RuntimeError, match="switched off"):
            F.scaled_dot_product_attention(q, q, q)
        with pytest.raises(RuntimeError, match="switched off"):
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q)
        raise ZeroDivisionError  # the student's code crashed: all must come back all the same
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    (g,) = torch.autograd.grad(out.sum(), q)
    assert g.shape == q.shape
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q.detach(), q.detach(), q.detach())


def test_score_matrix_watch_sees_the_whole_matrix_only():
    q, k = torch.randn(2, 5, 4), torch.randn(2, 11, 4)
    with lab.ScoreMatrixWatch(5, 11) as watch:
        q @ k[:, :4].transpose(-2, -1)  # one block: (5, 4)
        torch.ones(5, 11, dtype=torch.bool)  # a bool mask is not the score matrix
    assert watch.seen is None
    with lab.ScoreMatrixWatch(5, 11) as watch:
        k @ q.transpose(-2, -1)  # (11, 5): the matrix, transposed
    assert watch.seen is not None and "(2, 11, 5)" in watch.seen


def _lab_cells():
    sols, checks = {}, {}
    for cell in jupytext.read(ROOT / "solutions" / "09_capstone_lab.md").cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            sols[meta["grade_id"]] = cell.source
        elif meta.get("grade"):
            checks[meta["grade_id"].split("_check")[0]] = cell.source
    return sols, checks


@pytest.mark.slow  # about 2 s: every check twice (solution, then a wrong answer)
def test_the_solution_passes_and_the_first_wrong_answer_of_each_exercise_fails(capsys):
    """In-process and quick, what nbval and tools/check_wrong_answers.py prove in kernels."""
    sols, checks = _lab_cells()
    wrong = runpy.run_path(str(ROOT / "solutions" / "wrong" / "09_capstone_lab.py"))["WRONG"]
    assert sorted(sols) == sorted(checks) == sorted(wrong) and len(sols) == 5
    ns: dict = {}
    exec("import math\nimport torch\nimport torch.nn.functional as F", ns)
    ns.update(capstone_lab=lab, grading=grading)
    for gid, source in sols.items():
        exec(source, ns)
        exec(checks[gid], ns)
        assert "passed" in capsys.readouterr().out, gid
        what, code = wrong[gid][0]
        exec(replace_regions(source, code, what), ns)
        with pytest.raises(CheckFailed, match=r"Exercise \d"):
            exec(checks[gid], ns)

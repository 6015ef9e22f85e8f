"""Graders for lab 9 (solutions/09_capstone_lab.md): the capstone's attention, written by the
student, against torch's.

Each ``check_*`` takes the comparisons object that :func:`retorch.testing.grading.check`
passes and the student's functions, runs them and torch on the same inputs, and compares:

1. ``causal_mask`` and ``causal_scores``: torch's ``is_causal`` mask, read from torch itself
   (``F.scaled_dot_product_attention`` with ``is_causal=True`` on inputs whose output is the
   probability matrix), for L != S both ways (it is top-left aligned, ``tril(ones(L, S))``,
   not the bottom-right mask that decoding with a KV cache wants), then the masked scores
   through softmax against ``F.scaled_dot_product_attention(is_causal=True)`` and with the
   student's mask as ``attn_mask``;
2. ``split_heads`` and ``merge_heads``: values against ``unflatten``/``transpose``/``reshape``
   on any number of leading dims, and whether the result is a view of the input (the same
   storage, offset and strides as torch's view) wherever ``Tensor.view`` can give one: always
   for the split, for the merge when the heads' transpose can be undone in place (the split's
   own output, one head, one position), a copy otherwise (SDPA's contiguous output);
3. ``attention_backward``: dQ, dK, dV against torch's autograd through
   ``F.scaled_dot_product_attention`` (``aten/src/ATen/native/transformers/attention.cpp``'s
   math path), causal with L != S, a scale given and the default ``1/sqrt(E)`` with
   ``Ev != E``, leading dims, a transposed input, an all-zero dO, float32 and float64;
4. ``flash_attention_forward``: the online-softmax forward over key blocks against
   ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu`` (output and logsumexp;
   ``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``), with block sizes that do not
   divide S, one block, blocks of one key, causal with L != S, and scores so negative that a
   running maximum started at 0 underflows;
5. ``tied_weight_grad``: the gradient of the weight that the GPT's embedding and output layer
   share, against torch's autograd through ``F.embedding`` and ``F.linear``
   (``aten/src/ATen/native/Embedding.cpp``'s ``embedding_dense_backward``): repeated ids,
   ``padding_idx`` (0, -1, none), any leading dims, no positions, one use's gradient zero.

While a student's function runs, what would do the exercise for it raises: the chapter's
``retorch.models.attention`` helpers, torch's causal-bias helpers (exercise 1), torch's and
retorch's autograd engines (exercises 3 and 5) and torch's embedding backward (exercise 5);
and exercise 4 records every op's output and fails
when a floating-point (L, S) score matrix appears.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode


def _refuse(*args, **kwargs):  # its code runs in other functions' globals too: literals only
    raise RuntimeError(
        "this exercise asks for the algorithm itself: while the check runs your function, the "
        "chapter's attention helpers (retorch.models.attention), torch's causal-bias helpers "
        "and, for the backward, torch's and retorch's autograd engines are switched off"
    )


@contextlib.contextmanager
def switched_off(functions=(), attributes=()):
    """Inside the block, each of ``functions`` (plain Python functions: their code is swapped,
    so a name imported elsewhere is caught too) and each ``(owner, name)`` of ``attributes``
    raises."""
    codes = [f.__code__ for f in functions]
    saved = [(owner, name, owner.__dict__.get(name, getattr(owner, name)))
             for owner, name in attributes]  # fmt: skip
    try:
        for f in functions:
            f.__code__ = _refuse.__code__
        for owner, name, _ in saved:
            setattr(owner, name, _refuse)
        yield
    finally:
        for f, code in zip(functions, codes):
            f.__code__ = code
        for owner, name, value in saved:
            setattr(owner, name, value)


def _chapter_helpers() -> list:
    from retorch.models import attention

    fns = [attention.causal_mask, attention.attention_math, attention.attention_math_backward,
           attention.ScaledDotProductAttention.forward,
           attention.ScaledDotProductAttention.backward]  # fmt: skip
    try:
        from retorch.tensor import attention_kernels as ak  # the fused kernels, where present
    except Exception:  # noqa: BLE001  (absent, or unusable here: nothing to switch off)
        return fns
    return fns + [getattr(ak, n) for n in ("attention_forward", "attention_backward")
                  if callable(getattr(ak, n, None)) and hasattr(getattr(ak, n), "__code__")]  # fmt: skip


def _causal_bias_attributes() -> list:
    from torch.nn.attention import bias

    return [(bias.CausalBias, n) for n in ("_materialize", "_upper_left", "_lower_right")] + [
        (bias, n) for n in ("causal_upper_left", "causal_lower_right")
    ]


def _autograd_engines() -> list:
    from retorch.autograd import engine

    # torch's Python entry to its engine (torch >= 2.4; older ones call the engine directly)
    torch_engine = getattr(torch.autograd.graph, "_engine_run_backward", None)
    return [f for f in (torch_engine, engine.run_backward) if f is not None]


def _sdpa_attributes() -> list:
    """torch's attention itself, by every public name."""
    return [
        (F, "scaled_dot_product_attention"),
        (torch._C._nn, "scaled_dot_product_attention"),
        (torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"),
        (torch.ops.aten, "scaled_dot_product_attention"),
    ]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(shape, gen, dtype=torch.float64):
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


# ---- exercise 1 -------------------------------------------------------------------------------
MASK_HINT = (
    "torch's is_causal keeps key j for query i when j <= i, counting both from the start: the "
    "mask is tril(ones(L, S)), aligned top-left, whatever L and S are (query 0 sees key 0 "
    "only, also when S > L); True means 'takes part', the convention of attn_mask"
)
SCORES_HINT = (
    "masked scores are -inf (not 0: exp(0) = 1 still takes part in the softmax) where the "
    "causal mask is False, the scores themselves elsewhere; return a new tensor of the scores' "
    "shape, dtype and device and leave the input unchanged"
)

#: (L, S): square, more keys than queries (a KV cache), more queries than keys, one row or
#: one column, no queries
MASK_SIZES = [(4, 4), (3, 7), (7, 3), (1, 5), (5, 1), (2, 9), (0, 3)]


def torch_causal_mask(L: int, S: int) -> torch.Tensor:
    """torch's ``is_causal`` mask, read from SDPA: with zero queries and keys every kept score
    is equal, so with the identity as values the output row i is uniform over the keys that
    query i keeps, and 0 elsewhere."""
    out = F.scaled_dot_product_attention(torch.zeros(1, L, 1, dtype=torch.float64),
                                         torch.zeros(1, S, 1, dtype=torch.float64),
                                         torch.eye(S, dtype=torch.float64)[None],
                                         is_causal=True)  # fmt: skip
    return out[0] > 0


def check_causal_mask(cmp, causal_mask, causal_scores):
    off = dict(functions=_chapter_helpers(), attributes=_causal_bias_attributes())
    for L, S in MASK_SIZES:
        want = torch_causal_mask(L, S)
        what = f"causal_mask({L}, {S})"
        with switched_off(**off):
            got = cmp.call(lambda: causal_mask(L, S), what + " ran", MASK_HINT)
        cmp.tensor_like(got, want, what, MASK_HINT)
    with switched_off(**off):
        got = cmp.call(lambda: causal_mask(3, 6, device="meta"), "causal_mask(3, 6, "
                       "device='meta') ran", "make the mask on the device asked for")  # fmt: skip
    cmp.tensor_like(got, torch.empty(3, 6, dtype=torch.bool, device="meta"),
                    "causal_mask(3, 6, device='meta')",
                    "make the mask on the device asked for (torch.arange(..., device=device))")  # fmt: skip

    gen = _gen(9)
    # (leading dims, L, S, E, dtype, tolerance); the solution's largest error against SDPA over
    # 50 draws, |got - torch| / (1 + |torch|): float64 4.8e-16, float32 1.9e-7
    cases = [((2, 3), 5, 8, 4, torch.float64, 1e-12), ((), 6, 3, 5, torch.float64, 1e-12),
             ((4,), 1, 6, 8, torch.float32, 2e-6), ((2, 2), 7, 7, 4, torch.float32, 2e-6),
             ((3,), 9, 2, 3, torch.float64, 1e-12)]  # fmt: skip
    for k, (lead, L, S, E, dtype, tol) in enumerate(cases):
        q, kk, v = (_randn(lead + (n, E), gen, dtype) for n in (L, S, S))
        scale = 1 / math.sqrt(E)
        scores = (q @ kk.transpose(-2, -1)) * scale
        if k == 1:  # a transposed (non-contiguous) scores tensor
            scores = scores.transpose(-2, -1).contiguous().transpose(-2, -1)
        given = scores.clone()
        shape = f"scores of shape {tuple(scores.shape)}, {str(dtype)[6:]}"
        with switched_off(**off):
            got = cmp.call(lambda: causal_scores(given), f"causal_scores({shape}) ran",
                           SCORES_HINT)  # fmt: skip
            mask = cmp.call(lambda: causal_mask(L, S), f"causal_mask({L}, {S}) ran", MASK_HINT)
        cmp.equal(torch.equal(given, scores), True,
                  f"causal_scores({shape}) leaves its input unchanged",
                  "masked_fill_ (with the underscore) changes the caller's scores: use "
                  "masked_fill or where, which return a new tensor")  # fmt: skip
        want = scores.masked_fill(~torch_causal_mask(L, S), float("-inf"))
        cmp.tensor_like(got, want, f"causal_scores({shape})", SCORES_HINT)
        sdpa = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
        cmp.tensor_like(torch.softmax(got, -1) @ v, sdpa,
                        f"softmax(causal_scores(...)) @ v, {shape}, against "
                        "F.scaled_dot_product_attention(q, k, v, is_causal=True)",
                        SCORES_HINT, rtol=tol, atol=tol)  # fmt: skip
        with_mask = cmp.call(lambda: F.scaled_dot_product_attention(q, kk, v, attn_mask=mask),
                             f"F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask("
                             f"{L}, {S})) ran", MASK_HINT)  # fmt: skip
        cmp.tensor_like(with_mask, sdpa, f"SDPA with attn_mask=causal_mask({L}, {S}), {shape}, "
                        "against is_causal=True", MASK_HINT, rtol=tol, atol=tol)  # fmt: skip
    meta = torch.empty(2, 3, 4, 6, device="meta", dtype=torch.float16)
    with switched_off(**off):
        got = cmp.call(lambda: causal_scores(meta), "causal_scores(a meta tensor (2, 3, 4, 6), "
                       "float16) ran", "make the mask on the scores' device")  # fmt: skip
    cmp.tensor_like(got, meta, "causal_scores(a meta tensor (2, 3, 4, 6), float16)",
                    "make the mask on the scores' device and keep their dtype")  # fmt: skip


# ---- exercise 2 -------------------------------------------------------------------------------
SPLIT_HINT = (
    "(..., T, C) -> (..., H, T, C/H): split the last dim into (H, C/H), head first (head h "
    "holds channels h*C/H to (h+1)*C/H - 1), then swap the T and H dims (count them from the "
    "end: any number of leading dims). Splitting one dim is always possible as a view, "
    "whatever the strides: no copy"
)
MERGE_HINT = (
    "(..., H, T, D) -> (..., T, H*D): swap H and T back, then merge the last two dims. That "
    "is a view when the transposed (H, D) dims can be merged in place (stride of H == D * "
    "stride of D, as after a split, or H == 1); a contiguous (..., H, T, D), as SDPA returns, "
    "needs a copy (Tensor.view raises there; reshape copies only when it must)"
)


def _split_ref(x, h):
    return x.unflatten(-1, (h, x.shape[-1] // h)).transpose(-3, -2)


def _merge_ref(y):
    return y.transpose(-3, -2).reshape(y.shape[:-3] + (y.shape[-2], y.shape[-3] * y.shape[-1]))


def _view_check(cmp, got, given, want, what, hint):
    """``got`` has torch's values, then is the view torch makes: the input's storage, the same
    offset and strides."""
    cmp.tensor_like(got, want, what, hint)
    cmp.equal((got.stride(), got.storage_offset(), got.untyped_storage().data_ptr() == given.untyped_storage().data_ptr()),
              (want.stride(), want.storage_offset(), True),
              what + " is a view of its input: (strides, storage offset, shares the input's "
              "storage)", hint)  # fmt: skip


def check_split_merge(cmp, split_heads, merge_heads):
    gen = _gen(2)
    base = _randn((2, 5, 3 * 12), gen)
    # (description, x, n_head); every split is a view of x
    split_cases = [
        ("a contiguous (B, T, C)", _randn((2, 5, 12), gen), 3),
        ("a 2-D (T, C)", _randn((5, 8), gen), 2),
        ("a 4-D (A, B, T, C)", _randn((2, 3, 4, 6), gen), 3),
        ("the k slice of a fused qkv projection (narrowed: offset 12)", base[..., 12:24], 4),
        ("a sequence-first (T, B, C) tensor transposed to (B, T, C)",
         _randn((5, 2, 12), gen).transpose(0, 1), 6),
        ("a channels-first (B, C, T) tensor transposed to (B, T, C)",
         _randn((2, 12, 5), gen).transpose(1, 2), 2),
        ("an empty (B, 0, C)", _randn((2, 0, 8), gen), 4),
        ("one head", _randn((3, 4, 6), gen), 1),
    ]  # fmt: skip
    splits = []
    for desc, x, h in split_cases:
        given, before = x, x.clone()
        what = f"split_heads({desc} of shape {tuple(x.shape)}, n_head={h})"
        got = cmp.call(lambda: split_heads(given, n_head=h), what + " ran", SPLIT_HINT)
        _view_check(cmp, got, given, _split_ref(x, h), what, SPLIT_HINT)
        cmp.equal(torch.equal(x, before), True, what + " leaves its input unchanged", SPLIT_HINT)
        splits.append((desc, x, got))
    meta = torch.empty(2, 7, 12, device="meta")
    got = cmp.call(lambda: split_heads(meta, 4), "split_heads(a meta (2, 7, 12), 4) ran",
                   SPLIT_HINT)  # fmt: skip
    cmp.tensor_like(got, _split_ref(meta, 4), "split_heads(a meta (2, 7, 12), 4)", SPLIT_HINT,
                    strides=True)  # fmt: skip
    cmp.raises(lambda: split_heads(_randn((2, 5, 12), gen), 5), RuntimeError,
               "split_heads of C = 12 into 5 heads raises RuntimeError, as torch's view does",
               "C must be a multiple of n_head: let view/reshape/unflatten refuse, or raise "
               "RuntimeError yourself")  # fmt: skip

    # merging back what was split: always a view of the original x
    for desc, x, y in splits:
        what = f"merge_heads(split_heads({desc}))"
        y = _split_ref(x, y.shape[-3])
        got = cmp.call(lambda: merge_heads(y), what + " ran", MERGE_HINT)
        _view_check(cmp, got, y, _merge_ref(y), what, MERGE_HINT)
        cmp.equal(torch.equal(got, x), True, what + " gives x back", MERGE_HINT)
    # SDPA's output is contiguous (..., H, T, D): a copy is needed unless H or T is 1
    for shape in [(2, 3, 5, 4), (4, 6, 2), (2, 1, 5, 4), (2, 4, 1, 8), (2, 2, 3, 5, 4)]:
        y = _randn(shape, gen)
        want = _merge_ref(y)
        try:
            y.transpose(-3, -2).view(want.shape)
            viewable = True
        except RuntimeError:
            viewable = False
        what = f"merge_heads(a contiguous {shape}, as SDPA returns)"
        got = cmp.call(lambda: merge_heads(y), what + " ran", MERGE_HINT)
        if viewable:
            _view_check(cmp, got, y, want, what + " (one head or one position: no copy "
                        "needed)", MERGE_HINT)  # fmt: skip
        else:
            cmp.tensor_like(got, want, what + " (the heads' transpose cannot be viewed as "
                            "(..., T, H*D): this one must copy)", MERGE_HINT)  # fmt: skip
    meta = torch.empty(2, 4, 7, 3, device="meta").transpose(-3, -2).contiguous()
    meta = meta.transpose(-3, -2)  # a meta split's layout: merging is a view
    got = cmp.call(lambda: merge_heads(meta), "merge_heads(a meta (2, 4, 7, 3)) ran", MERGE_HINT)
    cmp.tensor_like(got, _merge_ref(meta), "merge_heads(a meta (2, 4, 7, 3))", MERGE_HINT,
                    strides=True)  # fmt: skip


# ---- exercise 3 -------------------------------------------------------------------------------
BACKWARD_HINT = (
    "recompute P = softmax(Q K^T * scale, masked with -inf above torch's top-left diagonal "
    "when is_causal); then dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)), "
    "dQ = dS K * scale, dK = dS^T Q * scale; scale defaults to 1/sqrt(E), E the last dim of "
    "q and k (not of v); transposes swap only the last two dims; make what you "
    "create (the mask) on the inputs' device"
)


def _torch_grads(q, k, v, d_out, is_causal, scale):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
    return torch.autograd.grad(out, (q, k, v), d_out)


#: (leading dims, L, S, E, Ev, is_causal, scale, dtype, tolerance). The solution's largest
#: error, |got - torch| / (1 + |torch|) over 20 draws of each case: float64 2.4e-16 (rounding
#: only: SDPA's math path scales q and k by sqrt(scale) each), float32 1.5e-7; the tolerances
#: (rtol = atol) leave a factor of 10 or more
BACKWARD_CASES = [
    ((2, 3), 5, 5, 4, 4, True, None, torch.float64, 1e-12),
    ((2,), 3, 7, 4, 6, True, None, torch.float64, 1e-12),  # L < S, Ev != E: 1/sqrt(E)
    ((), 7, 3, 5, 2, True, 0.3, torch.float64, 1e-12),  # L > S
    ((2, 2), 4, 6, 3, 5, False, 0.5, torch.float64, 1e-12),
    ((3,), 6, 4, 8, 8, True, None, torch.float32, 2e-6),
    ((2, 1, 2), 1, 9, 4, 4, True, None, torch.float64, 1e-12),  # decoding: one query
]


def check_attention_backward(cmp, attention_backward):
    gen = _gen(3)
    off = dict(
        functions=_chapter_helpers() + _autograd_engines(),
        attributes=[(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward")],
    )
    cases = []
    for lead, L, S, E, Ev, causal, scale, dtype, tol in BACKWARD_CASES:
        q, k, v = _randn(lead + (L, E), gen, dtype), _randn(lead + (S, E), gen, dtype), \
            _randn(lead + (S, Ev), gen, dtype)  # fmt: skip
        cases.append((q, k, v, _randn(lead + (L, Ev), gen, dtype), causal, scale, tol, ""))
    q, k, v, d_out, *_ = cases[1]
    qt = q.transpose(-2, -1).contiguous().transpose(-2, -1)  # a transposed (strided) query
    cases.append((qt, k, v, d_out, True, None, 1e-12, ", q transposed"))
    cases.append((q, k, v, torch.zeros_like(d_out), True, None, 0.0, ", dO all zero"))
    cases.append((q[:, :0], k, v, d_out[:, :0], True, None, 0.0, ", no queries (L = 0)"))
    meta = [torch.empty(shape, device="meta") for shape in ((2, 5, 3), (2, 8, 3), (2, 8, 4),
                                                             (2, 5, 4))]  # fmt: skip
    cases.append((*meta, True, None, 0.0, ", on the meta device"))
    for q, k, v, d_out, causal, scale, tol, note in cases:
        want = _torch_grads(q, k, v, d_out, causal, scale)
        args = (f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, "
                f"is_causal={causal}, scale={scale}, {str(q.dtype)[6:]}{note}")  # fmt: skip
        what = f"attention_backward({args})"
        kwargs = dict(is_causal=causal) if scale is None else dict(is_causal=causal, scale=scale)
        given = [t.clone() for t in (q, k, v, d_out)]
        with switched_off(**off):
            got = cmp.call(lambda: attention_backward(*given, **kwargs), what + " ran",
                           BACKWARD_HINT)  # fmt: skip
        cmp.equal(
            isinstance(got, (tuple, list)) and len(got) == 3,
            True,
            what + " returns (dq, dk, dv)",
            "return the three gradients, in that order",
        )
        for name, g, w in zip(("dq", "dk", "dv"), got, want):
            cmp.tensor_like(g, w, f"{what}: {name}", BACKWARD_HINT, rtol=tol, atol=tol)


# ---- exercise 4 -------------------------------------------------------------------------------
FLASH_HINT = (
    "for each block of keys: scores s = q k_b^T * scale (masked with -inf where key j0 + j "
    "lies after query i, j0 the block's first key); m_new = max(m, rowmax(s)); rescale what "
    "you have by exp(m - m_new): l = l * exp(m - m_new) + rowsum(exp(s - m_new)) and "
    "acc = acc * exp(m - m_new) + exp(s - m_new) v_b; start from m = -inf, l = 0, acc = 0; "
    "at the end out = acc / l and logsumexp = m + log(l); make what you create on q's device"
)


class ScoreMatrixWatch(TorchDispatchMode):
    """Records whether any op made a floating-point tensor whose last two dims are (L, S) or
    (S, L): the whole score matrix, which the online softmax never holds."""

    def __init__(self, L: int, S: int):
        super().__init__()
        self.L, self.S, self.seen = L, S, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if (isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 2
                    and tuple(t.shape[-2:]) in ((self.L, self.S), (self.S, self.L))
                    and self.seen is None):  # fmt: skip
                self.seen = f"{func} made a {tuple(t.shape)} tensor"
        return out


#: (B, H, L, S, E, block_size, is_causal, scale, dtype, tolerance); L, S, E distinct, so a
#: (L, S) tensor is the score matrix. The solution's largest error against torch's blocked
#: kernel (other blocks, the same algorithm), |got - torch| / (1 + |torch|) over 20 draws:
#: float64 3.6e-16, float32 1.8e-7
FLASH_CASES = [
    (2, 3, 5, 11, 4, 4, False, None, torch.float64, 1e-12),  # 11 = 4 + 4 + 3
    (1, 2, 6, 13, 3, 5, True, None, torch.float64, 1e-12),  # L < S, causal
    (2, 1, 9, 4, 6, 3, True, 0.25, torch.float64, 1e-12),  # L > S, causal
    (1, 2, 3, 7, 5, 1, True, None, torch.float64, 1e-12),  # blocks of one key
    (2, 2, 7, 10, 4, 16, True, None, torch.float64, 1e-12),  # one block
    (2, 2, 12, 20, 8, 6, True, None, torch.float32, 2e-6),
]


def check_flash_attention_forward(cmp, flash_attention_forward):
    gen = _gen(4)
    off = dict(functions=_chapter_helpers(), attributes=_sdpa_attributes())
    cases = []
    for B, H, L, S, E, bs, causal, scale, dtype, tol in FLASH_CASES:
        q, k, v = (_randn((B, H, n, E), gen, dtype) for n in (L, S, S))
        cases.append((q, k, v, bs, causal, scale, tol, ""))
    # every score near -800: exp of it is 0 even in float64, unless the maximum is subtracted
    q = torch.full((1, 2, 4, 5), 20.0, dtype=torch.float64)
    k = -20.0 + _randn((1, 2, 9, 5), gen)
    cases.append((q, k, _randn((1, 2, 9, 5), gen), 4, True, 0.4, 1e-12, ", scores near -800"))
    q, k, v, *_ = cases[1]
    kt = k.transpose(-2, -1).contiguous().transpose(-2, -1)  # transposed (strided) keys
    cases.append((q, kt, v, 4, True, None, 1e-12, ", k transposed"))
    meta = [torch.empty((2, 3, n, 4), device="meta") for n in (6, 10, 10)]
    cases.append((*meta, 3, True, None, 0.0, ", on the meta device"))
    for q, k, v, bs, causal, scale, tol, note in cases:
        L, S = q.shape[-2], k.shape[-2]
        # the op itself assumes a last-dim stride of 1 (SDPA makes its inputs so before calling
        # it): on the transposed key, torch 2.13's returns wrong values; it is handed copies
        want_out, want_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q.contiguous(), k.contiguous(), v.contiguous(), 0.0, causal, scale=scale)[:2]  # fmt: skip
        what = (f"flash_attention_forward(q {tuple(q.shape)}, k {tuple(k.shape)}, block_size="
                f"{bs}, is_causal={causal}, scale={scale}, {str(q.dtype)[6:]}{note})")  # fmt: skip
        kwargs = dict(is_causal=causal) if scale is None else dict(is_causal=causal, scale=scale)
        watch = ScoreMatrixWatch(L, S)
        with switched_off(**off), watch:
            got = cmp.call(lambda: flash_attention_forward(q, k, v, bs, **kwargs), what + " ran",
                           FLASH_HINT)  # fmt: skip
        if bs < S:
            cmp.equal(watch.seen, None, what + ": no whole (L, S) score matrix",
                      "work on one block of keys at a time: the scores of a block are "
                      f"(L, block_size); never all {S} keys at once")  # fmt: skip
        cmp.equal(
            isinstance(got, (tuple, list)) and len(got) == 2,
            True,
            what + " returns (out, logsumexp)",
            "return the output and the logsumexp",
        )
        cmp.tensor_like(got[0], want_out, what + ": out", FLASH_HINT, rtol=tol, atol=tol)
        cmp.tensor_like(got[1], want_lse, what + ": logsumexp (torch's, from "
                        "_scaled_dot_product_flash_attention_for_cpu)", FLASH_HINT, rtol=tol,
                        atol=tol)  # fmt: skip


# ---- exercise 5 -------------------------------------------------------------------------------
TIED_HINT = (
    "the weight is used twice, so its gradient is the sum of both uses: the output layer "
    "(logits = h W^T) gives d_logits^T h, summed over every position; the embedding (e = W[idx]) "
    "adds row d_emb[position] into row idx[position], once per occurrence (index assignment, "
    "and `dW[idx] += ...`, keep only one of repeated ids: use index_add_ or index_put_ with "
    "accumulate=True); the padding row (padding_idx, negative counted from the end) gets "
    "nothing from the embedding"
)

#: (idx shape, V, C, padding_idx, dtype, tolerance); the solution's largest error against
#: torch's autograd, |got - torch| / (1 + |torch|), over 30 draws of each case in both dtypes:
#: float64 5.2e-16, float32 3.7e-7 (summation order)
TIED_CASES = [
    ((3, 5), 11, 4, None, torch.float64, 1e-12),
    ((2, 6), 7, 3, 0, torch.float64, 1e-12),
    ((4, 3), 9, 5, -1, torch.float64, 1e-12),  # the last row, counted from the end
    ((12,), 5, 6, 2, torch.float32, 2e-6),  # no batch dim
    ((2, 2, 4), 6, 3, None, torch.float64, 1e-12),  # two leading dims
    ((2, 0), 5, 3, None, torch.float64, 1e-12),  # no positions: only zeros
]


def _torch_tied_grad(idx, h, d_logits, d_emb, weight, padding_idx):
    w = weight.detach().requires_grad_()
    loss = (F.embedding(idx, w, padding_idx=padding_idx) * d_emb).sum() + (
        F.linear(h, w) * d_logits
    ).sum()
    return torch.autograd.grad(loss, w)[0]


def check_tied_weight_grad(cmp, tied_weight_grad):
    gen = _gen(6)
    off = dict(
        functions=_autograd_engines(),
        attributes=[
            (torch.ops.aten, "embedding_dense_backward"),
            (torch.ops.aten, "embedding_backward"),
        ],  # fmt: skip
    )
    cases = []
    for shape, V, C, pad, dtype, tol in TIED_CASES:
        # ids drawn from few values, so that most repeat; the padding id among them
        idx = torch.randint(0, V, shape, generator=gen)
        if idx.numel():
            idx.view(-1)[::3] = idx.view(-1)[0]
            if pad is not None:
                idx.view(-1)[1] = pad % V
        lead = tuple(shape)
        h, d_logits, d_emb = (_randn(lead + (n,), gen, dtype) for n in (C, V, C))
        cases.append((idx, h, d_logits, d_emb, V, pad, tol, ""))
    idx, h, d_logits, d_emb, V, pad, tol, _ = cases[0]
    cases.append((idx, h, d_logits, torch.zeros_like(d_emb), V, pad, tol, ", d_emb all zero"))
    cases.append((idx, h, torch.zeros_like(d_logits), d_emb, V, pad, tol, ", d_logits all zero"))
    for idx, h, d_logits, d_emb, V, pad, tol, note in cases:
        weight = torch.zeros(V, h.shape[-1], dtype=h.dtype)  # the gradient does not depend on it
        want = _torch_tied_grad(idx, h, d_logits, d_emb, weight, pad)
        what = (f"tied_weight_grad(idx of shape {tuple(idx.shape)} ({idx.view(-1)[:8].tolist()}"
                f"{' ...' if idx.numel() > 8 else ''}), vocab {V}, padding_idx={pad}, "
                f"{str(h.dtype)[6:]}{note})")  # fmt: skip
        given = [t.clone() for t in (idx, h, d_logits, d_emb)]
        with switched_off(**off):
            got = cmp.call(lambda: tied_weight_grad(*given, padding_idx=pad), what + " ran",
                           TIED_HINT)  # fmt: skip
        cmp.tensor_like(got, want, what, TIED_HINT, rtol=tol, atol=tol)

"""Wrong answers a student could plausibly write for lab 9; each must fail its graded check.

Used by ``tools/check_wrong_answers.py 09_capstone_lab``. Each entry replaces the BEGIN/END
SOLUTION regions of the exercise's solution cell (a list: one per function, ``None`` keeps the
solution's region).
"""

_MASK = """\
i = torch.arange(L, device=device).view(L, 1)  # query index, down the rows
j = torch.arange(S, device=device).view(1, S)  # key index, along the columns
return j <= i
"""

_SCORES = """\
L, S = scores.shape[-2:]
return scores.masked_fill(~causal_mask(L, S, device=scores.device), float("-inf"))
"""

_SPLIT = """\
*lead, t, c = x.shape
return x.reshape(*lead, t, n_head, c // n_head).transpose(-3, -2)
"""

_MERGE = """\
*lead, h, t, d = y.shape
return y.transpose(-3, -2).reshape(*lead, t, h * d)  # reshape copies only if it must
"""

_BACKWARD = """\
scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
s = q @ k.transpose(-2, -1) * scale
if is_causal:
    L, S = s.shape[-2:]
    keep = torch.ones(L, S, dtype=torch.bool, device=s.device).tril()  # top-left
    s = s.masked_fill(~keep, float("-inf"))
p = torch.softmax(s, dim=-1)
dv = p.transpose(-2, -1) @ d_out
dp = d_out @ v.transpose(-2, -1)
ds = p * (dp - (dp * p).sum(-1, keepdim=True))  # the softmax's backward, row by row
dq = ds @ k * scale
dk = ds.transpose(-2, -1) @ q * scale
return dq, dk, dv
"""

_FLASH = """\
scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
L, S = q.shape[-2], k.shape[-2]
m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype, device=q.device)
l = torch.zeros_like(m)
acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
rows = torch.arange(L, device=q.device).view(L, 1)
for j0 in range(0, S, block_size):
    kb, vb = k[..., j0 : j0 + block_size, :], v[..., j0 : j0 + block_size, :]
    s = q @ kb.transpose(-2, -1) * scale  # (B, H, L, block): this block's scores
    if is_causal:
        cols = torch.arange(j0, j0 + kb.shape[-2], device=q.device).view(1, -1)
        s = s.masked_fill(cols > rows, float("-inf"))
    m_new = torch.maximum(m, s.amax(-1, keepdim=True))
    p = torch.exp(s - m_new)
    alpha = torch.exp(m - m_new)  # rescales what was summed under the old maximum
    l = l * alpha + p.sum(-1, keepdim=True)
    acc = acc * alpha + p @ vb
    m = m_new
return acc / l, (m + torch.log(l)).squeeze(-1)
"""

_TIED = """\
V, C = d_logits.shape[-1], h.shape[-1]
grad = d_logits.reshape(-1, V).transpose(0, 1) @ h.reshape(-1, C)  # the output layer
ids, rows = idx.reshape(-1), d_emb.reshape(-1, C)
if padding_idx is not None:
    keep = ids != padding_idx % V  # a negative padding_idx counts from the end
    ids, rows = ids[keep], rows[keep]
return grad.index_add(0, ids, rows)  # the embedding: every occurrence adds its row
"""


def _sub(source, old, new):
    assert old in source, old
    return source.replace(old, new)


WRONG = {
    "ex1_causal_mask": [
        (
            "bottom-right alignment (what a KV cache wants, not what is_causal does)",
            [_sub(_MASK, "return j <= i", "return j <= i + (S - L)"), None],
        ),
        (
            "off by one: the diagonal masked too (j < i)",
            [_sub(_MASK, "return j <= i", "return j < i"), None],
        ),
        (
            "the mask inverted: True where the key is in the future (the chapter's convention)",
            [_sub(_MASK, "return j <= i", "return j > i"), None],
        ),
        (
            "masked with 0 instead of -inf",
            [None, _sub(_SCORES, 'float("-inf")', "0.0")],
        ),
        (
            "masked in place (masked_fill_): the caller's scores change",
            [None, _sub(_SCORES, "scores.masked_fill(", "scores.masked_fill_(")],
        ),
        (
            "the mask made on the CPU, whatever the device",
            [_sub(_MASK, "device=device", "device=None"), None],
        ),
        (
            "a square mask of the larger size, cut to (L, S) from the bottom right",
            [
                "n = max(L, S)\n"
                "full = torch.ones(n, n, dtype=torch.bool, device=device).tril()\n"
                "return full[n - L :, n - S :]",
                None,
            ],
        ),
        (
            "torch's own causal bias (switched off: the exercise is the mask)",
            [
                "from torch.nn.attention.bias import causal_upper_left\n"
                "return causal_upper_left(L, S)._materialize(device)",
                None,
            ],
        ),
    ],
    "ex2_split_merge_heads": [
        (
            "the chapter's transpose(1, 2): right for (B, T, C) only",
            [_sub(_SPLIT, "transpose(-3, -2)", "transpose(1, 2)"), None],
        ),
        (
            "heads interleaved: the last dim split as (D, H)",
            [
                _sub(
                    _SPLIT,
                    "x.reshape(*lead, t, n_head, c // n_head).transpose(-3, -2)",
                    "x.reshape(*lead, t, c // n_head, n_head).transpose(-1, -2).transpose(-3, -2)",
                ),
                _sub(
                    _MERGE,
                    "y.transpose(-3, -2).reshape(*lead, t, h * d)",
                    "y.transpose(-3, -2).transpose(-1, -2).reshape(*lead, t, h * d)",
                ),
            ],
        ),
        (
            "split through contiguous(): a copy whenever x is a slice or a transpose",
            [_sub(_SPLIT, "x.reshape(", "x.contiguous().view("), None],
        ),
        (
            "merge with view: raises on SDPA's contiguous output",
            [None, _sub(_MERGE, ".reshape(*lead, t, h * d)", ".view(*lead, t, h * d)")],
        ),
        (
            "merge through contiguous(): always a copy",
            [None, _sub(_MERGE, ".reshape(*lead", ".contiguous().view(*lead")],
        ),
        (
            "merge without the transpose back: (H, T, D) flattened as it lies",
            [None, _sub(_MERGE, "y.transpose(-3, -2).reshape(", "y.reshape(")],
        ),
        (
            "split with permute(0, 2, 1, 3): 4-D only",
            [
                "b, t, c = x.shape[-3:]\n"
                "return x.reshape(b, t, n_head, c // n_head).permute(0, 2, 1, 3)",
                None,
            ],
        ),
    ],
    "ex3_attention_backward": [
        (
            "the scale left out of dQ and dK",
            _sub(_sub(_BACKWARD, "dq = ds @ k * scale", "dq = ds @ k"), "@ q * scale", "@ q"),
        ),
        (
            "the softmax's backward without the rowsum term",
            _sub(_BACKWARD, "p * (dp - (dp * p).sum(-1, keepdim=True))", "p * dp"),
        ),
        (
            "transposes left out: dV = P dO and dK = dS Q",
            _sub(
                _sub(_BACKWARD, "dv = p.transpose(-2, -1) @ d_out", "dv = p @ d_out"),
                "dk = ds.transpose(-2, -1) @ q",
                "dk = ds @ q",
            ),
        ),
        (
            "dQ and dK swapped their transposes: dQ = dS^T K, dK = dS Q",
            _sub(
                _sub(_BACKWARD, "dq = ds @ k * scale", "dq = ds.transpose(-2, -1) @ k * scale"),
                "dk = ds.transpose(-2, -1) @ q * scale",
                "dk = ds @ q * scale",
            ),
        ),
        (
            "torch's autograd through the forward (switched off: the exercise is the backward)",
            "q, k, v = (t.detach().requires_grad_() for t in (q, k, v))\n"
            "out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)\n"
            "return torch.autograd.grad(out, (q, k, v), d_out)",
        ),
        (
            "the rowsum taken down the columns (dim -2)",
            _sub(_BACKWARD, "(dp * p).sum(-1, keepdim=True)", "(dp * p).sum(-2, keepdim=True)"),
        ),
        (
            "the default scale from v's dim (1/sqrt(Ev))",
            _sub(_BACKWARD, "math.sqrt(q.shape[-1])", "math.sqrt(v.shape[-1])"),
        ),
        (
            "the causal mask forgotten in the recomputed forward",
            _sub(_BACKWARD, "s = s.masked_fill(~keep", "s = s.masked_fill(~keep & False"),
        ),
        (
            "the causal mask made on the CPU, whatever the inputs' device",
            _sub(_BACKWARD, "dtype=torch.bool, device=s.device)", "dtype=torch.bool)"),
        ),
        (
            "the causal mask aligned bottom-right",
            _sub(_BACKWARD, ".tril()", ".tril(S - L)"),
        ),
    ],
    "ex4_flash_attention_forward": [
        (
            "the running sum not rescaled when the maximum grows",
            _sub(_FLASH, "l = l * alpha + p.sum", "l = l + p.sum"),
        ),
        (
            "the accumulated output not rescaled",
            _sub(_FLASH, "acc = acc * alpha + p @ vb", "acc = acc + p @ vb"),
        ),
        (
            "the causal mask with the block's own key index (j, not j0 + j)",
            _sub(_FLASH, "torch.arange(j0, j0 + kb.shape[-2]", "torch.arange(0, kb.shape[-2]"),
        ),
        (
            "the query and key indices made on the CPU, whatever the inputs' device",
            _sub(
                _sub(_FLASH, "torch.arange(L, device=q.device)", "torch.arange(L)"),
                "kb.shape[-2], device=q.device)",
                "kb.shape[-2])",
            ),
        ),
        (
            "the running maximum started at 0, not -inf",
            _sub(_FLASH, 'float("-inf"), dtype=q.dtype', "0.0, dtype=q.dtype"),
        ),
        (
            "logsumexp as log(l), without the maximum",
            _sub(_FLASH, "(m + torch.log(l))", "torch.log(l)"),
        ),
        (
            "one pass over all keys: the whole score matrix at once",
            "scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale\n"
            "s = q @ k.transpose(-2, -1) * scale\n"
            "if is_causal:\n"
            "    L, S = s.shape[-2:]\n"
            '    s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))\n'
            "return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)",
        ),
        (
            "torch's attention for the output (switched off: the exercise is the algorithm)",
            "out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)\n"
            "s = q @ k[..., :block_size, :].transpose(-2, -1)\n"
            "return out, torch.logsumexp(s, -1)",
        ),
        (
            "the last, shorter block dropped (range(0, S - block_size + 1, block_size))",
            _sub(_FLASH, "range(0, S, block_size)", "range(0, S - block_size + 1, block_size)"),
        ),
    ],
    "ex5_tied_weight_grad": [
        (
            "the embedding's rows written with index assignment: a repeated id keeps one row",
            _sub(
                _TIED,
                "return grad.index_add(0, ids, rows)",
                "emb = torch.zeros_like(grad)\nemb[ids] = rows\nreturn grad + emb",
            ),
        ),
        (
            "dW[ids] += rows: advanced indexing adds a repeated id's rows only once",
            _sub(
                _TIED,
                "return grad.index_add(0, ids, rows)",
                "grad[ids] += rows\nreturn grad",
            ),
        ),
        (
            "only the output layer's gradient (the embedding's use forgotten)",
            _sub(_TIED, "return grad.index_add(0, ids, rows)", "return grad"),
        ),
        (
            "only the embedding's gradient (the output layer's use forgotten)",
            _sub(
                _TIED,
                "return grad.index_add(0, ids, rows)",
                "return torch.zeros_like(grad).index_add(0, ids, rows)",
            ),
        ),
        (
            "the padding row not left out",
            _sub(_TIED, "if padding_idx is not None:", "if False:"),
        ),
        (
            "a negative padding_idx compared as it is (-1 matches no id)",
            _sub(_TIED, "ids != padding_idx % V", "ids != padding_idx"),
        ),
        (
            "the output layer's gradient transposed: h^T d_logits, (C, V), read as (V, C)",
            _sub(
                _TIED,
                "d_logits.reshape(-1, V).transpose(0, 1) @ h.reshape(-1, C)",
                "(h.reshape(-1, C).transpose(0, 1) @ d_logits.reshape(-1, V)).reshape(V, C)",
            ),
        ),
    ],
}

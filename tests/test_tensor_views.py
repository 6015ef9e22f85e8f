"""retorch.tensor views against torch: random chains of view ops (hypothesis) must give the
same sizes, strides, storage_offset, is_contiguous and values, and the same exception type
and message where torch refuses (an impossible view, a bad dim, an out-of-range index)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import retorch.tensor as rt


def outcome(fn):
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001  (the exception itself is compared)
        return "error", (type(e), str(e))


def same_layout(ours, theirs):
    assert ours.shape == tuple(theirs.shape)
    assert ours.stride() == theirs.stride()
    assert ours.storage_offset() == theirs.storage_offset()
    assert ours.is_contiguous() == theirs.is_contiguous()
    if ours.dim() == 4:
        assert ours.is_contiguous(memory_format="channels_last") == theirs.is_contiguous(
            memory_format=torch.channels_last
        )
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def factorizations(n, max_dims=4):
    """Some shapes with ``n`` elements."""
    shapes = [(n,)]
    for a in range(1, n + 1):
        if n % a == 0:
            shapes.append((a, n // a))
            for b in range(1, n // a + 1):
                if (n // a) % b == 0:
                    shapes.append((a, b, n // a // b))
    return shapes


@st.composite
def view_op(draw, shape):
    """One view op with arguments drawn for ``shape`` (sometimes invalid on purpose)."""
    n = len(shape)
    dim = st.integers(-n - 1, n) if n else st.integers(-2, 1)
    numel = int(np.prod(shape)) if shape else 1
    kind = draw(
        st.sampled_from(
            [
                "view",
                "reshape",
                "transpose",
                "permute",
                "t",
                "expand",
                "squeeze",
                "unsqueeze",
                "narrow",
                "select",
                "unfold",
                "getitem",
                "flatten",
                "contiguous",
                "view_bad",
            ]
        )
    )
    if kind in ("view", "reshape"):
        new = list(draw(st.sampled_from(factorizations(numel))))
        if draw(st.booleans()):
            new[draw(st.integers(0, len(new) - 1))] = -1
        return kind, (tuple(new),)
    if kind == "view_bad":
        return "view", ((numel + 1,),)
    if kind == "transpose":
        return kind, (draw(dim), draw(dim))
    if kind == "permute":
        perm = draw(st.permutations(range(n)))
        if n and draw(st.integers(0, 9)) == 0:
            perm = list(perm)
            perm[0] = perm[-1]  # duplicate dims
        return kind, (tuple(perm),)
    if kind == "t":
        return kind, ()
    if kind == "expand":
        lead = draw(st.lists(st.integers(1, 3), max_size=2))
        tail = [
            draw(st.sampled_from([s, -1, 2, 3]))
            if s == 1
            else draw(st.sampled_from([s, -1, s + 1]))
            for s in shape
        ]
        return kind, (tuple(lead + tail),)
    if kind == "squeeze":
        return kind, (() if draw(st.booleans()) else (draw(dim),))
    if kind == "unsqueeze":
        return kind, (draw(st.integers(-n - 2, n + 1)),)
    if kind == "narrow":
        return kind, (draw(dim), draw(st.integers(-4, 4)), draw(st.integers(0, 4)))
    if kind == "select":
        return kind, (draw(dim), draw(st.integers(-5, 4)))
    if kind == "unfold":
        return kind, (draw(dim), draw(st.integers(0, 4)), draw(st.integers(1, 3)))
    if kind == "flatten":
        return kind, (draw(dim), draw(dim))
    if kind == "contiguous":
        return kind, ()
    # getitem: ints, positive-step slices, None and at most one Ellipsis
    parts = []
    for _ in range(draw(st.integers(1, max(1, n + 1)))):
        parts.append(
            draw(
                st.one_of(
                    st.integers(-4, 3),
                    st.builds(
                        slice,
                        st.one_of(st.none(), st.integers(-5, 5)),
                        st.one_of(st.none(), st.integers(-5, 5)),
                        st.one_of(st.none(), st.integers(1, 3)),
                    ),
                    st.none(),
                )
            )
        )
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), Ellipsis)
    return kind, (tuple(parts),)


def apply(t, kind, args):
    if kind == "getitem":
        return t[args[0]]
    return getattr(t, kind)(*args)


@given(st.data())
def test_view_chains_match_torch(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=0, max_size=4)))
    dtype = data.draw(st.sampled_from(["float32", "int64", "float64"]))
    base_np = np.arange(int(np.prod(shape)) if shape else 1).astype(dtype).reshape(shape)
    theirs = torch.from_numpy(base_np.copy())
    ours = rt.from_numpy(base_np.copy())
    for _ in range(data.draw(st.integers(1, 6))):
        kind, args = data.draw(view_op(ours.shape))
        a = outcome(lambda: apply(ours, kind, args))
        b = outcome(lambda: apply(theirs, kind, args))
        assert a[0] == b[0], (kind, args, a, b)
        if a[0] == "error":
            assert a[1] == b[1], (kind, args)
            return
        ours, theirs = a[1], b[1]
        same_layout(ours, theirs)
        # a view shares memory with its base: the element addresses agree with the offsets
        assert (
            ours.data_ptr()
            == ours.untyped_storage().data_ptr() + ours.storage_offset() * ours.element_size()
        )


def test_view_error_and_hint_match_torch():
    x = torch.arange(12.0).view(3, 4)
    r = rt.arange(12.0).view(3, 4)
    for fn in (
        lambda t: t.t().view(12),
        lambda t: t.view(5, -1),
        lambda t: t.view(-1, -1),
        lambda t: t.view(-2, 6),
        lambda t: t.expand(3),
        lambda t: t.expand(2, 3),
        lambda t: t.expand(-1, 3, 4),
        lambda t: t.permute(0),
        lambda t: t.permute(0, 0),
        lambda t: t[5],
        lambda t: t[0, 0, 0],
        lambda t: t[::0],
        lambda t: t.narrow(0, 2, 5),
        lambda t: t.select(0, 3),
        lambda t: t.unfold(1, 5, 1),
        lambda t: t.unfold(1, 2, 0),
        lambda t: t.squeeze(4),
        lambda t: t.flatten(1, 0),
        lambda t: t.as_strided((3, 4), (4, 1), 100),
        lambda t: t.as_strided((3,), (-1,)),
        lambda t: t.view(3, 4, 1).t(),
        lambda t: t.sum(-3),
        lambda t: t[0][0].unsqueeze(2),
        lambda t: t[0][0].select(0, 0),
        lambda t: t[0][0].narrow(0, 0, 1),
        lambda t: t.reshape(0, -1),
    ):
        a, b = outcome(lambda: fn(r)), outcome(lambda: fn(x))
        assert a[0] == b[0] == "error"
        assert a[1] == b[1], (a, b)


def test_negative_step_is_a_value_error_as_torch():
    a = outcome(lambda: rt.arange(3)[::-1])
    b = outcome(lambda: torch.arange(3)[::-1])
    assert a == b


def test_view_when_possible_else_copy():
    x, r = torch.arange(24.0).view(2, 3, 4), rt.arange(24.0).view(2, 3, 4)
    for fn in (
        lambda t: t.transpose(0, 1).reshape(3, 8),  # needs a copy
        lambda t: t.transpose(1, 2).reshape(2, 12),  # needs a copy
        lambda t: t[:, 1:].reshape(2, 8),  # needs a copy
        lambda t: t.permute(2, 0, 1)[..., 1].reshape(4, 2),
        lambda t: t[:, :, ::2].reshape(6, 2),  # a view: chunks stay evenly spaced
        lambda t: t.unsqueeze(1).expand(2, 5, 3, 4).reshape(10, 12),
    ):
        same_layout(fn(r), fn(x))
        shares = fn(r)._impl.storage is r._impl.storage
        assert shares == (fn(x).untyped_storage().data_ptr() == x.untyped_storage().data_ptr())


def test_views_share_storage_and_writes_show_through():
    base = np.zeros((3, 4), np.float32)
    r = rt.from_numpy(base)
    v = r.t()[1:, ::2]
    v.numpy()[...] = 7
    expected = np.zeros((3, 4), np.float32)
    expected.T[1:, ::2] = 7
    np.testing.assert_array_equal(base, expected)
    assert v._base is r


def test_channels_last():
    x = torch.arange(2 * 3 * 4 * 5.0).view(2, 3, 4, 5)
    r = rt.arange(2 * 3 * 4 * 5.0).view(2, 3, 4, 5)
    cl_t = x.contiguous(memory_format=torch.channels_last)
    cl_r = r.contiguous(memory_format="channels_last")
    same_layout(cl_r, cl_t)
    assert cl_r.is_contiguous(memory_format="channels_last")
    assert (
        rt.empty(2, 0, 3, 4, memory_format="channels_last").stride()
        == torch.empty(2, 0, 3, 4, memory_format=torch.channels_last).stride()
    )
    # elementwise ops keep the channels_last layout, as TensorIterator's fast path does
    same_layout(cl_r + cl_r, cl_t + cl_t)
    a, b = (
        outcome(lambda: r[0].contiguous(memory_format="channels_last")),
        outcome(lambda: x[0].contiguous(memory_format=torch.channels_last)),
    )
    assert a == b


@pytest.mark.parametrize(
    "shape,strides,offset",
    [((3, 4), (4, 1), 0), ((2, 2), (1, 2), 1), ((4,), (0,), 3), ((2, 3), (3, 1), 6)],
)
def test_as_strided_matches_torch(shape, strides, offset):
    x, r = torch.arange(12.0), rt.arange(12.0)
    a = outcome(lambda: r.as_strided(shape, strides, offset))
    b = outcome(lambda: x.as_strided(shape, strides, offset))
    assert a[0] == b[0]
    if a[0] == "ok":
        same_layout(a[1], b[1])
    else:
        assert a[1] == b[1], (a, b)


def test_dim_wrapping_on_0_dim_tensors():
    s, st_ = rt.tensor(3.0), torch.tensor(3.0)
    for d in (0, -1, 1, -2):
        assert outcome(lambda: s.unsqueeze(d).shape) == outcome(
            lambda: tuple(st_.unsqueeze(d).shape)
        )
        assert outcome(lambda: s.squeeze(d).shape) == outcome(lambda: tuple(st_.squeeze(d).shape))
        assert outcome(lambda: s.sum(d).item()) == outcome(lambda: st_.sum(d).item())
        assert outcome(lambda: s.flatten(d).shape) == outcome(lambda: tuple(st_.flatten(d).shape))
    assert outcome(lambda: s.size(0)) == outcome(lambda: st_.size(0))


def test_data_ptr_steps_like_torch():
    x, r = torch.arange(24.0).view(2, 3, 4), rt.arange(24.0).view(2, 3, 4)
    for fn in (lambda t: t[1], lambda t: t[:, 2], lambda t: t[..., 3], lambda t: t.narrow(2, 1, 2)):
        assert fn(r).data_ptr() - r.data_ptr() == fn(x).data_ptr() - x.data_ptr()


@pytest.mark.parametrize("shape", [(-1,), (4, 6), (2, 12)])
def test_reshape_that_copies_is_not_a_view_as_torchs(shape):
    """torch's ``_reshape_copy`` is ``_unsafe_view(clone)``: a tensor without ``_base``."""
    ours = rt.arange(24, dtype=rt.float64).view(2, 3, 4).transpose(0, 2).reshape(shape)
    theirs = torch.arange(24, dtype=torch.float64).view(2, 3, 4).transpose(0, 2).reshape(shape)
    assert (ours._base is None) == (theirs._base is None) is True
    assert ours.stride() == theirs.stride() and ours.tolist() == theirs.tolist()


def test_memory_format_names_match_torchs():
    x, tx = rt.ones(2, 3, 4, 5), torch.ones(2, 3, 4, 5)
    for ours, theirs in [(rt.channels_last, torch.channels_last),
                         (rt.contiguous_format, torch.contiguous_format)]:  # fmt: skip
        assert (
            x.contiguous(memory_format=ours).stride()
            == tx.contiguous(memory_format=theirs).stride()
        )
        assert x.contiguous(memory_format=ours).is_contiguous(memory_format=ours)
    assert rt.empty_like(x.contiguous(memory_format=rt.channels_last)).stride() == (60, 1, 15, 3)

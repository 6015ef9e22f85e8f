"""Graders for lab 8 (solutions/08_runtime_lab.md): the student's runtime rules against torch's.

Each ``check_*`` takes the comparisons object that :func:`retorch.testing.grading.check`
passes and the student's function, runs it and torch (or chapter 4's allocator model, for
exercise 3) on the same inputs, and compares:

1. ``update_scale``: GradScaler's update rule, step by step against ``torch._amp_update_scale_``
   on sequences of steps with and without infs (growth, backoff, a factor that needs float32
   rounding, a growth that would overflow, ``found_inf`` summed over two optimizers);
2. ``float64_to_bfloat16_bits``: ``.to(torch.bfloat16)`` of float64 values, whose bits torch
   rounds twice (to float32, then to bfloat16): ties, double-rounding cases, overflow, NaN;
3. ``can_reuse``: the caching allocator's reuse rule across streams, against what
   ``retorch.tensor.allocator.CUDACachingAllocator`` actually hands out after
   ``record_stream``, a free, and some streams synchronised (in orders where the highest or
   the last-recorded stream finishes first, and where an unrelated stream finishes);
4. ``unscale_and_check``: torch's ``_amp_foreach_non_finite_check_and_unscale_`` on float16
   gradients (every finite float16 value among them, so that a product rounded once and one
   rounded twice part), element by element, the flag and its type, the arrays kept in place.

Exercise 2's student function runs with retorch's own converters and torch's tensor
constructors switched off (``converters_off``): it must do the rounding itself.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from retorch.tensor.allocator import CUDACachingAllocator

# ---- exercise 1 -------------------------------------------------------------------------------
UPDATE_HINT = (
    "found_inf nonzero: scale * backoff_factor, tracker 0. Otherwise tracker + 1; when that "
    "reaches growth_interval, scale * growth_factor (kept only if finite) and tracker 0. The "
    "scale is a float32 tensor: round each product to float32 (np.float32)"
)

# (init scale, growth factor, backoff factor, growth interval, found_inf at each step)
UPDATE_CASES = [
    (65536.0, 2.0, 0.5, 3, [0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0]),
    (1.0, 1.7, 0.3, 2, [0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]),
    (2.0**126, 2.0, 0.5, 1, [0, 0, 0, 1, 0, 0]),  # the second growth would overflow
    (3.0, 1e5, 0.1, 1, [0, 0, 0, 0, 1, 0, 0, 0]),  # 3e15 * 1e5 ... past float32's max
    (8.0, 2.0, 0.25, 4, [0, 0, 0, 2, 0, 0, 0, 0, 0, 2, 2]),  # found_inf summed: 2.0
]


def check_update_scale(cmp, update_scale):
    for init, growth, backoff, interval, found in UPDATE_CASES:
        scale = torch.tensor(init, dtype=torch.float32)
        tracker = torch.tensor(0, dtype=torch.int32)
        got = (float(scale), 0)
        for step, f in enumerate(found):
            torch._amp_update_scale_(scale, tracker, torch.tensor(float(f)), growth, backoff,
                                     interval)  # fmt: skip
            args = (got[0], got[1], float(f), growth, backoff, interval)
            what = f"update_scale{args} (step {step} of {found}, growth_interval {interval})"
            got = cmp.call(lambda: update_scale(*args), what + " ran", UPDATE_HINT)
            cmp.equal(type(got).__name__, "tuple", what + ": the type returned",
                      "return (new scale, new growth tracker)")  # fmt: skip
            cmp.equal((float(got[0]), int(got[1])), (scale.item(), tracker.item()),
                      what + ": (scale, growth tracker), torch's in the expected row",
                      UPDATE_HINT)  # fmt: skip


# ---- exercise 2 -------------------------------------------------------------------------------
BF16_HINT = (
    "torch's copy converts float64 to float32 first (a C++ cast, rounding to nearest), then "
    "float32 to bfloat16: add 0x7FFF plus the lowest kept bit and keep the top 16 bits (round "
    "to nearest even, which also carries an overflow into inf); a NaN stays a NaN"
)


def bf16_inputs() -> list[float]:
    """Float64 values where the usual mistakes show, then random ones."""
    one = 1.0
    xs = [0.0, -0.0, 1.0, -2.5, one + 2**-8, one + 3 * 2**-8, one + 2**-8 + 2**-30,
          -(one + 2**-8 + 2**-28), one + 2**-8 + 2**-20, one + 2**-9, 3.3895313892515355e38,
          3.39e38, 3.4e38, 3.5e38, 1e300, -1e300, float("inf"), float("-inf"), float("nan"),
          -float("nan"), 2.0**-149, 2.0**-150, 1.5 * 2.0**-149, 1e-300, 2.0**-126 * (1 + 2**-8),
          0.1, 1 / 3, 65504.0, 1e-8]  # fmt: skip
    # a NaN whose payload fills the mantissa: a carry would reach the sign bit
    xs.append(float(np.array(0x7FFFFFFFFFFFFFFF, dtype=np.uint64).view(np.float64)))
    rng = np.random.default_rng(8)
    np_errors = np.errstate(invalid="ignore", over="ignore")  # random bits include NaNs
    np_errors.__enter__()
    bits32 = rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32)
    f32 = bits32.view(np.float32).astype(np.float64)
    # float32 values, then nudged below float32's precision (double-rounding cases)
    nudge = f32 * (1 + rng.choice([-1, 1], f32.size) * 2.0**-40)
    ties = ((bits32 & np.uint32(0xFFFF0000)) | np.uint32(0x8000)).view(np.float32)
    xs += f32.tolist() + nudge.tolist() + ties.astype(np.float64).tolist()
    np_errors.__exit__(None, None, None)
    return xs


def _refuse(*args, **kwargs):  # its code runs in half.py's globals too: literals only
    raise RuntimeError(
        "exercise 2 asks for the rounding itself: while the check runs your function, "
        "retorch's converters (retorch.tensor.half) and torch's tensor constructors raise"
    )


@contextlib.contextmanager
def converters_off():
    """retorch's float32 -> bfloat16/float16 converters, however the student reached them
    (``half.round_to_nearest_even``, an imported name, ``rt.tensor(...).to(...)``), and
    torch's tensor constructors, raise inside the block."""
    from retorch.tensor import half

    fns = [half.round_to_nearest_even, half.fp16_ieee_from_fp32_value, half.from_float32,
           half.to_storage]  # fmt: skip
    codes = [f.__code__ for f in fns]
    names = ("tensor", "as_tensor", "from_numpy", "asarray")
    saved = {n: getattr(torch, n) for n in names}
    try:
        for f in fns:
            f.__code__ = _refuse.__code__
        for n in names:
            setattr(torch, n, _refuse)
        yield
    finally:
        for f, code in zip(fns, codes):
            f.__code__ = code
        for n, fn in saved.items():
            setattr(torch, n, fn)


def check_float64_to_bfloat16_bits(cmp, float64_to_bfloat16_bits):
    xs = bf16_inputs()
    want = torch.tensor(xs, dtype=torch.float64).to(torch.bfloat16).view(torch.int16)
    want = [w & 0xFFFF for w in want.tolist()]
    with converters_off():
        got_all = [cmp.call(lambda: float64_to_bfloat16_bits(x),
                            f"float64_to_bfloat16_bits({x!r}) ran", BF16_HINT) for x in xs]  # fmt: skip
    for x, w, got in zip(xs, want, got_all):
        what = f"float64_to_bfloat16_bits({x!r})"
        cmp.equal(type(got).__name__ in ("int", "uint16", "uint32", "int64"), True,
                  what + " returns an int", "return the 16 bits as an int")  # fmt: skip
        got = int(got)
        if (w & 0x7F80) == 0x7F80 and (w & 0x7F):  # torch gives a NaN: any NaN bits will do
            cmp.equal((got & 0x7F80) == 0x7F80 and bool(got & 0x7F) and 0 <= got <= 0xFFFF, True,
                      f"{what} is a bfloat16 NaN (got {got:#06x})", BF16_HINT)  # fmt: skip
        else:
            cmp.equal(f"{got:#06x}", f"{w:#06x}", what, BF16_HINT)


# ---- exercise 3 -------------------------------------------------------------------------------
REUSE_HINT = (
    "a freed block goes back to the pool of the stream it was allocated on, so only that "
    "stream can get it; if other streams used it (record_stream), the free records an event on "
    "each of them and the block waits until every one of those streams has finished; a "
    "record_stream on the block's own stream is ignored"
)

# (block's stream, streams passed to record_stream, steps after the free)
REUSE_SCENARIOS = [
    (0, [], [("malloc", 1), ("malloc", 0)]),
    (
        0,
        [1],
        [
            ("malloc", 0),
            ("sync", 0),
            ("malloc", 0),
            ("malloc", 1),
            ("sync", 1),
            ("malloc", 1),
            ("malloc", 0),
        ],
    ),
    (
        2,
        [0, 1],
        [
            ("sync", 0),
            ("malloc", 2),
            ("sync", 2),
            ("malloc", 2),
            ("sync", 1),
            ("malloc", 0),
            ("malloc", 2),
        ],
    ),
    (1, [1, 3], [("malloc", 1), ("sync", 3), ("malloc", 1)]),
    (0, [0], [("malloc", 0)]),
    (3, [2], [("sync", 3), ("malloc", 3), ("sync", 2), ("malloc", 3)]),
    # the highest stream finishes first, then one that never used the block
    (
        0,
        [3, 1],
        [("sync", 3), ("malloc", 0), ("sync", 2), ("malloc", 0), ("sync", 1), ("malloc", 0)],
    ),  # fmt: skip
    # the last stream recorded finishes first
    (
        1,
        [2, 3, 0],
        [("sync", 0), ("malloc", 1), ("sync", 2), ("malloc", 1), ("sync", 3), ("malloc", 1)],
    ),  # fmt: skip
]


def check_can_reuse(cmp, can_reuse):
    for size in (512, 4 << 20):  # a small-pool block and a large-pool one
        for block_stream, used_on, steps in REUSE_SCENARIOS:
            alloc = CUDACachingAllocator(1 << 30)
            block = alloc.malloc(size, block_stream)
            for s in used_on:
                alloc.record_stream(block, s)
            ptr = block.ptr  # the Block object itself may be merged away once cached
            alloc.free(block)
            done: set = set()
            story = (
                f"a {size}-byte block of stream {block_stream}, record_stream on {used_on}, freed"
            )
            for kind, s in steps:
                if kind == "sync":
                    alloc.stream_synchronize(s)
                    done.add(s)
                    story += f", stream {s} done"
                    continue
                new = alloc.malloc(size, s)
                reused = new.ptr == ptr
                args = (block_stream, frozenset(used_on), s, frozenset(done))
                what = f"can_reuse{args} ({story}, then malloc on stream {s})"
                got = cmp.call(lambda: can_reuse(*args), what + " ran", REUSE_HINT)
                cmp.equal(got, reused, what + ": the model " + ("reuses" if reused else
                          "does not reuse") + " the block", REUSE_HINT)  # fmt: skip
                alloc.free(new)
                story += f", a malloc on stream {s}"


# ---- exercise 4 -------------------------------------------------------------------------------
UNSCALE_HINT = (
    "found_inf is 1.0 if any element of any gradient is inf or NaN; every gradient is then "
    "multiplied by inv_scale in place, infs and NaNs included, whatever was found. A float16 "
    "element is computed in float32 (its opmath type): widen, multiply by the float32 "
    "inv_scale (the product rounded to float32), round that back to float16: two roundings"
)


#: every finite float16 value: the products near a float16 tie, where a float32 product
#: rounded once more and an exact (float64) product rounded once part, are among them
_ALL_FP16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
_ALL_FP16 = _ALL_FP16[np.isfinite(_ALL_FP16)]


def check_unscale_and_check(cmp, unscale_and_check):
    gen = torch.Generator().manual_seed(4)
    for case, special, where in [("finite", None, 0), ("an inf in the first gradient",
                                 float("inf"), 0), ("a NaN in the second gradient",
                                 float("nan"), 1), ("a -inf in the last gradient",
                                 float("-inf"), 3)]:  # fmt: skip
        for inv in (1 / 3, 2.0**-10, 0.7, 1e-3):
            grads = [torch.randn(n, generator=gen).mul(300).half() for n in (50, 7, 1000)]
            grads.append(torch.from_numpy(_ALL_FP16.copy()))
            if special is not None:
                grads[where][3] = special
            inv_scale = torch.tensor(inv, dtype=torch.float32)
            found = torch.zeros(())
            arrays = [g.numpy().copy() for g in grads]
            given = list(arrays)  # the array objects handed over: updated in place?
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv_scale)
            what = f"float16 gradients with {case}, inv_scale {inv_scale.item()!r}"
            got = cmp.call(lambda: unscale_and_check(given, inv_scale.item()), what + " ran",
                           UNSCALE_HINT)  # fmt: skip
            cmp.equal("float" if isinstance(got, float) else type(got).__name__,
                      "float", what + ": the type of found_inf returned",
                      "return found_inf as a float, 1.0 or 0.0")  # fmt: skip
            cmp.equal(got, found.item(), what + ": found_inf returned", UNSCALE_HINT)
            cmp.equal([a is b for a, b in zip(given, arrays)], [True] * len(arrays),
                      what + ": the list still holds the arrays it was given",
                      "update each array in place (g[...] = ...), not the list")  # fmt: skip
            for k, (a, g) in enumerate(zip(arrays, grads)):
                cmp.equal(str(a.dtype), "float16", f"{what}: gradient {k} stays float16",
                          "write the results into the arrays, in place")  # fmt: skip
                want = g.numpy().view(np.uint16)
                differ = np.flatnonzero(
                    (a.view(np.uint16) != want) & ~(np.isnan(a) & np.isnan(g.numpy()))
                )
                first = int(differ[0]) if differ.size else None
                cmp.equal(
                    None if first is None else (first, float(a[first])),
                    None if first is None else (first, float(g.numpy()[first])),
                    f"{what}: gradient {k} after unscaling, (first index that differs, value)",
                    UNSCALE_HINT,
                )

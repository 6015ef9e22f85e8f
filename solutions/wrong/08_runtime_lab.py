"""Wrong answers a student could plausibly write for lab 8; each must fail its graded check.

Used by ``tools/check_wrong_answers.py 08_runtime_lab``. Each entry replaces the BEGIN/END
SOLUTION region of the exercise's solution cell.
"""

_UPDATE = """\
if found_inf:
    return float(np.float32(scale * backoff_factor)), 0
successful = growth_tracker + 1
if successful == growth_interval:
    with np.errstate(over="ignore"):  # an overflow to inf is refused just below
        new_scale = np.float32(scale * growth_factor)
    return (float(new_scale) if np.isfinite(new_scale) else scale), 0
return scale, successful
"""

_BF16 = """\
with np.errstate(over="ignore"):  # beyond float32's range: inf, as C++'s cast gives
    bits = int(np.array(x, dtype=np.float32).view(np.uint32))
if (bits & 0x7FFFFFFF) > 0x7F800000:  # NaN: c10's quiet NaN
    return 0x7FC0
return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
"""

_REUSE = """\
waiting_for = set(used_on) - {block_stream}  # one event per other stream that used it
return request_stream == block_stream and waiting_for <= set(completed)
"""


_UNSCALE = """\
found_inf = 0.0
inv = np.float32(inv_scale)
for g in grads:
    wide = g.astype(np.float32)  # opmath
    if not np.isfinite(wide).all():
        found_inf = 1.0
    g[...] = (wide * inv).astype(np.float16)  # to float32, then float16: two roundings
return found_inf
"""

_AGGREGATE = """\
children = [0.0] * len(events)  # the durations of each range's direct children
for name, start, end, parent in events:
    if parent is not None:
        children[parent] += end - start
rows = {}
for (name, start, end, parent), inside in zip(events, children):
    count, total, self_cpu = rows.get(name, (0, 0.0, 0.0))
    rows[name] = (count + 1, total + (end - start), self_cpu + ((end - start) - inside))
return rows
"""


def _sub(source, old, new):
    assert old in source, old
    return source.replace(old, new)


WRONG = {
    "ex1_update_scale": [
        (
            "growth on the step that found inf (the interval is counted before the inf check)",
            """\
successful = growth_tracker + 1
if successful == growth_interval:
    with np.errstate(over="ignore"):
        new_scale = np.float32(scale * growth_factor)
    return (float(new_scale) if np.isfinite(new_scale) else scale), 0
if found_inf:
    return float(np.float32(scale * backoff_factor)), 0
return scale, successful
""",
        ),
        (
            "tracker not reset when an inf is found",
            _sub(
                _UPDATE, "scale * backoff_factor)), 0", "scale * backoff_factor)), growth_tracker"
            ),
        ),
        (
            "tracker not reset after a growth (keeps counting)",
            _sub(_UPDATE, "else scale), 0", "else scale), successful"),
        ),
        (
            "growth one step late (> instead of ==, tracker allowed to reach the interval)",
            _sub(_UPDATE, "if successful == growth_interval:", "if successful > growth_interval:"),
        ),
        (
            "products kept in float64, not rounded to the float32 scale",
            _sub(
                _sub(
                    _UPDATE, "float(np.float32(scale * backoff_factor))", "scale * backoff_factor"
                ),
                "new_scale = np.float32(scale * growth_factor)",
                "new_scale = np.float64(scale * growth_factor)",
            ),
        ),
        (
            "a growth that overflows to inf is kept",
            _sub(
                _UPDATE,
                "(float(new_scale) if np.isfinite(new_scale) else scale)",
                "float(new_scale)",
            ),
        ),
    ],
    "ex2_float64_to_bfloat16": [
        (
            "round half up (always add 0x8000)",
            _sub(_BF16, "bits + 0x7FFF + ((bits >> 16) & 1)", "bits + 0x8000"),
        ),
        (
            "truncation (keep the top 16 bits)",
            _sub(_BF16, "bits + 0x7FFF + ((bits >> 16) & 1)", "bits"),
        ),
        (
            "NaN turned into inf",
            _sub(_BF16, "return 0x7FC0", "return 0x7F80 | ((bits >> 16) & 0x8000)"),
        ),
        (
            "no NaN case: a full payload carries into the sign",
            _sub(
                _BF16,
                "if (bits & 0x7FFFFFFF) > 0x7F800000:  # NaN: c10's quiet NaN\n    return 0x7FC0\n",
                "",
            ),
        ),
        (
            "one rounding from the float64 bits (torch rounds to float32 first)",
            """\
if x != x:
    return 0x7FC0
b = int(np.array(x, dtype=np.float64).view(np.uint64))
r = ((b + 0x7FFFFFFFFFFF + ((b >> 48) & 1)) >> 48) & 0xFFFF  # a float64 with 7 mantissa bits
with np.errstate(over="ignore"):
    f = np.array(r << 48, dtype=np.uint64).view(np.float64).astype(np.float32)
return int(f.view(np.uint32)) >> 16
""",
        ),
        (
            "calling the chapter's converter (half.round_to_nearest_even)",
            """\
from retorch.tensor import half

with np.errstate(over="ignore"):
    return int(half.round_to_nearest_even(np.float32(x))[0])
""",
        ),
        (
            "asking torch (torch.tensor(x).to(torch.bfloat16))",
            """\
import torch

return int(torch.tensor(x, dtype=torch.float64).to(torch.bfloat16).view(torch.int16)) & 0xFFFF
""",
        ),
        (
            "overflow clamped to the largest finite bfloat16",
            _sub(
                _BF16,
                "return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF",
                "out = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF\n"
                "return out - 1 if (out & 0x7FFF) == 0x7F80 and (bits & 0x7FFFFFFF) != 0x7F800000 "
                "else out",
            ),
        ),
    ],
    "ex3_can_reuse": [
        ("reuse right after the free (events ignored)", "return request_stream == block_stream\n"),
        (
            "reuse after the block's own stream's event only",
            "return request_stream == block_stream and block_stream in completed\n",
        ),
        (
            "any one of the streams that used it is enough",
            _sub(
                _REUSE,
                "waiting_for <= set(completed)",
                "(not waiting_for or bool(waiting_for & set(completed)))",
            ),
        ),
        (
            "any stream may take the block once the events completed (per-stream pools ignored)",
            _sub(_REUSE, "request_stream == block_stream and ", ""),
        ),
        (
            "a record_stream on the block's own stream waited for too",
            _sub(_REUSE, "set(used_on) - {block_stream}", "set(used_on)"),
        ),
        (
            "wait for the highest stream only",
            _sub(
                _REUSE,
                "waiting_for <= set(completed)",
                "(not waiting_for or max(waiting_for) in completed)",
            ),
        ),
        (
            "count completed streams (as many done as there are events)",
            _sub(_REUSE, "waiting_for <= set(completed)", "len(completed) >= len(waiting_for)"),
        ),
    ],
    "ex4_unscale_fp16": [
        (
            "computed in float16 (inv_scale rounded to float16 too)",
            _sub(
                _UNSCALE, "g[...] = (wide * inv).astype(np.float16)", "g[...] = g * np.float16(inv)"
            ),
        ),
        (
            "computed in float64 (one rounding of the exact product; torch rounds twice)",
            _sub(
                _UNSCALE,
                "g[...] = (wide * inv).astype(np.float16)",
                "g[...] = (g.astype(np.float64) * inv_scale).astype(np.float16)",
            ),
        ),
        (
            "gradients left scaled once an inf is found",
            """\
found_inf = float(any(not np.isfinite(g.astype(np.float32)).all() for g in grads))
if not found_inf:
    for g in grads:
        g[...] = (g.astype(np.float32) * np.float32(inv_scale)).astype(np.float16)
return found_inf
""",
        ),
        (
            "replacing list entries instead of updating the arrays in place",
            _sub(
                _sub(_UNSCALE, "for g in grads:", "for i, g in enumerate(grads):"),
                "g[...] = (wide * inv).astype(np.float16)",
                "grads[i] = (wide * inv).astype(np.float16)",
            ),
        ),
        (
            "returning a bool",
            _sub(_UNSCALE, "return found_inf", "return found_inf == 1.0"),
        ),
        (
            "dividing by 1/inv (the scale, rounded to float32) instead of multiplying",
            _sub(
                _UNSCALE,
                "g[...] = (wide * inv).astype(np.float16)",
                "g[...] = (wide / np.float32(1 / inv)).astype(np.float16)",
            ),
        ),
        (
            "found_inf reset for each gradient (only the last one counts)",
            _sub(
                _UNSCALE,
                "    if not np.isfinite(wide).all():\n        found_inf = 1.0",
                "    found_inf = float(not np.isfinite(wide).all())",
            ),
        ),
    ],
    "ex5_aggregate_ranges": [
        (
            "self time not subtracting the children (self = total)",
            _sub(_AGGREGATE, "self_cpu + ((end - start) - inside)", "self_cpu + (end - start)"),
        ),
        (
            "self time subtracting every descendant (nested ranges subtracted twice)",
            _sub(
                _AGGREGATE,
                "        children[parent] += end - start\n",
                "        up = parent\n"
                "        while up is not None:  # the parent, its parent, ...\n"
                "            children[up] += end - start\n"
                "            up = events[up][3]\n",
            ),
        ),
        (
            "self time subtracting the children's self times, not their totals",
            """\
own = [end - start for name, start, end, parent in events]
for k in range(len(events) - 1, -1, -1):  # a child comes after its parent: children first
    parent = events[k][3]
    if parent is not None:
        own[parent] -= own[k]  # own[k] is k's self time by now, not its duration
rows = {}
for k, (name, start, end, parent) in enumerate(events):
    count, total, self_cpu = rows.get(name, (0, 0.0, 0.0))
    rows[name] = (count + 1, total + (end - start), self_cpu + own[k])
return rows
""",
        ),
        (
            "keyed by the name without its namespace (aten::detach and detach merged)",
            _sub(
                _AGGREGATE,
                "    count, total, self_cpu = rows.get(name, (0, 0.0, 0.0))\n    rows[name]",
                "    name = name.split('::')[-1]\n"
                "    count, total, self_cpu = rows.get(name, (0, 0.0, 0.0))\n    rows[name]",
            ),
        ),
        (
            "ranges with a self time of 0 dropped (a zero-length range, a covered parent)",
            _sub(
                _AGGREGATE,
                "    count, total, self_cpu = rows.get(",
                "    if (end - start) - inside == 0:\n        continue\n"
                "    count, total, self_cpu = rows.get(",
            ),
        ),
        (
            "a range nested in one of its own name counted as part of that call",
            _sub(
                _AGGREGATE,
                "    count, total, self_cpu = rows.get(",
                "    up = parent\n"
                "    while up is not None and events[up][0] != name:\n"
                "        up = events[up][3]\n"
                "    if up is not None:  # inside a call of the same op: not a call of its own\n"
                "        continue\n"
                "    count, total, self_cpu = rows.get(",
            ),
        ),
        (
            "the last call's times kept, not summed over the calls",
            _sub(
                _AGGREGATE,
                "(count + 1, total + (end - start), self_cpu + ((end - start) - inside))",
                "(count + 1, end - start, (end - start) - inside)",
            ),
        ),
        (
            "top-level ranges only (the ops called inside another op left out)",
            _sub(
                _AGGREGATE,
                "    count, total, self_cpu = rows.get(",
                "    if parent is not None:\n        continue\n"
                "    count, total, self_cpu = rows.get(",
            ),
        ),
        (
            "calling retorch's key_averages on the ranges made into FunctionEvents",
            """\
from retorch.profiler import EventList, FunctionEvent

made = []
for k, (name, start, end, parent) in enumerate(events):
    e = FunctionEvent(k, name, 0, start)
    e.end_us = end
    if parent is not None:
        e.cpu_parent = made[parent]
        made[parent].cpu_children.append(e)
    made.append(e)
return {a.key: (a.count, a.cpu_time_total, a.self_cpu_time_total)
        for a in EventList(made).key_averages()}
""",
        ),
    ],
}

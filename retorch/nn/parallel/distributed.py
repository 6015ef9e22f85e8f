"""``DistributedDataParallel``: gradient buckets all-reduced while backward runs.

Mirrors torch/nn/parallel/distributed.py (the wrapper: initial broadcast, bucket assignment,
``no_sync``) and torch/csrc/distributed/c10d/reducer.cpp (the ``Reducer``: autograd hooks,
buckets, ``finalize_backward``). It wraps chapter 1's ``retorch.nn`` modules (the tests
compare it with torch's DDP around the same ``torch.nn`` model). Communication is
torch.distributed's (gloo here), as in torch.

1. Construction broadcasts rank 0's parameters and buffers, so every replica starts equal
   (torch's ``_sync_module_states``).
2. ``compute_bucket_assignment_by_size`` (reducer.cpp's rule) groups the parameters, in
   registration order, into buckets that close as soon as their bytes reach a limit (so a
   bucket may overshoot by its last tensor). The limits are those of torch's
   ``_BucketCapacityConfig.compute_bucket_size_limits``: with the default
   ``find_unused_parameters=False`` the only limit is ``sys.maxsize``, so the first
   iteration runs with ONE bucket of every parameter (registration order says little about
   the order backward produces gradients in); with ``find_unused_parameters=True`` the first
   bucket closes at 1 MiB (``dist._DEFAULT_FIRST_BUCKET_BYTES``) when ``bucket_cap_mb`` is
   left at its default, the others at ``bucket_cap_mb``. The buckets are then reversed:
   backward produces the last layers' gradients first.
3. A hook on each parameter's ``AccumulateGrad`` (``register_post_accumulate_grad_hook``)
   copies the gradient, times 1/world_size, into its bucket's flat buffer (torch divides
   while copying, to save a pass). When a bucket is full and all buckets before it have been
   launched, its all-reduce is launched with ``async_op=True`` and backward carries on: the
   communication overlaps the rest of backward. ``timeline`` records, per backward, when each
   gradient arrived and each bucket's all-reduce started, in seconds after the forward ended.
4. ``finalize_backward`` runs once backward is done (queued on the autograd engine with
   ``queue_callback``, as reducer.cpp does): it waits for the all-reduces and copies each
   bucket back into the ``.grad``s.

``overlap=False`` (not in torch: a baseline for the timeline and the benchmark) holds every
all-reduce back until the last gradient has arrived.

``no_sync()`` skips steps 3-4 (gradients accumulate locally) for the forwards run inside it.
``find_unused_parameters=True`` walks the autograd graph from the forward's outputs: the
parameters it does not reach are marked ready (zeros in their bucket) at the first hook, and
a parameter unused on every rank keeps its ``.grad`` untouched. Without it, a parameter that
gets no gradient leaves its bucket unreduced and the next forward raises torch's error.

5. Rebuilding (``Reducer::rebuild_buckets``): while ``find_unused_parameters`` is False, the
   first backward records the order in which gradients became ready; the next forward
   (``_rebuild_buckets``, called from torch's ``_pre_forward``) assigns the buckets again, in
   that order (limits: the first bucket's bytes, then ``bucket_cap_mb``), takes rank 0's
   assignment on every rank (``sync_bucket_indices``) and never rebuilds again. With
   ``find_unused_parameters=True`` the construction-time buckets are kept.

6. ``register_comm_hook(state, hook)``: the bucket's reduction is the hook's, as in torch:
   the gradients are copied into the bucket undivided, ``hook(state, GradBucket)`` returns a
   future of the reduced buffer, and ``finalize_backward`` copies its value back
   (retorch.distributed.algorithms.ddp_comm_hooks: the all-reduce and float16 hooks).

Differences from torch 2.13: buffers are broadcast once at construction (torch re-broadcasts
them every forward); ``gradient_as_bucket_view``, static graphs and mixed precision are left
out.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator, Sequence

import torch
import torch.distributed as dist

from ..modules.module import Module

__all__ = [
    "DistributedDataParallel",
    "bucket_size_limits",
    "compute_bucket_assignment_by_size",
]

DEFAULT_BUCKET_CAP_MB = 25
DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024  # dist._DEFAULT_FIRST_BUCKET_BYTES


def compute_bucket_assignment_by_size(
    tensors: Sequence[torch.Tensor],
    bucket_size_limits: Sequence[int],
    tensor_indices: Sequence[int] = (),
) -> tuple[list[list[int]], list[int]]:
    """Group tensors into buckets by size; the rule of reducer.cpp's function of that name.

    Tensors of one (dtype, device) fill one bucket at a time; a bucket closes as soon as its
    bytes reach the current limit, and each (dtype, device) then moves on to the next limit in
    ``bucket_size_limits`` (the last one repeats). Returns the buckets' tensor indices, sorted
    by their smallest index unless ``tensor_indices`` gave an order, and each bucket's limit.
    """
    result: list[tuple[list[int], int]] = []
    open_buckets: dict[tuple, tuple[list[int], int]] = {}  # key -> (indices, bytes)
    limit_index: dict[tuple, int] = {}
    for i, t in enumerate(tensors):
        index = tensor_indices[i] if tensor_indices else i
        key = (t.dtype, t.device)
        indices, size = open_buckets.get(key, ([], 0))
        indices.append(index)
        size += t.numel() * t.element_size()
        limit = bucket_size_limits[limit_index.setdefault(key, 0)]
        if size >= limit:
            result.append((indices, limit))
            indices, size = [], 0
            limit_index[key] = min(limit_index[key] + 1, len(bucket_size_limits) - 1)
        open_buckets[key] = (indices, size)
    for key, (indices, _) in open_buckets.items():
        if indices:
            result.append((indices, bucket_size_limits[limit_index[key]]))
    if not tensor_indices:
        result.sort(key=lambda b: min(b[0]))
    return [b[0] for b in result], [b[1] for b in result]


def bucket_size_limits(
    find_unused_parameters: bool, first_bucket_bytes: int, bucket_bytes_cap: int
) -> list[int]:
    """The limits of the buckets made at construction: torch's
    ``_BucketCapacityConfig.compute_bucket_size_limits`` (torch/nn/parallel/distributed.py).

    Without ``find_unused_parameters`` one bucket holds every parameter until the rebuild.
    """
    if not find_unused_parameters:
        return [sys.maxsize]
    if first_bucket_bytes < bucket_bytes_cap:
        return [first_bucket_bytes, bucket_bytes_cap]
    return [bucket_bytes_cap]


class _Bucket:
    """One flat buffer per bucket and where each of its parameters sits in it."""

    def __init__(self, index: int, params: list[torch.Tensor], param_indices: list[int]):
        self.index = index
        self.param_indices = param_indices
        self.buffer = torch.zeros(sum(p.numel() for p in params), dtype=params[0].dtype)
        offsets = [0]
        for p in params:
            offsets.append(offsets[-1] + p.numel())
        self.views = [self.buffer[a:b].view_as(p) for a, b, p in zip(offsets, offsets[1:], params)]
        self.pending = len(params)
        self.work = None


class GradBucket:
    """What a comm hook sees of a bucket (torch's ``dist.GradBucket``): its flat buffer,
    index, parameters and their gradients' views, and whether it is the last."""

    def __init__(self, bucket: _Bucket, params: list[torch.Tensor], last: bool) -> None:
        self._bucket, self._params, self._last = bucket, params, last

    def index(self) -> int:
        return self._bucket.index

    def buffer(self) -> torch.Tensor:
        return self._bucket.buffer

    def is_last(self) -> bool:
        return self._last

    def parameters(self) -> list[torch.Tensor]:
        return [self._params[i] for i in self._bucket.param_indices]

    def gradients(self) -> list[torch.Tensor]:
        return list(self._bucket.views)


class Reducer:
    """Buckets, autograd hooks and the all-reduces of one backward (reducer.cpp)."""

    def __init__(
        self,
        params: list[torch.Tensor],
        bucket_indices: list[list[int]],
        process_group,
        find_unused_parameters: bool,
        overlap: bool = True,
        bucket_bytes_cap: int = DEFAULT_BUCKET_CAP_MB * 1024 * 1024,
        first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES,
    ):
        self.params = params
        self.overlap = overlap
        self.process_group = process_group
        self.world_size = dist.get_world_size(process_group)
        self.find_unused_parameters = find_unused_parameters
        self.bucket_bytes_cap, self.first_bucket_bytes = bucket_bytes_cap, first_bucket_bytes
        self.has_rebuilt_bucket = False
        self.rebuilt_param_indices: list[int] = []  # gradients' arrival order, first backward
        self._initialize_buckets(bucket_indices)
        self.expect_autograd_hooks = False
        self.require_finalize = False
        self.unused: list[int] = []
        self.timeline: list[tuple[str, int, float]] = []
        self.comm_hook = None  # (state, hook) once register_comm_hook is called
        self.hooks = [
            p.register_post_accumulate_grad_hook(self._autograd_hook_for(i))
            for i, p in enumerate(params)
        ]

    def _initialize_buckets(self, bucket_indices: list[list[int]]) -> None:
        """One flat buffer per bucket, in launch order; ``locators`` (reducer.cpp's
        ``variable_locators_``) maps a parameter index to its bucket and position."""
        params = self.params
        self.buckets = [
            _Bucket(b, [params[i] for i in idx], list(idx)) for b, idx in enumerate(bucket_indices)
        ]
        self.locators = {
            i: (bucket, k) for bucket in self.buckets for k, i in enumerate(bucket.param_indices)
        }

    def should_rebuild_buckets(self) -> bool:
        return not self.find_unused_parameters and not self.has_rebuilt_bucket

    def rebuild_buckets(self) -> bool:
        """Reassign the buckets in the order the first backward produced the gradients
        (``Reducer::rebuild_buckets``); called by the next forward. True if it rebuilt."""
        self.ensure_prior_reduction_finished()
        if not self.should_rebuild_buckets() or not self.rebuilt_param_indices:
            return False
        order = self.rebuilt_param_indices
        if sorted(order) != list(range(len(self.params))):
            raise RuntimeError(
                f"rebuilt parameter indices size is not same as original model parameters "
                f"size. Original model param size is: {len(self.params)} versus rebuilt params "
                f"size of: {len(order)}"
            )
        limits = [self.first_bucket_bytes, self.bucket_bytes_cap]
        indices, _ = compute_bucket_assignment_by_size(
            [self.params[i] for i in order], limits, order
        )
        self._initialize_buckets(self._sync_bucket_indices(indices))
        self.has_rebuilt_bucket = True
        self.rebuilt_bucket_indices = [list(b.param_indices) for b in self.buckets]
        self.rebuilt_param_indices = []
        return True

    def _sync_bucket_indices(self, indices: list[list[int]]) -> list[list[int]]:
        """Every rank takes rank 0's assignment (reducer.cpp's ``sync_bucket_indices``: the
        indices, then each bucket's length, then the number of buckets, in one tensor)."""
        flat = [i for b in indices for i in b] + [len(b) for b in indices] + [len(indices)]
        message = torch.tensor(flat, dtype=torch.int64)
        src = 0 if self.process_group is None else dist.get_global_rank(self.process_group, 0)
        dist.broadcast(message, src=src, group=self.process_group)
        values = message.tolist()
        n = values[-1]
        lengths, start, synced = values[-1 - n : -1], 0, []
        for length in lengths:
            synced.append(values[start : start + length])
            start += length
        return synced

    def prepare_for_backward(self, outputs: Sequence[torch.Tensor]) -> None:
        """Reset the buckets for the coming backward; find the unused parameters."""
        self.expect_autograd_hooks = True
        self.next_bucket = 0
        self.has_marked_unused_parameters = False
        self.local_used = torch.zeros(len(self.params), dtype=torch.int32)
        for bucket in self.buckets:
            bucket.pending, bucket.work = len(bucket.param_indices), None
        self.unused = self._find_unused(outputs) if self.find_unused_parameters else []
        self.t0 = time.perf_counter()
        self.timeline = []

    def _find_unused(self, outputs: Sequence[torch.Tensor]) -> list[int]:
        seen, stack, reached = set(), [t.grad_fn for t in outputs if t.grad_fn], set()
        while stack:
            fn = stack.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            if hasattr(fn, "variable"):  # an AccumulateGrad node: a leaf reached
                reached.add(id(fn.variable))
            stack.extend(next_fn for next_fn, _ in fn.next_functions)
        reached |= {id(t) for t in outputs if t.grad_fn is None}
        return [i for i, p in enumerate(self.params) if id(p) not in reached]

    def _autograd_hook_for(self, index: int):
        def hook(param: torch.Tensor) -> None:
            if not self.expect_autograd_hooks:  # no_sync(), or a forward without grad
                return
            if not self.has_marked_unused_parameters:
                self.has_marked_unused_parameters = True
                for i in self.unused:
                    self._mark_variable_ready(i)
            self.local_used[index] = 1
            self._mark_variable_ready(index)

        return hook

    def _mark_variable_ready(self, index: int) -> None:
        # Once a gradient is marked ready, finalize_backward must run before the next forward.
        self.require_finalize = True
        if self.should_rebuild_buckets():
            self.rebuilt_param_indices.append(index)  # push_rebuilt_params
        bucket, k = self.locators[index]
        grad = self.params[index].grad
        self.timeline.append(("grad", index, time.perf_counter() - self.t0))
        if grad is None or index in self.unused:
            bucket.views[k].zero_()
        elif self.comm_hook is None:
            torch.mul(grad, 1.0 / self.world_size, out=bucket.views[k])
        else:  # a comm hook divides (or not) itself
            bucket.views[k].copy_(grad)
        bucket.pending -= 1
        if bucket.pending == 0:
            self._mark_bucket_ready()

    def _mark_bucket_ready(self) -> None:
        if not self.overlap and any(b.pending for b in self.buckets):
            return  # the baseline without overlap: launch every bucket once backward is done
        # Buckets are launched in order, so every rank issues the same all-reduces in the
        # same sequence even if gradients arrive in another order.
        while self.next_bucket < len(self.buckets) and self.buckets[self.next_bucket].pending == 0:
            bucket = self.buckets[self.next_bucket]
            self.timeline.append(("allreduce", bucket.index, time.perf_counter() - self.t0))
            if self.comm_hook is None:
                bucket.work = dist.all_reduce(bucket.buffer, group=self.process_group,
                                              async_op=True)  # fmt: skip
            else:
                state, hook = self.comm_hook
                last = bucket.index == len(self.buckets) - 1
                bucket.work = hook(state, GradBucket(bucket, self.params, last))
            self.next_bucket += 1
        if self.next_bucket == len(self.buckets):
            torch.autograd.Variable._execution_engine.queue_callback(self.finalize_backward)

    def finalize_backward(self) -> None:
        """Wait for every bucket's all-reduce and write the averaged gradients back."""
        self.expect_autograd_hooks = False
        self.require_finalize = False
        globally_used = None
        if self.find_unused_parameters:
            dist.all_reduce(self.local_used, group=self.process_group)
            globally_used = self.local_used > 0
        for bucket in self.buckets:
            reduced = bucket.work.wait()
            if self.comm_hook is not None:  # the hook's future holds the reduced buffer
                bucket.buffer.copy_(reduced[0] if isinstance(reduced, list) else reduced)
            for k, i in enumerate(bucket.param_indices):
                if globally_used is not None and not globally_used[i]:
                    continue  # unused on every rank: its grad stays as it was
                p = self.params[i]
                if p.grad is None:
                    p.grad = bucket.views[k].clone()
                else:
                    p.grad.copy_(bucket.views[k])
        self.timeline.append(("finalize", -1, time.perf_counter() - self.t0))

    def ensure_prior_reduction_finished(self) -> None:
        if not self.require_finalize:
            return
        missing = [i for i, p in enumerate(self.params) if not self._was_ready(i)]
        rank = dist.get_rank(self.process_group)
        raise RuntimeError(
            "Expected to have finished reduction in the prior iteration before starting a new "
            "one. This error indicates that your module has parameters that were not used in "
            "producing loss. You can enable unused parameter detection by passing the keyword "
            "argument `find_unused_parameters=True` to "
            "`retorch.nn.parallel.DistributedDataParallel`, and by \nmaking sure all `forward` "
            "function outputs participate in calculating loss. \nIf you already have done the "
            "above, then the distributed data parallel module wasn't able to locate the output "
            "tensors in the return value of your module's `forward` function. Please include "
            "the loss function and the structure of the return value of `forward` of your "
            "module when reporting this issue (e.g. list, dict, iterable).\nParameter indices "
            f"which did not receive grad for rank {rank}: {' '.join(map(str, missing))}"
        )

    def _was_ready(self, index: int) -> bool:
        return bool(self.local_used[index]) or index in self.unused


class DistributedDataParallel(Module):
    """Data parallelism: one replica per process, gradients averaged in buckets during backward.

    Mirrors ``torch.nn.parallel.DistributedDataParallel`` (see the module docstring).
    """

    def __init__(
        self,
        module: Module,
        process_group=None,
        bucket_cap_mb: float | None = None,
        find_unused_parameters: bool = False,
        overlap: bool = True,
    ):
        super().__init__()
        self.module = module
        self.process_group = process_group
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = True
        params = [p for _, p in module.named_parameters() if p.requires_grad]
        self._sync_module_states(params + list(module.buffers()))
        cap = DEFAULT_BUCKET_CAP_MB if bucket_cap_mb is None else bucket_cap_mb
        self.bucket_bytes_cap = int(cap * 1024 * 1024)
        first = DEFAULT_FIRST_BUCKET_BYTES if bucket_cap_mb is None else self.bucket_bytes_cap
        limits = bucket_size_limits(find_unused_parameters, first, self.bucket_bytes_cap)
        self.bucket_indices, _ = compute_bucket_assignment_by_size(params, limits)
        self._has_rebuilt_buckets = False
        self.reducer = Reducer(
            params,
            list(reversed(self.bucket_indices)),
            process_group,
            find_unused_parameters,
            overlap,
            self.bucket_bytes_cap,
            first,
        )

    @torch.no_grad()
    def _sync_module_states(self, tensors: list[torch.Tensor]) -> None:
        """Broadcast rank 0's parameters and buffers, as one flat message per dtype."""
        src = 0 if self.process_group is None else dist.get_global_rank(self.process_group, 0)
        for dtype in dict.fromkeys(t.dtype for t in tensors):
            group = [t for t in tensors if t.dtype == dtype]
            flat = torch.cat([t.detach().reshape(-1) for t in group])
            dist.broadcast(flat, src=src, group=self.process_group)
            for t, piece in zip(group, flat.split([t.numel() for t in group])):
                t.copy_(piece.view_as(t))

    def _get_ddp_logging_data(self) -> dict:
        """The bucket entries of torch's ``_get_ddp_logging_data()`` (logger.cpp), formatted
        as torch formats them: bytes per bucket at construction, in launch order, and after
        the rebuild the buckets' bytes and parameter indices. (torch's logger samples these at
        a forward, so it shows the rebuild one iteration later than it happens.)"""

        def sizes(buckets):
            return ", ".join(str(sum(self.reducer.params[i].nbytes for i in b)) for b in buckets)

        data = {
            "bucket_sizes": sizes(reversed(self.bucket_indices)),
            "has_rebuilt_buckets": int(self.reducer.has_rebuilt_bucket),
        }
        if self.reducer.has_rebuilt_bucket:
            rebuilt = self.reducer.rebuilt_bucket_indices
            data["rebuilt_bucket_sizes"] = sizes(rebuilt)
            data["rebuilt_per_bucket_param_indices"] = ", ".join(
                " ".join(map(str, b)) for b in rebuilt
            )
        return data

    @property
    def timeline(self) -> list[tuple[str, int, float]]:
        """The last backward's events: ("grad", param index, t), ("allreduce", bucket, t),
        ("finalize", -1, t); t in seconds after the forward ended."""
        return self.reducer.timeline

    def forward(self, *args, **kwargs):
        # torch's _pre_forward: rebuild once, before the forward's activations take memory.
        if torch.is_grad_enabled() and self.reducer.rebuild_buckets():
            self._has_rebuilt_buckets = True
        self.reducer.ensure_prior_reduction_finished()
        output = self.module(*args, **kwargs)
        if torch.is_grad_enabled() and self.require_backward_grad_sync:
            outputs = [t for t in _tensors(output) if t.requires_grad]
            self.reducer.prepare_for_backward(outputs)
        return output

    def register_comm_hook(self, state, hook) -> None:
        """Reduce each bucket with ``hook(state, bucket) -> Future[Tensor]`` (torch's API)."""
        if self.reducer.comm_hook is not None:
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be "
                               "called once.")  # fmt: skip
        self.reducer.comm_hook = (state, hook)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally in the forwards run inside the block; the first
        forward-backward after it reduces the accumulated gradients."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old


def _tensors(obj) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)

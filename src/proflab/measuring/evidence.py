"""Where evidence is measured: figures read from a Chrome trace file.

The trace that ``tensorboard_trace_handler`` writes is JSON: a list of events,
each with a name, a category, a start ``ts`` and a duration ``dur`` in
microseconds. ``ProfilerStep#N`` events span one training step each; every
figure here is taken inside those steps, per step, so traces with different
numbers of profiled steps compare fairly.

Each metric is a function from a loaded trace to a ``Measure``; a lab's
manifest names the one that proves its fix.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .trace import (DATALOADER_PREFIX, DEVICE_CATEGORIES, Event, Measure, Trace, TraceError,  # noqa: F401
                    from_data, load)
from .trace import outermost as _outermost
from .trace import union_length as _union_length


def dataloader_wait(trace: Trace) -> Measure:
    """Time per step the training loop spends inside ``DataLoader.__next__``."""
    steps = trace.steps
    step_us = sum(s.dur for s in steps)
    waits = []
    for s in steps:
        inside = [(max(e.ts, s.ts), min(e.end, s.end)) for e in trace.events
                  if e.name.startswith(DATALOADER_PREFIX) and e.ts < s.end and e.end > s.ts]
        waits.append(_union_length(inside))
    wait_us = sum(waits)
    share = wait_us / step_us if step_us else 0.0
    per_step_ms = wait_us / len(steps) / 1000.0
    return Measure(
        value=per_step_ms,
        unit="ms",
        summary=f"{share:.0%} of each step ({per_step_ms:.1f} ms of {step_us / len(steps) / 1000.0:.1f} ms)",
        details={"share": share, "wait_ms_per_step": per_step_ms, "step_ms": step_us / len(steps) / 1000.0,
                 "steps": float(len(steps))},
    )


INDEXING_OPS = frozenset({
    "aten::select", "aten::index", "aten::index_select", "aten::gather", "aten::take",
    "aten::embedding", "aten::embedding_bag", "aten::_embedding_bag", "aten::_embedding_bag_forward_only",
    # a row taken as a slice is a lookup too
    "aten::slice", "aten::narrow",
})
# Operators that cut a tensor into many views at once (``list(t)``, ``t.unbind()``, ``t.split(1)``):
# each view they make is one row looked up, however many the program then uses.
SPLITTING_OPS = frozenset({
    "aten::unbind", "aten::split", "aten::split_with_sizes", "aten::unsafe_split", "aten::chunk",
    "aten::unsafe_chunk", "aten::tensor_split",
})
ROW_VIEWS = frozenset({"aten::select", "aten::narrow"})


def indexing_ops(trace: Trace) -> Measure:
    """Row lookups per step: indexing operators on the host, plus host-to-device copies on CUDA.

    Counted on the host: every ``cpu_op`` event named in ``INDEXING_OPS`` that
    starts inside a ``ProfilerStep#``, however the lookup is spelled.
    ``tensor[i]`` with an integer runs one ``aten::select``; ``tensor[i:i + 1]``
    one ``aten::slice``; ``tensor.narrow(0, i, 1)`` one ``aten::narrow``;
    ``tensor[ids]`` one ``aten::index``; an ``nn.Embedding`` call one
    ``aten::embedding``; an ``nn.EmbeddingBag`` call one
    ``aten::embedding_bag``. Only the calls the program makes count, not what
    an operator runs inside itself: the ``aten::index_select`` that
    ``aten::embedding`` runs is the same lookup, not a second one, and the
    slices inside ``aten::mean`` are none. An operator that cuts a tensor into views
    (``SPLITTING_OPS``: ``list(t)``, ``t.unbind()``, ``t.split(1)``) counts
    once for each view it makes (the ``aten::select`` or ``aten::narrow`` it
    runs inside itself for each): a table cut into rows is looked up row by
    row, whichever of them the program then uses.

    Counted on CUDA: every ``gpu_memcpy`` event with ``HtoD`` in its name that
    starts inside a step. Copying ids to the device costs one copy per tensor;
    copying each looked-up row or pooled vector costs one per row.

    The value is the sum of both, per step, averaged over the profiled steps.
    """
    steps = trace.steps
    n = len(steps)
    # The calls the program made itself: the outermost operators, of any kind (a slice an operator takes
    # inside itself, as aten::mean or aten::embedding do, is its own business, not a lookup).
    ops = trace.within_steps(lambda e: e.cat == "cpu_op" and e.name.startswith("aten::"))
    lookups = [e for e in _outermost(ops) if e.name in INDEXING_OPS | SPLITTING_OPS]
    copies = trace.within_steps(lambda e: e.cat == "gpu_memcpy" and "HtoD" in e.name)
    on_cuda = trace.on_cuda

    views: dict[tuple[str, str], list[float]] = {}  # each thread's row views, by start
    for v in ops:
        if v.name in ROW_VIEWS:
            views.setdefault((str(v.pid), str(v.tid)), []).append(v.ts)
    for starts in views.values():
        starts.sort()
    counts: dict[str, int] = {}
    for e in lookups:
        made = 1
        if e.name in SPLITTING_OPS:  # one lookup for each row view it makes inside itself
            starts = views.get((str(e.pid), str(e.tid)), [])
            made = max(1, bisect.bisect_left(starts, e.end) - bisect.bisect_left(starts, e.ts))
        counts[e.name] = counts.get(e.name, 0) + made
    by_name = {name: count / n for name, count in counts.items()}
    per_step = sum(counts.values()) / n
    copies_per_step = len(copies) / n
    value = round(per_step + copies_per_step, 1)
    names = ", ".join(f"{count:.0f} {name}" for name, count in sorted(by_name.items(), key=lambda kv: -kv[1]))
    summary = f"{per_step:.0f} indexing ops per step ({names or 'none'})"
    if on_cuda:
        summary += f" and {copies_per_step:.0f} host-to-device copies"
    return Measure(
        value=value,
        unit="ops",
        summary=summary,
        details={"indexing_ops_per_step": per_step, "htod_copies_per_step": copies_per_step,
                 "steps": float(n), **by_name},
    )


# Operators that only make a new view of a tensor's memory (or detach it): no
# arithmetic, no kernel. op_count leaves them out, with everything they run.
VIEW_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias", "aten::t", "aten::transpose",
    "aten::permute", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::select", "aten::slice",
    "aten::unbind", "aten::split", "aten::as_strided", "aten::alias", "aten::detach", "aten::detach_",
    "aten::lift_fresh", "aten::numpy_T", "aten::contiguous",
})


def op_count(trace: Trace) -> Measure:
    """Operators per step: outermost ``aten::`` operators on the host, or kernels on CUDA.

    On CPU: every ``cpu_op`` event whose name starts with ``aten::`` and that
    starts inside a ``ProfilerStep#``, counted only if it is the outermost
    ``aten::`` operator on its thread and not one of ``VIEW_OPS`` (a view or a
    detach does no arithmetic; it is left out with whatever it runs inside). ``aten::linear`` counts once, not again
    for the ``aten::addmm`` it runs inside itself; the operators the backward
    pass runs count too (they sit under ``autograd::engine`` events, which are
    not ``aten::``). A hand-written softmax is five or six of them, forward,
    and as many again backward; ``F.softmax`` is one each way. Code compiled
    by ``torch.compile`` runs Inductor's generated loops, which are not
    ``aten::`` operators: only the operators it still calls (matrix products,
    for instance) are counted.

    On CUDA (the trace holds GPU events): the kernel launches the host makes
    inside a step (``cudaLaunchKernel`` and friends in the CUDA runtime and
    driver lanes; Triton kernels from ``torch.compile`` are launched through
    the driver). Launches are counted rather than the kernels themselves
    because a kernel runs later than its launch, often after its step's range
    on the host has closed. Each unfused operator launches at least one
    kernel; a fused one launches one for the whole chain.

    The value is the count per step, averaged over the profiled steps.
    """
    steps = trace.steps
    n = len(steps)
    on_cuda = trace.on_cuda
    if on_cuda:
        counted = trace.within_steps(lambda e: e.cat in ("cuda_runtime", "cuda_driver") and "LaunchKernel" in e.name)
    else:
        outermost = _outermost(trace.within_steps(lambda e: e.cat == "cpu_op" and e.name.startswith("aten::")))
        counted = [e for e in outermost if e.name not in VIEW_OPS]
    counts: dict[str, int] = {}
    for e in counted:
        counts[e.name] = counts.get(e.name, 0) + 1
    by_name = {name: count / n for name, count in counts.items()}
    per_step = len(counted) / n
    top = sorted(by_name.items(), key=lambda kv: -kv[1])
    names = ", ".join(f"{count:.0f} {name}" for name, count in top[:4])
    what = "kernel launches" if on_cuda else "aten ops"
    summary = f"{per_step:.0f} {what} per step" + (f" (most: {names})" if names else "")
    details = {"ops_per_step": per_step, "steps": float(n), **(dict(top[:12]) if not on_cuda else {})}
    return Measure(value=round(per_step, 1), unit="ops", summary=summary, details=details)


# Matrix products: the work every version of a block keeps, fused or not.
MATMUL_OPS = frozenset({"aten::mm", "aten::bmm", "aten::matmul", "aten::addmm", "aten::baddbmm", "aten::linear"})


def _numel(dims: Any) -> float:
    if not isinstance(dims, list) or not dims or not all(isinstance(d, int) for d in dims):
        return 0.0
    out = 1.0
    for d in dims:
        out *= d
    return out


def elementwise_traffic(trace: Trace) -> Measure:
    """Elements read per step by the operators that are not matrix products: what fusing removes.

    An unfused chain (a softmax written as max, subtract, exp, sum, divide)
    reads and writes a whole tensor at every operator, forward and backward,
    for a little arithmetic each time; a fused built-in (``F.softmax``,
    ``F.layer_norm``, ``F.scaled_dot_product_attention``) reads its inputs once.
    Counted from the shapes the profiler recorded (``record_shapes``): for every
    outermost ``aten::`` operator inside a ``ProfilerStep#``, on any thread, the
    number of elements of each tensor it takes, leaving out views
    (``VIEW_OPS``), which read nothing, and matrix products (``MATMUL_OPS``),
    which every version keeps. Code that ``torch.compile`` generates runs
    outside ``aten::`` operators and reads nothing here. So the figure weighs
    each chain by the size of the tensors it walks over: the attention scores'
    chain on (batch × heads × T × T) elements outweighs a LayerNorm's on
    (batch × T × D). Also on CUDA, where the same operators launch the kernels.
    """
    steps = trace.steps
    n = len(steps)
    outermost = _outermost(trace.within_steps(lambda e: e.cat == "cpu_op" and e.name.startswith("aten::")))
    by_name: dict[str, float] = {}
    for e in outermost:
        if e.name in VIEW_OPS or e.name in MATMUL_OPS:
            continue
        read = sum(_numel(d) for d in (e.args or {}).get("Input Dims") or [])
        by_name[e.name] = by_name.get(e.name, 0.0) + read
    per_step = sum(by_name.values()) / n if n else 0.0
    top = sorted(((name, v / n) for name, v in by_name.items()), key=lambda kv: -kv[1])
    names = ", ".join(f"{name} {v / 1e6:.1f}M" for name, v in top[:3])
    return Measure(value=round(per_step / 1e6, 2), unit="M elements",
                   summary=f"{per_step / 1e6:.1f} M elements read per step outside matrix products"
                           + (f" (most: {names})" if names else ""),
                   details={"elements_per_step": per_step, "steps": float(n),
                            **{name: v for name, v in top[:12]}})


# CUDA runtime and driver calls that block the host until the device catches up.
SYNC_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH_v2",
})
# On the host, the operators that read a tensor's values into Python.
HOST_READS = {
    "aten::_local_scalar_dense": "item()",  # .item(), float(t), int(t), bool(t), `if t:`, f"{t:.3f}", repr(t)
    "aten::resolve_neg": "tolist()",  # .tolist() and .numpy() resolve the negation bit first
}
# Operators whose output's size depends on the values in their input: the host must read those values
# (on CUDA, wait for the device) before it knows the size, whether or not Python ever reads a number.
# x[mask], torch.where(mask), argwhere and .nonzero() all run aten::nonzero; torch.equal answers a Python
# bool. (masked_select and repeat_interleave without output_size read their size through
# aten::_local_scalar_dense, counted above; nonzero_static and repeat_interleave with output_size do not
# depend on the values.)
SIZE_READS = {
    "aten::nonzero": "nonzero()",
    "aten::_unique": "unique()", "aten::_unique2": "unique()", "aten::unique_dim": "unique()",
    "aten::unique_consecutive": "unique()", "aten::unique_dim_consecutive": "unique()",
    "aten::equal": "torch.equal()",
}


@dataclass(frozen=True)
class HostReads:
    """Host reads per step by what made them (``.item()``, ``cudaStreamSynchronize``…), apart: those of the
    training step, and those inside data loading (a DataLoader's ``__next__``: the data set's own code,
    its collate), which the step's code did not make and which, on CPU, wait for no device."""

    in_step: dict[str, float]
    in_loading: dict[str, float]
    copies_per_step: float  # device-to-host copies (CUDA)

    @property
    def in_step_per_step(self) -> float:
        return round(sum(self.in_step.values()), 2)

    @property
    def in_loading_per_step(self) -> float:
        return round(sum(self.in_loading.values()), 2)


def counts_text(by_name: dict[str, float]) -> str:
    """Reads per step by what made them, most first: ``3 tolist(), 2 item()``."""
    return ", ".join(f"{count:g} {name}" for name, count in sorted(by_name.items(), key=lambda kv: -kv[1]))


def host_reads(trace: Trace) -> HostReads:
    """Each time Python waits for a tensor's value, per step, and where (see :func:`host_syncs`)."""
    n = len(trace.steps)
    if trace.on_cuda:
        reads = [(e, e.name) for e in trace.within_steps(
            lambda e: e.cat in ("cuda_runtime", "cuda_driver") and e.name in SYNC_CALLS)]
        copies = len(trace.within_steps(lambda e: e.cat == "gpu_memcpy" and "DtoH" in e.name))
    else:
        aten = trace.within_steps(lambda e: e.cat == "cpu_op" and e.name.startswith("aten::"))
        found = [e for e in aten if e.name == "aten::_local_scalar_dense"]  # always inside aten::item & co.
        found += [e for e in _outermost(aten) if e.name == "aten::resolve_neg"]
        found += _outermost([e for e in aten if e.name in SIZE_READS])
        reads = [(e, HOST_READS.get(e.name) or SIZE_READS[e.name]) for e in found]
        copies = 0
    loading: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for e in trace.events:
        if e.name.startswith(DATALOADER_PREFIX):
            loading.setdefault((str(e.pid), str(e.tid)), []).append((e.ts, e.end))
    in_step: dict[str, int] = {}
    in_loading: dict[str, int] = {}
    for e, what in reads:
        inside = any(start <= e.ts < end for start, end in loading.get((str(e.pid), str(e.tid)), ()))
        counts = in_loading if inside else in_step
        counts[what] = counts.get(what, 0) + 1
    return HostReads({k: v / n for k, v in in_step.items()}, {k: v / n for k, v in in_loading.items()}, copies / n)


def host_syncs(trace: Trace) -> Measure:
    """Round trips to the host per step: each time Python waits for a tensor's value.

    On CUDA (the trace holds GPU events): the runtime and driver calls that
    block the host until the device has caught up (``SYNC_CALLS``):
    ``cudaStreamSynchronize`` behind every ``.item()``, ``.cpu()`` and
    ``.tolist()``, ``cudaDeviceSynchronize`` behind ``torch.cuda.synchronize()``.
    The device-to-host copies are reported beside them.

    On CPU there is no device to wait for, but the same lines still read
    tensors into Python, and the work done there on Python numbers is what
    costs: each ``aten::_local_scalar_dense`` (under ``aten::item`` for
    ``.item()``, ``float(t)``, ``if t:``, a tensor formatted or printed) and
    each outermost ``aten::resolve_neg`` (the first thing ``.tolist()`` and
    ``.numpy()`` do) counts once; so does each outermost operator whose
    output's size depends on values (``SIZE_READS``: ``.nonzero()``,
    ``x[mask]``, ``torch.where(mask)``, ``unique``; ``torch.equal``), which on
    CUDA waits for the device as ``.item()`` does: a read spelled as a shape
    is still a read.

    Every read counts, wherever in the step it is made (a read moved into a data set's code is still made
    once per step); ``details["in_data_loading"]`` says how many were inside data loading.
    """
    reads = host_reads(trace)
    by_name = dict(reads.in_step)
    for name, count in reads.in_loading.items():
        by_name[name] = by_name.get(name, 0) + count
    per_step = sum(by_name.values())
    summary = f"{per_step:.2g} round trips per step ({counts_text(by_name) or 'none'})"
    if reads.in_loading:
        summary += f", {reads.in_loading_per_step:g} of them inside data loading"
    if trace.on_cuda:
        summary += f"; {reads.copies_per_step:.2g} device-to-host copies per step"
    return Measure(value=round(per_step, 2), unit="per step", summary=summary,
                   details={"round_trips_per_step": per_step, "dtoh_copies_per_step": reads.copies_per_step,
                            "steps": float(len(trace.steps)), "in_data_loading": reads.in_loading_per_step,
                            **by_name})


def _product(values: list[Any]) -> float:
    out = 1.0
    for v in values:
        out *= float(v)
    return out


def _strides(event: Event, position: int) -> list[int]:
    """An integer list among an operator's concrete inputs (``'[2, 2]'``), or [1, 1]."""
    try:
        text = (event.args or {}).get("Concrete Inputs", [])[position]
        values = [int(v) for v in str(text).strip("[]").split(",") if v.strip()]
        return values or [1, 1]
    except (IndexError, ValueError, TypeError):
        return [1, 1]


def flops(event: Event) -> float:
    """Floating-point operations of one matrix product or convolution, from the shapes the profiler recorded.

    ``aten::mm`` of (m×k)·(k×n) is 2·m·k·n; ``aten::addmm`` and ``aten::baddbmm``
    take their matrices second and third; ``aten::bmm`` adds the batch.
    ``aten::convolution`` is 2 × every output element × the kernel's
    input-channel·height·width; ``aten::convolution_backward`` twice that (the
    gradients of the input and of the weight). 0 for any other operator, for
    a product with a sparse operand (the trace gives it no strides: its dense
    shape says nothing of the work done), or when the trace holds no shapes
    (``record_shapes`` off).
    """
    dims = (event.args or {}).get("Input Dims") or []
    strides = (event.args or {}).get("Input Strides") or []
    if any(isinstance(d, list) and d and not (i < len(strides) and strides[i]) for i, d in enumerate(dims)):
        return 0.0  # an operand without strides is sparse: its dense size says nothing of the work
    try:
        if event.name == "aten::mm":
            (m, k), (_, n) = dims[0], dims[1]
            return 2.0 * m * k * n
        if event.name == "aten::addmm":
            (m, k), (_, n) = dims[1], dims[2]
            return 2.0 * m * k * n
        if event.name == "aten::bmm":
            (b, m, k), (_, _, n) = dims[0], dims[1]
            return 2.0 * b * m * k * n
        if event.name == "aten::baddbmm":
            (b, m, k), (_, _, n) = dims[1], dims[2]
            return 2.0 * b * m * k * n
        if event.name == "aten::convolution":
            x, w = dims[0], dims[1]
            out_positions = _product(x[2:]) / _product(_strides(event, 3)[: len(x) - 2])
            return 2.0 * x[0] * w[0] * out_positions * _product(w[1:])
        if event.name == "aten::convolution_backward":
            grad, w = dims[0], dims[2]
            return 4.0 * grad[0] * grad[1] * _product(grad[2:]) * _product(w[1:])
    except (IndexError, TypeError, ValueError):
        return 0.0
    return 0.0


def work_flops(trace: Trace, ops: tuple[str, ...]) -> Measure:
    """The work a profiled step does, by size: FLOPs per step of the operators in ``ops``, at any depth.

    Counted from the shapes of every call inside a ``ProfilerStep#``, on any
    thread, so that throw-away calls on tiny inputs do not add up to a step's
    work, whatever their number. Matrix products that ``torch.compile``'s code
    calls are ``aten::mm``/``aten::addmm`` too, and count.
    """
    n = len(trace.steps)
    wanted = set(ops)
    calls = trace.within_steps(lambda e: e.cat == "cpu_op" and e.name in wanted)
    total = sum(flops(e) for e in calls)
    per_step = total / n if n else 0.0
    return Measure(value=per_step, unit="FLOPs", summary=f"{per_step / 1e6:.1f} MFLOPs per step in {len(calls) / max(n, 1):.0f} calls",
                   details={"flops_per_step": per_step, "calls_per_step": len(calls) / max(n, 1), "steps": float(n)})


def work_shapes(trace: Trace, ops: tuple[str, ...]) -> dict[str, int]:
    """The shapes the operators in ``ops`` ran on in the profiled steps: ``"aten::addmm [8, 512] x [512, 2048]"``
    -> calls. Only the tensors (a bias the product adds is left out, as are scalars)."""
    wanted = set(ops)
    found: dict[str, int] = {}
    for e in trace.within_steps(lambda e: e.cat == "cpu_op" and e.name in wanted):
        dims = [d for d in (e.args or {}).get("Input Dims") or [] if isinstance(d, list) and len(d) >= 2]
        key = f"{e.name} " + " x ".join(str(d) for d in dims)
        found[key] = found.get(key, 0) + 1
    return found


def other_shapes(original: list[Trace], learner: list[Trace], ops: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The shapes the original's ``ops`` ran on (every trace: a torchrun job's ranks), and those the learner's
    ran on that the original's never did."""
    def shapes(traces: list[Trace]) -> set[str]:
        return {key for trace in traces for key in work_shapes(trace, ops)}

    theirs = shapes(original)
    return sorted(theirs), sorted(shapes(learner) - theirs)


# The operator a collective call is, whichever backend runs it (gloo or nccl): c10d's own.
ALLREDUCE_OPS = ("c10d::allreduce_", "c10d::allreduce_coalesced_")
# Every collective and point-to-point call of torch.distributed: gradients sent another way are still sent.
COLLECTIVE_OPS = frozenset({
    *ALLREDUCE_OPS, "c10d::allgather_", "c10d::_allgather_base_", "c10d::allgather_coalesced_",
    "c10d::allgather_into_tensor_coalesced_", "c10d::reduce_scatter_", "c10d::_reduce_scatter_base_",
    "c10d::reduce_scatter_tensor_coalesced_", "c10d::broadcast_", "c10d::reduce_", "c10d::gather_",
    "c10d::gather_into_tensor_", "c10d::scatter_", "c10d::alltoall_", "c10d::alltoall_base_", "c10d::send",
    "c10d::recv_", "c10d::recv_any_source_",
})
GRADIENT_BYTES = 4  # per element: the trace records a collective's tensors' shapes, not their dtype (float32 here)


def _elements(dims: Any) -> float:
    """The elements of one recorded argument: a tensor's shape, or a list (of lists) of them."""
    if not isinstance(dims, list) or not dims:
        return 0.0
    if all(isinstance(d, int) for d in dims):
        return _numel(dims)
    return sum(_elements(d) for d in dims)


def allreduce_calls(trace: Trace) -> Measure:
    """Collective calls per step: every ``c10d::`` collective or point-to-point call (``COLLECTIVE_OPS``)
    inside a ``ProfilerStep#``, on any thread.

    DDP calls one ``c10d::allreduce_`` per bucket at every backward pass that
    is not under ``no_sync()``; an all-reduce by hand is one call too, and so
    is an all-gather, a reduce-scatter, a broadcast or a send that carries the
    gradients another way. The megabytes each call carries are read from its
    recorded shapes: its largest argument (the list of tensors an all-reduce
    sums; the gathered output of an all-gather; the input a reduce-scatter
    splits), at ``GRADIENT_BYTES`` per element, and reported beside the count.
    """
    n = len(trace.steps)
    calls = trace.within_steps(lambda e: e.cat == "cpu_op" and e.name in COLLECTIVE_OPS)
    sent, shapes = 0.0, False
    by_name: dict[str, float] = {}
    for e in calls:
        carried = max((_elements(d) for d in (e.args or {}).get("Input Dims") or []), default=0.0)
        shapes = shapes or carried > 0
        sent += carried * GRADIENT_BYTES
        by_name[e.name] = by_name.get(e.name, 0.0) + 1
    per_step = len(calls) / n if n else 0.0
    others = {name: count for name, count in by_name.items() if name not in ALLREDUCE_OPS}
    what = "collective calls" if others else "all-reduce calls"
    summary = f"{per_step:.3g} {what} per step"
    if others:
        summary += " (" + ", ".join(f"{count / n:.3g} {name.removeprefix('c10d::').rstrip('_')}"
                                    for name, count in sorted(by_name.items(), key=lambda kv: -kv[1])) + ")"
    details = {"calls_per_step": per_step, "steps": float(n), **{name: count / n for name, count in by_name.items()}}
    if shapes:  # recorded with record_shapes=True (the checker's profile always is)
        details["mb_per_step"] = sent / n / 1e6
        summary += f", {details['mb_per_step']:.1f} MB per step"
    return Measure(value=round(per_step, 2), unit="calls", summary=summary, details=details)


def allreduce_traffic(trace: Trace) -> Measure:
    """The gradients sent per step, in MB, by every collective (``allreduce_calls``' megabytes; its calls
    beside them).

    What an all-reduce after every micro-batch multiplies is the traffic: the
    same gradients, sent once per micro-batch instead of once per optimizer
    step. Larger buckets send them in fewer calls, not fewer bytes.
    """
    calls = allreduce_calls(trace)
    if "mb_per_step" not in calls.details:
        if calls.value == 0:
            return Measure(value=0.0, unit="MB", summary=calls.summary + ", 0 MB per step",
                           details={**calls.details, "mb_per_step": 0.0})
        raise TraceError("the trace records no shapes of its all-reduce calls: profile with record_shapes=True")
    return Measure(value=round(calls.details["mb_per_step"], 2), unit="MB", summary=calls.summary,
                   details=calls.details)


def memory_growth(trace: Trace) -> Measure:
    """What each profiled step leaves allocated behind it, in MB per step (``memory.growth``)."""
    from .memory import growth

    return growth(trace)


METRICS: dict[str, Callable[[Trace], Measure]] = {
    "dataloader_wait": dataloader_wait,
    "indexing_ops": indexing_ops,
    "op_count": op_count,
    "elementwise_traffic": elementwise_traffic,
    "host_syncs": host_syncs,
    "memory_growth": memory_growth,
    "allreduce_traffic": allreduce_traffic,
}


def measure(metric: str, trace: Trace | str | Path) -> Measure:
    """``metric`` of a trace, loaded already or read from its path."""
    if metric not in METRICS:
        raise KeyError(f"unknown evidence metric '{metric}'; known: {', '.join(sorted(METRICS))}")
    return METRICS[metric](trace if isinstance(trace, Trace) else load(trace))

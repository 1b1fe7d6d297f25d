"""Megabytes of gradients sent per step by every collective call; the calls per step beside them.

What an all-reduce after every micro-batch multiplies is the traffic: the
same gradients, sent once per micro-batch instead of once per optimizer step.
Larger buckets send them in fewer calls, not fewer bytes.

Counted from every ``c10d::`` collective or point-to-point call
(``COLLECTIVE_OPS``) inside a ``ProfilerStep#``, on any thread, whichever
backend runs it (gloo or nccl). DDP calls one ``c10d::allreduce_`` per bucket
at every backward pass that is not under ``no_sync()``; an all-reduce by hand
is one call too, and so is an all-gather, a reduce-scatter, a broadcast or a
send that carries the gradients another way. The megabytes each call carries
are read from its recorded shapes (``record_shapes``): its largest argument
(the list of tensors an all-reduce sums; the gathered output of an
all-gather; the input a reduce-scatter splits), at ``GRADIENT_BYTES`` per
element. A trace with such calls but no shapes is refused (``TraceError``),
never read as zero. The value is in MB per step; a torchrun job's figure is
its worst rank's.

Seen in TensorBoard: Trace timeline, each rank's worker, the
``gloo:all_reduce`` ranges inside each ``ProfilerStep#``; Profile › Operators,
the Calls of ``c10d::allreduce_``.
"""

from __future__ import annotations

from typing import Any

from ..trace import Measure, Trace, TraceError, numel

NAME = "allreduce_traffic"
UNIT = "MB"

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
        return numel(dims)
    return sum(_elements(d) for d in dims)


def allreduce_calls(trace: Trace) -> Measure:
    """Collective calls per step (``COLLECTIVE_OPS``), by name, with the megabytes they carry per step in
    ``details["mb_per_step"]`` when the trace recorded their shapes."""
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


def measure(trace: Trace) -> Measure:
    calls = allreduce_calls(trace)
    if "mb_per_step" not in calls.details:
        if calls.value == 0:
            return Measure(value=0.0, unit=UNIT, summary=calls.summary + ", 0 MB per step",
                           details={**calls.details, "mb_per_step": 0.0})
        raise TraceError("the trace records no shapes of its all-reduce calls: profile with record_shapes=True")
    return Measure(value=round(calls.details["mb_per_step"], 2), unit=UNIT, summary=calls.summary,
                   details=calls.details)

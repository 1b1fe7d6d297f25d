"""Where the time of a step went, read from a trace: the kit's own Overview.

The profiler plugin's Overview needs the internet to draw its charts; this
breakdown is what the kit shows instead (as a TensorBoard image and in the
text report). Host time inside each ``ProfilerStep#`` is split into parts
that never overlap, taken in this order:

    DataLoader wait   inside ``enumerate(DataLoader)#…__next__``, or a DataPipe's
                      ``enumerate(DataPipe)#…`` (data loading either way)
    syncs             the host waiting on the device or reading a value back:
                      ``cuda*Synchronize`` and ``aten::_local_scalar_dense``
                      (what ``.item()`` runs)
    CPU ops           any other recorded operator or ``record_function`` range,
                      and the calls that launch device work (CUDA runtime
                      and driver)
    other             the rest: Python between operators, the profiler's own work

Device time (kernels, copies, memsets on the GPU) runs alongside the host and
is reported beside the host parts, as the device's busy time per step: the
time the device works on what the profiled steps launched, a kernel counted
whole for the step whose host range holds its launch call, however late it
ran (``device``'s rule; work launched outside the steps is not counted); so is
communication between the ranks of a distributed job (``comm_ms``): the time
covered by collectives as their backend runs them (``gloo:all_reduce`` ranges
on gloo's threads, inside the steps; NCCL's ``nccl…`` kernels on the device,
by the device's rule), which overlaps the backward pass it serves. A
``nccl:all_reduce`` range on the host is not communication: it only queues
the kernels (it is the CPU operators' time).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import device as device_work
from .trace import LAUNCH_CATEGORIES, LOADING_PREFIXES, Event, Trace

HOST_PARTS = ("DataLoader wait", "syncs", "CPU ops", "other")
# What each part is called where a learner reads it (the report, its charts, the Profile tab).
LABELS = {"DataLoader wait": "DataLoader wait", "syncs": "host reads and syncs", "CPU ops": "CPU operators",
          "other": "Python between operators"}
SYNC_NAMES = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
              "aten::_local_scalar_dense")
# Python's own frames (a trace recorded with_stack) are not operators: the time inside them that no operator
# covers is Python between operators, as it is in a trace without them. A launch is the host's work for the
# operator that makes it, through the CUDA runtime or the driver (cuLaunchKernel: Triton, torch.compile),
# inside an operator or not.
HOST_OP_CATEGORIES = ("cpu_op", "user_annotation", *LAUNCH_CATEGORIES)

Interval = tuple[float, float]


@dataclass(frozen=True)
class Breakdown:
    step_ms: float
    host_ms: dict[str, float]  # HOST_PARTS, summing to step_ms
    device_busy_ms: float  # per step, the time the device works on what the steps launched (``device``)
    steps: int
    comm_ms: float = 0.0  # per step, time covered by collectives (a distributed job's ranks talking)

    def share(self, part: str) -> float:
        return self.host_ms[part] / self.step_ms if self.step_ms else 0.0


def _length(intervals: list[Interval]) -> float:
    return sum(end - start for start, end in intervals)


def _subtract(intervals: list[Interval], taken: list[Interval]) -> list[Interval]:
    """``intervals`` minus ``taken`` (both merged and sorted)."""
    out: list[Interval] = []
    for start, end in intervals:
        cursor = start
        for t_start, t_end in taken:
            if t_end <= cursor or t_start >= end:
                continue
            if t_start > cursor:
                out.append((cursor, t_start))
            cursor = max(cursor, t_end)
        if cursor < end:
            out.append((cursor, end))
    return out


def _clip(events: list[Event], step: Event) -> list[Interval]:
    return device_work.merge([(max(e.ts, step.ts), min(e.end, step.end)) for e in events if e.ts < step.end and e.end > step.ts])


def of(trace: Trace) -> Breakdown:
    steps = trace.steps
    dataloader = [e for e in trace.events if e.name.startswith(LOADING_PREFIXES)]
    syncs = [e for e in trace.events if e.name in SYNC_NAMES]
    ops = [e for e in trace.events if e.cat in HOST_OP_CATEGORIES and not e.name.startswith("ProfilerStep#")
           and not e.name.startswith(LOADING_PREFIXES) and e.name not in SYNC_NAMES]
    work = device_work.step_work(trace)
    device = device_work.merge([(e.ts, e.end) for e, _ in work])
    comm = [e for e in trace.events if _is_host_collective(e)]
    talking_on_device = [(e.ts, e.end) for e, _ in work if _is_device_collective(e)]

    totals = dict.fromkeys(HOST_PARTS, 0.0)
    talking: list[Interval] = list(talking_on_device)
    for step in steps:
        talking += _clip(comm, step)
        taken: list[Interval] = []
        for part, events in (("DataLoader wait", dataloader), ("syncs", syncs), ("CPU ops", ops)):
            mine = _subtract(_clip(events, step), taken)
            totals[part] += _length(mine)
            taken = device_work.merge(taken + mine)
        totals["other"] += step.dur - _length(taken)
    n = len(steps)
    return Breakdown(
        step_ms=sum(s.dur for s in steps) / n / 1000.0,
        host_ms={part: value / n / 1000.0 for part, value in totals.items()},
        device_busy_ms=_length(device) / n / 1000.0,
        steps=n,
        comm_ms=_length(device_work.merge(talking)) / n / 1000.0,
    )


# How a collective shows in a trace as its backend runs it: gloo's ranges on its own threads, NCCL's kernels.
# (NCCL's ``nccl:all_reduce`` range on the host only queues its kernels: it is no communication.)
COLLECTIVE_PREFIXES = ("gloo:",)
DEVICE_COLLECTIVE_PREFIX = "nccl"


def _is_host_collective(e: Event) -> bool:
    return e.cat in ("user_annotation", "cpu_op") and e.name.startswith(COLLECTIVE_PREFIXES)


def _is_device_collective(e: Event) -> bool:
    return e.cat == "kernel" and e.name.startswith(DEVICE_COLLECTIVE_PREFIX)

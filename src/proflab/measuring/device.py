"""Which of the device's work belongs to the profiled steps: the rule every device figure follows.

The device runs what the host queued, later and on its own clock: a kernel a
step launched may run after that step has ended on the host, and the kernels
running while a step begins may be those of the step before it (or of the
warm-up, before the profiled window). So device work is given to a step by
who launched it, not by when it ran:

    a kernel, copy or memset belongs to the profiled step whose host range
    holds the call that launched it (the ``cuda_runtime`` or ``cuda_driver``
    event with the same ``correlation``: cudaLaunchKernel, cudaMemcpyAsync,
    cudaGraphLaunch, cuLaunchKernel), and counts whole, not clipped to the
    step: it is that step's work wherever on the device's timeline it ran.

Work whose launch is outside every profiled step (before the first, between,
after the last), or not in the trace at all (queued before the profiler
started recording), belongs to no step and is not counted. A trace that links
no device work to any launch (one whose launch calls were not recorded) falls
back on time: its device work counts where it runs inside a step's host
range, clipped to it.

Device busy per step (``breakdown``) is the time these events cover, merged
across streams and devices (the time at least one device works), over the
number of steps; an operator's device time (``operators``) is the same events,
given to the operator that made the launch. Device busy may so exceed the
host's step where the device runs behind the host: then the device, not the
host, sets the pace.
"""

from __future__ import annotations

import bisect

from .trace import DEVICE_CATEGORIES, LAUNCH_CATEGORIES, Event, Trace

Interval = tuple[float, float]


def correlation(e: Event):
    """The ``correlation`` that links a launch to the device work it queued (None where not recorded)."""
    return (e.args or {}).get("correlation")


def _step_of(trace: Trace):
    steps = trace.steps
    starts = [s.ts for s in steps]

    def at(ts: float) -> int | None:
        i = bisect.bisect_right(starts, ts) - 1
        return i if i >= 0 and ts < steps[i].end else None

    return at


def launches_in_steps(trace: Trace) -> dict:
    """The launch calls made inside a profiled step: correlation → (the launch, the step's index)."""
    at = _step_of(trace)
    found = {}
    for e in trace.events:
        if e.cat in LAUNCH_CATEGORIES and correlation(e) is not None:
            i = at(e.ts)
            if i is not None:
                found[correlation(e)] = (e, i)
    return found


def step_work(trace: Trace) -> list[tuple[Event, int]]:
    """The device's work that belongs to the profiled steps, by the module's rule, each with its step's index.
    Counted whole; only the fallback (no work linked to a launch anywhere in the trace) clips, and hands back
    events cut to their step."""
    device = [e for e in trace.events if e.cat in DEVICE_CATEGORIES]
    if not device:
        return []
    launched = {correlation(e) for e in trace.events if e.cat in LAUNCH_CATEGORIES and correlation(e) is not None}
    if any(correlation(e) in launched for e in device):
        inside = launches_in_steps(trace)
        return [(e, inside[correlation(e)][1]) for e in device if correlation(e) in inside]
    found = []
    for i, step in enumerate(trace.steps):
        for e in device:
            start, end = max(e.ts, step.ts), min(e.end, step.end)
            if start < end or (e.dur == 0 and step.ts <= e.ts < step.end):
                found.append((Event(e.name, e.cat, start, max(0.0, end - start), e.pid, e.tid, e.args), i))
    return found


def merge(intervals: list[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def busy_us(trace: Trace) -> float:
    """The time the device works on the profiled steps' work, in all (µs): ``step_work`` merged across
    streams and devices."""
    return sum(end - start for start, end in merge([(e.ts, e.end) for e, _ in step_work(trace)]))

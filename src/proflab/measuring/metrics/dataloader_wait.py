"""Milliseconds per step the training loop waits for its data: inside ``DataLoader.__next__``, or loading itself.

Counted per ``ProfilerStep#``, clipped to the step, overlaps counted once,
averaged over the profiled steps: the time covered by

* the profiler's ``enumerate(DataLoader)#…__next__`` ranges inside the step
  (and a DataPipe's ``enumerate(DataPipe)#…``: data loading too);
* the samples the step's own thread loads itself: the ``load sample`` and
  ``storage read`` ranges that the kit's data sets and storage client
  record on the thread that loads (photos read in the loop from a DataLoader
  that hands out indices only, or with no DataLoader at all, keep the step
  waiting as long as the original's loader did);
* the samples another thread of the process loads while the step's thread
  waits for them, inside no operator (a helper thread waited for at once).

Samples that DataLoader workers, or threads of the file's own, load while
the step trains are off the step's path, and are not counted. Loading is the
DataLoader's wait wherever it runs. ``details`` give the share of the step
it is, the step's length, and the part of the wait spent loading outside any
DataLoader range.

Seen in TensorBoard: Profile › Overview, the DataLoader share of the step;
Trace timeline, the ``enumerate(DataLoader)#…__next__`` bar at the start of
each ``ProfilerStep#``, and the ``load sample`` and ``storage read`` ranges on
the thread that loads.
"""

from __future__ import annotations

from ...running.storage import LOADING_RANGES
from ..trace import LOADING_PREFIXES, Event, Measure, Trace, union_length

NAME = "dataloader_wait"
UNIT = "ms"
LOADING = LOADING_RANGES


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _idle(step: Event, busy: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of ``step`` that none of ``busy`` covers."""
    gaps, at = [], step.ts
    for a, b in _merged(busy):
        if a > at:
            gaps.append((at, a))
        at = max(at, b)
    if at < step.end:
        gaps.append((at, step.end))
    return gaps


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(max(x, u), min(y, v)) for x, y in _merged(a) for u, v in _merged(b) if max(x, u) < min(y, v)]


def measure(trace: Trace) -> Measure:
    steps = trace.steps
    step_us = sum(s.dur for s in steps)
    waits, own = [], []
    for s in steps:
        here = (s.pid, s.tid)  # the thread that runs the steps

        def clipped(keep) -> list[tuple[float, float]]:
            return [(max(e.ts, s.ts), min(e.end, s.end)) for e in trace.events
                    if keep(e) and e.ts < s.end and e.end > s.ts]

        loader = clipped(lambda e: e.name.startswith(LOADING_PREFIXES))
        loading = clipped(lambda e: e.name in LOADING and (e.pid, e.tid) == here)
        elsewhere = clipped(lambda e: e.name in LOADING and e.pid == s.pid and (e.pid, e.tid) != here)
        working = clipped(lambda e: e.cat == "cpu_op" and (e.pid, e.tid) == here and "::" in e.name)
        waited = _overlap(elsewhere, _idle(s, working)) if elsewhere else []
        waits.append(union_length(loader + loading + waited))
        own.append(waits[-1] - union_length(loader))
    wait_us = sum(waits)
    share = wait_us / step_us if step_us else 0.0
    per_step_ms = wait_us / len(steps) / 1000.0
    step_ms = step_us / len(steps) / 1000.0
    own_ms = sum(own) / len(steps) / 1000.0
    summary = f"{share:.0%} of each step ({per_step_ms:.1f} ms of {step_ms:.1f} ms)"
    if own_ms >= 0.05:
        summary += f", {own_ms:.1f} ms of it loading outside the DataLoader on the step's path"
    return Measure(
        value=per_step_ms,
        unit=UNIT,
        summary=summary,
        details={"share": share, "wait_ms_per_step": per_step_ms, "step_ms": step_ms, "steps": float(len(steps)),
                 "loading_outside_ms_per_step": own_ms},
    )

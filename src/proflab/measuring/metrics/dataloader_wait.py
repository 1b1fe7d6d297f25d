"""Milliseconds per step the training loop waits for its data, inside ``DataLoader.__next__``.

Counted per ``ProfilerStep#``: the time covered by the profiler's
``enumerate(DataLoader)#…__next__`` ranges inside the step (clipped to it,
overlaps counted once), averaged over the profiled steps. ``details`` give the
share of the step it is, and the step's length.

Seen in TensorBoard: Profile › Overview, the DataLoader share of the step;
Trace timeline, the ``enumerate(DataLoader)#…__next__`` bar at the start of
each ``ProfilerStep#``.
"""

from __future__ import annotations

from ..trace import DATALOADER_PREFIX, Measure, Trace, union_length

NAME = "dataloader_wait"
UNIT = "ms"


def measure(trace: Trace) -> Measure:
    steps = trace.steps
    step_us = sum(s.dur for s in steps)
    waits = []
    for s in steps:
        inside = [(max(e.ts, s.ts), min(e.end, s.end)) for e in trace.events
                  if e.name.startswith(DATALOADER_PREFIX) and e.ts < s.end and e.end > s.ts]
        waits.append(union_length(inside))
    wait_us = sum(waits)
    share = wait_us / step_us if step_us else 0.0
    per_step_ms = wait_us / len(steps) / 1000.0
    step_ms = step_us / len(steps) / 1000.0
    return Measure(
        value=per_step_ms,
        unit=UNIT,
        summary=f"{share:.0%} of each step ({per_step_ms:.1f} ms of {step_ms:.1f} ms)",
        details={"share": share, "wait_ms_per_step": per_step_ms, "step_ms": step_ms, "steps": float(len(steps))},
    )

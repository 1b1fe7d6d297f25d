"""Milliseconds per step that no operator covers: the host's own work inside the step (Python, I/O).

Per ``ProfilerStep#``, the time of the step's thread that is neither inside an operator, nor waiting on the
DataLoader, nor reading a value back (the Overview's *Python between operators*, ``breakdown``), averaged
over the profiled steps. Serialising a checkpoint, formatting a log, writing a file: work a step does on the
host that the profiler records as a gap between operators. ``details`` give its share of the step.

Seen in TensorBoard: Profile › Overview, Python between operators; Trace timeline, the gaps inside each
``ProfilerStep#`` where no operator runs.
"""

from __future__ import annotations

from ..breakdown import of
from ..trace import Measure, Trace

NAME = "host_gap"
UNIT = "ms"


def measure(trace: Trace) -> Measure:
    b = of(trace)
    gap = b.host_ms["other"]
    share = b.share("other")
    return Measure(value=gap, unit=UNIT, summary=f"{share:.0%} of each step ({gap:.1f} ms of {b.step_ms:.1f} ms) "
                   "covered by no operator", details={"share": share, "step_ms": b.step_ms, "steps": float(b.steps)})

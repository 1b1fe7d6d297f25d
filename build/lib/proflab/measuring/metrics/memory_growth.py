"""Megabytes per step the profiled steps leave allocated behind them, never freed.

Counted from the ``[memory]`` events of ``profile_memory=True``, block by
block: every block allocated in a profiled step before the last and not freed
by the end of the last, on the device where that adds up to most, divided by
the steps before the last; ``details`` name the operators that allocated
them (``kept:<operator>``). Blocks allocated before profiling began count
neither way (the profiler does not see their frees), so the window should end
with the lab's periodic work (lab 5's last profiled step is an evaluation). A
trace with no memory events is refused (``TraceError``), never read as zero.
The reading itself is ``measuring.memory.growth``, which Profile › Memory
shares.

Seen in TensorBoard: Profile › Memory, what each step leaves allocated, the
curve, and the operators whose allocations are never freed (Kept); Trace
timeline, the ``[memory]`` events under each ``ProfilerStep#``.
"""

from __future__ import annotations

from ..memory import growth
from ..trace import Measure, Trace

NAME = "memory_growth"
UNIT = "MB per step"


def measure(trace: Trace) -> Measure:
    return growth(trace)

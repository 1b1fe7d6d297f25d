"""The evidence metrics: one small module each, registered here by name.

A lab's manifest names the metric that proves its fix (``[evidence] metric``);
the checker measures it in the original's trace and in the learner's, and the
fix passes only if the learner's figure meets the lab's bound. Each metric is a
module of this package that keeps one contract:

* its **module docstring is its documentation row**: what it counts, per
  profiled step, in which unit, and where a learner sees it in TensorBoard
  (a line starting ``Seen in TensorBoard:``);
* ``NAME = "<name>"``: the name a lab's ``[evidence] metric`` uses, the same
  as the module's own name; ``UNIT``: the unit of its value ("ms", "ops",
  "MB", ...);
* ``def measure(trace: Trace) -> Measure`` (``from ..trace import Measure,
  Trace``): the figure per profiled step, averaged over the steps, so that
  traces with different numbers of steps compare fairly. It raises
  ``TraceError`` when the trace cannot give the figure (no shapes or no memory
  events recorded), never reads that as zero; and it imports no torch (the
  manifest check imports this registry to list the names it accepts);
* its unit test beside it, ``tests/metrics/test_<name>.py``, measures a small
  real trace made by ``torch.profiler`` in the test;
  ``tests/metrics/test_registry.py`` fails for a metric without one.

What the checker does with the ``Measure``: ``value`` is the figure it grades,
in ``UNIT``. A lab's bounds hold it: ``max`` and ``min`` in the same unit;
``max_vs_original`` as a share of the original's value, measured in the same
check (0.5: at most half); ``more_to_gain_above``, a passing fix still above
that share of the original's is told there is more to gain. A torchrun job is
graded on its worst rank, the highest value. So a metric grows with the
bottleneck: lower is better, and a fix brings it down. The lab's ``unit``
only says how values are written (``"ms"`` with one decimal; ``"%"`` as a
share times 100; anything else with four significant digits and the unit after
them): give it the metric's ``UNIT``. ``Measure.unit`` is ``UNIT`` too;
``summary`` is the line the report shows beside the value (what was counted,
the most frequent names), and ``details`` the numbers behind it (always
``steps``), kept in the JSON report. Round ``value`` where a count should
compare exactly.

The shared helpers, in ``..trace``: ``trace.steps`` (the ``ProfilerStep#``
ranges on the host, in time order), ``trace.within_steps(predicate)`` (the
events that start inside a step), ``trace.on_cuda`` (the trace holds device
work: count on the device then), ``aten_ops(trace)`` (the ``aten::``
operators inside the steps, at any depth), ``outermost(events)`` (those not
nested in another on their thread: the calls the program made itself),
``union_length(intervals)`` (the time overlapping ranges cover),
``numel(dims)`` (the elements of a recorded shape), and ``DATALOADER_PREFIX``
and ``DEVICE_CATEGORIES`` (the names of DataLoader ranges, the categories of
device work).

Adding a metric: one new module here, and its name in the import and in
``MODULES`` below; then its test file. ``proflab new-lab --metric NAME --unit
UNIT`` writes all three, to be filled in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..trace import Measure, Trace, load
from . import (
    allreduce_traffic,
    batchnorm_calls,
    dataloader_wait,
    elementwise_traffic,
    host_gap,
    host_syncs,
    indexing_ops,
    memory_growth,
    op_count,
)

MODULES = (
    dataloader_wait,
    indexing_ops,
    op_count,
    elementwise_traffic,
    host_syncs,
    memory_growth,
    allreduce_traffic,
    batchnorm_calls,
    host_gap,
)

METRICS: dict[str, Callable[[Trace], Measure]] = {m.NAME: m.measure for m in MODULES}


def measure(metric: str, trace: Trace | str | Path) -> Measure:
    """``metric`` of a trace, loaded already or read from its path."""
    if metric not in METRICS:
        raise KeyError(f"unknown evidence metric '{metric}'; known: {', '.join(sorted(METRICS))}")
    return METRICS[metric](trace if isinstance(trace, Trace) else load(trace))

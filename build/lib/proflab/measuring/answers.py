"""Where a learner's own profile is graded (lab 0): its window, its labels, and the answers read from it.

In lab 0 the learner writes the profiler code. The checker then reads the
trace *their* profiler wrote, once their run has ended, and checks:

* it is a profiler trace of a window of steps (``ProfilerStep#`` events, at
  most the lab's ``max_steps``, not the whole loop), whose steps last about
  as long as the same steps stamped by the checker from outside the run;
* each step holds each of the lab's ``record_function`` labels;
* the answers in the file's ``ANSWERS`` match the figures measured from that
  same trace, within the lab's tolerance: they cannot be copied from another
  machine's profile, or from the docs.

Each answer metric is a function of the trace: ``METRICS[name](trace)`` gives
the measured value and the accepted answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .trace import Event, Trace

# The learner's steps in the trace may differ from the same steps stamped by the checker by the profiler's
# own cost (a profiled step is slower), and by where in the loop prof.step() is called; more than this
# factor either way, and the trace is not of this run's steps.
STEP_FACTOR = 3.0
STEP_SLACK_S = 0.05
# An operator whose self time is within this share of the largest is as good an answer (a near tie).
NEAR_TOP = 0.8


@dataclass
class Measured:
    """A figure measured from the learner's trace, and whether an answer matches it."""

    value: Any
    shown: str  # the figure as the report says it
    accepts: Callable[[Any, float], bool] = field(repr=False, default=lambda answer, tolerance: False)


def _in_steps(trace: Trace, events: list[Event]) -> list[Event]:
    steps = trace.steps
    return [e for e in events if any(s.ts <= e.ts < s.end for s in steps)]


def self_times(trace: Trace) -> dict[str, float]:
    """Self CPU time per operator (``aten::``), in µs, over the trace's steps, as key_averages' Self CPU
    column counts it (``operators.table``)."""
    from .operators import table

    return {row.name: row.self_cpu_us for row in table(trace, loading_apart=False) if row.name.startswith("aten::")}


def top_self_cpu(trace: Trace) -> Measured:
    times = self_times(trace)
    if not times:
        return Measured(None, "no aten:: operator in the trace's steps")
    name, top = max(times.items(), key=lambda item: item[1])
    total = sum(times.values()) or 1.0

    def accepts(answer: Any, tolerance: float) -> bool:
        return isinstance(answer, str) and times.get(answer.strip(), 0.0) >= NEAR_TOP * top

    return Measured(name, f"{name} ({top / 1000 / len(trace.steps):.1f} ms per step, {top / total:.0%} of the "
                          "operators' self CPU time)", accepts)


def _number_near(measured: float) -> Callable[[Any, float], bool]:
    """An answer that is a number within the tolerance of ``measured`` (a bool is no number here)."""
    def accepts(answer: Any, tolerance: float) -> bool:
        return (isinstance(answer, (int, float)) and not isinstance(answer, bool)
                and abs(answer - measured) <= tolerance + 1e-9)

    return accepts


def _calls_per_step(name: str) -> Callable[[Trace], Measured]:
    def metric(trace: Trace) -> Measured:
        calls = sum(1 for e in _in_steps(trace, trace.events) if e.name == name)
        per_step = calls / len(trace.steps)

        return Measured(per_step, f"{per_step:g} calls of {name} per step", _number_near(per_step))

    metric.__doc__ = f"How many times {name} runs in one step."
    return metric


def _label_share(label: str) -> Callable[[Trace], Measured]:
    def metric(trace: Trace) -> Measured:
        steps = trace.steps
        inside = sum(e.dur for e in _in_steps(trace, _on_host(trace, label)))
        share = inside / (sum(s.dur for s in steps) or 1.0)

        return Measured(share, f"{share:.2f} of each step in '{label}'", _number_near(share))

    metric.__doc__ = f"The share of a step spent inside the label {label!r}."
    return metric


METRICS: dict[str, Callable[[Trace], Measured]] = {
    "top_self_cpu": top_self_cpu,
    "conv2d_calls_per_step": _calls_per_step("aten::conv2d"),
    "backward_share": _label_share("backward"),
}


def _on_host(trace: Trace, name: str) -> list[Event]:
    """The ranges named ``name`` on the host (on CUDA a label also has its range on the device)."""
    return [e for e in trace.events if e.name == name and not e.cat.startswith("gpu_")]


def missing_labels(trace: Trace, labels: tuple[str, ...]) -> dict[str, int]:
    """Each label missing from some step of the trace, with how many steps lack it."""
    missing = {}
    for label in labels:
        events = _on_host(trace, label)
        lacking = sum(1 for s in trace.steps if not any(s.ts <= e.ts < s.end for e in events))
        if lacking:
            missing[label] = lacking
    return missing


def step_numbers(trace: Trace) -> list[int]:
    """The numbers of the trace's steps (``ProfilerStep#7`` is 7), in time order."""
    numbers = []
    for s in trace.steps:
        try:
            numbers.append(int(s.name.split("#", 1)[1]))
        except (IndexError, ValueError):
            numbers.append(-1)
    return numbers


def matches_stamps(trace: Trace, stamped: list[float]) -> tuple[bool, float, float]:
    """Whether the trace's steps last about as long as the same steps stamped from outside the run;
    returns (whether, seconds in the trace, seconds stamped)."""
    numbers = step_numbers(trace)
    if any(n < 0 or n >= len(stamped) for n in numbers):
        return False, sum(s.dur for s in trace.steps) / 1e6, 0.0
    in_trace = sum(s.dur for s in trace.steps) / 1e6
    outside = sum(stamped[n] for n in numbers)
    ok = outside / STEP_FACTOR - STEP_SLACK_S <= in_trace <= outside * STEP_FACTOR + STEP_SLACK_S
    return ok, in_trace, outside


# How far (seconds) a step in the trace may lie outside the run's window by the wall clock: the profiler's
# clock and this process's are the same clock, read a little apart.
WALL_SLACK_S = 2.0


def written_during(trace: Trace, base_ns: Any, window: list[float]) -> bool:
    """Whether every step of the trace happened while this run ran, by the wall clock: a trace written
    earlier, by another run, or by hand, did not."""
    if not isinstance(base_ns, (int, float)) or len(window) != 2 or not all(window):
        return False
    begin, end = window
    for step in trace.steps:
        at = base_ns / 1e9 + step.ts / 1e6
        if not begin - WALL_SLACK_S <= at <= end + WALL_SLACK_S:
            return False
    return True


# The kit's own record of the workload (lab 0's original, profiled by the kit). A learner's trace holds the
# same step when it runs every operator the record runs at least once a step as often, within this share
# (and one call): printing or an accuracy adds a few operators, never fewer convolutions. What the data
# loader runs is left out: loading in worker processes (lab 1's lesson) takes it off the traced thread.
CALLS_SLACK = 0.10
LOADER = "enumerate(DataLoader)"
# An operator the workload never runs, in the learner's trace, with this share of its operators' self time
# or more: something else was profiled, or the trace was not written by a profiler.
FOREIGN_SHARE = 0.05


def _step_calls(trace: Trace) -> dict[str, float]:
    """Calls per step of each ``aten::`` operator of the trace's steps, what the data loader runs left out."""
    loading = [e for e in trace.events if e.name.startswith(LOADER)]
    calls: dict[str, int] = {}
    for e in trace.within_steps(lambda e: e.cat == "cpu_op" and e.name.startswith("aten::")):
        if not any(d.ts <= e.ts < d.end and d.tid == e.tid and d.pid == e.pid for d in loading):
            calls[e.name] = calls.get(e.name, 0) + 1
    return {name: n / len(trace.steps) for name, n in calls.items()}


def _time_shares(trace: Trace) -> dict[str, float]:
    """Each ``aten::`` operator's share of the operators' self time in the trace's steps."""
    times = self_times(trace)
    total = sum(times.values()) or 1.0
    return {name: t / total for name, t in times.items()}


def not_profiler_made(trace: Trace) -> str:
    """Why the trace cannot have been written by torch.profiler ('' when nothing says so): every operator it
    records carries the profiler's ``External id``, one of its own."""
    ops = trace.within_steps(lambda e: e.cat == "cpu_op")
    if not ops:
        return "its steps hold no operator at all"
    ids = [e.args.get("External id") if e.args else None for e in ops]
    missing = sum(1 for i in ids if not isinstance(i, int) or isinstance(i, bool))
    if missing:
        return f"{missing} of its {len(ops)} operators carry no External id, which torch.profiler gives every one"
    if len(set(ids)) < len(ids):
        return f"{len(ids) - len(set(ids))} of its operators share an External id with another"
    return ""


def unlike_the_workload(learner: Trace, kit: Trace) -> list[str]:
    """How the learner's steps differ from the kit's own profile of the same step (empty: they do not):
    an operator of the step run more or less often, or one the step never runs holding a large share of
    the time."""
    mine, work, shares = _step_calls(learner), _step_calls(kit), _time_shares(kit)
    found = []  # the step's heaviest operators first
    for name, calls in sorted(work.items(), key=lambda item: (-shares.get(item[0], 0.0), -item[1], item[0])):
        theirs = mine.get(name, 0.0)
        if calls >= 1 and abs(theirs - calls) > max(1.0, CALLS_SLACK * calls):
            found.append(f"{name}: {theirs:g} calls per step in your trace, {calls:g} in the kit's own profile "
                         "of the same step")
    known = set(shares) | set(work)
    for name, share in sorted(_time_shares(learner).items(), key=lambda item: -item[1]):
        if name not in known and share >= FOREIGN_SHARE:
            found.append(f"{name}: {share:.0%} of your trace's operator time, and this step never runs it")
    return found

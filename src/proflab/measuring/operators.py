"""Where a trace becomes the profiler's operator table, and two tables a diff.

``prof.key_averages()`` exists only inside the profiled process. This builds
the same table from the trace file it wrote, so that the kit's offline views
(and the checker's answers for lab 0) can show it for any run:

* one row per name: every operator, ``record_function`` label, CUDA runtime
  call, and ``ProfilerStep*`` (all steps under one name, as key_averages
  groups them), taken inside the profiled steps;
* **Self CPU**: an event's time less that of the events directly inside it on
  its thread, as key_averages' Self CPU column counts it; **CPU total**: its
  whole time; an event that is the only child of one of its own name is that
  one again (torch's ``_remove_dup_nodes``), not a call of its own;
* on CUDA, **Self device**: the kernels, copies and memsets an operator
  launched inside the profiled steps (linked by the launch's ``correlation``,
  a CUDA runtime or driver call, to the operator's ``External id``), as
  key_averages' Self CUDA column counts them, wherever they ran
  (``measuring.device``);
* an operator run inside the DataLoader's ``__next__`` (a data set's own
  convolution, its collate) is the loader's, not the model's: its row is
  named apart, ``aten::conv2d (in data loading)``, so that neither the table
  nor a diff counts a data set's work as the model's (key_averages mixes
  them under one name: ``loading_apart=False`` gives its table).

Times are in µs over all the profiled steps; ``per_step`` divides them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from .trace import DEVICE_CATEGORIES, LAUNCH_CATEGORIES, LOADING_PREFIXES, Trace
from ..running.storage import LOADING_RANGES

HOST_CATEGORIES = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
STEP = "ProfilerStep*"
IN_LOADING = " (in data loading)"  # after the name of an operator run inside the DataLoader's __next__


@dataclass(frozen=True)
class Row:
    name: str
    calls: float
    self_cpu_us: float
    cpu_total_us: float
    self_device_us: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "calls": self.calls, "self_cpu_us": self.self_cpu_us,
                "cpu_total_us": self.cpu_total_us, "self_device_us": self.self_device_us}


def _name(raw_name: str) -> str:
    return STEP if raw_name.startswith("ProfilerStep#") else raw_name


class _Host:
    """The host events inside the profiled steps, in time order per thread, and what the table needs of each
    (lists aligned by index): its row's name, the step it falls in, its self time, its whole time, the event
    it runs directly inside on its thread (its index; None for none), and whether it is counted (``kept``)."""

    def __init__(self, events: list[dict], names: list[str], at: list[int], own: list[float], dur: list[float],
                 parents: list[int | None], kept: list[bool]):
        self.events, self.names, self.at, self.own, self.dur = events, names, at, own, dur
        self.parents, self.kept = parents, kept

    def counted(self):
        """(name, step, self time, whole time) of each event a row counts."""
        return [(n, a, o, d) for n, a, o, d, k in zip(self.names, self.at, self.own, self.dur, self.kept) if k]


def _events(trace: Trace, loading_apart: bool = True) -> _Host:
    """The host events inside the profiled steps, each named (``IN_LOADING`` after it inside the DataLoader's
    ``__next__``, where ``loading_apart``), with its step, its self time and its whole time.

    As key_averages builds its table (torch's ``EventList._remove_dup_nodes``), an event that is the only
    child of an event of the same name is that event again, not a call of its own (an operator that
    dispatches to itself: three nested ``aten::mm`` are one call of the outermost's length): it is merged
    into its parent, whose children its children become, and is not counted. A parent with more than one
    child of its name keeps them all as calls, as torch does.
    """
    steps = trace.steps
    inside = []
    for e in trace.raw.get("traceEvents", []):
        # The kit's own marks of loading (``running.storage``: where a sample was loaded, for the DataLoader
        # wait) are no operator of the learner's: their time stays with the range that holds them (the
        # DataLoader's ``__next__``), as in a trace of code the kit did not write.
        if e.get("ph") == "X" and "ts" in e and "name" in e and e.get("cat") in HOST_CATEGORIES \
                and e["name"] not in LOADING_RANGES:
            at = next((i for i, s in enumerate(steps) if s.ts <= float(e["ts"]) < s.end), None)
            if at is not None:
                inside.append((e, at))
    inside.sort(key=lambda x: (str(x[0].get("pid")), str(x[0].get("tid")), float(x[0]["ts"]),
                               -float(x[0].get("dur", 0.0))))
    # (thread, end, whether it is inside the DataLoader's __next__ or is it, its index)
    stack: list[tuple[tuple[str, str], float, bool, int]] = []
    names, parents, durs = [], [], []
    for k, (e, _) in enumerate(inside):
        thread, ts, dur = (str(e.get("pid")), str(e.get("tid"))), float(e["ts"]), float(e.get("dur", 0.0))
        while stack and (stack[-1][0] != thread or ts >= stack[-1][1]):
            stack.pop()
        loading = bool(stack) and stack[-1][2]
        parents.append(stack[-1][3] if stack else None)
        stack.append((thread, ts + dur, loading or e["name"].startswith(LOADING_PREFIXES), k))
        names.append(_name(e["name"]) + (IN_LOADING if loading and loading_apart else ""))
        durs.append(dur)
    children: list[list[int]] = [[] for _ in inside]
    for k, p in enumerate(parents):
        if p is not None:
            children[p].append(k)
    kept = [True] * len(inside)
    merged_into = list(parents)  # where a merged event's children now hang
    for k in range(len(inside)):  # parents come before their children: a chain folds into its outermost
        p = merged_into[k]
        if p is not None and inside[k][0]["name"] == inside[p][0]["name"] and len(children[p]) == 1:
            kept[k] = False
            children[p] = children[k]
            for c in children[k]:
                merged_into[c] = p
    own = [d - sum(durs[c] for c in children[k]) for k, d in enumerate(durs)]
    return _Host([e for e, _ in inside], names, [a for _, a in inside], own, durs, parents, kept)


def table(trace: Trace, *, per_step: bool = False, loading_apart: bool = True) -> list[Row]:
    """The operator table of ``trace``, sorted by self CPU time, largest first; an operator inside data
    loading under a name of its own (``IN_LOADING``), unless not ``loading_apart``, as key_averages."""
    host = _events(trace, loading_apart)
    calls: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    own: dict[str, float] = defaultdict(float)
    for name, _, mine, dur in host.counted():
        calls[name] += 1
        total[name] += dur
        own[name] += max(0.0, mine)
    device = _device_time(host.events, host.names, host.parents, trace.raw.get("traceEvents", []))
    steps = trace.steps
    n = len(steps) if per_step and steps else 1
    rows = [Row(name, calls[name] / n, own[name] / n, total[name] / n, device.get(name, 0.0) / n) for name in calls]
    rows.sort(key=lambda r: (-r.self_cpu_us, r.name))
    return rows


def self_per_step(trace: Trace) -> dict[str, list[float]]:
    """Each name's self time in every profiled step, in µs (the DataLoader's wait under one name)."""
    steps = len(trace.steps)
    found: dict[str, list[float]] = {}
    for name, at, mine, _ in _events(trace).counted():
        found.setdefault(diff_name(name), [0.0] * steps)[at] += max(0.0, mine)
    return found


def _device_time(host: list[dict], names: list[str], parents: list[int | None],
                 events: list[dict]) -> dict[str, float]:
    """Device time per host operator: each kernel's time, given to the operator that launched it.

    ``host``: the host events inside the profiled steps, in time order per thread, ``names`` the row each
    is counted in and ``parents`` the one each runs directly inside (its index, None for none). A kernel,
    copy or memset counts when a launch among them made it (``measuring.device``: a ``cuda_runtime`` call,
    cudaLaunchKernel, cudaGraphLaunch's whole graph, or a ``cuda_driver`` one, cuLaunchKernel of Triton and
    torch.compile), wherever on the device's timeline it ran; it goes to the operator whose ``External id``
    the launch carries, or, where it carries none, to the range the launch runs inside (a launch inside no
    operator: to the launch's own row).
    """
    launched_by: dict[Any, str] = {}  # correlation → the row of the operator that made the launch
    op_of: dict[Any, str] = {}  # External id → the innermost operator with it (the latest to start)
    for e, name in zip(host, names):
        args = e.get("args")
        if e.get("cat") in ("cpu_op", "user_annotation") and isinstance(args, dict) \
                and args.get("External id") is not None:
            op_of[args["External id"]] = name
    for i, (e, name) in enumerate(zip(host, names)):
        args = e.get("args")
        if e.get("cat") in LAUNCH_CATEGORIES and isinstance(args, dict) and "correlation" in args:
            made_by = op_of.get(args.get("External id")) if args.get("External id") else None
            if made_by is None:
                made_by = names[parents[i]] if parents[i] is not None else name
            launched_by[args["correlation"]] = made_by
    if not launched_by:
        return {}
    times: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("cat") in DEVICE_CATEGORIES and isinstance(e.get("args"), dict):
            op = launched_by.get(e["args"].get("correlation"))
            if op is not None:
                times[op] += float(e.get("dur", 0.0))
    return dict(times)


@dataclass(frozen=True)
class Change:
    """One name in a diff of two runs' tables, per step."""

    name: str
    status: str  # added | removed | grown | shrunk | same
    before: Row | None
    after: Row | None
    # "same" because its share of the step did not move: it grew or shrank with the whole step (a version
    # whose step changed, or a machine busier for one run), not on its own
    with_step: bool = False
    # "same" because its move is within what its time varies from step to step in the two runs
    within_noise: bool = False

    @property
    def self_delta_us(self) -> float:
        return (self.after.self_cpu_us if self.after else 0.0) - (self.before.self_cpu_us if self.before else 0.0)

    @property
    def calls_delta(self) -> float:
        return (self.after.calls if self.after else 0.0) - (self.before.calls if self.before else 0.0)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status,
                "before": self.before.as_dict() if self.before else None,
                "after": self.after.as_dict() if self.after else None,
                "self_delta_us": self.self_delta_us, "calls_delta": self.calls_delta, "with_step": self.with_step,
                "within_noise": self.within_noise}


# A change in self time smaller than this share of the before-step (and under 5 µs) counts as the same.
SAME_SHARE = 0.002
# A name called as often in both moved only if its share of the step moved by more than this (two
# points of the step): a profile is one run's few steps, whose operators a busy machine slows unevenly.
SHARE_MOVED = 0.02


# The DataLoader's iterator is named after its kind (``_SingleProcessDataLoaderIter``, with workers
# ``_MultiProcessingDataLoaderIter``): in a diff both are the one wait for the next batch.
DATALOADER_NEXT = "enumerate(DataLoader)#…__next__"


def diff_name(name: str) -> str:
    """The name a row is matched by in a diff: itself, or the DataLoader's wait under one name."""
    if name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__"):
        return DATALOADER_NEXT
    return name


def _by_diff_name(rows: list[Row]) -> dict[str, Row]:
    merged: dict[str, Row] = {}
    for r in rows:
        name = diff_name(r.name)
        old = merged.get(name)
        merged[name] = Row(name, r.calls, r.self_cpu_us, r.cpu_total_us, r.self_device_us) if old is None else \
            Row(name, old.calls + r.calls, old.self_cpu_us + r.self_cpu_us, old.cpu_total_us + r.cpu_total_us,
                old.self_device_us + r.self_device_us)
    return merged


def diff(before: Trace, after: Trace, noise: float = 0.0) -> list[Change]:
    """Per step, what moved from ``before`` to ``after``: every name, largest move in self time first
    (the DataLoader's wait matched under one name, whichever iterator each version used).

    A name called as often in both whose self time moved no more than the noise counts as the same:
    within ``SAME_SHARE`` of the step (or 5 µs); within twice ``noise`` (the run-to-run variation the
    caller measured, as a share) of its own time; within what its time varies from step to step in
    the two runs (a 95% interval of the difference of the means); or no further than the whole step
    moved (a profile taken while the machine was busier is slower all over: a name moved only if its
    share of the step moved too, the same way, by more than ``SHARE_MOVED``). Two runs of one file show
    nothing moved, on a busy machine too; a name called a different number of times always moved.
    """
    a = _by_diff_name(table(before, per_step=True))
    b = _by_diff_name(table(after, per_step=True))
    step_us = a[STEP].cpu_total_us if STEP in a else 1.0
    # a busy machine slows a whole profile alike: what moved is what moved beyond the step's own change
    scale = b[STEP].cpu_total_us / step_us if STEP in a and STEP in b and step_us > 0 else 1.0
    steps_a = steps_b = None
    changes = []
    for name in a.keys() | b.keys():
        old, new = a.get(name), b.get(name)
        with_step = within_noise = False
        if old is None:
            status = "added"
        elif new is None:
            status = "removed"
        else:
            delta = new.self_cpu_us - old.self_cpu_us
            same = old.calls == new.calls and (abs(delta) < max(5.0, SAME_SHARE * step_us)
                                               or abs(delta) <= 2 * noise * old.self_cpu_us)
            if not same and old.calls == new.calls:
                if steps_a is None:
                    steps_a, steps_b = self_per_step(before), self_per_step(after)
                beyond = new.self_cpu_us - old.self_cpu_us * scale  # its move beyond the whole step's
                same = within_noise = _within_step_noise(steps_a.get(name, []), steps_b.get(name, []), delta)
                with_step = not same and (
                    abs(beyond) < max(5.0, SHARE_MOVED * step_us * scale) or (beyond > 0) != (delta > 0)
                    or _within_step_noise([x * scale for x in steps_a.get(name, [])], steps_b.get(name, []), beyond))
                same = same or with_step
            if same:
                status = "same"
            else:
                status = "grown" if delta > 0 or (delta == 0 and new.calls > old.calls) else "shrunk"
        changes.append(Change(name, status, old, new, with_step, within_noise))
    changes.sort(key=lambda c: (-abs(c.self_delta_us), c.name))
    return changes



def _within_step_noise(a: list[float], b: list[float], delta: float) -> bool:
    """Whether a move of ``delta`` in the mean is within the 95% interval its per-step times allow."""
    import math
    from statistics import variance

    from .stats import t95

    if len(a) < 2 or len(b) < 2:
        return False
    se = math.sqrt(variance(a) / len(a) + variance(b) / len(b))
    return abs(delta) <= t95(min(len(a), len(b)) - 1) * se

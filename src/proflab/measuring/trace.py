"""The trace model: a Chrome trace file read into events and profiled steps.

The trace that ``tensorboard_trace_handler`` writes is JSON: a list of events,
each with a name, a category, a start ``ts`` and a duration ``dur`` in
microseconds. ``ProfilerStep#N`` events span one training step each; every
evidence metric (``metrics/``) takes its figure inside those steps, per step,
so traces with different numbers of profiled steps compare fairly.

This module holds what every metric shares, and nothing that measures: the
events, the steps, a ``Measure`` to hand back, and the helpers a metric counts
with (events inside the steps, the outermost of nested events, the length of
overlapping ranges, a tensor's element count). It imports no other part of the
kit but the trace reader, so any module may import it without a circle.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# The name of the range the profiler opens around each DataLoader.__next__ of a training loop.
DATALOADER_PREFIX = "enumerate(DataLoader)#"
# ... and around each step of a DataPipe's iteration (torchdata's pipes, with a DataLoader or without one).
DATAPIPE_PREFIX = "enumerate(DataPipe)#"
# The ranges of data loading: the step waiting for its next batch.
LOADING_PREFIXES = (DATALOADER_PREFIX, DATAPIPE_PREFIX)
# The range torch records around every optimizer.step() (its hooks run inside it).
OPTIMIZER_PREFIX = "Optimizer.step#"
# Trace categories of the work a GPU does: kernels, copies, memsets.
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# Trace categories of the host's calls that put that work on the device: the CUDA runtime's (cudaLaunchKernel,
# cudaMemcpyAsync, cudaGraphLaunch) and the driver's (cuLaunchKernel: Triton's and torch.compile's kernels).
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
# The events whose ``args`` are kept: operators (shapes, External id), launches and device work (correlation).
_ARGS_KEPT = ("cpu_op", *LAUNCH_CATEGORIES, *DEVICE_CATEGORIES)


class TraceError(ValueError):
    """A trace the kit cannot read or measure (not JSON, no profiled steps, no shapes recorded, written by a
    torch older than 2.x)."""


@dataclass(frozen=True)
class Event:
    name: str
    cat: str
    ts: float
    dur: float
    pid: Any
    tid: Any
    args: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class Trace:
    path: Path
    events: list[Event]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @functools.cached_property
    def steps(self) -> list[Event]:
        """The profiled steps on the host; on CUDA the trace also holds each step's range on the device
        (``gpu_user_annotation``), which is the same step again. (Found once: a trace's events do not change.)"""
        return sorted((e for e in self.events if e.name.startswith("ProfilerStep#") and not e.cat.startswith("gpu_")),
                      key=lambda e: e.ts)

    def within_steps(self, predicate: Callable[[Event], bool]) -> list[Event]:
        """The events ``predicate`` keeps that start inside a profiled step (found by bisection: a trace of
        thousands of steps is read in one pass)."""
        steps = self.steps
        starts = [s.ts for s in steps]
        found = []
        for e in self.events:
            if predicate(e):
                i = bisect.bisect_right(starts, e.ts) - 1
                if i >= 0 and e.ts < steps[i].end:  # the steps follow one another: the last to start before it
                    found.append(e)
        return found

    @property
    def on_cuda(self) -> bool:
        """Whether the trace holds device activity (it was profiled on CUDA)."""
        return any(e.cat in DEVICE_CATEGORIES for e in self.events)


@dataclass(frozen=True)
class Measure:
    """One figure from a trace, with the numbers behind it."""

    value: float
    unit: str
    summary: str
    details: dict[str, float] = field(default_factory=dict)


def load(path: str | Path) -> Trace:
    """The trace at ``path`` (``.json`` or ``.json.gz``); a ``TraceError`` says why not."""
    import zlib

    from .traces import read

    path = Path(path)
    try:
        raw = read(path)
    except (OSError, ValueError, EOFError, zlib.error) as e:  # zlib.error: a .gz cut short
        raise TraceError(f"cannot read trace {path}: {e}") from None
    return from_data(path, raw)


def from_data(path: str | Path, raw: dict[str, Any]) -> Trace:
    """A trace from its parsed JSON (read already, for instance to check and prepare it)."""
    path = Path(path)
    listed = raw.get("traceEvents", []) if isinstance(raw, dict) else None
    if not isinstance(listed, list):
        raise TraceError(f"{path.name} is not a profiler trace: its JSON is not an object with a list of "
                         "traceEvents")
    try:
        events = [
            Event(e["name"], e.get("cat", ""), float(e["ts"]), float(e.get("dur", 0.0)), e.get("pid"), e.get("tid"),
                  e.get("args") if e.get("cat") in _ARGS_KEPT else None)
            for e in listed
            if isinstance(e, dict) and e.get("ph") == "X" and "name" in e and "ts" in e
        ]
    except (TypeError, ValueError) as e:
        raise TraceError(f"{path.name} has an event the kit cannot read ({e})") from None
    _refuse_old_schema(path, listed)
    trace = Trace(path, events, raw)
    if not trace.steps:
        raise TraceError(f"{path} has no ProfilerStep# events: was it written with a profiler schedule?")
    return trace


# The categories torch 1.x's profiler filed its events under (torch 1.8: operators, runtime calls, kernels,
# copies, memsets, Python frames), which torch 2.x files under ``cpu_op``, ``cuda_runtime``, ``kernel``,
# ``gpu_memcpy``, ``gpu_memset`` and ``python_function``.
OLD_CATEGORIES = frozenset({"Operator", "Runtime", "Kernel", "Memcpy", "Memset", "Python"})


def _refuse_old_schema(path: Path, listed: list) -> None:
    """A trace from a torch older than the kit reads is refused, naming what it lacks: read as torch 2.x's, it
    would hold no operator and no launch (every figure 0), not an error."""
    seen = {e.get("cat") for e in listed if isinstance(e, dict) and e.get("ph") == "X"}
    if "cpu_op" in seen:
        return
    old = sorted(c for c in seen if c in OLD_CATEGORIES)
    if old:
        raise TraceError(f"{path.name} was written by an older torch than the kit reads: it has no cpu_op events "
                         f"(where torch 2.x records its operators), and its events are filed under "
                         f"{', '.join(old)}, torch 1.x's categories. Profile the run again with torch 2.x.")


def aten_ops(trace: Trace) -> list[Event]:
    """The ``aten::`` operators on the host (``cpu_op`` events) that start inside a profiled step, at any depth."""
    return trace.within_steps(lambda e: e.cat == "cpu_op" and e.name.startswith("aten::"))


def outermost(events: list[Event]) -> list[Event]:
    """The events not nested inside another of ``events`` on the same thread, in time order: the calls a
    program made itself, not those an operator runs inside itself."""
    kept: list[Event] = []
    outer_end: dict[tuple[str, str], float] = {}
    for e in sorted(events, key=lambda e: (str(e.pid), str(e.tid), e.ts, -e.dur)):
        thread = (str(e.pid), str(e.tid))
        if e.ts < outer_end.get(thread, float("-inf")):
            continue  # inside one already kept
        kept.append(e)
        outer_end[thread] = e.end
    return kept


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total time covered by possibly nested or overlapping intervals."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def numel(dims: Any) -> float:
    """The elements of a tensor from its recorded shape (``[8, 512]`` -> 4096); 0 for anything else."""
    if not isinstance(dims, list) or not dims or not all(isinstance(d, int) for d in dims):
        return 0.0
    out = 1.0
    for d in dims:
        out *= d
    return out


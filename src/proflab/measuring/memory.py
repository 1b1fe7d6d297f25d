"""Where memory is read from a trace: the ``[memory]`` events of ``profile_memory=True``.

With ``profile_memory=True`` the profiler records every allocation and every
free as an instant event named ``[memory]``: its ``args`` hold the block's
address (``Addr``), its size (``Bytes``, negative for a free), the
allocator's ``Total Allocated`` just after it, and the device (``Device
Type`` 0 for the CPU, 1 for CUDA, with its ``Device Id``). From them:

* ``curve``: memory allocated over the profiled steps, per device (the
  Profile tab's Memory view draws it);
* ``growth``: what each step leaves allocated behind it, in MB per step:
  the allocator's total at the end of each profiled step, from the first
  step's end to the last's, divided by the steps in between; on the device
  where it grows most;
* ``kept``: the allocations made in a profiled step and still not freed when
  the last profiled step ends, by the operator that made them (the innermost
  one running on the allocating thread): where the leaked memory came from.

A trace recorded without ``profile_memory`` (or by a PyTorch that records no
memory events on this device) holds none: that is said, never read as zero.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .evidence import Measure, Trace, TraceError

MB = 2**20
OUTSIDE = "(outside any operator)"


def device_of(args: dict[str, Any]) -> str:
    return "cpu" if args.get("Device Type", 0) == 0 else f"cuda:{args.get('Device Id', 0)}"


def events(trace: Trace) -> list[dict[str, Any]]:
    """The ``[memory]`` events inside the profiled steps, in time order."""
    steps = trace.steps
    first, last = steps[0].ts, steps[-1].end
    found = [e for e in trace.raw.get("traceEvents", [])
             if e.get("name") == "[memory]" and isinstance(e.get("args"), dict) and "ts" in e
             and first <= float(e["ts"]) <= last]
    return sorted(found, key=lambda e: float(e["ts"]))


def curve(trace: Trace) -> dict[str, Any]:
    """Memory allocated over the profiled steps, per device, and at each step's end."""
    marks = events(trace)
    steps = trace.steps
    if not marks:
        return {"recorded": False, "devices": {}, "top": [], "kept": []}
    first = steps[0].ts
    devices: dict[str, dict[str, Any]] = {}
    for e in marks:
        device = device_of(e["args"])
        d = devices.setdefault(device, {"t_ms": [], "allocated_mb": [], "peak_mb": 0.0, "peak_t_ms": 0.0})
        allocated = float(e["args"].get("Total Allocated", 0)) / MB
        d["t_ms"].append((float(e["ts"]) - first) / 1000.0)
        d["allocated_mb"].append(allocated)
        if allocated > d["peak_mb"]:
            d["peak_mb"], d["peak_t_ms"] = allocated, d["t_ms"][-1]
    for device, ends in _step_ends(marks, steps).items():
        devices[device]["step_end_mb"] = [round(v / MB, 3) for v in ends]
        devices[device]["growth_mb_per_step"] = round(_slope(ends) / MB, 3)
    return {"recorded": True, "devices": devices, "top": allocators(trace, marks), "kept": kept(trace, marks),
            "step_starts_ms": [(s.ts - first) / 1000.0 for s in steps]}


def _step_ends(marks: list[dict[str, Any]], steps) -> dict[str, list[float]]:
    """Per device, the allocator's total at the end of each profiled step: the last event before the
    step ends, carried over a step with no event of that device (and back, before its first)."""
    at_end: dict[str, list[float | None]] = {}
    last: dict[str, float] = {}
    i = 0
    for k, step in enumerate(steps):
        while i < len(marks) and float(marks[i]["ts"]) <= step.end:
            args = marks[i]["args"]
            last[device_of(args)] = float(args.get("Total Allocated", 0))
            i += 1
        for device, value in last.items():
            at_end.setdefault(device, [None] * len(steps))[k] = value
    out = {}
    for device, values in at_end.items():
        first = next(v for v in values if v is not None)
        out[device] = [first if v is None else v for v in values]
    return out


def _slope(ends: list[float]) -> float:
    """Bytes per step from the first step's end to the last's."""
    return (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else 0.0


def _innermost(events_: list[dict[str, Any]], marks: list[dict[str, Any]]) -> list[str]:
    """For each memory event, the innermost operator running on its thread when it happened."""
    ops = sorted((e for e in events_ if e.get("ph") == "X" and e.get("cat") == "cpu_op" and "ts" in e),
                 key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0))))
    open_ops: dict[tuple[str, str], list[dict]] = defaultdict(list)
    names, i = [], 0
    for m in marks:
        ts, thread = float(m["ts"]), (str(m.get("pid")), str(m.get("tid")))
        while i < len(ops) and float(ops[i]["ts"]) <= ts:
            op = ops[i]
            open_ops[(str(op.get("pid")), str(op.get("tid")))].append(op)
            i += 1
        stack = open_ops[thread]
        while stack and float(stack[-1]["ts"]) + float(stack[-1].get("dur", 0.0)) < ts:
            stack.pop()
        names.append(stack[-1]["name"] if stack else OUTSIDE)
    return names


def allocators(trace: Trace, marks: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The operators that allocate the most, per step (freed or not)."""
    marks = events(trace) if marks is None else marks
    steps = max(len(trace.steps), 1)
    allocated: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for m, name in zip(marks, _innermost(trace.raw.get("traceEvents", []), marks)):
        size = float(m["args"].get("Bytes", 0))
        if size > 0:
            allocated[name] += size
            count[name] += 1
    rows = [{"name": n, "allocated_mb": allocated[n] / MB / steps, "allocations": count[n] / steps}
            for n in allocated]
    return sorted(rows, key=lambda r: -r["allocated_mb"])[:15]


def kept(trace: Trace, marks: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The operators whose allocations outlive the profiled steps: made before the last profiled step
    began and not freed by its end, in MB per step (over the steps before the last)."""
    marks = events(trace) if marks is None else marks
    steps = trace.steps
    if len(steps) < 2:
        return []
    last_start = steps[-1].ts
    live: dict[tuple[str, Any], tuple[float, str, float]] = {}  # (device, address) -> (size, operator, ts)
    for m, name in zip(marks, _innermost(trace.raw.get("traceEvents", []), marks)):
        args = m["args"]
        key = (device_of(args), args.get("Addr"))
        size = float(args.get("Bytes", 0))
        if size > 0:
            live[key] = (size, name, float(m["ts"]))
        elif size < 0:
            live.pop(key, None)
    held: dict[str, float] = defaultdict(float)
    blocks: dict[str, int] = defaultdict(int)
    for size, name, ts in live.values():
        if ts < last_start:
            held[name] += size
            blocks[name] += 1
    before = len(steps) - 1
    rows = [{"name": n, "kept_mb": held[n] / MB / before, "blocks": blocks[n] / before} for n in held]
    return sorted(rows, key=lambda r: -r["kept_mb"])[:15]


def growth(trace: Trace) -> Measure:
    """What each profiled step leaves allocated behind it, in MB per step, on the device where it grows most.

    Raises TraceError for a trace with no memory events: recorded without
    ``profile_memory``, or by a PyTorch that records none on this device.
    """
    marks = events(trace)
    if not marks:
        raise TraceError(f"{trace.path.name} holds no memory events: it was recorded without "
                         "profile_memory=True, or by a PyTorch that records none on this device")
    ends = _step_ends(marks, trace.steps)
    slopes = {device: _slope(values) / MB for device, values in ends.items()}
    device = max(slopes, key=lambda d: slopes[d])
    per_step = slopes[device]
    top = kept(trace, marks)
    names = ", ".join(f"{r['name']} {r['kept_mb']:.1f} MB" for r in top[:3] if r["kept_mb"] >= 0.05)
    summary = (f"{per_step:+.1f} MB per step on {device} "
               f"({ends[device][0] / MB:.0f} → {ends[device][-1] / MB:.0f} MB allocated over "
               f"{len(trace.steps)} steps)")
    if names:
        summary += f"; kept, per step: {names}"
    return Measure(value=round(per_step, 2), unit="MB per step", summary=summary,
                   details={"growth_mb_per_step": per_step, "steps": float(len(trace.steps)),
                            "start_mb": ends[device][0] / MB, "end_mb": ends[device][-1] / MB,
                            **{f"kept:{r['name']}": r["kept_mb"] for r in top[:8]}})

"""Where memory is read from a trace: the ``[memory]`` events of ``profile_memory=True``.

With ``profile_memory=True`` the profiler records every allocation and every
free as an instant event named ``[memory]``: its ``args`` hold the block's
address (``Addr``), its size (``Bytes``, negative for a free), the
allocator's ``Total Allocated`` just after it, and the device (``Device
Type`` 0 for the CPU, 1 for CUDA, with its ``Device Id``). From them:

* ``curve``: memory allocated over the profiled steps, per device (the
  Profile tab draws it under Profile › Memory);
* ``growth``: what the steps leave allocated behind them, in MB per step:
  the blocks allocated in a profiled step before the last and still not
  freed when the last ends, on the device where they add up to most;
* ``kept``: the same blocks by the operator that allocated them (the
  innermost one running on the allocating thread): where the leaked memory
  came from.

A trace recorded without ``profile_memory`` (or by a PyTorch that records no
memory events on this device) holds none: that is said, never read as zero.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .trace import Measure, Trace, TraceError

MB = 2**20
KEPT_LISTED_MB = 0.001  # an operator keeping less per step (a few bytes of book-keeping) is left out of `kept`
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
    outliving = _outliving(trace, marks)  # one pass over the events, for both figures below
    kept_by_device = kept_per_step(outliving, len(steps))
    for device, ends in _step_ends(marks, steps).items():
        devices[device]["step_end_mb"] = [round(v / MB, 3) for v in ends]
        devices[device]["kept_mb_per_step"] = round(kept_by_device.get(device, 0.0), 3)
    return {"recorded": True, "devices": devices, "top": allocators(trace, marks), "kept": kept(outliving, len(steps)),
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


def _outliving(trace: Trace, marks: list[dict[str, Any]]) -> list[tuple[str, float, str]]:
    """The blocks allocated before the last profiled step began and still not freed when it ends:
    (device, bytes, the operator that allocated it)."""
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
    return [(key[0], size, name) for key, (size, name, ts) in live.items() if ts < last_start]


def kept(outliving: list[tuple[str, float, str]], steps: int) -> list[dict[str, Any]]:
    """The operators whose allocations outlive the profiled steps (``_outliving``), in MB per step over
    the ``steps`` profiled steps before the last: where the memory that stays allocated came from."""
    held: dict[str, float] = defaultdict(float)
    blocks: dict[str, int] = defaultdict(int)
    for _device, size, name in outliving:
        held[name] += size
        blocks[name] += 1
    before = max(steps - 1, 1)
    rows = [{"name": n, "kept_mb": held[n] / MB / before, "blocks": blocks[n] / before} for n in held
            if held[n] / MB / before >= KEPT_LISTED_MB]
    return sorted(rows, key=lambda r: -r["kept_mb"])[:15]


def kept_per_step(outliving: list[tuple[str, float, str]], steps: int) -> dict[str, float]:
    """Per device, the MB per step that the profiled steps before the last left allocated at the end."""
    per_device: dict[str, float] = defaultdict(float)
    for device, size, _name in outliving:
        per_device[device] += size
    before = max(steps - 1, 1)
    return {device: total / MB / before for device, total in per_device.items()}


def growth(trace: Trace) -> Measure:
    """What the profiled steps leave allocated behind them, in MB per step, on the device where it is most.

    Counted block by block: every block allocated in a profiled step before
    the last and not freed by the end of the last (the profiler sees the
    frees of blocks it saw allocated; a block allocated before profiling
    began is not counted either way). Memory a loop needs for a while and
    then gives back (one evaluation's buffers, until the next evaluation)
    is freed inside the window, so the window must end with the lab's
    periodic work: lab 5's last profiled step is an evaluation.

    Raises TraceError for a trace with no memory events: recorded without
    ``profile_memory``, or by a PyTorch that records none on this device
    (``profile_all_threads`` records none at all in torch 2.14).
    """
    marks = events(trace)
    if not marks:
        raise TraceError(f"{trace.path.name} holds no memory events: it was recorded without "
                         "profile_memory=True, or by a PyTorch that records none on this device")
    outliving = _outliving(trace, marks)
    per_device = kept_per_step(outliving, len(trace.steps)) or {device_of(marks[0]["args"]): 0.0}
    device = max(per_device, key=lambda d: per_device[d])
    per_step = per_device[device]
    ends = _step_ends(marks, trace.steps)
    top = kept(outliving, len(trace.steps))
    names = ", ".join(f"{r['name']} {r['kept_mb']:.1f} MB" for r in top[:3] if r["kept_mb"] >= 0.05)
    curve_ = ends.get(device, [0.0])
    summary = (f"{per_step:.1f} MB per step kept on {device}, never freed (allocated since the profiler "
               f"started: {curve_[0] / MB:.0f} → {curve_[-1] / MB:.0f} MB over the {len(trace.steps)} steps)")
    if names:
        summary += f"; most from {names}"
    return Measure(value=round(per_step, 2), unit="MB per step", summary=summary,
                   details={"kept_mb_per_step": per_step, "steps": float(len(trace.steps)),
                            "start_mb": curve_[0] / MB, "end_mb": curve_[-1] / MB,
                            **{f"kept:{r['name']}": r["kept_mb"] for r in top[:8]}})

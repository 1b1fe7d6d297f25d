"""What a profile says: where a step's time went, and a finding for each part that is a bottleneck.

Two readers share these findings. The Profile tab's Overview (``viewing.dashboard``)
shows ``overview_findings`` for any run, a lab's or not. ``proflab profile``
prints ``diagnose`` for a learner's own script: the same findings, and more that
a script of any kind may hold (memory kept from step to step, time spent
talking between ranks, the largest operators), each with what it costs per
step, where it was seen, and what to try, the costliest first.

A finding is a claim about the learner's code, so each has a bar set high
enough that a script without the bottleneck does not get it: a part of the
step only when it is a large share of the step, host reads only when there
are many per step or they take a share of it, memory only when it keeps
growing by a megabyte a step or more.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from . import breakdown
from .memory import growth
from .metrics.allreduce_traffic import ALLREDUCE_OPS, allreduce_calls
from .metrics.host_syncs import HostReads, counts_text, host_reads, placement
from .trace import LOADING_PREFIXES, Event, Trace, TraceError, aten_ops

# --- the Overview's findings (the Profile tab, for a lab's runs and any other) ----------------------------

# A part of the step this large gets a finding (shares of the host time per step): what is large and where
# (the diagnosis, always shown), and what to try (the prescription, held back in a lab's own runs until the
# learner asked for a hint or passed the lab: the lab is to find it from the profile).
FINDINGS = {
    "DataLoader wait": (0.3, "The DataLoader takes {share:.0%} of each step: the loop waits for its data "
                             "(the enumerate(DataLoader)#…__next__ ranges).",
                        "Load batches in the background: DataLoader(num_workers=…), and pin_memory=True on "
                        "CUDA."),
    "syncs": (0.2, "Host reads and syncs take {share:.0%} of each step: the host waits for the device or reads a "
                   "value back (.item(), .cpu(), .tolist(), printing a tensor).",
              "Keep values on the device, read them once in a while."),
    "other": (0.3, "Python between operators takes {share:.0%} of each step (the ProfilerStep# self time): many "
                   "small operations launched one by one from Python, or the host doing work of its own.",
              "Vectorise (one operator over a whole tensor), or fuse."),
}
READS = ("{reads:g} host reads per step, outside data loading and optimizer.step() ({names}): each read of a tensor into Python "
         "(.item(), .tolist(), .cpu(), float(t), if t:) stops the host until the value is ready, on CUDA until "
         "the device has caught up.")
READS_TRY = "Keep the values on the device and read them once per interval, not every step."
COMM = ("The ranks talk {share:.0%} of each step ({calls}); the all-reduces start inside the step, after the "
        "backward pass of a micro-batch that is not its last.")
COMM_TRY = ("Let DDP skip the all-reduce on every micro-batch but the last (model.no_sync()), and send fewer, "
            "larger buckets (bucket_cap_mb).")
COMM_SHARE = 0.3  # communication this large a share of the step gets a finding
DDP_FORWARD = "DistributedDataParallel.forward"
DEVICE_IDLE = "The device is busy only {busy:.0%} of each step: it waits for the host."
# Busy counts what the steps launched (``device``): none of it at all, the device sat idle through them.
DEVICE_IDLE_NONE = ("The device is idle throughout the profiled steps: no kernel, copy or memset launched inside them "
                    "ran; it waits for the host.")
DEVICE_IDLE_TRY = "Look at the host parts above, and at what launches the kernels."
DEVICE_IDLE_BELOW = 0.5


def device_idle_text(b: breakdown.Breakdown) -> str:
    """What the device-idle finding says: the share of each step the device works, or that it never did."""
    return DEVICE_IDLE_NONE if b.device_busy_ms <= 0 else DEVICE_IDLE.format(busy=b.device_busy_ms / b.step_ms)


def syncs_between_micro_batches(trace: Trace) -> bool:
    """Whether a step all-reduces between two of its DDP forward passes: after a micro-batch's backward,
    where gradient accumulation needs no all-reduce yet."""
    forwards = sorted(e.ts for e in trace.events if e.name == DDP_FORWARD)
    calls = [e.ts for e in trace.events if e.cat == "cpu_op" and e.name in ALLREDUCE_OPS]
    for step in trace.steps:
        inside = [t for t in forwards if step.ts <= t < step.end]
        if any(a < t < b for a, b in zip(inside, inside[1:]) for t in calls):
            return True
    return False


def overview_findings(trace: Trace, b: breakdown.Breakdown | None = None,
                      reads: HostReads | None = None) -> list[tuple[str, str]]:
    """The Overview's findings, (what and where, what to try), for the Profile tab; ``b`` and ``reads``, where
    the caller read them already."""
    b = b or breakdown.of(trace)
    reads = reads or host_reads(trace)
    found = [(text.format(share=b.share(part)), cure) for part, (limit, text, cure) in FINDINGS.items()
             if b.share(part) >= limit]
    if reads.in_step_per_step >= 1:
        found.append((READS.format(reads=reads.in_step_per_step, names=counts_text(reads.in_step)), READS_TRY))
    comm = allreduce_calls(trace) if b.comm_ms else None
    if comm is not None and b.step_ms and b.comm_ms / b.step_ms >= COMM_SHARE and syncs_between_micro_batches(trace):
        found.append((COMM.format(share=b.comm_ms / b.step_ms, calls=comm.summary), COMM_TRY))
    if trace.on_cuda and b.step_ms and b.device_busy_ms / b.step_ms < DEVICE_IDLE_BELOW:
        found.append((device_idle_text(b), DEVICE_IDLE_TRY))
    return found


# --- a script's diagnosis (proflab profile) ----------------------------------------------------------------

# The bars a script's own profile must clear for a finding (see the module's docstring).
SHARE = {"DataLoader wait": 0.2, "syncs": 0.15, "other": 0.35}
# What a read is made of in a trace, once per read (aten::item runs aten::_local_scalar_dense inside).
READ_EVENTS = frozenset({"aten::_local_scalar_dense", "aten::resolve_neg", "aten::nonzero",
                         "cudaStreamSynchronize", "cudaDeviceSynchronize"})
READ_NAMES = {"aten::_local_scalar_dense": "item()", "aten::resolve_neg": "tolist()", "aten::nonzero": "nonzero()",
              "cudaStreamSynchronize": "cudaStreamSynchronize", "cudaDeviceSynchronize": "cudaDeviceSynchronize"}
READS_PER_STEP = 8  # a read per sample, or per token: a loop reading tensors one value at a time
MEMORY_MB_PER_STEP = 1.0
# A finding that costs less than this share of the step here is said last, as minor (host reads on the
# CPU: each would wait for the device on CUDA, so they are said at all).
MINOR_SHARE = 0.05
TOP_OPERATORS = 5


@dataclass
class Finding:
    """One bottleneck: what it is and what it costs, where it was seen, what to try."""

    key: str  # "loader", "reads", "python", "comm", "device_idle", "memory"
    title: str
    what: str
    where: str
    cure: str
    ms: float = 0.0  # what it costs a step (0: not time, memory)
    share: float = 0.0  # of the step


@dataclass
class Diagnosis:
    steps: int
    step_ms: float
    on_cuda: bool
    parts: list[tuple[str, float, float]]  # (label, ms per step, share), largest first
    operators: list[tuple[str, float, float, float]]  # (name, ms per step, share of the operators, calls/step)
    findings: list[Finding] = field(default_factory=list)
    memory: str = ""  # what was read of memory, or why nothing was
    device_busy: float | None = None  # on CUDA, the share of each step the device works


# A frame of Python code in a trace recorded with_stack: "train.py(42): accuracy".
_FRAME = re.compile(r"^(?P<file>.+?\.py)\((?P<line>\d+)\): (?P<func>.+)$")
_LIBRARY = ("site-packages/", "dist-packages/", "/lib/python", "torch/", "<frozen", "runpy.py", "proflab/")


def _own_frame(name: str) -> bool:
    m = _FRAME.match(name)
    return bool(m) and not any(part in m["file"] for part in _LIBRARY)


def code_of(trace: Trace, events: list[Event] | Callable[[], list[Event]], what: str, limit: int = 3) -> list[str]:
    """Where in the script's own code ``events`` were made, most first: the innermost frame of its own
    files (not a library's) around each event, with how many of them (``what``: "operators", "reads") it made
    per step, from a trace recorded ``with_stack``; [] without one. ``events`` may be a function giving them,
    called only for a trace that has such frames."""
    frames = [e for e in trace.events if e.cat == "python_function" and _own_frame(e.name)]
    if not frames:
        return []
    if callable(events):
        events = events()
    if not events:
        return []
    by_thread: dict[tuple, list[Event]] = {}
    for f in frames:
        by_thread.setdefault((f.pid, f.tid), []).append(f)
    counts: Counter[str] = Counter()
    for e in events:
        around = [f for f in by_thread.get((e.pid, e.tid), ()) if f.ts <= e.ts and e.end <= f.end]
        if around:
            inner = min(around, key=lambda f: f.dur)
            counts[inner.name] += 1
    n = max(len(trace.steps), 1)
    return [f"{name} ({count / n:g} {what} per step)" for name, count in counts.most_common(limit)]


def _ms(part: str, b: breakdown.Breakdown) -> float:
    return b.host_ms[part]


def _loader(trace: Trace, b: breakdown.Breakdown) -> Finding | None:
    share = b.share("DataLoader wait")
    if share < SHARE["DataLoader wait"]:
        return None
    names = Counter(e.name for e in trace.within_steps(lambda e: e.name.startswith(LOADING_PREFIXES)))
    seen = ", ".join(names) or "enumerate(DataLoader)#…__next__"
    multi = any("MultiProcessing" in n for n in names)
    what = (f"The loop waits {_ms('DataLoader wait', b):.1f} ms of each {b.step_ms:.1f} ms step for its next "
            "batch: the data is decoded and transformed " +
            ("by worker processes that do not keep up." if multi else "in the training process, between steps."))
    cure = ("More worker processes (DataLoader(num_workers=…), up to the cores the machine gives), "
            "persistent_workers=True (workers kept between epochs), a larger prefetch_factor; less work per "
            "sample (decode once, cache); pin_memory=True on CUDA.")
    where = f"Trace timeline: {seen} in each ProfilerStep#; Profile › Overview, DataLoader wait"
    loading = [e for e in trace.events if e.name.startswith(LOADING_PREFIXES)]
    lines = code_of(trace, lambda: trace.within_steps(lambda e: e.cat == "cpu_op" and any(
        d.pid == e.pid and d.tid == e.tid and d.ts <= e.ts < d.end for d in loading)), "operators")
    if lines:
        where += "; in your code: " + "; ".join(lines)
    return Finding("loader", "DataLoader wait", what, where, cure, _ms("DataLoader wait", b), share)


def own_reads(trace: Trace) -> list[Event]:
    """The host reads the script's step makes (``READ_EVENTS``, one per read), those the libraries make for
    themselves left out: an optimizer reading its step counts (AdamW's ``.item()`` per parameter, inside
    ``Optimizer.step#…``) and a data set's code inside the DataLoader's ``__next__``."""
    where = placement(trace)
    return [e for e in trace.within_steps(lambda e: e.name in READ_EVENTS) if where(e) == "step"]


def _reads(trace: Trace, b: breakdown.Breakdown) -> Finding | None:
    events = own_reads(trace)
    n = max(len(trace.steps), 1)
    per_step = len(events) / n
    share = b.share("syncs")
    if per_step < READS_PER_STEP and (share < SHARE["syncs"] or not events):
        return None
    names = Counter(READ_NAMES.get(e.name, e.name) for e in events)
    said = ", ".join(f"{count / n:g} {name}" for name, count in names.most_common())
    # What they cost: the syncs' own time, or, for a loop of many reads (on the CPU each is quick, and the
    # loop's Python and small operators around them are what cost), the span of each step they cover.
    spans = []
    for step in trace.steps:
        inside = [e for e in events if step.ts <= e.ts < step.end]
        if inside:
            spans.append((max(e.end for e in inside) - min(e.ts for e in inside)) / 1000.0)
    span = sum(spans) / n if per_step >= READS_PER_STEP else 0.0
    cost = max(_ms("syncs", b), span)
    what = (f"{per_step:g} host reads per step ({said}), "
            + (f"made over {span:.1f} ms of each {b.step_ms:.1f} ms step (the loop around them; the reads "
               f"themselves {_ms('syncs', b):.1f} ms)" if span > _ms("syncs", b) else
               f"{_ms('syncs', b):.1f} ms of each step") +
            ": each read of a tensor into Python stops the host until the value is ready" +
            (", and the device's queue drains." if trace.on_cuda else
             "; a loop of them is Python work and small operators, one value at a time."))
    lines = code_of(trace, events, "reads")
    where = "Trace timeline: aten::item / aten::_local_scalar_dense" + (
        " and cudaStreamSynchronize" if trace.on_cuda else "") + " under each ProfilerStep#; Profile › " \
        "Operators, the Calls of aten::item"
    if lines:
        where += "; in your code: " + "; ".join(lines)
    cure = ("Keep the values on the device: sum them as tensors over the step (a metric over the whole batch "
            "in one operator), and read them once per interval, not per sample or per step.")
    return Finding("reads", "Host reads and syncs", what, where, cure, cost, cost / b.step_ms if b.step_ms else 0.0)


def _python(trace: Trace, b: breakdown.Breakdown) -> Finding | None:
    share = b.share("other")
    if share < SHARE["other"]:
        return None
    per_step: Counter[str] = Counter(e.name for e in aten_ops(trace))
    n = max(len(trace.steps), 1)
    busiest = ", ".join(f"{name} {calls / n:g}" for name, calls in per_step.most_common(3))
    what = (f"Python between operators takes {_ms('other', b):.1f} ms of each {b.step_ms:.1f} ms step "
            f"({share:.0%}): small operations launched one by one from Python, or the host doing work of its "
            "own between them.")
    where = ("Trace timeline: the gaps between operators under each ProfilerStep#; Profile › Operators, the "
             f"most called per step ({busiest})")
    lines = code_of(trace, lambda: trace.within_steps(lambda e: e.cat == "cpu_op" and e.name.startswith("aten::")),
                    "operators")
    if lines:
        where += "; in your code: " + "; ".join(lines)
    cure = "One operator over a whole tensor instead of a Python loop over its rows; fuse small operators " \
           "(torch.compile)."
    return Finding("python", "Python between operators", what, where, cure, _ms("other", b), share)


def _comm(trace: Trace, b: breakdown.Breakdown) -> Finding | None:
    if not b.comm_ms or not b.step_ms or b.comm_ms / b.step_ms < COMM_SHARE:
        return None
    calls = allreduce_calls(trace)
    between = syncs_between_micro_batches(trace)
    what = (f"The ranks talk {b.comm_ms:.1f} ms of each {b.step_ms:.1f} ms step ({calls.summary})" +
            (", and the all-reduces start after the backward pass of a micro-batch that is not its last."
             if between else "."))
    cure = COMM_TRY if between else ("Fewer, larger all-reduces (DDP's buckets, bucket_cap_mb) overlapped with "
                                     "the backward pass; no all-reduce of your own per parameter; less to send "
                                     "(gradients in bf16 on CUDA).")
    return Finding("comm", "Communication between ranks", what,
                   "Trace timeline: gloo:all_reduce (nccl kernels on CUDA) on the backend's threads; Profile › "
                   "Operators, the Calls of c10d::allreduce_", cure, b.comm_ms, b.comm_ms / b.step_ms)


def _device_idle(trace: Trace, b: breakdown.Breakdown) -> Finding | None:
    if not trace.on_cuda or not b.step_ms or b.device_busy_ms / b.step_ms >= DEVICE_IDLE_BELOW:
        return None
    idle = b.step_ms - b.device_busy_ms
    return Finding("device_idle", "Device idle", device_idle_text(b),
                   "Trace timeline: the gaps in the GPU's stream lanes under each ProfilerStep#", DEVICE_IDLE_TRY +
                   " The findings above say what the host does meanwhile.", idle, idle / b.step_ms)


def _memory(trace: Trace) -> tuple[Finding | None, str]:
    try:
        kept = growth(trace)
    except TraceError:
        return None, "memory not recorded (profile again with --memory to see what each step keeps)"
    said = kept.summary
    if kept.value < MEMORY_MB_PER_STEP:
        return None, said
    makers = [k.removeprefix("kept:") for k in kept.details if k.startswith("kept:")]
    where = "Profile › Memory: the curve climbs step after step; Kept: " + (", ".join(makers[:3]) or "see the tab")
    cure = ("Keep no tensor from one step to the next unless you need it: a loss or an output kept in a list holds "
            "its memory (and, with its graph, what the graph holds); keep .item() or .detach() of it, or "
            "nothing, and clear what you collect.")
    return Finding("memory", "Memory kept from step to step", f"{kept.value:.1f} MB per step stay allocated: "
                   f"{said}.", where, cure), said


def _operators(trace: Trace) -> list[tuple[str, float, float, float]]:
    from .operators import table

    # The step's own operators; not the backends' ranges of a collective (gloo:all_reduce on gloo's threads),
    # which overlap the step and each other (24 of them made 106 ms a 73.5 ms step): the communication
    # between ranks is its own finding, measured as the time they cover.
    rows = [r for r in table(trace) if r.name.startswith(("aten::", "c10d::"))]
    n = max(len(trace.steps), 1)
    key = (lambda r: r.self_device_us) if trace.on_cuda and any(r.self_device_us for r in rows) else \
        (lambda r: r.self_cpu_us)
    total = sum(key(r) for r in rows) or 1.0
    rows.sort(key=key, reverse=True)
    return [(r.name, key(r) / n / 1000.0, key(r) / total, r.calls / n) for r in rows[:TOP_OPERATORS]]


def diagnose(trace: Trace, b: breakdown.Breakdown | None = None) -> Diagnosis:
    """A script's profile read as the Overview reads it, and every finding, the costliest first; ``b``, where
    the caller read it already."""
    b = b or breakdown.of(trace)
    parts = sorted(((breakdown.LABELS[p], b.host_ms[p], b.share(p)) for p in breakdown.HOST_PARTS),
                   key=lambda part: -part[1])
    found = [f for f in (_loader(trace, b), _reads(trace, b), _python(trace, b), _comm(trace, b),
                         _device_idle(trace, b)) if f is not None]
    found.sort(key=lambda f: -f.ms)
    memory_finding, memory_said = _memory(trace)
    if memory_finding is not None:  # not time: after the findings that cost time, before the minor ones
        at = next((i for i, f in enumerate(found) if f.share < MINOR_SHARE), len(found))
        found.insert(at, memory_finding)
    for f in found:
        if f.ms and f.share < MINOR_SHARE:
            f.title += " (minor here)"
    return Diagnosis(steps=b.steps, step_ms=b.step_ms, on_cuda=trace.on_cuda, parts=parts,
                     operators=_operators(trace), findings=found, memory=memory_said,
                     device_busy=b.device_busy_ms / b.step_ms if trace.on_cuda and b.step_ms else None)

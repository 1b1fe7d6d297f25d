"""What the checker sees of a run from outside: its marks, stamped with the checker's clock, and the CPU
time of its processes and threads, read from ``/proc``.

The runner writes a mark at every step through a pipe (``B`` before the first step, ``W`` after each warm-up
step, ``S``, a ``T`` after each timed step, ``E``, ``P`` and ``Q`` around each profiled step, ``C`` and ``c``
around each compilation, ``H`` and the trace's SHA-256). A thread of the checker stamps each as it arrives
(``_read_marks``); at ``B``, the first ``W``, ``S``, ``E``, the first ``P``, the first ``Q`` (the end of the
profiler's warm-up step, which is not in the trace) and the last ``Q`` the run waits stopped while its CPU
time is read. At ``S`` and ``E`` the bytes its sandbox's network has sent are read too (``network_bytes``).
``_from_outside`` then replaces the run's own timings by these stamps, and fails a run whose marks or clock
disagree with them.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import processes, sandbox
from .readings import cpu_by_task, network_bytes, run_cpu_s, run_process
from .spec import RunSpec

Outcome = Any  # execute.Outcome: a run's status and result, which _from_outside rewrites from the stamps

# The window the runner reports may be shorter than the one seen from here by
# scheduling jitter only: a quarter, and 20 ms, is far beyond that.
CLOCK_SLACK = 0.75
CLOCK_SLACK_S = 0.02


@dataclass
class Marks:
    """What the checker saw of a run from outside: each mark stamped with its own clock."""

    stamps: list[tuple[str, float]] = field(default_factory=list)
    trace_sha256: str | None = None
    # at "B", "S", "E", the first "P" and the last "Q": CPU seconds per thread and process
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)
    wall: dict[str, float] = field(default_factory=dict)  # the wall clock (time.time) at "B" and "E"
    busy: list[float] = field(default_factory=list)  # at each "C" and "c": CPU seconds the whole run had used
    total: dict[str, float] = field(default_factory=dict)  # at "B", the first "W", "S" and "E": the run's CPU seconds
    cpu_in_ticks: bool = False  # some thread's time was read in clock ticks (no ``schedstat``), not in ns
    held: float = 0.0  # how long the run waited stopped at the checker's pauses: left out of every stamp
    exited: float | None = None  # when the run's own process ended (this process's clock), once it did
    final_cpu: float | None = None  # the run's CPU once all it started was gone: the kernel's count
    from_proc: bool = False  # some CPU reading fell back to a scan of /proc (no cgroup): not the kernel's count
    unpaused: list[str] = field(default_factory=list)  # the pausing marks at which the run did not stop
    channel: str = ""  # what the run did to the mark channel, seen from outside (a second handle, a swap)
    # at "S" and "E": the bytes sent over the sandbox's own network (its loopback), counted by the kernel;
    # absent where the run shares the machine's network (no sandbox: nothing there is the run's alone)
    net: dict[str, int] = field(default_factory=dict)

    def times(self, code: str) -> list[float]:
        return [t for c, t in self.stamps if c == code]


@dataclass
class Watched:
    """What the mark readers know of the run they stamp, as it starts and runs (``execute``), read at each
    mark: the run's processes once started, how its CPU is counted, its channel, its pauses, its draws."""

    pause: bool = False  # the run stops itself at its pausing marks until its CPU is read
    profile_steps: int = 0  # the last "Q" ends the profiled steps
    pipe: str | None = None  # the mark channel, as /proc links it ("pipe:[N]", "socket:[N]")
    mark_fd: int | None = None  # the descriptor the run was given it at
    draws: list[bytes] | None = None  # each step's inputs, handed out as the step begins (``labkit.handout``)
    given: int = 0  # the draws handed out so far
    cpu: Callable[[], float | None] | None = None  # the kernel's count of the run's CPU (its cgroup's)
    tree: Any = None  # the run's processes (``processes.Tree``, ``sandbox.Tree``), once it started
    members: list[int] | None = None  # its processes at the last scan


# The marks after which the run stops itself until its CPU time is read: the first of each, but the last "Q"
# (the end of the profiled steps), whose count the checker knows (``Watched.profile_steps``).
PAUSE_MARKS = "BWSEPQ"
# How long the checker waits for a run to stop itself at such a mark: the runner stops at once after
# writing it (microseconds of work), so only a machine too busy to schedule it for seconds takes longer.
PAUSE_WAIT_S = 3.0
TREE_WAIT_S = 2.0  # how long a mark may wait for the run's process tree to be known


def _paused(child: Watched, code: str, seen: set[str], marks: Marks, last_q: bool = False) -> int | None:
    """At a pausing mark (its first time; for "Q" its last), the run's own process once it has stopped
    itself (None for another mark, or a process that is not found): read it, then continue it (``_resume``).
    A run that does not stop there did not write the mark where the runner does: noted on ``marks``
    (``unpaused``), which fails the run, and its time is not held."""
    first_q = code == "Q" and "q" not in seen
    if code not in PAUSE_MARKS or (code in seen if code != "Q" else not (first_q or last_q)):
        return None
    seen.add("q" if code == "Q" else code)
    deadline = time.perf_counter() + TREE_WAIT_S
    while child.tree is None and time.perf_counter() < deadline:
        time.sleep(0.001)
    if child.tree is None:
        return None
    pid = run_process(child.tree)
    deadline = time.perf_counter() + PAUSE_WAIT_S
    while True:
        info = processes.stat(pid)
        if info is None or info[4] in ("Z", "X"):
            return None  # gone: the run's end says what happened
        if info[4] in ("T", "t"):
            return pid
        if time.perf_counter() >= deadline:
            marks.unpaused.append(code)
            return None
        time.sleep(0.0002)


def _run_cpu(child: Watched, marks: Marks) -> float:
    """CPU seconds the whole run has used so far: the kernel's count for its cgroup (``cgroups``), every
    process it ever started included; where there is none, a scan of its live processes in /proc."""
    counter = child.cpu
    if counter is not None:
        used = counter()
        if used is not None:
            return used
    marks.from_proc = True
    return run_cpu_s(child.tree, child.members) if child.tree is not None else 0.0


def _channel(child: Watched) -> str:
    """What the run has done to the mark channel, seen from outside in /proc (""): the run's own process
    must hold it at the descriptor the runner was given, and no process of the run at any other (a copy
    kept to write marks the runner did not). A process it forked inherits it at that same number."""
    pipe, expected = child.pipe, child.mark_fd
    if pipe is None or child.tree is None:
        return ""
    target = pipe  # the link /proc shows for it: "pipe:[N]", or "socket:[N]" where it runs both ways
    main = run_process(child.tree)
    held_by_main = False
    for pid in dict.fromkeys([main, *(child.members or [])]):
        info = processes.stat(pid)
        if info is None or info[4] in ("Z", "X"):
            if pid == main:
                return ""  # ended (a mark read late, on a busy machine): nothing to look at
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            if pid == main:
                return ""  # cannot be read from here: nothing said either way
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") != target:
                    continue
            except OSError:
                continue
            if int(fd) == expected:
                held_by_main = held_by_main or pid == main
                continue
            who = "its own process" if pid == main else f"process {sandbox.inner_pid(pid) or pid} of the run"
            return (f"{who} holds a second handle on the checker's mark channel (descriptor {fd}, a copy of "
                    f"descriptor {expected}): the marks are the runner's alone")
    if not held_by_main:
        info = processes.stat(main)
        if info is None or info[4] in ("Z", "X"):
            return ""  # it ended while it was looked at
        return (f"its own process no longer holds the checker's mark channel at descriptor {expected}: something "
                "closed or replaced it")
    return ""


def _resume(pid: int | None) -> float:
    """Continue the stopped run; the time just before it was continued. The run waited stopped at least
    until then, and this thread may be made to wait after it (on a busy machine, seconds): the time the
    run waited is counted up to the continue, never to whenever this thread runs again."""
    before = time.perf_counter()
    if pid is not None:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
    return before


def _read(pipe, n: int) -> bytes:
    """Up to ``n`` bytes of marks; none once the run has closed its end. A channel that runs both ways
    (a socket) reports a run that ended with draws it never read as reset, after every mark it sent."""
    try:
        return pipe.read(n)
    except ConnectionResetError:
        return b""


def _read_marks(fd: int, marks: Marks, child: Watched) -> None:
    """Stamp every mark the runner writes with this process's clock, until the pipe closes.

    At the first step's start and end, when the timed window opens and
    closes, and when the profiled steps begin and end, the CPU time of every thread and process of the run is read from
    /proc, from here, while the run waits stopped (``PAUSE_MARKS``); it is
    continued once read, and the time it waited is left out of the stamps.
    """
    seen: set[str] = set()
    looked: set[str] = set()
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while chunk := _read(pipe, 1):
            arrived = time.perf_counter()
            now = arrived - marks.held  # the time the run has waited stopped so far is left out
            code = chunk.decode("latin-1")
            last_q = code == "Q" and len(marks.times("Q")) + 1 == child.profile_steps
            first_q = code == "Q" and not marks.times("Q")  # the profiler's warm-up step, not in the trace, ends
            stopped = _paused(child, code, seen, marks, last_q) if child.pause else None
            if code in "BSEPQ" and code not in looked and not marks.channel:
                looked.add(code)
                marks.channel = _channel(child)
            if code == "H":
                digest = b""
                while len(digest) < 64 and (more := _read(pipe, 64 - len(digest))):
                    digest += more
                marks.trace_sha256 = digest.decode("latin-1") if marks.trace_sha256 is None else "twice"
            if ((code in ("B", "W", "S", "E", "P", "H") and code not in marks.total) or last_q) and child.tree is not None:
                # read at once: the kernel's count (else the processes last scanned: a scan takes longer)
                marks.total[code] = _run_cpu(child, marks)
            if first_q and child.tree is not None:
                marks.total["q"] = marks.total["Q"] if last_q else _run_cpu(child, marks)
            if (code in ("S", "E") or (code in "BP" and code not in marks.cpu) or last_q) and child.tree is not None:
                marks.cpu[code] = cpu_by_task(child.tree, marks)
            if code in ("S", "E") and code not in marks.net and child.tree is not None:
                sent = network_bytes(run_process(child.tree))
                if sent is not None:
                    marks.net[code] = sent
            if code in ("C", "c"):
                marks.busy.append(_run_cpu(child, marks) if child.tree is not None else 0.0)
            if code in ("B", "E"):
                marks.wall.setdefault(code, time.time())
            marks.stamps.append((code, now))
            if code in HANDOUT_MARKS and child.draws:
                _hand_out(pipe.fileno(), child)
            if stopped is not None:
                marks.held += _resume(stopped) - arrived


# The marks after which the next step begins (the first step's, B): where the checker hands out that step's
# inputs, in a lab that has them handed out (``labkit.handout``).
HANDOUT_MARKS = "BWTQ"


def _hand_out(fd: int, child: Watched) -> None:
    """Send the next step's draw down the channel (none past the run's last step)."""
    draws, given = child.draws, child.given
    if given >= len(draws):
        return
    child.given = given + 1
    try:
        os.write(fd, draws[given])
    except OSError:
        pass  # the run has closed its end: it is over, and its end says how


def _expected_marks(spec: RunSpec) -> str:
    return "B" + "W" * spec.warmup_steps + "S" + "T" * spec.timed_steps + "E" + "PQ" * spec.profile_steps


def _bad_marks(outcome: Outcome, marks: Marks, spec: RunSpec) -> str:
    """Why the marks cannot be trusted, or ""."""
    if marks.channel:
        return marks.channel
    if marks.unpaused:
        return (f"it did not stop where the runner stops after mark {marks.unpaused[0]} (the checker reads its "
                f"CPU there): marks written by anything but the runner count for nothing")
    steps = "".join(c for c, _ in marks.stamps if c not in "CcH")
    expected = _expected_marks(spec)
    if steps != expected:
        if not steps:
            return "no step reached the checker (the marks of its steps never arrived)"
        return (f"the marks of its steps reached the checker as {_abridge(steps)}, "
                f"not {_abridge(expected)}")
    compiling = "".join(c for c, _ in marks.stamps if c in "Cc")
    if compiling and not spec.compile_marks:
        return "compile marks arrived from a file that never mentions torch.compile"
    if compiling != "Cc" * (len(compiling) // 2) or len(compiling) % 2:
        return "its compile marks do not open and close in turn"
    has_trace = bool(outcome.result.get("trace"))
    if has_trace and (marks.trace_sha256 is None or len(marks.trace_sha256) != 64):
        return "the fingerprint of its trace did not reach the checker"
    if not has_trace and marks.trace_sha256 is not None:
        return "it sent the fingerprint of a trace it did not report"
    return ""


def _profiled_span(marks: Marks, what: str) -> tuple[float | None, float | None]:
    """When the kit's profiled steps began (the first "P") and its trace was written (the "H", else the last
    "Q"): by the stamps (``what`` = "times") or the run's CPU then ("total"); (None, None) in a run that was
    not profiled. What lies between is the profiled steps, which the trace and the timed steps answer for,
    and the kit's own writing of the trace, whose length is the trace's size: it is not the run's work after
    its window (``after_s``), which is the rest, up to the run's end."""
    if what == "times":
        ps, qs, hs = marks.times("P"), marks.times("Q"), marks.times("H")
        if not ps or not qs:
            return None, None
        return ps[0], (hs[0] if hs else qs[-1])
    total = marks.total
    if "P" not in total or ("H" not in total and "Q" not in total):
        return None, None
    return total["P"], total.get("H", total.get("Q"))


def _abridge(codes: str) -> str:
    """``BWWWSTTTE`` as ``B W×3 S T×3 E``."""
    parts, i = [], 0
    while i < len(codes):
        j = i
        while j < len(codes) and codes[j] == codes[i]:
            j += 1
        parts.append(codes[i] if j - i == 1 else f"{codes[i]}×{j - i}")
        i = j
    return " ".join(parts)


STEP_MARKS = "BWSTEPQ"


def _within_a_step(marks: Marks, a: float, b: float) -> bool:
    """Whether a compile span lies inside one step: torch.compile compiles within the step that calls it,
    so a span that holds a step's mark was written by the run, not the compiler, and earns nothing (were
    it credited, the step it closes in would also keep the first step's allowance for the same time)."""
    return not any(a < t < b for code, t in marks.stamps if code in STEP_MARKS)


def _compiling_s(marks: Marks, start: float, end: float, reads=None) -> float:
    """Seconds between ``start`` and ``end`` spent compiling (torch.compile), by the stamps, as far as the
    checker can corroborate them from outside: the marks come from inside the run, so each interval
    counts only as much CPU time as the whole run used during it (compiling is CPU work: a run waiting
    on storage, a peer or a sleep is not compiling), and not at all when the lab's storage served a read
    during it (reading data is not compiling)."""
    opened, closed = marks.times("C"), marks.times("c")
    busy = marks.busy if len(marks.busy) == len(opened) + len(closed) else []
    credited = 0.0
    for i, (a, b) in enumerate(zip(opened, closed)):
        overlap = max(0.0, min(b, end) - max(a, start))
        if not overlap:
            continue
        if (reads is not None and reads(a, b)) or not _within_a_step(marks, a, b):
            continue
        cpu = busy[2 * i + 1] - busy[2 * i] if busy else 0.0
        credited += max(0.0, min(overlap, cpu))
    return credited


def _compiling_cpu_s(marks: Marks, start: float, end: float) -> float:
    """CPU seconds the run used while compiling between ``start`` and ``end`` (torch.compile, marked)."""
    opened, closed = marks.times("C"), marks.times("c")
    if len(marks.busy) != len(opened) + len(closed):
        return 0.0
    return sum(max(0.0, marks.busy[2 * i + 1] - marks.busy[2 * i]) for i, (a, b) in enumerate(zip(opened, closed))
               if a >= start and b <= end and _within_a_step(marks, a, b))


def _clock_slow(inside_steps: Any, bounds: list[float]) -> bool:
    """Whether the run's clock ran slow in most of its timed steps, not only across the window: a mark
    this process stamped late (its thread waiting for the interpreter while the checker parsed a large
    file) lengthens one step by the checker's clock and shortens the next, where a changed clock shortens
    every step alike. Without the steps' times (a run that did not report them), the window decides."""
    outside = [b - a for a, b in zip(bounds, bounds[1:])]
    if (not isinstance(inside_steps, list) or len(inside_steps) != len(outside)
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in inside_steps)):
        return True
    slow = sum(mine < CLOCK_SLACK * theirs - CLOCK_SLACK_S / len(outside)
               for mine, theirs in zip(inside_steps, outside))
    return slow > len(outside) // 2


def _from_outside(outcome: Outcome, marks: Marks, spec: RunSpec, background_allowed: bool,
                  reads=None, compile_credit: bool = False) -> None:
    """Replace the run's own timings by the checker's stamps; fail a run whose marks or clock disagree.

    Besides the timed window, the stamps give what the checker needs to count
    the warm-up too (``checks.counted_step_s``): the span from the first step
    to the end of the window, the first step's time, and the time spent
    compiling (torch.compile, marked as it happens) during the warm-up.
    """
    why = _bad_marks(outcome, marks, spec)
    if why:
        outcome.status = "error"
        outcome.result = {"kind": "marks", "message": f"the checker could not follow its steps: {why}"}
        return
    r = outcome.result
    begin, warm_ends = marks.times("B")[0], marks.times("W")
    start, ends, end = marks.times("S")[0], marks.times("T"), marks.times("E")[0]
    inside = float(r.get("window_s", 0.0))
    outside = end - start
    r["reported"] = {"window_s": inside}
    inside_steps = r.pop("step_s", None)
    if inside < CLOCK_SLACK * outside - CLOCK_SLACK_S and _clock_slow(inside_steps, [start, *ends]):
        outcome.status = "error"
        outcome.result = {"kind": "clock", "message": (
            f"the timed steps took {outside * 1000:.0f} ms by the checker's clock, but "
            f"{inside * 1000:.0f} ms by the clock inside the run: something changed the clock")}
        return
    first_end = warm_ends[0] if warm_ends else start
    bounds = [start, *ends]
    r["step_times"] = [b - a for a, b in zip(bounds, bounds[1:])]
    every = [begin, *warm_ends, *ends]  # each step's end: step 0 also imports the file and builds the pipeline
    r["all_step_s"] = [b - a for a, b in zip(every, every[1:])]
    r["window_s"] = outside
    r["outside_window_s"] = outside
    r["mean_step_s"] = outside / max(spec.timed_steps, 1)
    r["span_s"] = end - begin  # from the first warm-up step to the end of the timed window
    # What the run did after its timed window, until its own process ended: its profiled steps, and
    # whatever else it ran there. Beyond what the original does there, it counts against the run
    # (``measures.after_allowance``): work moved out of the window is paid for where it went.
    ended = marks.exited - marks.held if marks.exited is not None else None
    profiled_from, profiled_to = _profiled_span(marks, "times")
    if ended is not None:
        r["after_s"] = max(0.0, ended - end) if profiled_from is None else \
            max(0.0, profiled_from - end) + max(0.0, ended - profiled_to)
    # Between the last profiled step and the trace's fingerprint ("Q" to "H") the kit stops the profiler and
    # writes the trace, for a time that grows with the trace; a file that rebinds the runner's helpers could
    # also work there, out of its profiled steps. It is counted beyond what the original takes there for a
    # trace of that size (``measures.after_allowance``).
    qs, hs = marks.times("Q"), marks.times("H")
    if qs and hs:
        r["trace_gap_s"] = max(0.0, hs[0] - qs[-1])
    credit = compile_credit  # ([timing] compile) elsewhere compiling is work like any other: nothing left out
    r["compile_s"] = _compiling_s(marks, begin, start, reads) if credit else 0.0
    if {"B", "W", "S", "E"} <= marks.total.keys() or ({"B", "S", "E"} <= marks.total.keys()
                                                     and not spec.warmup_steps):
        total = marks.total
        r["cpu_span_s"] = total["E"] - total["B"]  # what the checker's /proc says the run used, B to E
        r["cpu_window_s"] = total["E"] - total["S"]
        r["cpu_compile_s"] = _compiling_cpu_s(marks, begin, start) if credit else 0.0
        first_cpu = total.get("W", total["S"]) - total["B"]
        r["first_step_cpu_s"] = max(0.0, first_cpu - (_compiling_cpu_s(marks, begin, first_end) if credit else 0.0))
        if "Q" in total and "H" in total:
            r["cpu_trace_gap_s"] = max(0.0, total["H"] - total["Q"])
        n = spec.profile_steps
        if {"P", "q", "Q"} <= total.keys() and n >= 2 and "Q" in spec.pause_marks:
            # the profiler's warm-up step (not in the trace), and the traced steps' mean: both read while the
            # run waited stopped at their ends
            r["profiled_cpu_s"] = [total["q"] - total["P"], (total["Q"] - total["q"]) / (n - 1)]
        if marks.final_cpu is not None and not marks.from_proc:  # every process it ever started
            cpu_from, cpu_to = _profiled_span(marks, "total")
            r["cpu_after_s"] = max(0.0, marks.final_cpu - total["E"]) if cpu_from is None else \
                max(0.0, cpu_from - total["E"]) + max(0.0, marks.final_cpu - cpu_to)
    r["cpu_source"] = "/proc" if marks.from_proc else "cgroup"
    if {"S", "E"} <= marks.net.keys():  # every byte the run's network carried in its timed steps
        r["net_bytes_per_step"] = (marks.net["E"] - marks.net["S"]) / max(spec.timed_steps, 1)
    r["compile_marked_s"] = sum(max(0.0, min(b, start) - max(a, begin))
                                for a, b in zip(marks.times("C"), marks.times("c")))
    r["first_step_s"] = max(0.0, (first_end - begin) - (_compiling_s(marks, begin, first_end, reads) if credit else 0.0))
    r["counted_steps"] = spec.warmup_steps + spec.timed_steps - (1 if spec.warmup_steps else 0)
    profiled = [q - p for p, q in zip(marks.times("P"), marks.times("Q"))]
    r["profiled_step_s"] = sum(profiled) / len(profiled) if profiled else 0.0
    r["profiled_steps_s"] = profiled
    r["trace_sha256"] = marks.trace_sha256
    r["wall_window"] = [marks.wall.get("B", 0.0), marks.wall.get("E", 0.0)]
    r["beside_cpu_s"] = {what: {"busiest": task, "cpu_s": busy, "span_s": span}
                         for what, (task, busy, span) in _beside(marks, outside).items()}
    if not background_allowed:
        # the run's word that it ran on CUDA counts only where this machine has an NVIDIA driver to run it on
        on_device = str(r.get("device", "cpu")).startswith("cuda") and os.path.exists("/dev/nvidiactl")
        beside = _busy_beside(marks, outside, on_device=on_device)
        if beside:
            outcome.status = "error"
            outcome.result = {"kind": "background", "message": f"work went on beside the timed steps: {beside}"}


# A thread or process of the run other than the one running the steps may use a tenth of a window's time
# beside it, and at least this much: read from the scheduler (in ns) a thread that only wakes up now and then
# uses tens of microseconds; read in clock ticks (where there is no ``schedstat``), any thread may show one.
BESIDE_FLOOR_S = 0.0005
BESIDE_FLOOR_TICKS_S = 0.03


def _beside(marks: Marks, window_s: float) -> dict[str, tuple[str, float, float]]:
    """Per span (the timed steps; the profiled steps, whose operators the evidence counts): the busiest thread
    (other than the one running the steps) or other process of the run, its CPU seconds, the span's length.
    Only those the lab file's run could have started (not there before it was imported, ``B``), and over the
    profiled steps, only those the run had when its timed steps began."""
    spans = [("S", "E", window_s, "timed steps")]
    if "P" in marks.cpu and "Q" in marks.cpu and marks.times("P") and marks.times("Q"):
        spans.append(("P", "Q", marks.times("Q")[-1] - marks.times("P")[0], "profiled steps"))
    found = {}
    for first, last, span_s, what_steps in spans:
        before, after = marks.cpu.get(first, {}), marks.cpu.get(last, {})
        # Over the profiled steps, the threads and processes the run had when its timed steps began: those
        # the kit's own profiler starts after them (its trace collection, in a process that never profiled
        # before) are not the lab file's work.
        known = marks.cpu.get("S", after) if first == "P" else after
        kits = marks.cpu.get("B", {})  # there before the lab file was imported: the kit's, torch's own
        busy = {task: used - before.get(task, 0.0) for task, used in after.items() if task != "main"
                and task in known and task not in kits}
        top = max(busy, key=busy.get, default="")
        found[what_steps] = (top, busy.get(top, 0.0), span_s)
    return found


def _busy_beside(marks: Marks, window_s: float, on_device: bool = False) -> str:
    """Why work went on beside the steps, seen from outside the run: a thread or process busy during the timed
    window or the profiled steps beyond a tenth of it (and ``BESIDE_FLOOR_S``); or ""."""
    # On CUDA the driver's own threads (its event handler, the profiler's activity buffers) start with the
    # lab file's first call and wake as the device works: they keep the coarser floor there (not measured
    # on a GPU yet).
    floor = BESIDE_FLOOR_TICKS_S if marks.cpu_in_ticks or on_device else BESIDE_FLOOR_S
    for what_steps, (task, busy, span_s) in _beside(marks, window_s).items():
        if busy > max(floor, 0.1 * span_s):
            what = f"process {task.split(':', 1)[1]}" if task.startswith("proc:") else f"a thread ({task})"
            return (f"{what} used {busy * 1000:.1f} ms of CPU during the {span_s * 1000:.1f} ms of "
                    f"{what_steps} (seen from outside the run)")
    return ""

"""What the runner does beside the steps, inside the run's process: it writes the step marks down the
checker's channel (``marker``), marks each torch.compile compilation, imports ahead what torch imports lazily,
and reads the CPU its threads used beside the timed steps. The calls it makes are bound when the kit's runner
is imported, before any lab file runs: a file that patches ``os.write`` or ``os.kill`` changes nothing here.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from ..labkit import handout

_write = os.write
_fstat = os.fstat
_kill = os.kill
_getpid = os.getpid


def marker(fd: int | None, pause: str = ""):
    """Tell the checker, through a pipe, where each step starts and ends.

    The checker stamps every mark with its own clock, in its own process, and
    takes the timings from those stamps alone; what this process reports is
    only cross-checked against them. The marks, one byte each:

        B            the lab file is about to be imported (its first step starts here)
        W            a warm-up step ended
        S, T, E      the timed window starts, a timed step ended, the window ends
        P, Q         a profiled step starts, ends
        C, c         torch.compile starts, ends compiling (left out of the timing)
        H + 64 hex   the sha256 of the trace, sent as soon as it is written

    In lab 3 (``RunSpec.handout``) the channel is a socket that runs both
    ways: after B, W, T and Q, the checker sends the next step's draw, which
    the lab's data class reads as that step asks for its batch
    (``labkit.handout``).

    A run whose marks do not follow this order exactly is a failed run. A
    mark is only written to the pipe the checker gave: once that descriptor is
    closed, or holds another file, the marks stop (and the run fails).

    After each mark in ``pause`` (its first time: B, the first W, S, E and
    the first P; the first Q, the end of the profiler's warm-up step, which
    is not in the trace; and the last Q, the end of the profiled steps), the process stops itself (SIGSTOP) until the checker, which reads the
    run's CPU time from /proc at those marks, has read it and continues it
    (SIGCONT): the figure then holds exactly the work between the marks,
    however late a busy machine lets the checker read. A process that does
    not stop only adds its own work after the mark to its figure.
    """
    paused: set[bytes] = set()
    try:
        given = _fstat(fd) if fd is not None else None
    except OSError:
        given = None

    def mark(code: bytes, last: bool = True) -> None:
        if code in b"BWTQ" and handout.active():  # a step begins: its batch may be asked for
            handout.began()
        if given is None:
            return
        try:
            now = _fstat(fd)
            if (now.st_dev, now.st_ino) == (given.st_dev, given.st_ino):
                _write(fd, code)
                # the first of each pausing mark; of "Q", the first and the last (the profiler's warm-up step ends)
                again = (b"q" in paused and not last) if code == b"Q" else code in paused
                if code in pause.encode() and not again:
                    paused.add(b"q" if code == b"Q" else code)
                    _kill(_getpid(), signal.SIGSTOP)  # the checker reads this process's CPU, then continues it
        except OSError:
            pass
    return mark


def watch_compiling(mark) -> None:
    """Mark every torch.compile compilation (forward and the lazy backward), so it is left out of the timing."""
    try:
        from torch._dynamo.callback import callback_handler
    except Exception:  # noqa: BLE001 - older torch: no callbacks, compile time then counts
        return
    callback_handler.register_start_callback(lambda *args: mark(b"C"))
    callback_handler.register_end_callback(lambda *args: mark(b"c"))
    try:  # torch.compile() imports the compiler (Inductor) the first time it is called: a second, before the steps
        import torch

        torch.compile(lambda x: x)
    except Exception:  # noqa: BLE001 - the lab file's own call then reports what is wrong
        pass


def preimport() -> None:
    """Import now what torch imports lazily the first time an optimizer is built or a model compiled.

    torch.optim's first optimizer imports torch._dynamo, about a second on a
    2-core machine: start-up, not work, and it would otherwise land in the
    first step, which the checker lets a version spend only as long as the
    original's (see checks.first_step_allowance).
    """
    try:
        import torch._dynamo  # noqa: F401
    except Exception:  # noqa: BLE001 - the lab file's own import then reports what is wrong
        pass


def thread_cpu_s() -> dict[int, tuple[str, float]]:
    """CPU seconds used so far by each Python thread but this one (Linux: /proc; elsewhere: empty)."""
    import threading

    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    used = {}
    for thread in threading.enumerate():
        if thread is threading.current_thread() or not thread.native_id:
            continue
        try:
            fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used[thread.native_id] = (thread.name, (int(fields[11]) + int(fields[12])) / tick)
    return used


def background(before: dict[int, tuple[str, float]], window_s: float, workers_allowed: bool) -> str | None:
    """Work done beside the timed steps: a Python thread busy during them, or a multiprocessing child.

    Idle threads a library leaves behind (torch.compile's pool) do not count;
    a thread that used more than a tenth of the window's time (and 30 ms, or
    half the window where the window is shorter than 60 ms: lab 2's fixed
    steps take a millisecond, and a thread working ahead beside 16 of them
    used less than 30 ms in all) does, except the DataLoader's pin-memory thread. Worker processes count unless
    the lab allows them (lab 1's fix is DataLoader workers).
    """
    import multiprocessing

    for native_id, (name, cpu) in thread_cpu_s().items():
        busy = cpu - before.get(native_id, (name, 0.0))[1]
        if busy > max(min(0.03, 0.5 * window_s), 0.1 * window_s) and "pin_memory" not in name:
            return f"thread '{name}' used {busy * 1000:.0f} ms of CPU during the {window_s * 1000:.0f} ms of timed steps"
    children = [] if workers_allowed else multiprocessing.active_children()
    if children:
        return f"process '{children[0].name}' (pid {children[0].pid}) was running during the timed steps"
    return None

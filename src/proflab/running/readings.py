"""What the checker reads of a run's processes in /proc, from its own process: the CPU of each thread and
process (the scheduler's nanoseconds, ``schedstat``, or clock ticks), the run's own process inside its sandbox,
and the bytes its sandbox's own network carried."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import processes, sandbox


def _cpu_s(stat_path: str, waited_for: bool = False) -> float | None:
    """CPU seconds (user and system) from a /proc ``stat`` file, and with ``waited_for`` those of the children
    the process has waited for; None when it is gone."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11:15 if waited_for else 13]) / tick
    except (OSError, ValueError, IndexError):
        return None


def _precise_cpu_s(pid: int) -> float:
    """A process's CPU seconds: its live threads' run time from the scheduler (``schedstat``, in ns), or,
    where threads have exited since (their time is only in the process's own figure, in clock ticks), that
    figure when it is larger; and the children it has waited for. 0 when it is gone."""
    ticks = _cpu_s(f"/proc/{pid}/stat") or 0.0
    waited = (_cpu_s(f"/proc/{pid}/stat", waited_for=True) or 0.0) - ticks
    live = 0.0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                live += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        pass
    return max(live, ticks) + max(0.0, waited)


def run_cpu_s(tree: processes.Tree, members: list[int] | None = None) -> float:
    """CPU seconds the whole run has used so far, read from /proc, never reported by it: every process
    of its tree (``_precise_cpu_s``), and, in a sandbox, what the sandbox's first process and the fork
    server have reaped of it (an orphan that ended counts there)."""
    total = sum(_precise_cpu_s(pid) for pid in (members if members else tree.scan()))
    for pid in getattr(tree, "leave_out", ()):
        total += max(0.0, (_cpu_s(f"/proc/{pid}/stat", waited_for=True) or 0.0) - (_cpu_s(f"/proc/{pid}/stat") or 0.0))
    return total


def run_process(tree: processes.Tree) -> int:
    """The run's own process: the tree's first, or, where that is bubblewrap started for a fresh run (no
    fork server: on CUDA, a torch that loads the driver on import), the run inside it (bubblewrap, then the
    sandbox's first process, also bubblewrap, then the run). Found once, then kept."""
    found = getattr(tree, "run_process", None)
    if found is not None:
        return found
    pid = tree.root
    while _name(pid) == "bwrap":
        inside = sandbox.children(pid)
        if len(inside) != 1:
            return tree.root  # not started yet, or not bubblewrap's shape: asked again next time
        pid = inside[0]
    tree.run_process = pid
    return pid


def network_bytes(pid: int) -> int | None:
    """The bytes sent so far over the network the process ``pid`` is in, by the kernel's count of every
    interface (a sandbox has its loopback alone); None where that network is this process's own (a run
    without a sandbox shares the machine's, where other programs' traffic counts too) or cannot be read."""
    try:
        if os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            return None
        lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    except OSError:
        return None
    sent = 0
    for line in lines:  # "  lo: rx_bytes rx_packets ... (8 receive fields) tx_bytes ..."
        name, _, fields = line.partition(":")
        values = fields.split()
        if name.strip() and len(values) >= 9 and values[8].isdigit():
            sent += int(values[8])
    return sent


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _thread_cpu_s(pid: int, tid: str) -> tuple[float | None, bool]:
    """A thread's CPU seconds, from the scheduler's run time (``schedstat``, in ns, exact while the run waits
    stopped) where there is one, else from its ``stat`` in clock ticks; and whether it was read in ticks."""
    try:
        return int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9, False
    except (OSError, ValueError, IndexError):
        return _cpu_s(f"/proc/{pid}/task/{tid}/stat"), True


def cpu_by_task(tree: processes.Tree, marks: Any = None) -> dict[str, float]:
    """CPU seconds used so far by each thread of the run's process ("main" for the one running the steps)
    and each other process it started ("proc:PID"), from /proc; empty where there is no /proc. A reading
    in clock ticks is noted on ``marks`` (``marks.Marks``)."""
    pid = run_process(tree)
    used: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return used
    for tid in tids:
        cpu, in_ticks = _thread_cpu_s(pid, tid)
        if cpu is not None:
            used["main" if int(tid) == pid else f"tid {tid}"] = cpu
            if in_ticks and marks is not None:
                marks.cpu_in_ticks = True
    for other in tree.scan():
        if other != pid and os.path.exists(f"/proc/{other}/stat"):
            used[f"proc:{other}"] = _precise_cpu_s(other)
    return used

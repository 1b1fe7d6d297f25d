"""Every process a run starts, found and stopped, whatever session or group it moved to.

A lab file may start processes that leave the run's process group: a
``Popen(start_new_session=True)``, or a double fork with ``setsid``. So a run
is followed as a tree, not a group:

* this process becomes a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``):
  a process of the run whose parent exits is re-parented here instead of to
  init, so it is still found by its parent;
* the tree is walked from ``/proc``: every descendant of the run's first
  process, every member of its process group and of its session, and every
  child of this process that was not there before the run started;
* each process seen is remembered with its start time, so one that slipped
  out of all of these is still stopped, and a PID the kernel handed to an
  unrelated process since is never signalled.

Stopping is done in two passes: every process found is stopped (SIGSTOP) until
no new one appears, so a process cannot fork its way out while the tree is
killed, and then killed (SIGKILL) and reaped. The whole sequence runs with
SIGINT, SIGTERM and SIGHUP held back (``shielded``): a second Ctrl-C arrives
once nothing is left running, not half-way through.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
HELD_BACK = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_subreaper: bool | None = None


def become_subreaper() -> bool:
    """Make this process the one orphans of its descendants are re-parented to (Linux); once."""
    global _subreaper
    if _subreaper is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            _subreaper = False
    return _subreaper


@contextmanager
def shielded():
    """Hold SIGINT, SIGTERM and SIGHUP back while the body runs (main thread only); they arrive after it."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_BACK)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def stat(pid: int) -> tuple[int, int, int, int, str] | None:
    """(parent, process group, session, start time, state) of a process, from /proc; None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        fields = text.rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]), fields[0]
    except (OSError, ValueError, IndexError):
        return None


def _pids() -> list[int]:
    """Every process /proc lists now."""
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []


def _all() -> dict[int, tuple[int, int, int, int, str]]:
    return {pid: info for pid in _pids() if (info := stat(pid)) is not None}


def command_lines() -> dict[int, bytes]:
    """Every process's command line as /proc holds it (arguments ended by NUL bytes); a process that has
    exited (a zombie) has none, and is left out."""
    found = {}
    for pid in _pids():
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if line:
            found[pid] = line
    return found


# The checker's own helper processes (nvidia-smi asked for a run's device memory): children of this process
# that no run started, never taken for a run's. Started and registered under the lock a scan reads /proc under.
_helpers: set[int] = set()
_helpers_lock = threading.Lock()


def helper(argv: list[str], timeout: float) -> str:
    """Run one of the checker's own commands, and return what it printed ("" when it fails or is missing)."""
    try:
        with _helpers_lock:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
            _helpers.add(proc.pid)
    except OSError:
        return ""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        out = ""
    finally:
        with _helpers_lock:
            _helpers.discard(proc.pid)
    return out


def children_of_mine() -> set[int]:
    me = os.getpid()
    return {pid for pid, info in _all().items() if info[0] == me}


class Tree:
    """The processes of one run: its first process ``root`` (a session and group leader) and all it starts."""

    def __init__(self, root: int, others_before: set[int] | None = None, parent: int | None = None):
        self.root = root
        self.me = os.getpid()
        # The root's parent: this process, or the fork server that forked it (``forkserver``).
        self.parent = parent or self.me
        # This process's other children (a TensorBoard a test started, say) are not the run's.
        self.before = set(others_before if others_before is not None else children_of_mine()) - {root}
        self.seen: dict[int, int] = {}  # pid -> start time, of every process of the run seen so far
        self.left_session: set[int] = set()  # processes of the run seen in a session of their own
        self.survivors: list[int] = []  # alive after ``kill``
        self._lock = threading.Lock()

    def scan(self) -> list[int]:
        """The run's processes alive now (zombies left out), the root first when alive."""
        with _helpers_lock:
            procs = _all()
            for pid in _helpers:  # the checker's own, not the run's
                procs.pop(pid, None)
        with self._lock:
            root_info = procs.get(self.root)
            if root_info is not None and self.root not in self.seen and root_info[0] == self.parent:
                self.seen[self.root] = root_info[3]
            # Once the root is gone, its PID may be given to an unrelated process: not followed then.
            reused = root_info is not None and self.seen.get(self.root) != root_info[3]
            kids: dict[int, list[int]] = {}
            for pid, info in procs.items():
                kids.setdefault(info[0], []).append(pid)
            found: set[int] = set()
            todo = ([] if reused else [self.root]) + [pid for pid in kids.get(self.me, []) if pid not in self.before]
            for pid, info in procs.items():
                if pid == self.me:
                    continue
                if not reused and (info[1] == self.root or info[2] == self.root):  # the run's group or session
                    todo.append(pid)
                elif self.seen.get(pid) == info[3]:  # seen before (same start time: the same process)
                    todo.append(pid)
            while todo:
                pid = todo.pop()
                if pid in found or pid == self.me or pid not in procs:
                    continue
                found.add(pid)
                todo.extend(kids.get(pid, []))
            for pid in found:  # found through the tree itself: this is the process now holding the PID
                self.seen[pid] = procs[pid][3]
                if procs[pid][2] != self.root and pid != self.root:
                    self.left_session.add(pid)
            alive = [pid for pid in found if procs[pid][4] not in ("Z", "X")]
        return sorted(alive, key=lambda pid: pid != self.root)

    def _signal_all(self, pids: list[int], sig: int) -> None:
        for pid in pids:
            info = stat(pid)
            if info is None or self.seen.get(pid) != info[3]:
                continue  # gone, or the PID now belongs to another process
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self, timeout_s: float = 5.0) -> list[int]:
        """Stop every process of the run, then kill them all; returns the PIDs killed (``survivors`` then
        lists any still alive: a process stuck in the kernel)."""
        killed: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            stopped: set[int] = set()
            while time.monotonic() < deadline:  # freeze the tree: a stopped process cannot fork
                alive = [pid for pid in self.scan() if pid not in stopped]
                if not alive:
                    break
                self._signal_all(alive, signal.SIGSTOP)
                stopped.update(alive)
            if not stopped:
                break
            self._signal_all(sorted(stopped), signal.SIGKILL)
            killed |= stopped
            self._reap(stopped)
            time.sleep(0.01)
        self._reap(set(self.seen))
        self.survivors = self.scan()
        return sorted(killed)

    def _reap(self, pids: set[int]) -> None:
        """Collect the exit status of the run's processes that were re-parented here (not the root: its
        Popen, or the fork server, does that), so none is left a zombie."""
        for pid in pids:
            if pid == self.root:
                continue
            info = stat(pid)
            if info is None or info[0] != self.me:
                continue
            for _ in range(50):
                try:
                    done, _status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if done:
                    break
                time.sleep(0.002)

"""The CPU a run used, counted by the kernel: a control group (cgroup) per run server, or per fresh run.

A scan of a run's live processes from ``/proc`` misses what it hides: a child
that exited and was never reaped (a zombie's time is in no live process's
figure), a process that left the tree between two scans. The kernel's CPU
accounting does not: every process started inside a cgroup stays in it, and
the cgroup's usage holds the CPU time of every task that ever ran in it,
exited or not, reaped or not.

* cgroup v1 (this kit's Linux servers, as root): a group made under the
  ``cpuacct`` hierarchy, read from ``cpuacct.usage`` (nanoseconds);
* cgroup v2 (laptops): a group made below this process's own, where that is
  delegated to its user (``systemd-run --user --scope``, or root), read from
  ``cpu.stat``'s ``usage_usec``.

A process enters its group before it execs (``enter``, run in the forked
child, as ``subprocess.Popen``'s ``preexec_fn``), so nothing it starts is
outside it. Where no group can be made, ``available()`` says why, and the
checker falls back to ``/proc`` (``proflab doctor`` says which is used and
what is then not seen).
"""

from __future__ import annotations

import functools
import itertools
import os
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup/cpuacct")
V2_ROOT = Path("/sys/fs/cgroup")
PARENT = "proflab"
_count = itertools.count()


@functools.lru_cache(maxsize=1)
def _where() -> tuple[str, Path | None, str]:
    """(kind, folder new groups are made in, why not): "v1" or "v2" and a folder, or "" and the reason."""
    if os.environ.get("PROFLAB_CGROUPS") == "off":  # the kit's own tests of the fallback
        return "", None, "cgroups turned off (PROFLAB_CGROUPS=off)"
    if (V1_ROOT / "cpuacct.usage").exists():
        base = V1_ROOT / PARENT
        try:
            base.mkdir(exist_ok=True)
            probe = base / f"probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            probe.rmdir()
            return "v1", base, ""
        except OSError as e:
            return "", None, f"cannot make a cpuacct cgroup ({e.strerror or e}: run as root, or on cgroup v2)"
    if (V2_ROOT / "cgroup.controllers").exists():
        try:
            own = next(line.split("::", 1)[1] for line in Path("/proc/self/cgroup").read_text().splitlines()
                       if line.startswith("0::"))
        except (OSError, StopIteration):
            return "", None, "this process's cgroup (v2) cannot be read"
        mine = V2_ROOT / own.lstrip("/")
        try:
            base = mine / PARENT
            base.mkdir(exist_ok=True)
            probe = base / f"probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            ok = (probe / "cgroup.procs").exists() and os.access(probe / "cgroup.procs", os.W_OK) \
                and os.access(mine / "cgroup.procs", os.W_OK)
            probe.rmdir()
            if ok:
                return "v2", base, ""
        except OSError:
            pass
        return "", None, ("this process's cgroup (v2) is not delegated to its user: start the kit under "
                          "`systemd-run --user --scope`, or as root")
    return "", None, "no cgroup CPU accounting on this machine (not Linux, or no cpuacct)"


def available() -> tuple[bool, str]:
    """Whether runs' CPU is counted by a cgroup here, and if not, why not."""
    kind, _, why = _where()
    return bool(kind), why


def describe() -> str:
    kind, base, why = _where()
    if kind:
        return (f"counted by the kernel: a cgroup {kind} per run server ({base}); every process a run starts, "
                "reaped or not, is counted")
    return (f"read from /proc ({why}): the live processes of a run are counted, not a child it leaves "
            "unreaped after it exits")


class Group:
    """One cgroup, made now; ``None``-safe to use where none can be made (``make``)."""

    def __init__(self, kind: str, path: Path):
        self.kind, self.path = kind, path
        self._procs = str(path / "cgroup.procs")
        self._usage = str(path / ("cpuacct.usage" if kind == "v1" else "cpu.stat"))

    def enter(self) -> None:
        """Put the calling process in the group: in a forked child before it execs (``preexec_fn``). Kept
        to one ``write``: nothing here may take a lock the parent held."""
        fd = os.open(self._procs, os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)

    def add(self, pid: int) -> bool:
        try:
            fd = os.open(self._procs, os.O_WRONLY)
            try:
                os.write(fd, str(pid).encode())
            finally:
                os.close(fd)
            return True
        except OSError:
            return False

    def usage_s(self) -> float | None:
        """CPU seconds every task that ever ran in the group used; None where it cannot be read."""
        try:
            with open(self._usage, "rb") as f:
                text = f.read().decode()
        except OSError:
            return None
        try:
            if self.kind == "v1":
                return int(text.strip()) / 1e9
            for line in text.splitlines():
                if line.startswith("usage_usec"):
                    return int(line.split()[1]) / 1e6
        except (ValueError, IndexError):
            pass
        return None

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in Path(self._procs).read_text().split()]
        except (OSError, ValueError):
            return []

    def remove(self) -> None:
        """Remove the group once it is empty (every process of it gone); a group still holding one stays."""
        try:
            self.path.rmdir()
        except OSError:
            pass


def entering(group: "Group | None"):
    """A ``preexec_fn`` that puts the new process in ``group`` (None: nothing to do). A failure leaves it
    outside, which the caller sees (``Group.pids``), never a failed start."""
    if group is None:
        return None

    def enter() -> None:
        try:
            group.enter()
        except OSError:
            pass
    return enter


def make(label: str) -> Group | None:
    """A new, empty group for ``label`` (a run server, a run); None where groups cannot be made."""
    kind, base, _ = _where()
    if not kind:
        return None
    _tidy(base)
    path = base / f"{os.getpid()}-{next(_count)}-{label}"
    try:
        path.mkdir()
    except OSError:
        return None
    return Group(kind, path)


_tidied = False


def _tidy(base: Path) -> None:
    """Once per process: remove the empty groups a checker that was killed left behind."""
    global _tidied
    if _tidied:
        return
    _tidied = True
    try:
        for old in base.iterdir():
            if old.is_dir():
                pid = old.name.split("-", 1)[0]
                if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                    try:
                        old.rmdir()
                    except OSError:
                        pass
    except OSError:
        pass


def own_cpu_s(pids) -> float:
    """CPU seconds used by the processes ``pids`` themselves (every thread, from the scheduler, in ns; not
    their children): a server's own share of its group, which is not its runs'."""
    total = 0.0
    for pid in {p for p in pids if p}:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    total += int(f.read().split()[0]) / 1e9
            except (OSError, ValueError, IndexError):
                pass
    return total

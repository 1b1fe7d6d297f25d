"""Turns at the machine: every measured round of every proflab on the machine takes a slot first.

Thirty learners checking at once on one server, or a gate beside other jobs
on a CI runner, would time each other's runs. So a measured round (a check's
paired runs, a gate's, ``proflab run``'s timed run) first takes one of the
machine's *slots*, and gives it back after. A slot is a lock file in a folder
every user of the machine shares (``/tmp/proflab-slots``, or
``PROFLAB_SLOTS``), held with ``flock``: the kernel gives it back when its
holder ends, however it ends (SIGKILL included), so a killed check never
keeps one.

* **How many**: one per ``CORES_PER_SLOT`` cores this process may use (2,
  or ``PROFLAB_SLOT_CORES``): a lab's run uses one core for its steps, and
  the other is left to the checker and the machine. A 2-core machine has one
  slot; a 32-core server sixteen.
* **Pinned**: where there are several slots, each has its own cores, and the
  processes of a run that holds it are pinned to them (``sched_setaffinity``),
  so two runs side by side never share a core.
* **In turn**: a check that waits puts a ticket in the queue (a file it holds
  locked, so a ticket whose owner died is seen as dead and skipped) and takes
  a slot when it is first in line; it says how many are ahead of it. The
  wait is not measured and not counted in the check's time budget.

Nested turns (a check inside a grading) take one slot, the outer one.
"""

from __future__ import annotations

import contextvars
import fcntl
import os
import secrets
import stat
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

FOLDER_ENV = "PROFLAB_SLOTS"
CORES_ENV = "PROFLAB_SLOT_CORES"
CORES_PER_SLOT = 2
POLL_S = 0.1
WAITING = "waiting for a turn on this machine"  # how every message about a wait begins


@dataclass
class Slot:
    index: int
    cores: tuple[int, ...] | None  # pinned to these cores; None: all of them (a single slot)
    waited_s: float = 0.0

    def take_wait(self) -> float:
        """The wait for this turn, told once: to whoever takes it first (a turn inside it then claims none)."""
        waited, self.waited_s = self.waited_s, 0.0
        return waited


_current: contextvars.ContextVar[Slot | None] = contextvars.ContextVar("proflab_slot", default=None)


def current() -> Slot | None:
    """The slot this process holds now, in this context."""
    return _current.get()


def folder() -> Path:
    """The machine's slot folder, shared by every user (sticky and writable by all, as /tmp is)."""
    given = os.environ.get(FOLDER_ENV)
    shared = Path(given) if given else Path(tempfile.gettempdir()) / "proflab-slots"
    # where the shared folder cannot be used (made by another user without room for others), one of this
    # user's own: its checks still take turns with each other
    for path in (shared, shared.with_name(f"{shared.name}-{os.geteuid()}")):
        try:
            for sub in (path, path / "queue"):
                sub.mkdir(exist_ok=True)
                if sub.stat().st_uid == os.geteuid():
                    os.chmod(sub, 0o1777)
            if os.access(path, os.W_OK | os.X_OK) and os.access(path / "queue", os.W_OK | os.X_OK):
                return path
        except OSError:
            continue
    raise OSError(f"no folder for turns at the machine: {shared} cannot be made or written")


def cores_per_slot() -> int:
    try:
        return max(1, int(os.environ.get(CORES_ENV, CORES_PER_SLOT)))
    except ValueError:
        return CORES_PER_SLOT


def layout() -> list[tuple[int, ...] | None]:
    """Each slot's cores: the cores this process may use, cut into groups of ``cores_per_slot``."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    per = cores_per_slot()
    count = max(1, len(cpus) // per)
    if count == 1:
        return [None]
    return [tuple(cpus[i * per:(i + 1) * per]) for i in range(count)]


def _open_shared(path: Path) -> int:
    """A lock file every user can open (created readable and writable by all)."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)  # flock needs no write access: any user opens it
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, 0o666)
    except OSError:
        pass
    return fd


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def _ahead(queue: Path, mine: str) -> int:
    """Live tickets before ``mine`` in the queue (a ticket nobody holds is a dead waiter's: removed)."""
    count = 0
    for ticket in sorted(p.name for p in queue.iterdir() if not p.name.startswith(".")):
        if ticket >= mine:
            break
        try:
            fd = os.open(queue / ticket, os.O_RDONLY)
        except OSError:
            continue
        try:
            if _try_lock(fd):  # nobody holds it: its waiter is gone
                try:
                    os.unlink(queue / ticket)
                except OSError:
                    pass
                continue
        finally:
            os.close(fd)
        count += 1
    return count


@contextmanager
def turn(on_wait: Callable[[str], None] = lambda message: None) -> Iterator[Slot]:
    """Hold one of the machine's slots for the body; ``on_wait`` hears where this turn is in the queue."""
    held = _current.get()
    if held is not None:  # a turn inside a turn: the outer one's slot; its wait told once, to the first inside
        claimed = held.take_wait()
        yield Slot(held.index, held.cores, claimed)
        return
    try:
        base = folder()
    except OSError as e:
        from .. import errors

        raise errors.KitError(f"{e}; set PROFLAB_SLOTS to a folder every user of the machine can write") from None
    cores = layout()
    started = time.perf_counter()
    ticket = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}"
    # locked before it is in the queue (made under a hidden name, then renamed): never seen unheld
    ticket_fd = _open_shared(base / "queue" / f".{ticket}")
    fcntl.flock(ticket_fd, fcntl.LOCK_EX)
    os.rename(base / "queue" / f".{ticket}", base / "queue" / ticket)
    slot_fd, index, said = -1, -1, None
    try:
        while index < 0:
            ahead = _ahead(base / "queue", ticket)
            if ahead < len(cores):  # first in line, or a slot for each turn ahead
                for i in range(len(cores)):
                    fd = _open_shared(base / f"slot-{i}")
                    if _try_lock(fd):
                        slot_fd, index = fd, i
                        break
                    os.close(fd)
            if index < 0:
                slots_here = f"{len(cores)} slot{'s' if len(cores) != 1 else ''} on this machine"
                message = (f"{WAITING}: {ahead} ahead in the queue ({slots_here}, all measuring); "
                           "the wait is not counted" if ahead else
                           f"{WAITING}: next in the queue ({slots_here}, all measuring); the wait is not counted")
                if message != said:
                    on_wait(message)
                    said = message
                time.sleep(POLL_S)
    finally:
        try:
            os.unlink(base / "queue" / ticket)
        except OSError:
            pass
        os.close(ticket_fd)
    slot = Slot(index, cores[index], time.perf_counter() - started)
    token = _current.set(slot)
    try:
        yield slot
    finally:
        _current.reset(token)
        os.close(slot_fd)  # gives the slot back


def pin(pids: list[int]) -> None:
    """Pin the processes of a run to the cores of the slot held now (nothing where there is one slot)."""
    slot = _current.get()
    if slot is None or slot.cores is None or not hasattr(os, "sched_setaffinity"):
        return
    wanted = set(slot.cores)
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                if os.sched_getaffinity(int(tid)) != wanted:
                    os.sched_setaffinity(int(tid), wanted)
        except (OSError, ValueError):
            pass  # gone, or not ours to pin


def holders() -> list[int]:
    """The slots held now, by index (for reports and tests)."""
    base = folder()
    held = []
    for path in sorted(base.glob("slot-*")):
        if not stat.S_ISREG(path.stat().st_mode):
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            if _try_lock(fd):
                fcntl.flock(fd, fcntl.LOCK_UN)
            else:
                held.append(int(path.name.split("-")[1]))
        finally:
            os.close(fd)
    return held

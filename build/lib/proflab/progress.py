"""The progress file: each lab's status and the hints a learner has seen.

``.proflab/progress.json``, written atomically, so a Ctrl-C never leaves it
half-written. Statuses: not started, failing, passed.

Every read-modify-write holds an exclusive ``flock`` on
``.proflab/progress.lock``, so commands run at once (four ``proflab hint`` in
four terminals) never lose each other's updates.

Nothing in the file is lost silently: a file that is not JSON, or not shaped
as a record of progress, is moved aside to ``progress.json.corrupt-<UTC
stamp>`` (never deleted) and the kit goes on from an empty record; a file with
some entries the kit cannot read keeps the others, and the original is moved
aside the same way. Either way one warning line on stderr names both paths.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from . import atomic, paths

NOT_STARTED, FAILING, PASSED = "not started", "failing", "passed"
STATUSES = (NOT_STARTED, FAILING, PASSED)

T = TypeVar("T")


def _path() -> Path:
    return paths.state_dir() / "progress.json"


def _lock_path() -> Path:
    return paths.state_dir() / "progress.lock"


# --- warnings ------------------------------------------------------------------

_warned: set[str] = set()


def warn(message: str) -> None:
    """One line on stderr (once per message per process): the kit goes on."""
    if message in _warned:
        return
    _warned.add(message)
    from rich.console import Console
    from rich.markup import escape

    from .quiet import printable

    Console(stderr=True, highlight=False).print(f"[yellow]![/] {escape(printable(message))}", soft_wrap=True)


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


def safely(action: Callable[[], T], what: str = "your progress was not recorded") -> T | None:
    """``action()``; if it fails, one warning line and None: recording progress never loses a verdict."""
    try:
        return action()
    except Exception as e:  # noqa: BLE001
        where = getattr(e, "filename", None)
        warn(f"{what}: {f'{paths.display(where)}: ' if where else ''}{_reason(e)}")
        return None


# --- the shape of the record -------------------------------------------------------

def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# Each field of a lab's entry the kit reads or writes, and what a valid value is.
# Fields the kit does not know are kept as they are (a newer kit may have written them).
_FIELDS: dict[str, Callable[[Any], bool]] = {
    "status": lambda v: isinstance(v, str) and v in STATUSES,
    "hints_shown": _is_count,
    "checks": _is_count,
    "last_check": lambda v: isinstance(v, str),
    "speedup": lambda v: v is None or _is_number(v),
    "device": lambda v: isinstance(v, str),
}


def _is_name(value: Any) -> bool:
    """A folder name under runs/: a lab's slug or a run's label."""
    return isinstance(value, str) and value not in ("", ".", "..") and "/" not in value and "\\" not in value \
        and "\0" not in value


def _valid_last_run(value: Any) -> bool:
    return (isinstance(value, dict) and _is_name(value.get("lab")) and _is_name(value.get("run"))
            and isinstance(value.get("at", ""), str))


def validate(data: Any) -> tuple[dict[str, Any], list[str]]:
    """The valid part of a record, and what was dropped from it (empty when nothing was).

    A record that is not a JSON object is dropped whole.
    """
    if not isinstance(data, dict):
        shown = {list: "a list", str: "a string", bool: "true or false", int: "a number", float: "a number"}.get(
            type(data), "null")
        return {"labs": {}}, [f"it holds {shown}, not a record of progress"]
    dropped: list[str] = []
    clean: dict[str, Any] = {k: v for k, v in data.items() if k not in ("labs", "last_run")}
    labs_in = data.get("labs", {})
    if not isinstance(labs_in, dict):
        dropped.append("labs (not a table of labs)")
        labs_in = {}
    clean["labs"] = {}
    for name, lab in labs_in.items():
        if not isinstance(lab, dict):
            dropped.append(f"labs.{name} (not a record)")
            continue
        kept = {}
        for key, value in lab.items():
            check = _FIELDS.get(key)
            if check is not None and not check(value):
                dropped.append(f"labs.{name}.{key} ({json.dumps(value)[:40]})")
                continue
            kept[key] = value
        clean["labs"][name] = kept
    if "last_run" in data:
        if _valid_last_run(data["last_run"]):
            clean["last_run"] = data["last_run"]
        elif data["last_run"] is not None:
            dropped.append("last_run")
    return clean, dropped


# --- reading and writing, under the lock ----------------------------------------------

@contextmanager
def _locked(create: bool) -> Iterator[bool]:
    """Hold the exclusive lock; yields whether it is held.

    ``create``: make ``.proflab/`` and the lock file if needed, and raise when
    the lock cannot be taken (a write must not go on without it). Otherwise
    (a read) go on without the lock when it cannot be taken: a read-only
    ``.proflab/`` still lists the labs.
    """
    lock = _lock_path()
    try:
        if create:
            lock.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        except PermissionError:  # a lock file of another user's: reading it is enough to lock it
            fd = os.open(lock, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        if create:
            raise
        yield False
        return
    try:
        try:
            held = _wait_for_lock(fd, lock, LOCK_WAIT_S if create else LOCK_READ_WAIT_S)
            if not held and not create:
                warn(f"gave up waiting for {paths.display(lock)} after {LOCK_READ_WAIT_S:.0f} s: going on from the "
                     "progress file as it is now")
        except OSError as e:
            if create or e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EBADF):
                raise
            held = False
        if not held and create:
            raise Busy(errno.EAGAIN, f"another proflab command has held {paths.display(lock)} for "
                                     f"{LOCK_WAIT_S:.0f} s (stopped with Ctrl-Z, or stuck?): finish or stop it, "
                                     "then run this again; your work is as it was", str(lock))
        yield held
    finally:
        os.close(fd)  # closing the descriptor releases the lock


# How long a command waits for another's hold on the progress file before it says so, and at most: a hold
# lasts milliseconds (a read, a write); one that lasts seconds is a command stopped or stuck.
LOCK_SAY_AFTER_S = 1.0
LOCK_WAIT_S = float(os.environ.get("PROFLAB_LOCK_WAIT_S", "30"))
LOCK_READ_WAIT_S = min(5.0, LOCK_WAIT_S)  # a read (proflab list) goes on without the lock after this


class Busy(OSError):
    """The progress file's lock stayed held beyond ``LOCK_WAIT_S``: nothing was written."""


def _wait_for_lock(fd: int, lock: Path, bound: float) -> bool:
    """Take the lock, saying so once the wait is noticeable; False once it has lasted ``bound`` seconds."""
    import time

    started, said = time.monotonic(), False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except InterruptedError:
            continue
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        waited = time.monotonic() - started
        if waited >= bound:
            return False
        if waited >= LOCK_SAY_AFTER_S and not said:
            said = True
            warn(f"waiting for {paths.display(lock)}: another proflab command holds it (this one gives up after "
                 f"{bound:.0f} s)")
        time.sleep(0.05)


def _aside(path: Path) -> Path:
    """Where a broken progress file goes: ``progress.json.corrupt-20260101T120000Z``, never over another."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists() or target.is_symlink():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    return target


class Unreadable(OSError):
    """The progress file exists but could not be read, nor moved aside: it must not be overwritten."""


def _read(repair: bool) -> dict[str, Any]:
    """The record as the file holds it, validated; call it holding the lock when ``repair``.

    With ``repair``, a broken or partly invalid file is moved aside (and the
    valid part written back). Raises ``Unreadable`` when ``repair`` and the
    file can be neither read nor moved aside, so that no write replaces it.
    """
    path = _path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {"labs": {}}
    except IsADirectoryError:
        raw, problem = None, "it is a folder"
    except OSError as e:
        if repair:
            raise Unreadable(e.errno, f"cannot read it ({_reason(e)}), so it is left as it is", str(path)) from e
        warn(f"could not read {paths.display(path)} ({_reason(e)}); going on without the progress it records")
        return {"labs": {}}
    else:
        problem = None
    data: Any = None
    if raw is not None:
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            problem = "it is not valid JSON" + (f" ({e.msg} at line {e.lineno})" if isinstance(e, json.JSONDecodeError)
                                                else "")
    if problem is None:
        clean, dropped = validate(data)
        if not dropped:
            return clean
        whole = not isinstance(data, dict)
        problem = dropped[0] if whole else f"some of its entries are not valid ({', '.join(dropped[:8])}" + (
            f", and {len(dropped) - 8} more)" if len(dropped) > 8 else ")")
    else:
        clean, whole = {"labs": {}}, True
    if not repair:
        warn(f"{paths.display(path)} is broken: {problem}; it is left as it is (.proflab/ cannot be written "
             f"to move it aside), and this command goes on {'from an empty record' if whole else 'with the rest'}")
        return clean
    aside = _aside(path)
    try:
        os.replace(path, aside)
    except OSError as e:
        raise Unreadable(e.errno, f"it is broken ({problem}) and could not be moved aside to {paths.display(aside)} "
                                  f"({_reason(e)}), so it is left as it is", str(path)) from e
    if not whole:
        try:
            atomic.write_json(path, clean)
        except OSError as e:  # the original is safe aside; the valid part is still used for this command
            warn(f"{paths.display(path)}: could not write back its valid entries ({_reason(e)}); "
                 f"they are in {paths.display(aside)}")
    warn(f"{paths.display(path)} was broken: {problem}; moved it to {paths.display(aside)} and "
         f"{'went on from an empty record' if whole else 'kept the rest'}")
    return clean


def load() -> dict[str, Any]:
    """The record of progress, for reading (never raises for a broken or unwritable file)."""
    if not _path().exists() and not _path().is_symlink():
        return {"labs": {}}
    try:
        with _locked(create=False) as held:
            return _read(repair=held)
    except Unreadable as e:
        warn(f"{paths.display(e.filename)}: {e.strerror}; going on without the progress it records")
        return {"labs": {}}
    except OSError as e:
        warn(f"could not read {paths.display(_path())} ({_reason(e)}); going on without the progress it records")
        return {"labs": {}}


@contextmanager
def _updating() -> Iterator[dict[str, Any]]:
    """The record, to change in place, saved (atomically) when the block ends; under the lock throughout."""
    with _locked(create=True):
        data = _read(repair=True)
        yield data
        atomic.write_json(_path(), data)


# --- what the commands ask -------------------------------------------------------------

def entry(name: str) -> dict[str, Any]:
    return load()["labs"].get(name, {})


def status(name: str) -> str:
    return entry(name).get("status", NOT_STARTED)


def record_check(name: str, passed: bool, speedup: float | None, device: str) -> None:
    """Raises OSError when it cannot be recorded (callers warn and go on: ``safely``)."""
    with _updating() as data:
        lab = data["labs"].setdefault(name, {})
        lab.update(status=PASSED if passed else FAILING,
                   last_check=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   speedup=speedup if speedup is None or _is_number(speedup) else None, device=str(device))
        lab["checks"] = lab.get("checks", 0) + 1


def all_hints_shown(name: str, total: int) -> None:
    """Remember that every hint of lab ``name`` was shown (``proflab hint N --all``). Raises OSError when it
    cannot be recorded (callers warn and go on: ``safely``)."""
    with _updating() as data:
        data["labs"].setdefault(name, {})["hints_shown"] = total


def next_hint(name: str, total: int) -> int:
    """Index of the hint to show now (and remember that it was shown).

    When it cannot be remembered (a read-only ``.proflab/``), one warning, and
    the hint is shown all the same.
    """
    try:
        with _updating() as data:
            lab = data["labs"].setdefault(name, {})
            shown = lab.get("hints_shown", 0)
            index = max(0, min(shown, total - 1))
            lab["hints_shown"] = min(shown + 1, total)
        return index
    except OSError as e:
        where = getattr(e, "filename", None) or _path()
        warn(f"the hint shown was not remembered: {paths.display(where)}: {_reason(e)}")
        return max(0, min(entry(name).get("hints_shown", 0), total - 1))


def remember_run(lab_slug: str, run: str) -> None:
    """The run a learner just made: ``proflab tensorboard`` points there first. Raises OSError (see ``safely``)."""
    with _updating() as data:
        data["last_run"] = {"lab": lab_slug, "run": run,
                            "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def remember_steps(lab_slug: str, run: str, figures: dict) -> None:
    """The step times of a version's last ``proflab run`` (the next run of another version is told how it
    compares). Raises OSError (see ``safely``)."""
    with _updating() as data:
        data.setdefault("step_times", {})[f"{lab_slug}/{run}"] = {
            **figures, "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def remembered_steps(lab_slug: str, run: str) -> dict | None:
    found = (load().get("step_times") or {}).get(f"{lab_slug}/{run}")
    return found if isinstance(found, dict) and isinstance(found.get("step_times"), list) else None


def last_run() -> dict[str, str] | None:
    return load().get("last_run")


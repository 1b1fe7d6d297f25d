"""Where a grading's verdicts are kept the moment they are made: the journal.

``proflab grade`` appends each verdict to a journal next to its output (one
JSON line per submission, flushed to disk), so an interruption (Ctrl-C, a CI
timeout's SIGTERM, a dropped SSH session, even a SIGKILL) loses at most the
submission being graded. ``proflab grade --resume`` reads it back and grades
only what it does not hold: a submission whose file changed since, or that
the kit could not grade, is graded again. The journal is removed once the
outputs of a finished grading are written.

The first line says what was being graded (the folder, the lab, the device,
the rounds, the kit's version and a fingerprint of each lab's manifest); a
journal of another grading, or of one by another checker, is never resumed.

A grading holds its journal's lock (``flock`` on ``.<name>.journal.lock``,
given back by the kernel however the grading ends) from the moment it opens
the journal until it is done: a second grading of the same outputs, resumed
or not, is refused while the first runs, so no two gradings write one
journal or one output. A journal that is not one (its first line is not a
journal's header) is moved aside, as a broken progress file is.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import __version__, paths
from .verdicts import Report

FORMAT = 1


class JournalError(Exception):
    """The journal cannot be used as asked (a usage error: the message says what to do)."""


class Broken(JournalError):
    """The file is not a grading journal at all (its first line is no journal's header)."""


def _lock(path: Path) -> int:
    """Take the journal's lock, or say which grading holds it. The descriptor is kept until ``close``."""
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.read(fd, 32).decode("ascii", "replace").strip()
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            who = f" (process {holder})" if holder.isdigit() else ""
            raise JournalError(f"another grading{who} is writing {paths.display(path)} now: wait for it to "
                               "finish, or write the outputs somewhere else (--out, --json-out)") from None
        try:  # the lock file may have been removed by a grading that just finished: lock the one in place
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            return fd
        os.close(fd)


def _aside(path: Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target, n = path.with_name(f"{path.name}.corrupt-{stamp}"), 1
    while target.exists() or target.is_symlink():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    return target


def location(folder: Path, out: str | None, json_out: str | None) -> Path:
    """Next to the output file; for output on stdout, in the kit's state folder, one per class folder."""
    if out or json_out:
        target = Path(out or json_out)
        return target.with_name(f".{target.name}.journal")
    key = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:12]
    return paths.state_dir() / "grade" / f"{folder.resolve().name or 'folder'}-{key}.journal"


def file_sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


@dataclass
class Entry:
    shown: str
    sha256: str
    report: Report


@dataclass
class Journal:
    path: Path
    header: dict[str, Any]
    entries: dict[str, Entry] = field(default_factory=dict)  # by the submission's path in the folder
    note: str = ""  # what was done to an earlier journal on the way (moved aside), for the grader to say
    unwritable: str = ""  # why a verdict could not be journaled (a full disk): none is journaled after it
    _fd: int = -1  # the lock, held until close()

    @classmethod
    def begin(cls, path: Path, header: dict[str, Any], resume: bool, restart: bool) -> "Journal":
        """A new journal, or (``resume``) the one at ``path``, read back; its lock held either way."""
        fd = _lock(path)
        try:
            journal = cls._begin(path, header, resume, restart)
        except BaseException:
            os.close(fd)
            raise
        journal._fd = fd
        return journal

    @classmethod
    def _begin(cls, path: Path, header: dict[str, Any], resume: bool, restart: bool) -> "Journal":
        header = {"journal": FORMAT, "proflab": __version__, **header}
        note = ""
        if path.exists() and path.stat().st_size:
            try:
                cls.read(path)
            except Broken as e:
                aside = _aside(path)
                os.replace(path, aside)
                note = f"{e}; moved it to {paths.display(aside)}"
                if resume:
                    raise JournalError(f"--resume: {note}, so there is nothing to resume: run without --resume") \
                        from None
        exists = path.exists()
        if resume:
            if not exists:
                raise JournalError(f"--resume: there is no unfinished grading to resume ({paths.display(path)} "
                                   "does not exist); run without --resume")
            journal = cls.read(path)
            theirs = {k: journal.header.get(k) for k in header if k != "journal"}
            ours = {k: v for k, v in header.items() if k != "journal"}
            if isinstance(theirs.get("labs"), dict) and isinstance(ours.get("labs"), dict):
                # a lab none of whose verdicts is journaled may have changed (a manifest broken then, fixed
                # since): its files are graded now; a lab with verdicts here must be as it was
                then, now = theirs["labs"], ours["labs"]
                changed = {slug for slug in {*then, *now} if then.get(slug) != now.get(slug)}
                graded = {f"{e.report.number:02d}-{e.report.lab}" for e in journal.entries.values()
                          if e.report.verdict != "error"}
                if not changed & graded:
                    theirs["labs"] = now
            if theirs != ours:
                differ = ", ".join(f"{k} {theirs[k]!r} (now {ours[k]!r})" if k != "labs" else
                                   "the labs' manifests have changed since" for k in ours if theirs[k] != ours[k])
                raise JournalError(f"--resume: {paths.display(path)} is the journal of another grading "
                                   f"({differ}); resume it with the same folder and options, or use --restart")
            return journal
        if exists and not restart:
            done = len(cls.read(path).entries) if path.stat().st_size else 0
            raise JournalError(f"{paths.display(path)} holds {done} verdict{'s' if done != 1 else ''} of an "
                               "unfinished grading: --resume continues it, --restart grades everything again")
        journal = cls(path, header, note=note)
        journal._write_line(header, mode="w")
        return journal

    @classmethod
    def read(cls, path: Path) -> "Journal":
        """A journal from its file; a last line cut short by an interruption is left out."""
        try:
            # bytes that are not UTF-8 (a journal overwritten by something else) make lines that are not JSON
            lines = path.read_bytes().decode("utf-8", "replace").splitlines()
        except OSError as e:
            raise JournalError(f"cannot read {paths.display(path)}: {e.strerror or e}") from None
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except (ValueError, RecursionError):
                continue  # the line being written when it stopped
        if not records or not isinstance(records[0], dict) or "journal" not in records[0]:
            raise Broken(f"{paths.display(path)} is not a grading journal (its first line is not a journal's "
                         "header)")
        if records[0].get("journal") != FORMAT:
            raise JournalError(f"{paths.display(path)} is not a grading journal this version can read; "
                               "use --restart")
        journal = cls(path, records[0])
        unread: list[str] = []
        for n, record in enumerate(records[1:], 2):
            try:
                if not isinstance(record, dict):
                    raise ValueError(f"a {type(record).__name__}, not an object")
                if not isinstance(record.get("file"), str) or not isinstance(record.get("sha256"), str):
                    raise ValueError("no file or fingerprint")
                journal.entries[record["file"]] = Entry(record["file"], record["sha256"],
                                                        Report.from_dict(record["report"]))
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                unread.append(f"{n}: {str(e) if not isinstance(e, KeyError) else f'no {e}'}")
        if unread:
            journal.note = (f"{len(unread)} verdict{'s' if len(unread) != 1 else ''} in {paths.display(path)} "
                            f"could not be read (entry {'; entry '.join(unread[:3])}"
                            f"{'; …' if len(unread) > 3 else ''}): those submissions are graded again")
        return journal

    def done(self, shown: str, path: Path) -> Report | None:
        """The journaled report of a submission, if it was graded and its file has not changed since."""
        entry = self.entries.get(shown)
        if entry is None or entry.report.verdict == "error" or entry.sha256 != file_sha256(path):
            return None
        return entry.report

    def add(self, shown: str, path: Path, report: Report) -> None:
        """Journal a verdict, with the fingerprint of the copy that was graded (not of the file now)."""
        entry = Entry(shown, report.file_sha256 or file_sha256(path), report)
        self.entries[shown] = entry
        self._write_line({"file": shown, "sha256": entry.sha256, "report": report.as_dict()})

    def _write_line(self, record: dict[str, Any], mode: str = "a") -> None:
        """One line, whole or not at all: a write that fails (a full disk) is cut back to where it began,
        so the journal never ends in half a verdict; the OSError names the file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if mode == "w" else os.O_APPEND)
        fd = os.open(self.path, flags, 0o644)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except OSError as e:
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    pass
                raise OSError(e.errno, e.strerror, str(self.path)) from None
        finally:
            os.close(fd)

    def remove(self) -> None:
        """The grading is done: the journal goes, and its lock (still held until ``close``)."""
        self.path.unlink(missing_ok=True)
        self.path.with_name(self.path.name + ".lock").unlink(missing_ok=True)

    def close(self) -> None:
        """Give the lock back (the kernel does it too, however the grading ends)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

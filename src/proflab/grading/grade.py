"""Where a class is graded: a folder of submissions, one file per learner and lab.

The folder's layout (the forms can be mixed):

    FOLDER/<learner>/<lab>.py     a folder per learner: alice/1.py, alice/dataloader.py, bob/03_fusion.py
    FOLDER/<learner>__<lab>.py    flat, two underscores between the two: alice__1.py
    FOLDER/<lab>.py               the folder is one learner's, named after it (Gradescope's
                                  /autograder/submission holds one learner's files)

``<lab>`` is what ``proflab check`` accepts: the number (``1``, ``01``), the
name (``dataloader``), the lab's folder (``01_dataloader``) or its runs
folder (``01-dataloader``). When one lab is being graded (``--lab``),
``exercise.py`` is that lab's too. Hidden files and ``__pycache__`` are
passed over; any other file that maps to no lab is listed as not graded,
with the reason, and never stops the grading. A link (to a file or a folder)
is never followed: it is listed as "a link, not graded". Several files for one
learner's lab are all named: the one graded is chosen by ``pick``, the rule
the autograder follows too.

Every submission goes through ``checks.check``, the function behind
``proflab check``, one after another, never two at once: they are timed.
Each is graded from a copy taken when its check starts, so the learner's file
is never written to, and runs in an empty scratch folder, where what the
program writes next to itself lands. Each learner's runs get a label of their own
(``grade-alice``), so their traces stay apart under ``runs/<lab>/``.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from . import checks, staging
from ..running import forkserver, processes
from .. import errors, labs, paths

if TYPE_CHECKING:
    from .journal import Journal

FLAT = "__"  # alice__1.py: the learner, then the lab
EXERCISE = "exercise"  # exercise.py is the lab given with --lab
PASSED_OVER = {"__pycache__"}


class GradeError(Exception):
    """The folder cannot be graded as asked (a usage error)."""


class KitError(Exception):
    """The kit cannot grade at all: no labs, or a lab's data cannot be prepared."""


@dataclass(frozen=True)
class Submission:
    learner: str
    lab: labs.Lab
    path: Path  # the learner's file, where it was found
    shown: str  # relative to the folder: alice/1.py


@dataclass(frozen=True)
class Skipped:
    """A file of the folder that is not graded, and why."""

    shown: str
    reason: str
    learner: str = ""
    kit: bool = False  # not graded for the kit's failure (its lab's manifest is broken), not the learner's


@dataclass(frozen=True)
class Found:
    folder: Path
    submissions: tuple[Submission, ...]
    skipped: tuple[Skipped, ...]

    @property
    def learners(self) -> list[str]:
        """Everyone with a file in the folder, graded or not."""
        return sorted({s.learner for s in self.submissions} | {s.learner for s in self.skipped if s.learner})

    @property
    def graded_learners(self) -> list[str]:
        """Everyone with a file to grade."""
        return sorted({s.learner for s in self.submissions})


@dataclass(frozen=True)
class Points:
    check: str
    earned: float
    max: float


@dataclass
class Graded:
    submission: Submission
    report: checks.Report
    points: list[Points]

    @property
    def graded(self) -> bool:
        """False when the kit could not grade it: it then has no score, not a score of 0."""
        return self.report.verdict != "error"

    @property
    def score(self) -> float | None:
        return round(sum(p.earned for p in self.points), 4) if self.graded else None

    @property
    def max_score(self) -> float:
        return round(sum(p.max for p in self.points), 4)

    @property
    def speedup(self) -> float | None:
        return (self.report.comparison or {}).get("speedup")


@dataclass
class Result:
    folder: Path
    graded: list[Graded]
    skipped: list[Skipped]
    learners: list[str]
    started_at: str  # ISO 8601, UTC
    duration_s: float
    pending: list[Submission] = field(default_factory=list)  # not graded yet: the grading was interrupted
    resumed: int = 0  # verdicts taken from the journal of an interrupted grading

    @property
    def graded_any(self) -> bool:
        """Whether any submission got a verdict (not every one was beyond the kit)."""
        return any(g.report.verdict != "error" for g in self.graded)

    @property
    def not_graded(self) -> list[Graded]:
        """Submissions the kit could not grade (its failure or the machine's, never the learner's)."""
        return [g for g in self.graded if g.report.verdict == "error"]

    @property
    def partial(self) -> bool:
        return bool(self.pending)


# --- finding the submissions ------------------------------------------------------

def find(folder: Path, only: labs.Lab | None, known: list[labs.Lab]) -> Found:
    """The submissions in ``folder``, and the files that are not graded."""
    if not folder.exists():
        raise GradeError(f"{folder}: no such folder")
    if not folder.is_dir():
        raise GradeError(f"{folder} is a file, not a folder of submissions; "
                         f"to grade one file: proflab check LAB --file {folder}")
    if not known:
        raise KitError(f"no labs found under {paths.labs_dir()}")
    entries = _entries(folder)
    if not entries:
        raise GradeError(f"{folder} holds no submissions. Put one file per learner and lab in it: "
                         f"{folder.name}/alice/1.py, or {folder.name}/alice__1.py")
    skipped: list[Skipped] = []
    candidates: dict[tuple[str, int], list[Submission]] = {}  # every file for a learner's lab, in name order
    whose = folder.resolve().name or "learner"

    def add(learner: str, path: Path, lab_name: str, shown: str, owned: bool = True) -> None:
        """``owned``: a file not graded counts as the learner's (not so for loose files of the folder)."""
        owner = learner if owned else ""
        why = unreadable(path)
        if why:
            skipped.append(Skipped(shown, why, owner))
            return
        if path.suffix not in (".py", ".toml"):
            skipped.append(Skipped(shown, "not a Python file (.py)", owner))
            return
        try:
            # a diagnosis drill is the learner's own, drawn again from their name
            lab = _drill_of(learner) if lab_name.lower() == DRILL and owned else _which_lab(lab_name, only, known)
        except labs.ManifestError as e:
            skipped.append(Skipped(shown, f"not graded: its lab's manifest is broken ({e})", owner, kit=True))
            return
        if isinstance(lab, str):
            skipped.append(Skipped(shown, lab, owner))
            return
        if path.suffix != lab.exercise.suffix:  # a pipeline is .py; a gate lab's settings (lab 7) are .toml
            kind = "a gate's settings (.toml)" if lab.kind == "gate" else "a Python file (.py)"
            skipped.append(Skipped(shown, f"lab {lab.number}'s submission is {kind}", owner))
            return
        candidates.setdefault((learner, lab.number), []).append(Submission(learner, lab, path, shown))

    for entry in entries:
        if not _printable(entry.name):
            skipped.append(Skipped(_shown(entry.name), "its name is not valid UTF-8: rename it"))
        elif entry.is_symlink():  # read, never followed: a link to a folder or a file is not the learner's file
            owner = entry.stem.rsplit(FLAT, 1)[0] if FLAT in entry.stem else (entry.name if entry.is_dir() else "")
            skipped.append(Skipped(entry.name + ("/" if entry.is_dir() else ""), LINK, owner.strip()))
        elif entry.is_dir():
            inner = _entries(entry)
            for path in inner:
                shown = f"{entry.name}/{path.name}"
                if not _printable(path.name):
                    skipped.append(Skipped(_shown(shown), "its name is not valid UTF-8: rename it", entry.name))
                elif path.is_symlink():
                    skipped.append(Skipped(shown, LINK, entry.name))
                elif path.is_dir():
                    skipped.append(Skipped(shown + "/", f"a folder inside a learner's folder: put the files "
                                                        f"directly in {entry.name}/", entry.name))
                else:
                    add(entry.name, path, path.stem, shown)
        elif FLAT in entry.stem:
            learner, lab_name = entry.stem.rsplit(FLAT, 1)
            if not learner.strip():
                skipped.append(Skipped(entry.name, f"no learner before '{FLAT}': name it <learner>{FLAT}<lab>.py"))
            else:
                add(learner, entry, lab_name, entry.name)
        else:
            add(whose, entry, entry.stem, entry.name, owned=False)
    submissions: list[Submission] = []
    for files in candidates.values():
        chosen, others = pick([s.path for s in files], files[0].lab, [s.shown for s in files])
        submissions.append(files[chosen])
        skipped += [Skipped(files[i].shown, why, files[i].learner) for i, why in others.items()]
    return Found(folder, tuple(submissions), tuple(skipped))


LINK = "a link, not graded: submissions are read, never followed; submit the file itself"


def unreadable(path: Path) -> str:
    """Why ``path`` is not read as a submission ("" when it is a plain file): a link (never followed,
    wherever it points) or anything that is not a regular file (a folder, a FIFO, a device)."""
    try:
        mode = path.lstat().st_mode
    except OSError as e:
        return f"not a readable file ({e.strerror or e})"
    if stat.S_ISLNK(mode):
        return LINK
    if not stat.S_ISREG(mode):
        return "not a readable file (not a regular file)"
    return ""


def _unchanged(path: Path, lab: labs.Lab) -> bool:
    """Whether ``path`` is the lab's exercise as handed out (or its original), byte for byte."""
    try:
        digest = labs.sha256(path)
    except OSError:
        return False
    handed = {lab.original_sha256}
    try:
        handed.add(labs.sha256(lab.exercise))
    except OSError:
        pass
    return digest in handed


def pick(paths: list[Path], lab: labs.Lab, shown: list[str]) -> tuple[int, dict[int, str]]:
    """The rule for several files for one lab by one learner, the same in ``proflab grade`` and the
    autograder: a file that is still the lab's exercise as handed out is passed over, and the first of
    the others, in the order given (name order), is graded; when every one is unchanged, the first. The
    index graded, and why each other one is not."""
    if len(paths) == 1:
        return 0, {}
    unchanged = [_unchanged(p, lab) for p in paths]
    chosen = next((i for i, same in enumerate(unchanged) if not same), 0)
    others = {}
    for i in range(len(paths)):
        if i == chosen:
            continue
        if unchanged[i] and not unchanged[chosen]:
            others[i] = (f"lab {lab.number}'s exercise as handed out, and {shown[chosen]} is changed: "
                         f"{shown[chosen]} is graded (one file per lab)")
        else:
            others[i] = (f"a second file for lab {lab.number}; {shown[chosen]} is graded, the first in name order "
                         "(one file per lab)")
    return chosen, others


def _printable(name: str) -> bool:
    """Whether a file name can be written out (a name of bytes that are not UTF-8 cannot)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(name: str) -> str:
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _entries(folder: Path) -> list[Path]:
    try:
        return sorted((p for p in folder.iterdir() if not p.name.startswith(".") and p.name not in PASSED_OVER),
                      key=lambda p: p.name)
    except OSError as e:
        raise GradeError(f"cannot read {folder}: {e.strerror or e}") from None


DRILL = "drill"  # a learner's drill.py: graded against the drill drawn for that learner's name


def _drill_of(learner: str) -> labs.Lab | str:
    from ..authoring import drills

    try:
        return drills.lab_for(learner)
    except ValueError as e:
        return f"no drill for this learner: {e}"
    except OSError as e:  # the kit's drills/ folder cannot be written: the kit's failure, said as such
        raise labs.ManifestError(f"the learner's drill cannot be written into the kit ({e})") from None


def _which_lab(name: str, only: labs.Lab | None, known: list[labs.Lab]) -> labs.Lab | str:
    """The lab a file's name gives, or why it gives none."""
    if only is not None and name.lower() == EXERCISE:
        return only
    try:
        lab = labs.resolve(name, known)
    except labs.LabNotFound:
        first = only or known[0]
        names = f"{first.number}.py, {first.name}.py or {first.folder.name}.py"
        if only is None:
            return f"'{name}' names no lab; name the file after its lab, like {names} (or give --lab)"
        return f"'{name}' names no lab; name it {EXERCISE}.py or {names}"
    if only is not None and lab.number != only.number:
        return f"lab {lab.number} ({lab.name}), and only lab {only.number} ({only.name}) is graded (--lab)"
    return lab


# --- grading ----------------------------------------------------------------------

def score(report: checks.Report, grading: labs.Grading) -> list[Points]:
    """The points each check earns under the lab's ``[grading]`` table."""
    out = []
    for c in report.checks:
        worth = grading.points(c.pays)
        if report.verdict == "error":  # not graded: the kit, not the learner
            earned = 0.0
        elif c.status == checks.PASSED:
            earned = worth
        elif c.status == checks.INCONCLUSIVE:
            earned = worth * grading.inconclusive
        else:
            earned = 0.0
        out.append(Points(c.name, round(earned, 4), worth))
    return out


def prepare_data(found: Found) -> None:
    """Prepare the data of every lab to grade, before the first timed run."""
    from ..labkit import prepare

    done = set()
    for sub in found.submissions:
        if sub.lab.data and sub.lab.data not in done:
            try:
                prepare(sub.lab.data, paths.data_dir())
            except Exception as e:  # noqa: BLE001 - whatever stops the data stops the grading
                raise KitError(f"lab {sub.lab.number}'s data could not be prepared ({e}); "
                               "run `proflab data` to see why") from None
            done.add(sub.lab.data)


def labels(learners: list[str]) -> dict[str, str]:
    """A run label per learner (a folder name under runs/), distinct even when two names differ
    only in case or in characters a folder name should not hold."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for learner in learners:
        base = "grade-" + (re.sub(r"[^a-z0-9_-]+", "-", learner.lower()).strip("-") or "learner")
        label, n = base, 1
        while label in taken:
            n += 1
            label = f"{base}-{n}"
        taken.add(label)
        out[learner] = label
    return out


Started = Callable[[int, int, Submission], None]
Finished = Callable[[int, int, Graded], None]


def grade(
    found: Found,
    *,
    device: str = "auto",
    rounds: int | None = None,
    timeout_s: float | None = None,
    on_start: Started = lambda i, n, sub: None,
    on_progress: checks.Progress = lambda message: None,
    on_done: Finished = lambda i, n, graded: None,
    journal: "Journal | None" = None,
) -> Result:
    """Grade every submission, one after the other; each verdict goes to ``journal`` as it is made.

    A verdict the journal already holds (``--resume``) is taken from it, not
    graded again. On Ctrl-C (or SIGTERM, SIGHUP) the grading stops after the
    run in progress is stopped, and the result lists what was not graded yet.
    """
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    started = time.perf_counter()
    label = labels(found.learners)
    graded: list[Graded] = []
    with forkserver.session():  # torch imported once for the whole class (once per lab), not once per run
        resumed = _grade_each(found, label, graded, device, rounds, timeout_s, on_start, on_progress, on_done,
                              journal)
    pending = list(found.submissions[len(graded):])  # not empty only when interrupted
    return Result(found.folder, graded, list(found.skipped), found.learners, started_at,
                  time.perf_counter() - started, pending=pending, resumed=resumed)


def _grade_each(found: Found, label: dict[str, str], graded: list[Graded], device: str, rounds: int | None,
                timeout_s: float | None, on_start: Started, on_progress: checks.Progress, on_done: Finished,
                journal: "Journal | None") -> int:
    """Grade the submissions in turn into ``graded``, until done or interrupted; how many were resumed.

    Two by two: a submission whose check was not set up ahead sets up the next one's beside its own, so
    that the next learner's server imports torch while this one's does (``staging``)."""
    resumed = 0
    total = len(found.submissions)
    todo = [sub for sub in found.submissions if not (journal and journal.done(sub.shown, sub.path))]
    ahead: Turn | None = None
    try:
        for i, sub in enumerate(found.submissions, 1):
            mine = None
            try:
                report = journal.done(sub.shown, sub.path) if journal else None
                if report is not None:
                    resumed += 1
                else:
                    on_start(i, total, sub)
                    mine, ahead = (ahead, None) if ahead is not None and ahead.sub is sub else (None, ahead)
                    if mine is None:
                        mine = Turn.of(sub, label[sub.learner])
                        later = todo[todo.index(sub) + 1:] if sub in todo else []
                        if later and ahead is None:
                            ahead = Turn.of(later[0], label[later[0].learner])
                    report = mine.check(device, rounds, timeout_s, on_progress)
                    if journal is not None and not journal.unwritable:
                        with processes.shielded():  # a verdict is journaled whole, or not at all
                            try:
                                journal.add(sub.shown, sub.path, report)
                            except OSError as e:  # a full disk: the verdict stands; --resume will not find it
                                journal.unwritable = (
                                    f"{errors.describe(e, 'write the journal')}: the verdicts stand and are "
                                    "printed, but a --resume would grade these submissions again")
                item = Graded(sub, report, score(report, sub.lab.grading))
                graded.append(item)
                on_done(i, total, item)
            except KeyboardInterrupt:  # whatever it interrupted, what was graded is kept (and journaled)
                if mine is not None:
                    mine.close()
                break
    finally:
        if ahead is not None:
            ahead.close()
    return resumed


class Turn:
    """A submission's turn: a copy of it in an empty scratch folder, where ``checks.check`` runs it (what
    the program writes next to itself, or over itself, lands there, never in the class folder), and its
    check set up (``staging.ahead``). The report names the learner's file."""

    def __init__(self, sub: Submission, label: str, scratch: Path | None, why: str = ""):
        self.sub, self.label, self.scratch, self.why = sub, label, scratch, why
        self.copy = scratch / sub.path.name if scratch is not None else None
        self.staged: staging.Stage | None = None

    @classmethod
    def of(cls, sub: Submission, label: str) -> "Turn":
        try:
            scratch = staging.new_workspace(f"{label}-")
        except checks.NotGraded as e:
            return cls(sub, label, None, f"{e}. This is the kit's or the machine's failure")
        turn = cls(sub, label, scratch)
        try:
            _copy_unfollowed(sub.path, turn.copy)
        except OSError as e:
            turn.why = f"{sub.shown} could not be read: {e.strerror or e}"
        except ValueError as e:  # it became a link, or something else than a file, since it was found
            turn.why = f"{sub.shown}: {e}"
        else:
            turn.staged = staging.ahead(sub.lab, turn.copy, scratch)
        return turn

    def check(self, device: str, rounds: int | None, timeout_s: float | None,
              on_progress: checks.Progress) -> checks.Report:
        try:
            if self.why:
                return _not_graded(self.sub, self.label, self.why)
            try:
                report = checks.check(self.sub.lab, self.copy, label=self.label, device=device, rounds=rounds,
                                      timeout_s=timeout_s, on_progress=on_progress, workdir=self.scratch,
                                      staged=self.staged)
            except Exception as e:  # noqa: BLE001 - the kit failed on this file: its "not graded", not the class's
                report = _not_graded(self.sub, self.label, f"the kit failed on this file ({type(e).__name__}: {e}); "
                                                           "this is the kit's failure, not the learner's: the "
                                                           "traceback is in the record")
                report.traceback = traceback.format_exc()
            checks.name_the_file(report, self.copy, self.sub.path)
            return report
        finally:
            self.close()

    def close(self) -> None:
        if self.staged is not None:
            self.staged.close()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _copy_unfollowed(source: Path, target: Path) -> None:
    """Copy a submission without following a link (one put in its place after it was found is refused too),
    and without waiting on a FIFO."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ValueError(LINK) from None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a readable file (not a regular file)")
        data = f.read()
    target.write_bytes(data)


def _not_graded(sub: Submission, label: str, why: str) -> checks.Report:
    report = checks.Report(lab=sub.lab.name, number=sub.lab.number, title=sub.lab.title, file=str(sub.path),
                           label=label, checks=[checks.Check(*c) for c in checks.CHECKS])
    report.verdict, report.error = "error", why
    return report

"""A check's set-up: its private workspace, the copies it grades, its data, and its fork servers importing.

``stage`` sets a check up when it starts. A caller that grades several files
in a row (``proflab grade``, a class; the tests' batches) may set up the
next one with ``stage`` while the one before it is still being set up: its
learner's server then imports torch beside the current one's (on two cores,
two servers import in the time of one, 5.6 s here), and ``forkserver.settle``
waits for both before the current check's first timed run, so no import ever
runs beside a timed step. Nothing of one learner's is shared with another's:
each staged check has its own workspace, its own copy of the file, and a
server of its own (its role is its copy's path).
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import errors, labs, paths
from ..running import execute, forkserver, sandbox
from .verdicts import NotGraded


def new_workspace(prefix: str) -> Path:
    """``workspace``'s folder, for a caller that removes it itself."""
    try:
        return Path(tempfile.mkdtemp(prefix=paths.owned(prefix), dir=execute._scratch_dir()))
    except OSError as e:
        raise NotGraded(errors.describe(e, "make a scratch folder in")) from None


@contextmanager
def workspace(prefix: str):
    """A private scratch folder under ``.proflab/tmp``, removed afterwards; a kit error if it cannot be made."""
    folder = new_workspace(prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def unreadable(file: Path, e: OSError) -> str:
    """Why a file to be graded cannot be: said of the file as the learner named it."""
    return (f"{file} does not exist" if isinstance(e, FileNotFoundError) else
            f"{file} is a folder, not a file" if isinstance(e, IsADirectoryError) else
            f"{file} could not be read: {e.strerror or e}")


def snapshot(file: Path, folder: Path) -> Path:
    """A copy of ``file`` taken now: what is graded, even if the file is saved again during the check."""
    copy = folder / file.name
    data = Path(file).read_bytes()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(data)
    except OSError as e:
        raise NotGraded(errors.describe(e, "write")) from None
    return copy


def original_role(lab: labs.Lab) -> str:
    """Whose server forks the lab's original: one per lab for a whole session (a class graded by
    ``proflab grade``), in a sandbox of its own that no learner's run can reach."""
    return f"original:{lab.slug}"


def original_reads() -> tuple[Path, ...]:
    """What the original's sandbox reads besides its lab: every check's copy of the original, in the kit's
    scratch folder (the original is the kit's own code; no learner's run shares its sandbox)."""
    return (paths.state_dir() / "tmp",)


def prepare_data(lab: labs.Lab) -> Path | None:
    """The lab's data, verified by content (and rebuilt if a copy is incomplete), before any run."""
    if not lab.data:
        return None
    from ..labkit import DataError, prepare

    try:
        # Where runs are sandboxed they cannot write the data folder, which keeps what the last
        # preparation found: the data is then checked without importing its module (and torch)
        memo = paths.data_dir() / ".prepared.json" if sandbox.engine().ok else None
        return Path(prepare(lab.data, paths.data_dir(), memo))
    except (DataError, OSError) as e:
        raise NotGraded(f"lab {lab.number}'s data is not ready ({e}); run `proflab data` to see why") from None


@dataclass
class Stage:
    """One check, set up: ``learner`` (the copy of ``file`` that is graded) and ``original`` (the lab's) in
    ``work``, the check's own folder; ``error`` when the file could not be read (nothing else is set up)."""

    lab: labs.Lab
    file: Path
    work: Path
    workdir: Path
    learner: Path | None = None
    original: Path | None = None
    preload: tuple[str, ...] = ()
    error: str = ""
    warmed: bool = False

    def warm(self) -> None:
        """Both versions' servers importing (at once, each in its own sandbox: the learner's runs never
        reach the original's). Once: a check set up ahead has started them already."""
        if self.warmed or self.learner is None:
            return
        self.warmed = True
        lab = self.lab
        execute.warm(lab, self.preload, original_role(lab), self.original, lab.folder, reads=original_reads())
        execute.warm(lab, self.preload, str(self.learner), self.learner, self.workdir)

    def close(self) -> None:
        """Its learner's server stopped (the original's serves the next check too), its folder removed."""
        if self.learner is not None:
            forkserver.retire(str(self.learner))
        shutil.rmtree(self.work, ignore_errors=True)


def stage(lab: labs.Lab, file: Path, workdir: Path | None = None, warm: bool = True) -> Stage:
    """Set up the check of ``file`` now: its workspace, the copies it grades (taken now: saving the file
    again later changes nothing), and, inside a ``forkserver.session``, both versions' servers, which
    start importing at once (``warm``; else when the check calls ``Stage.warm``, once the file as handed in
    has been judged: a file refused before it runs costs no import). ``close`` it when its check is over
    (or will never come)."""
    work = new_workspace("check-")
    found = Stage(lab, Path(file), work, Path(workdir) if workdir else Path(file).resolve().parent)
    try:
        try:
            found.learner = snapshot(Path(file), work / "learner")
        except OSError as e:
            found.error = unreadable(Path(file), e)
            return found
        try:
            found.original = snapshot(lab.original, work / "original")
        except OSError as e:
            raise NotGraded(f"the lab's original {paths.display(lab.original)} cannot be read "
                            f"({e.strerror or e})") from None
        found.preload = execute.preload_for(lab.original, found.learner)
        if warm:
            found.warm()
    except BaseException:
        found.close()
        raise
    return found


def ahead(lab: labs.Lab, file: Path, workdir: Path | None = None) -> Stage | None:
    """``stage``, for a check whose turn comes after the current one's; None where nothing is set up early
    (a lab graded by a gate) or cannot be (the check then sets itself up when its turn comes, and says
    what went wrong)."""
    if lab.kind == "gate":
        return None
    try:
        return stage(lab, file, workdir)
    except NotGraded:
        return None

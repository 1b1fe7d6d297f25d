"""Where things live: the labs, their data, the runs folder and the kit's state.

Everything hangs off one root folder, the checkout of the kit. It is found,
in order, from ``$PROFLAB_ROOT``, from the current folder or one above it that
holds ``labs/``, or from the checkout this package was installed from.
"""

from __future__ import annotations

import os
from pathlib import Path


def _is_root(path: Path) -> bool:
    return any((path / "labs").glob("*/lab.toml"))


def root() -> Path:
    env = os.environ.get("PROFLAB_ROOT")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if _is_root(candidate):
            return candidate
    source_checkout = kit_clone()
    if _is_root(source_checkout):
        return source_checkout
    return here


def kit_clone() -> Path:
    """The folder this package was installed from (a clone's top, for an editable install): where the kit's
    own git history is, whichever project the command runs in."""
    return Path(__file__).resolve().parents[2]


def labs_dir() -> Path:
    return root() / "labs"


def drills_dir() -> Path:
    """The diagnosis drills written for this kit's learners (``proflab drill``), one lab folder each."""
    return root() / "drills"


def data_dir() -> Path:
    return root() / "data"


def runs_dir() -> Path:
    """TensorBoard's log folder: one sub-folder per lab, one run per version."""
    return root() / "runs"


def state_dir() -> Path:
    """The progress file, backups of reset exercises and scratch space."""
    return root() / ".proflab"


def display(path: Path) -> str:
    """A path as a learner would type it: relative to the current folder when inside it."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def kit_owned(path: Path | str) -> str:
    """Why the kit will not write an output at ``path``, or "": inside its labs, data or package, or over a
    file its git checkout tracks (an output written there replaced ``original.py`` once, and every later
    grading was "not graded")."""
    import subprocess

    target = Path(path).absolute().resolve()
    top = root().resolve()
    for folder, what in ((labs_dir(), "the labs' folder"), (data_dir(), "the labs' data"),
                         (Path(__file__).resolve().parent, "the kit's own code")):
        if target.is_relative_to(folder.resolve()):
            return f"{path} is inside {what} ({display(folder)}): the kit does not write its outputs there"
    if target.is_file() and target.is_relative_to(top) and _is_root(top):
        try:
            tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(target)], cwd=top,
                                     capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.SubprocessError):
            tracked = False
        if tracked:
            return f"{path} is one of the kit's own files (tracked by git): the kit does not write over it"
    return ""


def owned(prefix: str) -> str:
    """A scratch folder's name prefix that says which process made it (``run-1234-``): ``sweep_scratch``
    removes it once that process is gone."""
    return f"{prefix}{os.getpid()}-"


def sweep_scratch(folder: Path) -> None:
    """Remove the scratch folders of ``folder`` whose process is gone (killed before it could clean up).
    Only this user's, only folders named by ``owned``; a process whose number was reused keeps its folder
    (left for a later sweep), never the other way round."""
    import re
    import shutil

    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    me = os.geteuid()
    for entry in entries:
        found = re.search(r"-(\d+)-[a-z0-9_]{8}$", entry.name)  # mkdtemp's 8 characters after owned()
        if not found or int(found.group(1)) == os.getpid():
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != me or not entry.is_dir(follow_symlinks=False):
                continue
            os.kill(int(found.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            continue

"""The one door for every file a command writes where its user told it to (``--out``, ``--json``,
``--json-out``, ``--junit``, ``--results``, ``--merge … --out``, the autograder's files, ``profile --out``).

Whatever the command, an output is refused (``Refused``: a usage error, exit 2, nothing written) when it
would land

* on a file of the kit: its labs, their data, its package and source, its state (``.proflab``), a file its
  git checkout tracks, any ``.git`` folder, or the Python installation it runs from (the virtual
  environment and its commands, ``sys.prefix``);
* on one of the command's own inputs (a submission, a merged record, the profiled script, a gated file);
* through a link: a symbolic link anywhere on the way (the top-level links of the system's own layout,
  such as macOS's ``/tmp``, aside), the file itself included;
* over a file that is not a regular one (a FIFO, a device), or over a folder where a file is asked for;
* over a file the kit did not write: a file that exists is replaced only when it is empty or holds what
  the kit writes (its outputs name proflab near their top; a ``.zip`` is the autograder's). ``--force``
  where a command has it replaces such a file of the kit's too; nothing else.

``write_text``/``write_bytes`` check, then write atomically (a reader sees the old file or the new one).
A write that fails raises ``NotWritten``, which names the file and why. A command added later calls these
and is guarded the same way.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path
from typing import Iterable

from . import atomic, paths

MARK = b"proflab"  # every text output of the kit names it near its top (a JSON key, a comment, a title)
HEAD = 8192
NEVER_BY_CONTENT = (".py", ".pyw", ".pyi", ".sh", ".toml", ".cfg", ".ini", ".pth", ".so")


class Refused(ValueError):
    """An output the kit will not write there; the message names the file and why (a usage error)."""


class NotWritten(OSError):
    """An output that could not be written; its message names the file and why."""

    def __str__(self) -> str:
        return str(self.strerror)


def _links(target: Path) -> Path | None:
    """The first symbolic link on the way to ``target`` (absolute, not resolved), itself included; None if
    none. The links right under ``/`` (``/tmp`` -> ``/private/tmp`` on macOS, ``/bin`` -> ``usr/bin``) are
    the system's layout, not a user's detour, and pass."""
    parts = target.parts
    for i in range(2, len(parts) + 1):
        step = Path(*parts[:i])
        if step.is_symlink() and i > 2:
            return step
        if i == 2 and step.is_symlink():
            continue
        if not step.exists():
            return None
    return None


def _python_install() -> list[tuple[Path, str]]:
    """The virtual environment (or installation) this runs from: all of it, or, where it holds the current
    folder (a venv made in the project's own folder), its own parts."""
    found = []
    cwd = Path.cwd().resolve()
    for prefix in {Path(p).resolve() for p in (sys.prefix, sys.exec_prefix, sys.base_prefix)}:
        if prefix == Path(prefix.anchor):
            continue
        if cwd.is_relative_to(prefix):
            found += [(prefix / part, "the Python environment the kit runs from")
                      for part in ("bin", "Scripts", "lib", "lib64", "Lib", "include", "pyvenv.cfg")]
        else:
            found.append((prefix, "the Python environment the kit runs from"))
    return found


def kit_file(path: str | os.PathLike) -> str:
    """Why ``path`` is a file of the kit (or of the Python it runs with), or ""."""
    target = Path(path).absolute()
    real = target.resolve()
    if ".git" in target.parts or ".git" in real.parts:
        return f"{path} is inside a git repository's own folder (.git): the kit does not write its outputs there"
    top = paths.root().resolve()
    kit: list[tuple[Path, str]] = [(paths.state_dir(), "the kit's own state")]
    if paths._is_root(top) and (top / "src" / "proflab").is_dir():
        kit.append((top / "src", "the kit's own code"))
    kit += _python_install()
    for folder, what in kit:
        folder = Path(folder).resolve()
        if real == folder or real.is_relative_to(folder):
            return (f"{path} is inside {what} ({paths.display(folder)}): the kit does not write its outputs "
                    "there; write it somewhere else")
    owned = paths.kit_owned(real)
    return owned.replace(str(real), str(path)) + "; write it somewhere else" if owned else ""


def kit_wrote(path: Path) -> bool:
    """Whether the file at ``path`` is one the kit writes: empty, or naming proflab near its top or its end
    (every record, report and workflow of the kit does), or the autograder's zip. A script or a setting never is."""
    try:
        if path.stat().st_size == 0:
            return True
        if path.suffix.lower() in NEVER_BY_CONTENT:
            return False
        if path.suffix.lower() == ".zip":
            import zipfile

            with zipfile.ZipFile(path) as z:
                names = set(z.namelist())
                return "autograder.json" in names and any(n.startswith("proflab/") for n in names)
        with open(path, "rb") as f:
            head = f.read(HEAD)
            if MARK in head.lower():
                return True
            f.seek(max(0, path.stat().st_size - HEAD))  # results.json names it in its extra_data, at its end
            return MARK in f.read(HEAD).lower()
    except Exception:  # noqa: BLE001 - unreadable, not a zip: not the kit's
        return False


def refusal(path: str | os.PathLike | None, inputs: Iterable[str | os.PathLike | None] = (), *,
            folder: bool = False, exists_ok: bool = True, force: bool = False, option: str = "",
            above: bool = True) -> str:
    """Why the output ``path`` is not written, or "" if it may be. ``inputs``: the command's own inputs
    (files, or folders whose files are all inputs). ``folder``: the output is a folder the command writes
    files into. ``exists_ok``: an existing file of the kit's may be replaced without ``force``. ``above``: the
    folder it goes in is looked at too (a file in its place, not writable); left to the write itself where a
    command says its verdict first and then names the file it could not write (the gate)."""
    said = f"{option} {path}" if option else f"{path}"
    if path is None or str(path) == "":
        return f"{option or 'the output'}: give a file name"
    target = Path(path).absolute()
    link = _links(target)
    if link is not None:
        return (f"{said}: {paths.display(link) if link != target else path} is a symbolic link: the kit does not "
                "write through links; name the file itself")
    why = kit_file(target)
    if why:
        return (f"{option} " if option else "") + why.replace(str(target), str(path))
    real = target.resolve()
    for given in filter(None, inputs):
        source = Path(given).absolute().resolve()
        if real == source or (source.is_dir() and real.is_relative_to(source)):
            return (f"{said} is one of this command's inputs ({given}): an output written there would replace "
                    "it; write it somewhere else")
    try:
        st = os.stat(target, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):  # a file where a folder above it should be: see below
        st = None
    except OSError as e:
        return f"{said}: cannot be looked at ({e.strerror or e})"
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            if not folder:
                return f"{path} is a folder; {option or 'the output'} takes a file name"
        elif folder:
            return f"{said}: a file is in the way; give a folder"
        elif not stat.S_ISREG(st.st_mode):
            return f"{said} is not a regular file (a FIFO, a device or a socket): the kit writes only files"
        elif not kit_wrote(target):
            return (f"{said} exists and was not written by the kit: it is left as it is (remove it, or name "
                    "another file)")
        elif not exists_ok and not force:
            return f"{said} exists: it is left as it is (--force writes over it)"
    container = next((p for p in target.parents if p.exists()), None) if above else None
    if container is not None and not container.is_dir():
        return f"cannot write {path}: {paths.display(container)} is a file, not a folder"
    if container is not None and not os.access(container, os.W_OK):
        return f"cannot write {path}: {paths.display(container)} is not writable"
    return ""


def check(path: str | os.PathLike | None, inputs: Iterable[str | os.PathLike | None] = (), **how) -> Path:
    """``path`` as a Path, or ``Refused`` saying why not."""
    why = refusal(path, inputs, **how)
    if why:
        raise Refused(why)
    return Path(path)  # type: ignore[arg-type]


def folder(path: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = (), option: str = "") -> Path:
    """The output folder ``path``, checked and made."""
    target = check(path, inputs, folder=True, option=option)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NotWritten(e.errno or errno.EIO, f"cannot make the folder {path}: {e.strerror or e}", str(path)) from None
    return target


def write_text(path: str | os.PathLike, text: str, inputs: Iterable[str | os.PathLike | None] = (), **how) -> Path:
    """``text`` to ``path`` as UTF-8, after ``check``, atomically; ``NotWritten`` names the file when it fails."""
    target = check(path, inputs, **how)
    try:
        atomic.write_text(target, text)
    except OSError as e:
        raise NotWritten(e.errno or errno.EIO, f"could not write {path}: {e.strerror or e}", str(path)) from None
    return target


def write_bytes(path: str | os.PathLike, data: bytes, inputs: Iterable[str | os.PathLike | None] = (),
                **how) -> Path:
    """``data`` to ``path``, after ``check``; atomically, read back and compared. ``NotWritten`` names the file
    when the write fails (a full disk, a folder that went away); the file is then as it was."""
    target = check(path, inputs, **how)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_verified(target, data, like=target if target.is_file() else None)
    except OSError as e:
        raise NotWritten(e.errno or errno.EIO, f"could not write {path}: {e.strerror or e}", str(path)) from None
    return target


def new_file(path: str | os.PathLike, text: str, within: str | os.PathLike) -> Path:
    """A file made where none is (``new-lab``'s skeleton, inside the kit's checkout ``within``): never over a
    file that exists, never through a link below ``within``."""
    target, top = Path(path).absolute(), Path(within).absolute()
    step = top
    for part in target.relative_to(top).parts:
        step = step / part
        if step.is_symlink():
            raise Refused(f"{paths.display(step)} is a symbolic link: the kit does not write through links")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "x", encoding="utf-8") as f:  # never over a file that exists
        f.write(text)
    return target

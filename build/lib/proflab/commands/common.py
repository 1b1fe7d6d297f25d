"""What every ``proflab`` command shares: its consoles, its usage error, how a lab and a file are named on
the command line, and the status line."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from .. import errors, labs, paths
from ..running import sandbox, slots

USAGE_ERROR = 2


out = Console(highlight=False)


err = Console(stderr=True, highlight=False)


class UsageError(Exception):
    pass


def _lab(name: str) -> labs.Lab:
    try:
        return labs.resolve(name)
    except labs.LabNotFound as e:
        raise UsageError(str(e)) from None
    except labs.ManifestError as e:
        # The kit's mistake, not a usage error: exit 3, as when the kit cannot grade.
        problems = str(e).splitlines()
        said = problems[0] if len(problems) == 1 else "\n" + "\n".join(f"  {line}" for line in problems)
        raise errors.KitError(f"a lab manifest is broken: {said}") from None


def not_a_file(name: str) -> str:
    """Why ``name`` cannot be read as a lab file: a folder, a FIFO or a device, or nothing there at all."""
    import stat

    try:
        mode = os.stat(name).st_mode
    except OSError:
        return f"{name}: no such file"
    if stat.S_ISDIR(mode):
        return f"{name} is a folder: give the lab file itself (a .py file)"
    return f"{name} is not a regular file (a FIFO, a device or a socket): give the lab file itself (a .py file)"


def _lab_and_file(target: str, file: str | None, version: str = "exercise") -> tuple[labs.Lab, Path]:
    """``1``, ``dataloader`` or a path to a lab file; ``--file`` overrides the file."""
    as_path = Path(target)
    if target.endswith(".py") or as_path.is_file():
        if not as_path.is_file():
            raise UsageError(not_a_file(target))
        lab = labs.find_by_file(as_path)
        if lab is None and (as_path.resolve().parent / "lab.toml").is_file():
            lab = _lab(as_path.resolve().parent.name)  # a lab whose manifest is broken says so
        if lab is None:
            raise UsageError(f"{target} is not inside a lab folder; name the lab: proflab run LAB --file {target}")
        return lab, as_path.resolve()
    lab = _lab(target)
    if file:
        path = Path(file)
        if not path.is_file():
            raise UsageError(not_a_file(file))
        return lab, path.resolve()
    chosen = {"exercise": lab.exercise, "original": lab.original, "solution": lab.solution}[version]
    if not chosen.exists():
        restore = (f"`proflab reset {lab.number}` hands out a fresh copy of the exercise" if version == "exercise"
                   else f"`git checkout -- {paths.display(chosen)}` restores it")
        raise UsageError(f"{paths.display(chosen)} is missing: {restore}")
    if chosen.is_dir():
        raise errors.KitError(f"{paths.display(chosen)} is a folder, not a file: move it aside, then "
                              f"`proflab reset {lab.number}` restores the exercise")
    return lab, chosen


def _audited() -> bool:
    """The source audit is on unless PROFLAB_AUDIT=off in the checker's own environment (the kit's tests
    use it to exercise the checks behind the audit); ``proflab grade`` always audits."""
    return os.environ.get("PROFLAB_AUDIT", "on").lower() != "off"


def _label(lab: labs.Lab, file: Path) -> str:
    """The run name a version gets under runs/<lab>/."""
    file = file.resolve()
    if file == lab.exercise.resolve():
        return "yours"
    if file == lab.solution.resolve():
        return "reference"
    if file == lab.original.resolve():
        return "original"
    stem = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in file.stem)
    return f"file-{stem}"


@contextmanager
def _status(message: str, enabled: bool = True):
    if not enabled or not err.is_terminal:  # a log: only a wait for a turn at the machine is said, once a line
        yield lambda text: err.print(escape(text)) if text.startswith(slots.WAITING) else None
        return
    with err.status(message) as live:
        yield lambda text: live.update(text)


def _say_unsandboxed() -> None:
    """Said once, before a check whose runs go unsandboxed: its grade rests on the file keeping to itself."""
    engine = sandbox.engine()
    if not engine.ok:
        err.print(f"[yellow]note:[/] this grade is unsandboxed: {escape(engine.why)}. Your file runs with your "
                  "own rights; `proflab doctor` says more.")


def _refuse_unsandboxed(args, command: str) -> None:
    """grade and gate: a verdict others rely on needs the sandbox, or the user's say-so (--unsandboxed)."""
    engine = sandbox.engine()
    if engine.ok:
        return
    if not args.unsandboxed:
        raise UsageError(f"runs cannot be sandboxed on this machine ({engine.why}). `proflab {command}` runs "
                         "other people's code: install bubblewrap, or accept unsandboxed runs with "
                         "--unsandboxed (the records then say so)")
    err.print(f"[yellow]note:[/] runs are unsandboxed ({escape(engine.why)}); every record says so.")


KIT_ERROR = 3


def _say(console: Console, text: str) -> None:
    """A last line that may have nowhere to go (the terminal was closed): never an error of its own."""
    try:
        console.print(text)
    except (OSError, ValueError):
        pass

def _summaries(write) -> None:
    """Summaries are a view of the verdict; failing to draw them never loses it."""
    try:
        write()
    except Exception as e:  # noqa: BLE001
        err.print(f"[yellow]![/] TensorBoard summaries were not written: {escape(str(e))}")

"""Where labs are discovered: each folder under ``labs/`` (and the drills' folder) with a ``lab.toml``.

A broken lab never hides the others: :func:`discover` returns the labs that load, :func:`broken` (or
:func:`discover_all`) the ones that do not, and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import paths
from ..vocabulary import integer
from .keys import NAME
from .model import Lab, LabNotFound, ManifestError
from .reading import load, shown, tomllib


@dataclass(frozen=True)
class BrokenLab:
    """A lab folder whose manifest does not load, and why (every problem, one a line).

    ``number`` and ``name`` are the manifest's when it gives valid ones, else
    those of the folder's name (``01_dataloader``); either may be None.
    """

    folder: Path
    message: str
    number: int | None = None
    name: str | None = None

    def answers_to(self, wanted: str) -> bool:
        """Whether ``wanted`` (lower case) names this lab: its folder, its number or its name."""
        prefix = re.match(r"\d+", self.folder.name)
        if wanted.isdigit():
            return int(wanted) in {self.number, int(prefix[0]) if prefix else None}
        names = {self.folder.name.lower(), self.name}
        if self.number is not None and self.name:
            names.add(f"{self.number:02d}-{self.name}")
        return wanted in names


def _identity(folder: Path) -> tuple[int | None, str | None]:
    """The number and name of a lab whose manifest does not load, as far as they can be told."""
    match = re.fullmatch(r"(\d+)[_-](.+)", folder.name)
    number, name = (int(match[1]), match[2].lower()) if match else (None, None)
    try:
        data = tomllib.loads((folder / "lab.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return number, name
    if integer(0).ok(data.get("number")):
        number = data["number"]
    if NAME.ok(data.get("name")):
        name = data["name"]
    return number, name


def discover_all(labs_dir: Path | None = None) -> tuple[list[Lab], list[BrokenLab]]:
    """Every lab folder under ``labs_dir``: the labs that load, by number, and the broken ones.

    Two labs with the same number or name are both broken, each naming the other.
    """
    # the kit's labs, and the diagnosis drills written for its learners (``authoring.drills``)
    folders = [Path(labs_dir)] if labs_dir else [paths.labs_dir(), paths.drills_dir()]
    loaded: list[Lab] = []
    broken_labs: list[BrokenLab] = []
    for manifest in [m for folder in folders for m in sorted(folder.glob("*/lab.toml"))]:
        try:
            loaded.append(load(manifest.parent))
        except ManifestError as e:
            broken_labs.append(BrokenLab(manifest.parent, str(e), *_identity(manifest.parent)))
    clashes: dict[Path, list[str]] = {}
    for what in ("number", "name"):
        groups: dict[Any, list[Lab]] = {}
        for lab in loaded:
            groups.setdefault(getattr(lab, what), []).append(lab)
        for value, same in groups.items():
            for lab in same if len(same) > 1 else ():
                others = ", ".join(shown(other.folder / "lab.toml") for other in same if other is not lab)
                clashes.setdefault(lab.folder, []).append(
                    f"{shown(lab.folder / 'lab.toml')}: {what} {value!r} is also the {what} of {others}; "
                    f"each lab needs its own")
    good = [lab for lab in loaded if lab.folder not in clashes]
    broken_labs += [BrokenLab(lab.folder, "\n".join(clashes[lab.folder]), lab.number, lab.name)
                    for lab in loaded if lab.folder in clashes]
    broken_labs.sort(key=lambda b: (b.number is None, b.number or 0, b.folder.name))
    return sorted(good, key=lambda lab: lab.number), broken_labs


def discover(labs_dir: Path | None = None) -> list[Lab]:
    """The labs under ``labs_dir`` that load, by number; a broken one is left out (see :func:`broken`).

    Only when there are lab folders and not one of them loads does it raise
    ManifestError, with every broken lab's message: there is nothing to do then.
    """
    good, broken_labs = discover_all(labs_dir)
    if not good and broken_labs:
        raise ManifestError("\n".join(b.message for b in broken_labs))
    return good


def broken(labs_dir: Path | None = None) -> list[BrokenLab]:
    """The lab folders under ``labs_dir`` whose manifest does not load, and why."""
    return discover_all(labs_dir)[1]


def resolve(name: str, labs: list[Lab] | None = None) -> Lab:
    """A lab by number (``1``, ``01``) or by name (``dataloader``).

    A name that only a broken lab answers to (its folder ``01_dataloader``, the
    number its folder starts with, or its name) raises ManifestError with why
    that lab is broken; broken labs are looked for in the folders of ``labs``
    (or the kit's ``labs/`` when there are none).
    """
    broken_labs = None
    if labs is None:
        labs, broken_labs = discover_all()
    wanted = name.strip().lower()
    for lab in labs:
        if wanted.isdigit() and int(wanted) == lab.number:
            return lab
        if wanted in (lab.name, lab.slug, lab.folder.name.lower()):
            return lab
    if broken_labs is None:
        folders = sorted({lab.folder.parent for lab in labs}) or [paths.labs_dir()]
        broken_labs = [b for folder in folders for b in discover_all(folder)[1]]
    for b in broken_labs:
        if b.answers_to(wanted):
            raise ManifestError(b.message)
    known = ", ".join(f"{lab.number} ({lab.name})" for lab in labs) or "none found"
    import difflib

    close = difflib.get_close_matches(wanted, [lab.name for lab in labs], n=1, cutoff=0.6)
    guess = f" Did you mean '{close[0]}'?" if close else ""
    raise LabNotFound(f"no lab called '{name}'.{guess} Labs: {known}.")


def find_by_file(path: Path, labs: list[Lab] | None = None) -> Lab | None:
    """The lab whose folder holds ``path``, if any (a broken lab is none)."""
    path = path.resolve()
    for lab in discover_all()[0] if labs is None else labs:
        if path.parent == lab.folder.resolve():
            return lab
    return None

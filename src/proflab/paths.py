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
    source_checkout = Path(__file__).resolve().parents[2]
    if _is_root(source_checkout):
        return source_checkout
    return here


def labs_dir() -> Path:
    return root() / "labs"


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

"""Failures that are the kit's or the machine's, never the learner's.

A full disk, an unwritable folder, lab data that cannot be built: the kit
reports these as "not graded" (exit 3), with what failed and where, and keeps
the learner's work and progress as they were.
"""

from __future__ import annotations

import os
from pathlib import Path


class KitError(RuntimeError):
    """The kit could not do its own work here; the message says what and where."""


# Below this much free space, a run that failed may have failed for the disk, not for its code.
LOW_DISK_BYTES = 32 * 1024 * 1024
# A run is not started with less free space than this where it writes: its traces and result file fit
# in far less, so a disk that fills during a run was filled by the run.
RUN_NEEDS_BYTES = 256 * 1024 * 1024


def low_disk(*folders: Path | str | None, need: int = LOW_DISK_BYTES) -> str:
    """A sentence naming the first of ``folders`` whose disk has less than ``need`` bytes free, or ""."""
    for folder in filter(None, folders):
        path = Path(folder)
        while not path.exists() and path != path.parent:
            path = path.parent
        try:
            fs = os.statvfs(path)
        except OSError:
            continue
        free = fs.f_bavail * fs.f_frsize
        if free < need or (fs.f_files and fs.f_favail == 0):
            return (f"the disk holding {path} is full ({free / 1e6:.1f} MB free, and a run needs "
                    f"{need / 1e6:.0f} MB): free some space and run it again")
    return ""


def describe(e: OSError, doing: str) -> str:
    """``cannot write runs/…: No space left on device`` from an OSError."""
    where = f" {e.filename}" if e.filename else ""
    return f"cannot {doing}{where}: {e.strerror or e}"

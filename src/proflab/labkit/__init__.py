"""What the labs import: their data sets and models, kept out of the lab files.

A lab file holds the pipeline a learner edits; the data it reads and the
model it trains live here, so that a fix changes how the work is done, never
what the work is. Each lab names its data preparer in its manifest
(``data = "proflab.labkit.photos:ensure_photos"``).
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


def build_once(data_dir: str | os.PathLike, name: str, version: str, build: Callable[[Path], None]) -> Path:
    """``data_dir/name``, built by ``build(folder)`` once per ``version``; safe if processes race.

    The data is built in a temporary folder and renamed into place, with a
    ``READY`` file naming its version, so no process ever reads half of it.
    """
    root = Path(data_dir) / name
    ready = root / "READY"
    if ready.exists() and ready.read_text().strip() == version:
        return root
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=data_dir))
    try:
        build(tmp)
        (tmp / "READY").write_text(version + "\n")
        if root.exists():
            shutil.rmtree(root, ignore_errors=True)
        try:
            os.replace(tmp, root)
        except OSError:  # another process finished first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def prepare(spec: str, data_dir: Path) -> Path:
    module, _, func = spec.partition(":")
    return getattr(importlib.import_module(module), func)(data_dir)


def prepare_all(data_dir: Path) -> list[str]:
    from .. import labs, paths

    done = []
    for lab in labs.discover():
        if lab.data:
            folder = prepare(lab.data, data_dir)
            done.append(f"lab {lab.number} ({lab.name}): data ready in {paths.display(folder)}")
    return done

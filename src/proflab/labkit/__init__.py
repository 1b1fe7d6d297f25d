"""What the labs import: their data sets and models, kept out of the lab files.

A lab file holds the pipeline a learner edits; the data it reads and the
model it trains live here, so that a fix changes how the work is done, never
what the work is. Each lab names its data preparer in its manifest
(``data = "proflab.labkit.photos:ensure_photos"``).
"""

from __future__ import annotations

import importlib
from pathlib import Path


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

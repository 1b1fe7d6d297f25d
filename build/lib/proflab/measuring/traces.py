"""Traces the kit writes, made readable by TensorBoard's PyTorch Profiler plugin.

torch-tb-profiler 0.4.3, the plugin's last release, was written for PyTorch
1.x traces. PyTorch 2.x files every ``record_function`` range (your own labels
and the DataLoader's ``enumerate(DataLoader)#…__next__``) under the category
``user_annotation``, and the plugin drops every ``user_annotation`` event but
``ProfilerStep#``. Its Overview then shows a DataLoader share of 0% and never
recommends more workers, and your labels vanish from its Operator view
(views that need the internet in any case: they load their charts from it;
the kit's Profile tab reads the traces itself, offline).

The kit re-files those ranges under ``cpu_op``, the category the plugin reads
them from, right after ``tensorboard_trace_handler`` writes the file. Names,
times and nesting are untouched, so the timeline and every figure the kit
measures stay the same. GPU-side annotations (``gpu_user_annotation``) are
left alone.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from ..atomic import write_text

PLUGIN_CATEGORY = "cpu_op"

try:  # twice as fast as the standard library on a trace of tens of MB, ten times at writing one
    import orjson
except ImportError:  # pragma: no cover - a dependency; the standard library does the same, slower
    orjson = None


def parse(raw: bytes | str) -> Any:
    """A trace file's JSON (orjson where it can; the standard library for what orjson refuses, NaN say)."""
    if orjson is not None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


def dumps(data: Any) -> str:
    if orjson is not None:
        try:
            return orjson.dumps(data).decode("utf-8")
        except TypeError:  # what orjson cannot write (an integer beyond 64 bits): the standard library can
            pass
    return json.dumps(data)


def read(path: str | Path) -> Any:
    """A trace file (``.json`` or ``.json.gz``), parsed."""
    path = Path(path)
    raw = path.read_bytes()
    return parse(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def fix_for_plugin(path: str | Path, data: dict | None = None) -> int:
    """Re-file ``record_function`` ranges so the plugin counts them; returns how many.

    ``data``: the file's parsed JSON, when the caller has read it already; it
    is changed in place and written back.
    """
    path = Path(path)
    if data is None:
        data = read(path)
    changed = 0
    for event in data.get("traceEvents", []):
        if event.get("cat") == "user_annotation" and not str(event.get("name", "")).startswith("ProfilerStep#"):
            event["cat"] = PLUGIN_CATEGORY
            changed += 1
    if changed:
        text = dumps(data)
        if path.suffix == ".gz":
            tmp = path.with_name(path.name + ".tmp")
            with gzip.open(tmp, "wt", encoding="utf-8") as f:
                f.write(text)
            tmp.replace(path)
        else:
            write_text(path, text)
    return changed


def publish(trace: str | Path, folder: str | Path) -> Path:
    """Move ``trace`` from a run's private folder into the TensorBoard run folder ``folder``.

    Each check and each ``proflab run`` writes its traces apart, so two of
    them on the same lab at once (two terminals, or a ``check`` beside a
    ``grade``) never delete each other's. Once read, a trace replaces the ones
    in its run folder, under a lock on the lab's runs folder.
    """
    return publish_all([trace], folder)[0]


def publish_all(found: list[str | Path], folder: str | Path) -> list[Path]:
    """``publish`` for the traces of one run's several workers (a torchrun job's ranks): together,
    they replace what the run folder held."""
    import fcntl
    import shutil

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    moved = []
    with open(folder.parent / ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for old in folder.glob("*.pt.trace.json*"):
            old.unlink(missing_ok=True)
        for trace in map(Path, found):
            target = folder / trace.name
            try:
                shutil.move(str(trace), target)
            except OSError:  # a full disk: no trace cut short is left for TensorBoard to choke on
                for done in [*moved, target]:
                    done.unlink(missing_ok=True)
                raise
            moved.append(target)
    return moved

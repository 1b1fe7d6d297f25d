"""Where a check's traces go once it is decided: one TensorBoard run per lab and version, ``runs/<lab>/<label>``.

A check's runs write their traces into the check's private folder; when the
check ends they are published to the kit's runs folder (``trace_dir``), where
``proflab tensorboard`` shows them, and what the report says of the copy that
was graded is said of the learner's own file (``name_the_file``). A trace that
cannot be kept costs only its view in TensorBoard: the verdict stands.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .. import errors, labs, paths
from ..measuring import traces
from .verdicts import Report


def trace_dir(lab: labs.Lab, label: str) -> Path:
    """``runs/01-dataloader/original``: one TensorBoard run per lab and version."""
    return paths.runs_dir() / lab.slug / label


def publish_traces(lab: labs.Lab, label: str, report: Report) -> None:
    """The traces read for the verdict, moved from the check's private folder to its TensorBoard runs."""
    if report.rank_traces:
        _publish_rank_traces(lab, label, report)
        return
    if report.traces.get("original") and report.traces.get("original") == report.traces.get("learner"):
        source = Path(report.traces["learner"])  # one run stood for both (an unchanged file): a copy for each
        if source.exists():
            copy = source.parent / "original" / ("original." + source.name.split(".", 1)[-1])
            copy.parent.mkdir(exist_ok=True)
            shutil.copyfile(source, copy)
            report.traces["original"] = str(copy)
    for which, path in list(report.traces.items()):
        if not Path(path).exists():
            continue
        folder = trace_dir(lab, "original" if which == "original" else label)
        try:
            report.traces[which] = str(traces.publish(path, folder))
        except OSError as e:
            report.traces.pop(which)  # the verdict stands; only its view in TensorBoard is missing
            _not_kept(report, which, e, folder)


def _publish_rank_traces(lab: labs.Lab, label: str, report: Report) -> None:
    """A torchrun job's traces: every rank's into the version's TensorBoard run, one worker per rank."""
    same = report.rank_traces.get("original") == report.rank_traces.get("learner")
    for which in ("original", "learner"):
        paths = [p for p in report.rank_traces.get(which, []) if p and Path(p).exists()]
        if not paths:
            continue
        if same and which == "original":  # one job stood for both (an unchanged file): a copy for each
            copies = Path(paths[0]).parent / "original"
            copies.mkdir(exist_ok=True)
            paths = [shutil.copyfile(p, copies / Path(p).name) for p in paths]
        folder = trace_dir(lab, "original" if which == "original" else label)
        try:
            published = traces.publish_all(paths, folder)
        except OSError as e:
            report.traces.pop(which, None)  # the verdict stands; only its view in TensorBoard is missing
            _not_kept(report, which, e, folder)
            continue
        report.rank_traces[which] = [str(p) for p in published]
        report.traces[which] = str(published[0])


def _not_kept(report: Report, which: str, e: OSError, folder: Path) -> None:
    """Said of the folder the trace was to go to (the check's own copy is not what failed): ``runs/…``."""
    report.notes.append(f"the {which}'s trace was not kept for TensorBoard (cannot write into "
                        f"{paths.display(folder)}: {e.strerror or e}); the verdict does not rest on it: free some "
                        "space and check again to see it")


def name_the_file(report: Report, snapshot_path: Path, file: Path) -> None:
    """What the report says about the snapshot, said of the learner's own file."""
    report.file = str(file)
    for where in {str(snapshot_path), str(snapshot_path.resolve())}:
        report.traceback = report.traceback.replace(where, str(file))
        report.error = report.error.replace(where, str(file))
        report.output = report.output.replace(where, str(file))
        for c in report.checks:
            c.rationale, c.actual = c.rationale.replace(where, str(file)), c.actual.replace(where, str(file))
            c.details = [line.replace(where, str(file)) for line in c.details]

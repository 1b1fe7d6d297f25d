"""What the kit writes for TensorBoard's own dashboards, which work offline.

For each check, in the lab's runs folder (``runs/01-dataloader/``):

* Scalars ``step_time_ms/<lab>`` in the original's run and in the learner's, so the
  two versions overlay in one chart (every timed step of every round);
* Text ``checker_report`` in the learner's run: the report as a table;
* Images ``where_the_time_went`` and ``step_times`` in the learner's run.

Old event files in those runs are replaced, so TensorBoard shows the latest
check only, as it does for the traces.
"""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

from .. import errors, labs
from ..measuring.breakdown import Breakdown
from ..grading.checks import trace_dir
from ..grading.verdicts import Report

STEP_TIME = "step_time_ms"
REPORT = "checker_report"
WHERE = "where_the_time_went"
STEP_TIMES = "step_times"


# Free space the summaries need, a few charts and scalars: with less, they are not written (the verdict is
# printed anyway), rather than cut short.
SUMMARY_NEEDS_BYTES = 4 * 1024 * 1024


def _quiet_about_writes(hook):
    def quiet(args):
        if not issubclass(args.exc_type, OSError):
            hook(args)
    return quiet


class _Writer:
    """One event file, written with TensorBoard's own writer and summary protos.

    Not torch.utils.tensorboard: it imports torch (two seconds and more of
    every check, in the checker's process), for three kinds of summary that
    TensorBoard's own modules write as well.
    """

    def __init__(self, folder: Path):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        full = errors.low_disk(folder, need=SUMMARY_NEEDS_BYTES)
        if full:
            raise errors.KitError(full)
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("events.out.tfevents.*"):
            old.unlink(missing_ok=True)
        # The writer writes from a thread of its own, and a write that fails there (the disk filled meanwhile)
        # is raised again by close(), here: the thread's own traceback is not printed into the report.
        self._hook = threading.excepthook
        threading.excepthook = _quiet_about_writes(self._hook)
        self._file = EventFileWriter(str(folder))

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._file.close()
        finally:
            threading.excepthook = self._hook

    def _add(self, value, step: int = 0) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._file.add_event(Event(wall_time=time.time(), step=step, summary=Summary(value=[value])))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._add(Summary.Value(tag=tag, simple_value=float(value)), step)

    def add_text(self, tag: str, text: str) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.text.metadata import create_summary_metadata
        from tensorboard.util.tensor_util import make_tensor_proto

        self._add(Summary.Value(tag=f"{tag}/text_summary", metadata=create_summary_metadata(tag, ""),
                                tensor=make_tensor_proto([text.encode()])))

    def add_figure(self, tag: str, figure) -> None:
        """The figure as a PNG image summary; the figure is closed."""
        from matplotlib import pyplot as plt
        from tensorboard.compat.proto.summary_pb2 import Summary

        png = io.BytesIO()
        figure.savefig(png, format="png")
        width, height = (int(round(x)) for x in figure.get_size_inches() * figure.dpi)
        plt.close(figure)
        self._add(Summary.Value(tag=tag, image=Summary.Image(height=height, width=width, colorspace=4,
                                                             encoded_image_string=png.getvalue())))


def step_time_tag(lab: labs.Lab) -> str:
    """One chart per lab (``step_time_ms/01-dataloader``): labs' step times differ a hundredfold."""
    return f"{STEP_TIME}/{lab.slug}"


def _step_times(writer, lab: labs.Lab, step_times_s: list[float]) -> None:
    for i, t in enumerate(step_times_s):
        writer.add_scalar(step_time_tag(lab), t * 1000.0, i)


def write_step_times(lab: labs.Lab, label: str, step_times_s: list[float]) -> Path:
    folder = trace_dir(lab, label)
    with _Writer(folder) as w:
        _step_times(w, lab, step_times_s)
    return folder


def write_check(lab: labs.Lab, report: Report) -> Path:
    """Scalars, text and images for one check; returns the learner's run folder."""
    from . import charts
    from .report import to_markdown

    if report.step_times["original"]:
        write_step_times(lab, "original", report.step_times["original"])
    folder = trace_dir(lab, report.label)
    with _Writer(folder) as w:
        _step_times(w, lab, report.step_times["learner"])
        w.add_text(REPORT, to_markdown(report))
        names = {"original": "original", "learner": report.label}
        if report.breakdown:
            parts = {names[k]: Breakdown(**report.breakdown[k]) for k in ("original", "learner")
                     if k in report.breakdown}
            w.add_figure(WHERE, charts.where_time_went(parts, f"Lab {lab.number}: where a step's time went"))
        if report.step_times["learner"]:
            ratios = [o / m for o, m in zip(report.timings["original"], report.timings["learner"])]
            times = {names[k]: [t * 1000.0 for t in report.step_times[k]] for k in ("original", "learner")}
            w.add_figure(STEP_TIMES, charts.step_times(times, ratios if report.comparison else [],
                                                       report.threshold, f"Lab {lab.number}: step times"))
    return folder

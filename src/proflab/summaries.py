"""What the kit writes for TensorBoard's own dashboards, which work offline.

For each check, in the lab's runs folder (``runs/01-dataloader/``):

* Scalars ``step_time_ms`` in the original's run and in the learner's, so the
  two versions overlay in one chart (every timed step of every round);
* Text ``checker_report`` in the learner's run: the report as a table;
* Images ``where_the_time_went`` and ``step_times`` in the learner's run.

Old event files in those runs are replaced, so TensorBoard shows the latest
check only, as it does for the traces.
"""

from __future__ import annotations

from pathlib import Path

from . import charts, labs
from .breakdown import Breakdown
from .checks import Report, trace_dir

STEP_TIME = "step_time_ms"
REPORT = "checker_report"
WHERE = "where_the_time_went"
STEP_TIMES = "step_times"


def _writer(folder: Path):
    from torch.utils.tensorboard import SummaryWriter

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("events.out.tfevents.*"):
        old.unlink(missing_ok=True)
    return SummaryWriter(log_dir=str(folder))


def _step_times(writer, step_times_s: list[float]) -> None:
    for i, t in enumerate(step_times_s):
        writer.add_scalar(STEP_TIME, t * 1000.0, i)


def write_step_times(lab: labs.Lab, label: str, step_times_s: list[float]) -> Path:
    folder = trace_dir(lab, label)
    with _writer(folder) as w:
        _step_times(w, step_times_s)
    return folder


def write_check(lab: labs.Lab, report: Report) -> Path:
    """Scalars, text and images for one check; returns the learner's run folder."""
    from .report import to_markdown

    if report.step_times["original"]:
        write_step_times(lab, "original", report.step_times["original"])
    folder = trace_dir(lab, report.label)
    with _writer(folder) as w:
        _step_times(w, report.step_times["learner"])
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

"""What the kit writes for TensorBoard's own dashboards, which work offline.

For each check, in the lab's runs folder (``runs/01-dataloader/``):

* Scalars ``step_time_ms/<lab>`` in the original's run and in the learner's, so the
  two versions overlay in one chart (every timed step of every round);
* Text ``checker_report`` in the learner's run: the report as a table;
* Images ``where_the_time_went`` and ``step_times`` in the learner's run.

Lab 7's check runs two gates instead (``write_gate_check``), and writes the
same three kinds into each gate's two runs, the runs of its traces
(``runs/07-gate/unchanged/baseline`` and ``…/candidate``, likewise ``regression``).

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
from ..grading.publishing import trace_dir
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


def to_write(lab: labs.Lab, report: Report) -> bool:
    """Whether a check has summaries to write: a lab's once the learner's version was timed; lab 7's once a
    gate published its traces (its summaries go into those runs)."""
    if report.error:
        return False
    if lab.kind == "gate":
        return bool(report.traces)
    return bool(report.step_times["learner"])


def write_check(lab: labs.Lab, report: Report) -> Path:
    """Scalars, text and images for one check; returns the learner's run folder (lab 7: the runs folder)."""
    from . import charts
    from .report import to_markdown

    if lab.kind == "gate":
        return write_gate_check(lab, report)

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


# --- lab 7: a check that runs two gates ------------------------------------------------------------------

def write_gate_check(lab: labs.Lab, report: Report) -> Path:
    """Lab 7's check, for each gate it traced (``unchanged``, then ``regression``), in the runs of its two
    traces (``07-gate/unchanged/baseline`` and ``07-gate/unchanged/candidate``: the names the report prints):

    * Scalars ``step_time_ms/07-gate`` in both runs, each round's mean step (the gate's timings), so all
      four runs overlay in one chart;
    * Text ``checker_report`` in the candidate's run: the check's report and this gate's verdict;
    * Images ``where_the_time_went`` and ``step_times`` in the candidate's run: baseline against candidate.

    Returns the runs folder.
    """
    from . import charts

    for gate, found in report.evidence.items():
        folders = {which: Path(report.traces[f"{gate}_{which}"]).parent for which in ("baseline", "candidate")
                   if f"{gate}_{which}" in report.traces}
        if not isinstance(found, dict) or not folders:
            continue
        timings = found.get("timings") or {}
        for which, folder in folders.items():
            with _Writer(folder) as w:
                _step_times(w, lab, timings.get(which, []))
                if which != "candidate":
                    continue
                w.add_text(REPORT, gate_markdown(lab, report, gate))
                parts = {v: Breakdown(**found["breakdown"][v]) for v in ("baseline", "candidate")
                         if v in (found.get("breakdown") or {})}
                if parts:
                    w.add_figure(WHERE, charts.where_time_went(
                        parts, f"Lab {lab.number}, the {gate} gate: where a profiled step's time went"))
                base, cand = timings.get("baseline", []), timings.get("candidate", [])
                if base and cand:
                    w.add_figure(STEP_TIMES, charts.step_times(
                        {"baseline": [t * 1000.0 for t in base], "candidate": [t * 1000.0 for t in cand]},
                        [c / b for b, c in zip(base, cand) if b > 0], found.get("max_slowdown"),
                        f"Lab {lab.number}, the {gate} gate: step times", times_label="mean step time of a round, ms",
                        ratios_title="Candidate / baseline, per round", ratio_label="slowdown per round",
                        threshold_label="max_slowdown"))
    return Path(report.runs_dir)


# What each of lab 7's gates runs, in words.
GATE_RUNS = {"unchanged": "the fix against itself", "regression": "the fix undone against the fix"}


def gate_markdown(lab: labs.Lab, report: Report, gate: str) -> str:
    """Lab 7's report as Markdown, for the Text dashboard of one gate's candidate run."""
    from .report import _WORD, _cell

    verdict = {"passed": "PASSED", "failed": "FAILED", "inconclusive": "INCONCLUSIVE"}.get(report.verdict,
                                                                                         "NOT GRADED")
    found = report.evidence[gate]
    lines = [f"## Lab {report.number} · {report.title}: {verdict}", "",
             f"`{Path(report.file).name}`, {report.against}, on {report.device}, in {report.duration_s:.0f} s: "
             f"two gates, each a TensorBoard run for its baseline and one for its candidate. This is the "
             f"**{gate}** gate ({GATE_RUNS.get(gate, gate)}), runs "
             + " and ".join(f"`{r}`" for r in found.get("runs", ())) + ".", "",
             "| check | verdict | expected | measured |", "|---|---|---|---|"]
    for c in report.checks:
        measured = c.actual if c.status != "skipped" else c.skipped_because()
        lines.append(f"| {c.title} | {_WORD[c.status]} | {_cell(c.expected)} | {_cell(measured)} |")
    s = found.get("slowdown") or {}
    if s:
        said = {"passed": "no regression", "failed": "regression"}.get(found.get("verdict"), "too noisy to call")
        lines += ["", f"**The {gate} gate:** {said}: {s['median']:.2f}× the baseline's step time (95% interval "
                      f"{s['low']:.2f}–{s['high']:.2f}×, {found.get('rounds', 0)} rounds) against max_slowdown "
                      f"{found.get('max_slowdown', 0):g}×"]
    because = (found.get("because") or {}).get("slower") or (found.get("because") or {}).get("faster")
    if because:
        lines += ["", f"**What changed most:** {because}"]
    failed = next((c for c in report.checks if c.status in ("failed", "inconclusive")), None)
    if failed and failed.help:
        lines += ["", f"**Where to look next:** {failed.help}"]
    return "\n".join(lines)

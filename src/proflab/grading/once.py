"""One run of one version, and the file as handed in: the same for a lab's rounds and for a gate.

``as_handed_in`` is the pre-check every graded file gets before any process starts (a file that does not
parse fails at once, as a run would, with its line); ``run_once`` runs a version once and reads it as both
callers must: the kit's failures are "not graded", what the run is run from must be as it was after it
(``measures.changed_during``), and the device a first run found is the next runs' (``Runs.device``);
``keep_trace`` keeps a first run's trace for the evidence. ``rounds.Rounds`` and ``gate`` call these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import errors, labs
from ..running import execute
from .measures import changed_during
from .verdicts import NotGraded


def as_handed_in(file: Path, version: str, shown: str | Path | None = None) -> execute.Outcome | None:
    """The file as handed in, before anything runs: None when it parses; else the failed run it would have been
    (its SyntaxError, file and line), for ``failures.runtime_failure`` to tell."""
    try:
        compile(Path(file).read_bytes(), str(file), "exec")
    except SyntaxError as e:
        return execute.Outcome(version, Path(file), "error", result={
            "kind": "syntax", "message": f"SyntaxError: {e.msg}", "file": str(shown or file), "line": e.lineno,
            "code": (e.text or "").strip()})
    return None


@dataclass
class Runs:
    """What the runs of one check (or gate) share: its lab, the original it must leave as it was, the data
    they read (and its fingerprint, taken before the first run), the device once a run found it."""

    lab: labs.Lab
    original: Path  # the lab's original (a gate's baseline)
    data: Path | None
    data_print: dict = field(default_factory=dict)
    device: str = "auto"

    def run_once(self, file: Path, name: str, learners: bool, **how: Any) -> execute.Outcome:
        """Run ``file`` once as version ``name`` (``how``: ``execute.run``'s options); ``learners``: the run is
        of the file being graded (a change to what the original runs from is then its doing)."""
        try:
            outcome = execute.run(self.lab, file, name, device=self.device, checking=True, **how)
        except errors.KitError as e:
            raise NotGraded(str(e)) from None
        if outcome.status == "kit":
            raise NotGraded(outcome.result.get("message", "the kit failed"))
        changed_during(outcome, learners, self.original, self.lab, self.data, self.data_print)
        if outcome.ok and self.device == "auto":  # every later run then runs where the first one did
            self.device = outcome.result["device"]
        return outcome


def keep_trace(report: Any, which: str, outcome: execute.Outcome, loaded: dict, job: bool = False) -> None:
    """A first run's trace: its path (and, where the report keeps them, its fingerprint and a job's every
    rank's) in ``report``, and its events in ``loaded`` for the evidence (taken off the outcome)."""
    if not (outcome.ok and outcome.result.get("trace")):
        return
    report.traces[which] = outcome.result["trace"]
    if hasattr(report, "trace_sha256"):
        report.trace_sha256[which] = outcome.result.get("trace_sha256") or ""
    if job:  # a torchrun job's: every rank's
        report.rank_traces[which] = list(outcome.result.get("rank_traces") or [])
        report.rank_trace_sha256[which] = list(outcome.result.get("rank_trace_sha256") or [])
        loaded.update({f"{which}@{rank}": t for rank, t in enumerate(outcome.rank_traces) if t is not None})
        outcome.rank_traces = []
    if outcome.trace is not None:
        loaded[which] = outcome.trace
        outcome.trace = None

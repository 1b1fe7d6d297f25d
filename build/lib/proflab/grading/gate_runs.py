"""Where a gate lab (lab 7) is graded: the learner's gate settings, run by the checker on a known fix.

The exercise is not a pipeline but the ``[tool.proflab.gate]`` table a
project would keep in its pyproject.toml. The checker reads it (data: no
code of the learner's runs), then runs the real ``proflab gate`` machinery
with it twice, on the kit's own files, verified by their fingerprints. Its
four named checks (``checks.gate_settings``, ``gate_unchanged``,
``gate_regression``, ``gate_cause``) decide from these runs, each asking for
the gate it needs when it needs it:

    1. settings      the table reads, and sets only how to gate, not what
    2. unchanged     the fix against itself: no regression (a false alarm,
                     or "too noisy to call", blocks every pull request)
    3. regression    the fix undone against the fix: a regression
    4. cause         that verdict names what changed (the DataLoader)

Each gate's traces are published in the kit's runs folder as four
TensorBoard runs, ``07-gate/unchanged/baseline``, ``07-gate/unchanged/candidate``,
``07-gate/regression/baseline`` and ``07-gate/regression/candidate`` (``run_name``):
the report names them as TensorBoard lists them, and ``cmd_check`` adds each
gate's Scalars, Text and Images to them (``summaries.write_gate_check``).

The lab carries its own copy of the fix (``[gate] pipeline``, ``pipeline.py``)
for the learner to try the settings on, and to break on purpose, without
having done lab 1; the checker never runs it: it gates the kit's files.
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import Any, Iterator, Sequence

from .. import labs, paths
from . import gate as gating
from . import gate_config
from .publishing import trace_dir
from .staging import snapshot, unreadable, workspace
from .trial import ON_DEMAND, Asked, NamedCheck, rows
from .verdicts import FAILED, Check, NotGraded, Report

GATES = ("unchanged", "regression")  # the two gates a check runs, in order
VERSIONS = ("baseline", "candidate")


def run_name(lab: labs.Lab, gate: str, which: str) -> str:
    """A gate's version as TensorBoard lists it under the kit's runs folder: ``07-gate/unchanged/baseline``."""
    return f"{lab.slug}/{gate}/{which}"


class GateRuns:
    """Lab 7's check of one settings file: its copy, and the two gates its checks ask for, each run once."""

    WHOSE = "your settings'"  # what a check the kit could not grade says it was not the failure of

    def __init__(self, asked: Asked, named: Sequence[NamedCheck]):
        lab = asked.lab
        self.asked, self.lab = asked, lab
        self.report = Report(lab=lab.name, number=lab.number, title=lab.title, file=str(asked.file),
                             label=asked.label,
                             # the run names the report prints are relative to this: TensorBoard's own (07-gate/...)
                             checks=rows(named), runs_dir=str(paths.runs_dir()),
                             against=f"as the gate of lab {lab.gating.lab}'s fix")
        self.shown = Path(asked.file)  # the file as the learner named it
        self.file = self.shown  # the copy that is graded, once taken
        self.target: labs.Lab | None = None  # the lab whose fix is gated, once the settings are read
        self.how: dict[str, Any] = {}  # the settings: how to gate (the checker chooses what)
        self.limit = 0.0  # their max_slowdown
        self._files: dict[str, Path] = {}  # each gate's candidate
        self._done: dict[str, gating.GateReport] = {}

    def moments(self) -> Iterator[str]:
        """The check from start to end: the copy taken, one moment at which the checks ask for the gates they
        need, then what an earlier check left in the runs folder and this one did not trace, forgotten."""
        report, lab = self.report, self.lab
        with workspace("check-") as work:
            try:
                self.file = snapshot(self.shown, work / "learner")
            except OSError as e:
                report.verdict, report.error = "error", unreadable(self.shown, e)
                return
            report.file_sha256 = labs.sha256(self.file)
            if labs.sha256(lab.original) != lab.original_sha256:
                report.verdict = "error"
                report.error = f"{lab.original} was edited; restore it (`git checkout -- {paths.display(lab.original)}`)"
                return
            try:
                yield ON_DEMAND
            finally:
                if self.target is not None:
                    forget_untraced(lab, report)

    def aim(self, found: dict[str, Any]) -> None:
        """Gate with ``found``, the learner's settings, read and held to the lab: on the fix of the lab they
        gate, as the kit ships it (verified by its fingerprint), and that fix undone."""
        g = self.lab.gating
        try:
            target = labs.resolve(g.lab)
        except (labs.LabNotFound, labs.ManifestError) as e:
            raise NotGraded(f"lab {self.lab.number} gates the fix of lab '{g.lab}', which cannot be loaded "
                            f"({e})") from None
        fix, undone = target.folder / g.fix, target.folder / g.regression
        if not fix.is_file() or labs.sha256(fix) != g.fix_sha256 or not target.original_is_intact():
            raise NotGraded(f"lab {target.number}'s {g.fix} or {g.regression} is not as the kit ships it (restore them "
                            f"with `git checkout -- {paths.display(target.folder)}`)")
        self.how = {k: v for k, v in found.items() if k not in ("file", "baseline", "against", "trace_dir")}
        self.limit = self.how.get("max_slowdown", gate_config.KEYS["max_slowdown"].default)
        self._files = {"unchanged": fix, "regression": undone}
        self.target = target

    def gate(self, name: str) -> gating.GateReport:
        """The gate ``name`` (one of ``GATES``), run with the learner's settings the first time a check asks for
        it. What it measured goes into the report when its candidate ran through (``broken``: it did not)."""
        if name in self._done:
            return self._done[name]
        lab, report, asked, n = self.lab, self.report, self.asked, GATES.index(name) + 1
        values = {**self.how, "lab": self.target.name, "file": str(self._files[name]),
                  "baseline": str(self._files["unchanged"]), "trace_dir": str(trace_dir(lab, name))}
        if asked.device != "auto":
            values["device"] = asked.device
        settings = gate_config.Settings(values, {k: "lab 7" for k in values})
        done = gating.run(settings, on_progress=lambda text: asked.on_progress(f"gate {n} of 2 ({name}): {text}"))
        if done.verdict == "error":
            raise NotGraded(f"the {name} gate could not run: {done.error}")
        self._done[name] = done
        if broken(done) is not None:
            return done
        report.evidence[name] = {k: getattr(done, k) for k in ("verdict", "slowdown", "because", "duration_s",
                                                               "changes", "traces", "stopped")}
        report.evidence[name]["rounds"] = (done.comparison or {}).get("rounds", 0)
        # what TensorBoard's Scalars and Images show of it: each round's mean step, where a profiled step went
        report.evidence[name].update(max_slowdown=done.max_slowdown, timings=done.timings,
                                     breakdown=done.breakdown, runs=[run_name(lab, name, v) for v in VERSIONS])
        report.traces.update({f"{name}_{which}": path for which, path in done.traces.items()})
        report.device = done.device
        return done


def broken(done: gating.GateReport) -> Check | None:
    """The gate's own check its candidate failed, where the settings make a kit's file fail to run (too many
    steps, a timeout): that gate says nothing of the settings' verdicts."""
    return next((c for c in done.checks if c.name in ("runs", "same_results") and c.status == FAILED), None)


def ran_through(done: gating.GateReport, name: str, check: Check) -> bool:
    """Whether the gate ``name``'s candidate ran through; if not, ``check`` failed, and why."""
    stopped = broken(done)
    if stopped is None:
        return True
    check.failed(f"with these settings the {name} gate's candidate does not run through: {stopped.rationale}",
                 "both versions run every step", stopped.actual or "a failed run",
                 "ask for fewer steps (warmup_steps, timed_steps, profile_steps): lab 1's data and time limit "
                 "are the lab's")
    return False


def slowdown_in_words(done: gating.GateReport) -> str:
    """A gate's slowdown in words, as the checks quote it."""
    s = done.slowdown
    if not s:
        return "not measured"
    rounds = (done.comparison or {}).get("rounds", 0)
    return (f"{s['median']:.2f}× the fix's step time (95% interval {s['low']:.2f}–{s['high']:.2f}×, "
            f"{rounds} rounds)")


def forget_untraced(lab: labs.Lab, report: Report) -> None:
    """A gate this check did not trace (not run, or run without a profile) keeps no runs of an earlier check:
    TensorBoard then lists this check's runs only, the ones its report names. Best effort: a file that cannot
    be removed costs only a stale run."""
    for gate in GATES:
        if any(f"{gate}_{which}" in report.traces for which in VERSIONS):
            continue
        folder = trace_dir(lab, gate)
        if not folder.is_dir():
            continue
        try:
            with open(folder / ".lock", "a+") as lock:  # the lock traces.publish takes on these runs
                fcntl.flock(lock, fcntl.LOCK_EX)
                for which in VERSIONS:
                    for old in [*(folder / which).glob("*.pt.trace.json*"),
                                *(folder / which).glob("events.out.tfevents.*")]:
                        old.unlink(missing_ok=True)
        except OSError:
            pass

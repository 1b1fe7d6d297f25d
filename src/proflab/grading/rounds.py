"""Where a lab's fix is measured: the original and the learner's version, run in alternating rounds.

The original and the learner's version run alternately, each in a fresh
process forked from one server that imported torch for the whole check
(round 1: learner then original; round 2: original then learner; ...), so
slow drifts in machine load hit both alike. A version's first run is
profiled; later runs stop after the timed steps. When the last check cannot
be called after the lab's base rounds (a speed-up too close to the
threshold), more rounds are measured (within the lab's round limit and time
budget); if it still cannot be called, the verdict is "inconclusive", never a
coin flip. A file that is still the original, byte for byte, runs once, as
both versions.

The rounds measure; the lab's named checks judge (``checks``). They are the
trial the checks decide from (``trial``): before anything runs, after the
first round, after each later one, and when the rounds are over. A round is
measured, and judged, in one turn at the machine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

from .. import labs, paths
from ..measuring import evidence, stats
from ..running import execute, forkserver, sandbox, slots
from .compare import Difference
from .measures import (after_allowance, after_excess_s, counted_step_s, differs, figure_of, fingerprint,
                       first_step_allowance, gap_excess_s, record_peaks, round_seed, stop_reason)
from .once import Runs, keep_trace
from .publishing import name_the_file, publish_traces
from .staging import Stage, original_reads, original_role, prepare_data, stage
from .trial import BEFORE, FIRST_ROUND, LATER_ROUND, OVER, Asked, LastCheck, rows
from .verdicts import NotGraded, Report


@dataclass(frozen=True)
class Differing:
    """A learner's run whose values are not the original's on the same inputs, or were not all read from the
    lab's storage (``unread``, the run's own account)."""

    run: execute.Outcome
    difference: Difference | None
    unread: str = ""


class Rounds:
    """A lab's check of one file: set up, measured round by round, its traces published when it ends."""

    WHOSE = "your fix's"  # what a check the kit could not grade says it was not the failure of

    def __init__(self, asked: Asked, named: Sequence[LastCheck]):
        lab, engine = asked.lab, sandbox.engine()
        self.asked, self.lab = asked, lab
        self.report = Report(lab=lab.name, number=lab.number, title=lab.title, file=str(asked.file),
                             label=asked.label, checks=rows(named), runs_dir=str(paths.runs_dir() / lab.slug),
                             audited=asked.audited, sandboxed=engine.ok, sandbox=engine.describe())
        self.settled = named[-1].settled  # whether the rounds so far decide the last check: no more rounds then
        self.rounds = asked.rounds or lab.workload.rounds
        self.timeout_s = asked.timeout_s or lab.workload.timeout_s
        self.device = asked.device  # "auto" until the first run says where it ran: the others run there too
        self.file = Path(asked.file)  # the copy that is graded, once the check is set up
        self.round_no = 0  # 0 before any run
        self.originals: list[execute.Outcome] = []
        self.learners: list[execute.Outcome] = []
        self.loaded: dict[str, evidence.Trace] = {}  # the first runs' traces, read once by execute, until the evidence
        self.failed: execute.Outcome | None = None  # the learner's run that failed, ending its round
        self.controlled = ""  # what the control run said of that failure (``_control``), when one ran
        self.differing: Differing | None = None  # the learner's run that did other work than the original's
        self.unchanged = False  # the file is the original, byte for byte
        self._seeds: dict[int, int] = {}

    def moments(self) -> Iterator[str]:
        """The check from start to end: set up, then its moments, then its traces published and its copies
        removed, however it ends."""
        asked, report = self.asked, self.report
        # The whole check in one turn at the machine: its servers' imports, its rounds and their reading.
        # (Turns taken per round let the next checks' servers import torch beside a measured round: four
        # checks at once left lab 0's sound profile inconclusive, its rounds 0.70-1.18x.)
        with slots.turn(asked.on_progress) as slot, forkserver.session():  # torch imported once for the check's runs
            report.waited_s += slot.take_wait()
            # (a check set up ahead has its servers importing already; else they start once the file as
            # handed in has been judged)
            staged = asked.staged or stage(self.lab, asked.file, asked.workdir, warm=False)
            try:
                if staged.error:
                    report.verdict, report.error = "error", staged.error
                    return
                report.file_sha256 = labs.sha256(staged.learner)
                try:
                    yield from self._rounds(staged)
                finally:
                    publish_traces(self.lab, asked.label, report)
                    name_the_file(report, staged.learner, Path(asked.file))
            finally:
                staged.close()

    def _rounds(self, staged: Stage) -> Iterator[str]:
        lab, report = self.lab, self.report
        self.file, self._staged = staged.learner, staged
        if labs.sha256(staged.original) != lab.original_sha256:
            report.verdict = "error"
            report.error = (f"{lab.original} was edited, so there is nothing trustworthy to compare against. "
                            f"Put your changes in {lab.exercise.name}, then restore the original "
                            f"(`git checkout -- {paths.display(lab.original)}`).")
            return
        yield BEFORE
        # Both versions' servers start importing now; meanwhile the data are verified; then every server of
        # the session is waited for: no timed run shares the machine with an import.
        staged.warm()
        data = prepare_data(lab)
        try:
            forkserver.settle(lab.workload.timeout_s)
        except forkserver.EngineFailed as e:
            raise NotGraded(str(e)) from None
        # the runs' shared state: the data (verified once the file as handed in is judged) and its fingerprint
        self._runs = Runs(lab, staged.original, data, fingerprint(data), self.device)
        since, waited_before = time.perf_counter(), report.waited_s
        # A file that is still the original, byte for byte (the untouched exercise), runs once: that run is
        # the original's too, and the evidence, read from its trace, cannot show a change.
        self.unchanged = report.file_sha256 == lab.original_sha256
        while True:
            self.round_no += 1
            # the round in one turn at the machine, its runs and the reading of their results: no other
            # proflab measures, or reads a trace, on these cores meanwhile
            with slots.turn(self.asked.on_progress) as slot:
                report.waited_s += slot.take_wait()
                if not self._play():
                    return
                yield FIRST_ROUND if self.round_no == 1 else LATER_ROUND
                if self.round_no == 1:
                    self.loaded.clear()  # the traces' events are not needed after the first round's checks
                    if self.unchanged:
                        report.verdict = "error"
                        report.error = (f"the lab's original passes its own check ({report.paying('evidence').title}): "
                                        "the lab cannot tell a fix from no change here")
                        return
                if self.round_no >= self.rounds:
                    # waiting for turns is not counted
                    measured_s = time.perf_counter() - since - (report.waited_s - waited_before)
                    report.stopped = self._stop_reason(measured_s)
                    if report.stopped:
                        break
        yield OVER

    def _play(self) -> bool:
        """One round: each version runs once, in this round's order, and the learner's values are held to the
        original's on the same inputs. It stops at the learner's first run that fails (``failed``) or does other
        work (``differing``), for the checks to say why; False when the original itself failed: there is
        nothing to grade against."""
        lab, report = self.lab, self.report
        for which in ("learner", "original") if self.round_no % 2 else ("original", "learner"):
            if self.unchanged and which == "original":
                outcome = as_original(self.learners[0], self.report, self.loaded)
            else:
                outcome = self._run(which)
            if which == "learner":
                if not self.learners:
                    report.output = outcome.stdout[-2000:]
                if not outcome.ok:
                    report.traceback = outcome.result.get("traceback", "") or outcome.stderr
                    self.failed = outcome
                    return self._control(outcome)
                self.learners.append(outcome)
            else:
                if not outcome.ok:
                    report.verdict = "error"
                    why = outcome.result.get("message", outcome.status)
                    report.error = (f"the original itself failed ({why}); "
                                    "this is a problem of the kit or the machine, not of your fix")
                    report.traceback = outcome.result.get("traceback", "") or outcome.stderr
                    return False
                self.originals.append(outcome)
        report.device = self.device
        for index in range(len(report.timings["learner"]), len(self.learners)):
            run = self.learners[index]
            diff = differs(lab, self.originals[index], run)  # the original's run on the same round's inputs
            unread = (run.result.get("storage") or {}).get("unread")
            if diff is not None or unread:
                self.differing = Differing(run, diff, unread or "")
                return True
            for compared in (run, self.originals[index]):  # the checker's memory does not grow with every run's values
                compared.result.pop("results", None)
                compared.result.pop("rank_results", None)
        self._tally()
        return True

    def _control(self, failed: execute.Outcome) -> bool:
        """Before a learner's run is failed for a reason that could be the machine's or the kit's (a crash,
        a signal, a hang, an error in reading the lab's data), the original runs the same way, in this
        round, as a control: if it fails too, the fault is not the learner's, and nothing is graded (False,
        the report an error). True when the failure stands (the control passed, or none was needed)."""
        if not machine_could_fail(failed) or self.unchanged:
            return True
        self.asked.on_progress("your run failed in a way the machine could cause: running the original the "
                               "same way, as a control")
        control = self._run("original", control=True)
        if control.ok:
            self.controlled = "the original, run the same way as a control, ran through: the failure is your file's"
            return True
        report = self.report
        report.verdict = "error"
        theirs = control.result.get("message", control.status)
        mine = failed.result.get("message", failed.status)
        report.error = (f"your file's run failed ({mine}), and so did the original's, run the same way as a control "
                        f"({theirs}): this is a problem of the kit or the machine, not of your fix. Nothing was "
                        "recorded against you; check again, and run `proflab doctor` if it happens again")
        report.traceback = control.result.get("traceback", "") or control.stderr
        return False

    def _tally(self) -> None:
        """The rounds' figures so far, into the report: each version's time per step and first step, every
        step's time, and (a lab graded on memory) each round's peaks."""
        lab, report, originals, learners = self.lab, self.report, self.originals, self.learners
        report.figure = figure_of(lab, self.device, originals + learners)
        allowance = first_step_allowance(lab, originals, report.figure)
        first_key = "first_step_cpu_s" if report.figure == "cpu_time" else "first_step_s"
        after = after_allowance(lab, originals, report.figure)
        report.timings["original"] = [counted_step_s(o, allowance, report.figure, after) for o in originals]
        report.timings["learner"] = [counted_step_s(o, allowance, report.figure, after) for o in learners]
        report.after = {"allowance_s": after, "original_s": [_after_of(o, report.figure) for o in originals],
                        "learner_s": [_after_of(o, report.figure) for o in learners],
                        "counted_s": [after_excess_s(o, after, report.figure) for o in learners],
                        "trace_gap_counted_s": [gap_excess_s(o, after, report.figure) for o in learners]}
        report.first_step = {"allowance_s": allowance, **{
            which: stats.median([float(o.result.get(first_key, 0.0)) for o in runs_of])
            for which, runs_of in (("original_s", originals), ("learner_s", learners))}}
        report.step_times["original"] = [t for o in originals for t in o.result["step_times"]]
        report.step_times["learner"] = [t for o in learners for t in o.result["step_times"]]
        if lab.leaner:
            record_peaks(report, originals, learners)

    def _run(self, which: str, control: bool = False) -> execute.Outcome:
        """One run of ``which`` version in this round, on the round's inputs; each version's first is profiled
        (a ``control`` run is not: it only has to run through)."""
        lab, report, asked, staged = self.lab, self.report, self.asked, self._staged
        first = not control and not (self.originals if which == "original" else self.learners)
        name = "original" if which == "original" else asked.label
        what = "original" if which == "original" else self.file.name
        round_no, rounds = self.round_no, self.rounds
        asked.on_progress(f"round {round_no}/{rounds}: running the {what}" if round_no <= rounds else
                          f"extra round {round_no}: the speed-up is close to the threshold, measuring again ({what})")
        outcome = self._runs.run_once(
            staged.original if which == "original" else self.file, name, which == "learner",
            trace_dir=staged.work / "traces" / which if first else None, timeout_s=self.timeout_s,
            workdir=lab.folder if which == "original" else staged.workdir,
            shown_as=lab.original if which == "original" else Path(asked.file), steps=_steps(lab, which, first),
            preload=staged.preload, seed=self._seeds.setdefault(round_no, round_seed()),
            role=original_role(lab) if which == "original" else str(self.file),
            reads=original_reads() if which == "original" else ())
        self.device = self._runs.device  # both versions run where the first one did
        if which == "original" and first and outcome.ok:
            _holds_every_value(lab, outcome)
        if first:
            keep_trace(report, which, outcome, self.loaded, job=lab.kind == "job")
        return outcome

    def _stop_reason(self, elapsed_s: float) -> str:
        """Why the measuring stops after this round, or "" for another round.

        Another round is run while the rounds so far cannot decide the last
        check (a speed-up too close to the threshold to call), up to the lab's
        round limit and while it fits in its time budget.
        """
        return stop_reason(self.lab, self.settled(self), self.round_no, elapsed_s)


# The kinds of failure a broken machine or kit can cause as well as a learner's file: a run that died
# without a result (an engine that fails, a signal), a hang, a crash; and exceptions of the lab's data.
MACHINE_KINDS = {"crash", "timeout", "missing_result"}
MACHINE_ERRORS = ("DataError", "OSError", "FileNotFoundError", "PermissionError", "MemoryError", "EOFError",
                  "ConnectionError", "BrokenPipeError", "ConnectionResetError", "TimeoutError")


def machine_could_fail(run: execute.Outcome) -> bool:
    """Whether ``run``'s failure is of a kind the machine or the kit could cause, so that a control decides."""
    kind = run.result.get("kind", run.status)
    if run.status in ("crash", "timeout") or kind in MACHINE_KINDS:
        return True
    message = str(run.result.get("message", ""))
    return kind == "exception" and message.split(":", 1)[0].strip() in MACHINE_ERRORS


def _after_of(run: execute.Outcome, figure: str) -> float | None:
    """What a run spent after its timed window, in the report's figure (None where it is not known)."""
    spent = run.result.get("cpu_after_s" if figure == "cpu_time" else "after_s")
    return float(spent) if spent is not None else None


def _steps(lab: labs.Lab, which: str, first: bool) -> dict[str, Any] | None:
    """What a run takes besides the manifest's steps. A version's first run is profiled; the later ones
    only time it, so stop after the timed steps (a lab graded on memory runs every step each time: its
    peak grows with the steps, and each round must compare the same). Lab 0: the learner's file profiles
    itself; the original's first run is profiled by the kit after its timed steps, its record of the work."""
    if lab.kind == "own_profile":
        if which == "original" and first and lab.profiling.kit_steps:
            return {"profile_steps": lab.profiling.kit_steps, "learner_profiles": False}
        return None
    return None if first or lab.leaner else {"profile_steps": 0}


def as_original(run: execute.Outcome, report: Report, loaded: dict[str, evidence.Trace]) -> execute.Outcome:
    """The run of a file that is the original, byte for byte, taken as the original's run too."""
    for table in (report.traces, report.trace_sha256, report.rank_traces, report.rank_trace_sha256, loaded):
        if "learner" in table:
            table["original"] = table["learner"]
    for key in [k for k in loaded if k.startswith("learner@")]:
        loaded["original@" + key.split("@", 1)[1]] = loaded[key]
    values: dict[str, Any] = {"results": list(run.result["results"])}
    if "rank_results" in run.result:
        values["rank_results"] = [list(v) for v in run.result["rank_results"]]
    return replace(run, version="original", result={**run.result, **values})


def _holds_every_value(lab, original) -> None:
    """The lab's ``[results.KEY]`` tables name what its original yields: a value declared and never yielded
    would compare nothing, and every version would match it. The kit's mistake, not the learner's."""
    steps = (original.result.get("rank_results") or [[]])[0] if lab.kind == "job" else \
        original.result.get("results", [])
    yielded = {key for values in steps if isinstance(values, dict) for key in values}  # some only now and then
    missing = [rule.key for rule in lab.results if rule.key not in yielded]
    if missing and yielded:
        raise NotGraded(f"lab {lab.number}'s lab.toml compares [results.{missing[0]}], but its original yields no "
                        f"'{missing[0]}' (it yields {', '.join(repr(k) for k in sorted(yielded))}): name in "
                        "[results.KEY] the values the original yields")

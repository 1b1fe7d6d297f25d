"""Where a learner's fix is graded: four dependent checks, like check50's.

    1. runs          the file imports, and pipeline(cfg) yields every step
    2. same_results  same samples, same number of steps, same values
    3. evidence      the profiler trace shows the bottleneck is gone
    4. faster        the speed-up clears the lab's threshold for this device

The original and the learner's version run alternately, each in a fresh
process forked from one server that imported torch for the whole check
(round 1: learner then original; round 2: original then learner; ...), so
slow drifts in machine load hit both alike. A version's first run is
profiled; later runs stop after the timed steps. When the speed-up is too
close to the threshold to call after the lab's base rounds, more rounds are
measured (within the lab's round limit and time budget); if it still cannot
be called, the verdict is "inconclusive", never a coin flip. A file that is
still the original, byte for byte, runs once, as both versions. The first
failing check stops the chain: later checks are reported as skipped.

This module runs the rounds and decides the first two checks; ``bottleneck``
decides the third from the traces, ``margin`` the fourth from the rounds'
figures, and ``verdicts`` holds what every check and report says. What is
read from a run the same way here and in the gate is ``measures``'; what a
failed run says, ``failures``'; where the traces go, ``publishing``'s.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ..measuring import evidence, stats
from . import bottleneck, margin
from .. import errors, labs, paths
from ..running import execute, forkserver, sandbox, slots
from .failures import runtime_failure
from .measures import (FIRST_STEP_SLACK, FIRST_STEP_SLACK_S, changed_during, counted_step_s, differs,  # noqa: F401
                       figure_of, fingerprint, first_step_allowance, round_seed, tampering)
from .publishing import name_the_file, publish_traces, trace_dir
from .staging import (NotGraded, Stage, original_reads, original_role, prepare_data, snapshot, stage,  # noqa: F401
                      unreadable, workspace)
# What a check says lives in verdicts; the names are kept here too, for the callers of the checker.
from .verdicts import (CHECKS, EXIT_CODES, FAILED, INCONCLUSIVE, PASSED, SKIPPED, Check,  # noqa: F401
                       Progress, Report, checks_of, where_to_look)


def check(
    lab: labs.Lab,
    file: Path,
    label: str = "yours",
    device: str = "auto",
    rounds: int | None = None,
    timeout_s: float | None = None,
    on_progress: Progress = lambda message: None,
    audited: bool = True,
    workdir: Path | None = None,
    staged: Stage | None = None,
) -> Report:
    """Grade ``file`` against ``lab``'s original. Never raises for a learner's mistake.

    The file is graded from a copy taken when the check starts (saving it
    again during the check changes nothing), run in ``workdir`` (default: its
    own folder). Each check's traces are written apart, then published to
    ``runs/<lab>/``. A failure of the kit or the machine (a full disk, lab
    data that cannot be built) gives the verdict "error" ("not graded").

    ``audited=False`` skips the source audit; the kit's own tests use it to
    show that the checks after it catch what it would have refused. The
    report says so. ``staged``: the check, set up ahead of its turn
    (``staging.stage``, for the same ``lab``, ``file`` and ``workdir``,
    inside the same ``forkserver.session``); it is closed with the check.
    """
    if lab.gating is not None:  # lab 7: the exercise is a gate's settings, run on a known fix
        from . import gate_lab

        return gate_lab.check(lab, file, label, device, on_progress)
    started = time.perf_counter()
    engine = sandbox.engine()
    report = Report(lab=lab.name, number=lab.number, title=lab.title, file=str(file), label=label,
                    checks=[Check(*c) for c in checks_of(lab)], runs_dir=str(paths.runs_dir() / lab.slug),
                    audited=audited, sandboxed=engine.ok, sandbox=engine.describe())
    rounds = rounds or lab.workload.rounds
    timeout = timeout_s or lab.workload.timeout_s
    try:
        # The whole check in one turn at the machine: its servers' imports, its rounds and their reading.
        # (Turns taken per round let the next checks' servers import torch beside a measured round: four
        # checks at once left lab 0's sound profile inconclusive, its rounds 0.70-1.18x.)
        with slots.turn(on_progress) as slot, forkserver.session():  # torch imported once for the check's runs
            report.waited_s += slot.waited_s
            staged = staged or stage(lab, file, workdir)  # both versions' servers start importing now
            try:
                if staged.error:
                    report.verdict, report.error = "error", staged.error
                    return report
                report.file_sha256 = labs.sha256(staged.learner)
                try:
                    # While the servers import, the data are verified and the file audited; the first
                    # timed run waits for every server of the session to be ready.
                    data = prepare_data(lab)
                    forkserver.settle()
                    _grade(lab, staged.learner, label, device, rounds, timeout, report, on_progress,
                           workdir=staged.workdir, work=staged.work, shown_as=Path(file), data=data,
                           preload=staged.preload, original=staged.original)
                finally:
                    publish_traces(lab, label, report)
                    name_the_file(report, staged.learner, Path(file))
            finally:
                staged.close()
    except NotGraded as e:
        report.verdict = "error"
        report.error = f"{e}. This is the kit's or the machine's failure, not your fix's"
    finally:
        report.duration_s = time.perf_counter() - started
    return report


def _grade(lab, file, label, device, rounds, timeout, report: Report, on_progress: Progress, *,
           workdir: Path, work: Path, shown_as: Path, original: Path, data: Path | None = None,
           preload: tuple[str, ...] | None = None) -> None:
    runs, same, proof, faster = (report.check(n) for n, *_ in CHECKS)
    data_print = fingerprint(data)
    if labs.sha256(original) != lab.original_sha256:
        report.verdict = "error"
        report.error = (f"{lab.original} was edited, so there is nothing trustworthy to compare against. "
                        f"Put your changes in {lab.exercise.name}, then restore the original "
                        f"(`git checkout -- {paths.display(lab.original)}`).")
        return
    try:
        compile(file.read_bytes(), str(file), "exec")
    except SyntaxError as e:  # no need to start a process to find this one
        runtime_failure(runs, execute.Outcome("learner", file, "error", result={
            "kind": "syntax", "message": f"SyntaxError: {e.msg}", "file": str(file), "line": e.lineno,
            "code": (e.text or "").strip()}), lab, timeout)
        report.verdict = FAILED
        return
    if report.audited and _refused(lab, file, report, runs):
        report.verdict = FAILED
        return

    originals: list[execute.Outcome] = []
    learners: list[execute.Outcome] = []
    loaded: dict[str, evidence.Trace] = {}  # the first runs' traces, read once by execute, until the evidence
    measuring_since, waited_before = time.perf_counter(), report.waited_s

    seeds: dict[int, int] = {}

    def run_one(which: str, round_no: int) -> execute.Outcome:
        nonlocal device
        first = not (originals if which == "original" else learners)
        name = "original" if which == "original" else label
        what = "original" if which == "original" else Path(file).name
        on_progress(f"round {round_no}/{rounds}: running the {what}" if round_no <= rounds else
                    f"extra round {round_no}: the speed-up is close to the threshold, measuring again ({what})")
        try:
            outcome = execute.run(lab, original if which == "original" else file, name, device=device,
                                  trace_dir=work / "traces" / which if first else None, timeout_s=timeout,
                                  checking=True, workdir=lab.folder if which == "original" else workdir,
                                  shown_as=lab.original if which == "original" else shown_as,
                                  steps=_steps(lab, which, first),
                                  preload=preload, seed=seeds.setdefault(round_no, round_seed()),
                                  role=original_role(lab) if which == "original" else str(file),
                                  reads=original_reads() if which == "original" else ())
        except errors.KitError as e:
            raise NotGraded(str(e)) from None
        if outcome.status == "kit":
            raise NotGraded(outcome.result.get("message", "the kit failed"))
        changed_during(outcome, which == "learner", original, lab, data, data_print)
        if outcome.ok and device == "auto":  # both versions then run where the first one did
            device = outcome.result["device"]
        if outcome.ok and first and outcome.result.get("trace"):
            report.traces[which] = outcome.result["trace"]
            report.trace_sha256[which] = outcome.result.get("trace_sha256") or ""
            if lab.distributed is not None:
                report.rank_traces[which] = list(outcome.result.get("rank_traces") or [])
                report.rank_trace_sha256[which] = list(outcome.result.get("rank_trace_sha256") or [])
                loaded.update({f"{which}@{rank}": t for rank, t in enumerate(outcome.rank_traces) if t is not None})
                outcome.rank_traces = []
            if outcome.trace is not None:
                loaded[which] = outcome.trace
                outcome.trace = None
        return outcome

    # A file that is still the original, byte for byte (the untouched exercise), runs once: that run is
    # the original's too, and the evidence, read from its trace, cannot show a change.
    unchanged = report.file_sha256 == lab.original_sha256

    round_no = 0
    while True:
        round_no += 1
        order = ("learner", "original") if round_no % 2 else ("original", "learner")
        # the round in one turn at the machine, its runs and the reading of their results: no other
        # proflab measures, or reads a trace, on these cores meanwhile
        with slots.turn(on_progress) as slot:
            report.waited_s += slot.waited_s
            for which in order:
                if unchanged and which == "original":
                    outcome = _as_original(learners[0], report, loaded)
                else:
                    outcome = run_one(which, round_no)
                if which == "learner":
                    if not learners:
                        report.output = outcome.stdout[-2000:]
                    if not outcome.ok:
                        report.traceback = outcome.result.get("traceback", "") or outcome.stderr
                        if outcome.result.get("kind") == "short":
                            done = outcome.result.get("steps_done", 0)
                            runs.passed(f"{Path(file).name} ran, but stopped early", actual=f"{done} steps")
                            same.failed(f"pipeline(cfg) yielded {done} steps; the original yields "
                                        f"{lab.workload.total_steps} for the same data",
                                        f"{lab.workload.total_steps} steps", f"{done} steps",
                                        "keep every step of the original: the same batches, the same batch size")
                        else:
                            runtime_failure(runs, outcome, lab, timeout)
                        report.verdict = FAILED
                        return
                    learners.append(outcome)
                else:
                    if not outcome.ok:
                        report.verdict = "error"
                        why = outcome.result.get("message", outcome.status)
                        report.error = (f"the original itself failed ({why}); "
                                        "this is a problem of the kit or the machine, not of your fix")
                        report.traceback = outcome.result.get("traceback", "") or outcome.stderr
                        return
                    originals.append(outcome)
            report.device = device

            for index in range(len(report.timings["learner"]), len(learners)):
                run = learners[index]
                diff = differs(lab, originals[index], run)  # the original's run on the same round's inputs
                unread = (run.result.get("storage") or {}).get("unread")
                if diff is not None or unread:
                    runs.passed(f"{Path(file).name} ran all {lab.workload.total_steps} steps",
                                actual=f"{run.result['steps_done']} steps in {run.wall_s:.1f} s")
                    if diff is not None:
                        same.failed(diff.message, "the original's values, step by step", f"step {diff.step} differs",
                                    diff.hint or where_to_look(lab))
                    else:
                        same.failed(unread, "every sample read from the lab's storage", "samples that did not "
                                    "come from storage", "read every sample through the lab's dataset (PhotoDataset): "
                                    "make the reads overlap (DataLoader workers, threads), not disappear")
                    report.verdict = FAILED
                    return
                for compared in (run, originals[index]):  # the checker's memory does not grow with every run's values
                    compared.result.pop("results", None)
                    compared.result.pop("rank_results", None)
            report.figure = figure_of(lab, device, originals + learners)
            allowance = first_step_allowance(lab, originals, report.figure)
            first_key = "first_step_cpu_s" if report.figure == "cpu_time" else "first_step_s"
            report.timings["original"] = [counted_step_s(o, allowance, report.figure) for o in originals]
            report.timings["learner"] = [counted_step_s(o, allowance, report.figure) for o in learners]
            report.first_step = {"allowance_s": allowance, **{
                which: stats.median([float(o.result.get(first_key, 0.0)) for o in runs_of])
                for which, runs_of in (("original_s", originals), ("learner_s", learners))}}
            report.step_times["original"] = [t for o in originals for t in o.result["step_times"]]
            report.step_times["learner"] = [t for o in learners for t in o.result["step_times"]]
            if lab.leaner:
                margin.record_peaks(report, originals, learners)

            if round_no == 1:
                runs.passed(f"{Path(file).name} ran all {lab.workload.total_steps} steps on {report.device}",
                            actual=f"{learners[0].result['steps_done']} steps")
                same.passed(f"all {lab.workload.total_steps} steps match the original "
                            f"({', '.join(r.key for r in lab.results)})",
                            expected="the original's values", actual="equal within tolerance")
                if lab.profiling is not None:
                    proven = bottleneck.own_profile(lab, report, proof, learners[0], loaded)
                else:
                    proven = bottleneck.evidence_holds(lab, report, proof, learners[0], loaded, file, same)
                loaded.clear()  # the traces' events are not needed after this
                if not proven:
                    report.verdict = FAILED
                    return
                if unchanged:
                    report.verdict = "error"
                    report.error = (f"the lab's original passes its own check ({proof.title}): the lab cannot tell "
                                    "a fix from no change here")
                    return
            if round_no >= rounds:
                # waiting for turns is not counted
                measured_s = time.perf_counter() - measuring_since - (report.waited_s - waited_before)
                report.stopped = _stop_reason(lab, report, round_no, measured_s)
                if report.stopped:
                    break

    margin.grade(lab, report, faster, file)
    report.verdict = {PASSED: PASSED, FAILED: FAILED}.get(faster.status, INCONCLUSIVE)


def _as_original(run: execute.Outcome, report: Report, loaded: dict[str, evidence.Trace]) -> execute.Outcome:
    """The run of a file that is the original, byte for byte, taken as the original's run too."""
    for table in (report.traces, report.trace_sha256, report.rank_traces, report.rank_trace_sha256, loaded):
        if "learner" in table:
            table["original"] = table["learner"]
    for key in [k for k in loaded if k.startswith("learner@")]:
        loaded["original@" + key.split("@", 1)[1]] = loaded[key]
    values = {"results": list(run.result["results"])}
    if "rank_results" in run.result:
        values["rank_results"] = [list(v) for v in run.result["rank_results"]]
    return replace(run, version="original", result={**run.result, **values})


def _refused(lab: labs.Lab, file: Path, report: Report, runs: Check) -> bool:
    """The source audit, before anything runs: a file that reaches for the checker's own machinery is refused."""
    from . import audit

    findings = audit.audit_file(file, allow=lab.audit.allow, refuse=lab.audit.refuse)
    if not findings:
        return False
    report.refused = [asdict(f) for f in findings]
    first = findings[0]
    more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
    runs.failed(f"the checker refuses to run {file.name}: line {first.line}{more}: {first.message}",
                "a lab file that leaves the checker's process alone",
                f"{len(findings)} line{'s' if len(findings) > 1 else ''} refused",
                "change the lines shown; the instructor guide's 'What the checker guards against' says why "
                "each is refused",
                [f"{f.line:>4} | {f.code}   ({f.rule})" for f in findings[:8]])
    return True


def _stop_reason(lab: labs.Lab, report: Report, done: int, elapsed_s: float) -> str:
    """Why the measuring stops after ``done`` rounds, or "" for another round.

    Another round is run while the speed-up is too close to the threshold to
    call, up to the lab's round limit and while it fits in its time budget.
    """
    if lab.leaner:  # decided, or a peak that could not be read (no more rounds will read it)
        if margin.memory_decision(lab, report)[0] not in (stats.UNCLEAR, "too few"):
            return "decided"
    elif stats.compare(*margin.series(lab, report)).decide(lab.threshold(report.device)) != stats.UNCLEAR:
        return "decided"
    if done >= lab.workload.round_limit:
        return "round limit"
    if elapsed_s + elapsed_s / done > lab.workload.budget_s:
        return "time budget"
    return ""


def _steps(lab: labs.Lab, which: str, first: bool) -> dict[str, Any] | None:
    """What a run takes besides the manifest's steps. A version's first run is profiled; the later ones
    only time it, so stop after the timed steps (a lab graded on memory runs every step each time: its
    peak grows with the steps, and each round must compare the same). Lab 0: the learner's file profiles
    itself; the original's first run is profiled by the kit after its timed steps, its record of the work."""
    if lab.profiling is not None:
        if which == "original" and first and lab.profiling.kit_steps:
            return {"profile_steps": lab.profiling.kit_steps, "learner_profiles": False}
        return None
    return None if first or lab.leaner else {"profile_steps": 0}



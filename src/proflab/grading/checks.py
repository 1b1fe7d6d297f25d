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
figures, and ``verdicts`` holds what every check and report says.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ..measuring import evidence, stats, traces
from . import bottleneck, compare, margin
from .. import errors, labs, paths
from ..running import execute, forkserver, sandbox, slots
from .staging import (NotGraded, Stage, original_reads, original_role, prepare_data, snapshot, stage,  # noqa: F401
                      unreadable, workspace)
# What a check says lives in verdicts; the names are kept here too, for the callers of the checker.
from .verdicts import (CHECKS, EXIT_CODES, FAILED, INCONCLUSIVE, PASSED, SKIPPED, Check,  # noqa: F401
                       Progress, Report, checks_of, where_to_look)


def trace_dir(lab: labs.Lab, label: str) -> Path:
    """``runs/01-dataloader/original``: one TensorBoard run per lab and version."""
    return paths.runs_dir() / lab.slug / label


def runtime_failure(check: Check, outcome: execute.Outcome, lab: labs.Lab, timeout: float) -> None:
    r = outcome.result
    name = Path(r.get("file") or outcome.file).name
    place = f"{name}, line {r['line']}" if r.get("line") else name
    kind = r.get("kind", outcome.status)
    details = []
    if r.get("code"):
        details.append(f"{r['line']:>4} | {r['code']}")
    if kind == "syntax":
        check.failed(f"{place}: the file does not parse", "a file Python can import",
                     r.get("message", ""), "fix the line shown (and the one just before it)", details)
    elif kind == "import":
        check.failed(f"{place}: importing the file raised an error", "the file imports cleanly",
                     r.get("message", ""), "look at the top-level code of your file", details)
    elif kind == "missing":
        check.failed(f"{name} defines no pipeline(cfg)", "a function pipeline(cfg) that yields once per step",
                     "no such function", "keep the function name and signature of the exercise")
    elif kind in ("exception", "bad_yield", "not_generator"):
        step = (f" on rank {r['rank']}" if "rank" in r else "") + (f" at step {r['step']}" if "step" in r else "")
        check.failed(f"{place}: your pipeline raised an error{step}", "every step runs",
                     r.get("message", ""), "look at the line shown; --verbose prints the full traceback", details)
    elif kind == "timeout":
        ranks = f": {r['ranks_at']}" if r.get("ranks_at") else ""  # a torchrun job: where each rank stopped
        check.failed(f"{name} did not finish within the time limit ({timeout:g} s){ranks}", f"under {timeout:g} s",
                     "still running, stopped", "look for an endless loop or a wait that never returns; "
                     "`proflab run` shows how far it gets")
    elif kind == "background":
        check.failed(f"{name}: {r.get('message', '')}", "each step does its own work, in the step",
                     "work beside the steps", "do the work of a step inside pipeline(cfg)'s loop, before it "
                     "yields; this lab allows no threads or processes that work on while the steps are timed")
    elif kind == "marks":
        check.failed(f"{name}: {r.get('message', '')}", "every step marked, in order, as the kit's runner marks it",
                     "marks missing or out of order", "leave the kit's runner, its pipe and its file descriptors "
                     "alone; if you did not touch them, run `proflab run` to see whether the run ends early")
    elif kind == "tampered":
        check.failed(f"{name}: {r.get('message', '')}", "the original and the lab's data left as they are",
                     "changed", "a lab file reads the lab's data through the lab's own classes, and writes nothing")
    elif kind == "disk":
        check.failed(f"{name}: {r.get('message', '')}", "a run that leaves the disk with room", "a full disk",
                     "look for files your program writes (a cache, a log, a copy of the data): free the space, "
                     "then check again")
    elif kind == "left_running":
        check.failed(f"{name}: {r.get('message', '')}", "every process it starts stops with it", "stuck processes",
                     "look for processes that wait on a device or a file that never answers")
    elif kind == "trace":
        check.failed(f"{name}: {r.get('message', '')}", "the trace as the profiler wrote it", "a different file",
                     "leave the trace files alone: the checker reads them as the profiler wrote them")
    elif kind == "clock":
        check.failed(f"{name}: {r.get('message', '')}", "the same time by both clocks", "they disagree",
                     "leave time, the profiler and the kit's own modules as they are")
    elif kind == "memory":
        check.failed(f"{name} {r.get('message', '')}", f"under {lab.workload.memory_mb:.0f} MB",
                     "too much memory", "look for data kept from every step (tensors that still require "
                     "grad, a growing list), or a bigger batch than the original's")
    elif kind == "device":
        check.failed(r.get("message", ""), "an available device", outcome.result.get("message", ""),
                     "use --device cpu")
    else:
        check.failed(f"{name}: {r.get('message', 'the run failed')}", "a finished run", kind,
                     "run the file with `proflab run` to see its output")


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
                    _publish_traces(lab, label, report)
                    name_the_file(report, staged.learner, Path(file))
            finally:
                staged.close()
    except NotGraded as e:
        report.verdict = "error"
        report.error = f"{e}. This is the kit's or the machine's failure, not your fix's"
    finally:
        report.duration_s = time.perf_counter() - started
    return report


def round_seed() -> int:
    """A round's inputs, drawn by the checker when the round starts (``cfg.seed``, and the data and weights
    the lab kit draws from it): unknown to a file in advance, so nothing kept from another round or
    another check is worth anything."""
    import secrets

    return secrets.randbelow(2**31 - 1) + 1


def fingerprint(folder: Path | None) -> dict[str, tuple[int, int, int]]:
    """Each file of a data folder with its size, modification time and inode: what a rewrite changes."""
    found: dict[str, tuple[int, int, int]] = {}
    if folder is None:
        return found
    try:
        for entry in os.scandir(folder):
            st = entry.stat(follow_symlinks=False)
            found[entry.name] = (st.st_size, st.st_mtime_ns, st.st_ino)
    except OSError:
        pass
    return found


def tampering(original: Path, lab: labs.Lab, data: Path | None, data_print: dict) -> str:
    """What a learner's run changed of what the original is run from (its copy, the lab's data), or ""."""
    try:
        intact = labs.sha256(original) == lab.original_sha256
    except OSError:
        intact = False
    if not intact:
        return "the checker's copy of the original was changed during its run"
    if fingerprint(data) != data_print:
        try:
            (data / "READY").unlink(missing_ok=True)  # rebuilt before the next check: never used again as it is
        except OSError:
            pass
        return f"the lab's data in {paths.display(data)} was changed during its run"
    return ""


def changed_during(outcome: execute.Outcome, learner: bool, original: Path, lab: labs.Lab, data: Path | None,
                   data_print: dict) -> None:
    """After a run: what it is run from (the original's copy, the lab's data) must be as it was. A change
    is the learner's tampering only where the learner's run could have made it; a sandboxed run cannot
    write there (nor can the original's), so the change is another process's, and nothing measured since
    can be trusted: not graded (a data file rewritten during a check once failed a sound fix on a NaN)."""
    changed = tampering(original, lab, data, data_print)
    if not changed:
        return
    if learner and not outcome.sandboxed:
        outcome.status, outcome.result = "error", {"kind": "tampered", "message": changed}
        return
    raise NotGraded(f"{changed}, and not by the run (it cannot write there): another process on this machine "
                    "changed it. Run `proflab data --verify`, then check again")


def _publish_traces(lab: labs.Lab, label: str, report: Report) -> None:
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
        try:
            report.traces[which] = str(traces.publish(path, trace_dir(lab, "original" if which == "original"
                                                                        else label)))
        except OSError as e:
            report.traces.pop(which)  # the verdict stands; only its view in TensorBoard is missing
            _not_kept(report, which, e)


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
        try:
            published = traces.publish_all(paths, trace_dir(lab, "original" if which == "original" else label))
        except OSError as e:
            report.traces.pop(which, None)  # the verdict stands; only its view in TensorBoard is missing
            _not_kept(report, which, e)
            continue
        report.rank_traces[which] = [str(p) for p in published]
        report.traces[which] = str(published[0])


def _not_kept(report: Report, which: str, e: OSError) -> None:
    report.notes.append(f"the {which}'s trace was not kept for TensorBoard ({errors.describe(e, 'write')}); the "
                        "verdict does not rest on it: free some space and check again to see it")


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


def _expected(original: execute.Outcome, run: execute.Outcome) -> list[dict]:
    """The values the original's run yielded, for as many steps as ``run`` was asked for (a later run
    stops after its timed steps)."""
    return original.result["results"][:run.steps_asked]


def differs(lab: labs.Lab, original: execute.Outcome, run: execute.Outcome) -> compare.Difference | None:
    """Where ``run``'s values differ from those of the original's run on the same inputs (a torchrun
    job's: rank by rank)."""
    if lab.distributed is None:
        return compare.compare(_expected(original, run), run.result["results"], lab.results)
    expected = [values[:run.steps_asked] for values in original.result["rank_results"]]
    return compare.compare_ranks(expected, run.result.get("rank_results"), lab.results, lab.distributed)


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


# The learner's first step (its import, the pipeline's set-up and the first
# step's work) may run this much longer than the original's, for scheduling
# noise, before the excess counts as work moved into it.
FIRST_STEP_SLACK = 1.05
FIRST_STEP_SLACK_S = 0.02


def figure_of(lab: labs.Lab, device: str, runs: list[execute.Outcome], wanted: str | None = None) -> str:
    """The figure a step's time is for these runs: ``wanted``, else the lab's for the device ([timing]),
    where every run has it (CPU time needs /proc: elsewhere, wall time)."""
    wanted = wanted or lab.figure(device or "cpu")
    if wanted == "cpu_time" and all("cpu_span_s" in o.result for o in runs):
        return wanted
    return "wall_time"


def first_step_allowance(lab: labs.Lab, originals: list[execute.Outcome], figure: str = "wall_time") -> float:
    """How long a version's first step may take and still be left out of its time, in seconds.

    The first step imports the lab file and builds the pipeline (data, model,
    DataLoader workers) before its work, so it is not timed, but only up to what the original's first step
    took (the median over its runs so far), a little slack, and the lab's
    ``startup_s`` (starting worker processes, for instance). What a version
    does beyond that in its first step is work moved out of the timed steps,
    and counts. Time spent compiling (torch.compile) is left out on top.
    """
    key = "first_step_cpu_s" if figure == "cpu_time" else "first_step_s"
    firsts = [float(o.result.get(key, 0.0)) for o in originals]
    return (stats.median(firsts) if firsts else 0.0) * FIRST_STEP_SLACK + FIRST_STEP_SLACK_S + lab.workload.startup_s


def counted_step_s(run: execute.Outcome, allowance_s: float, figure: str = "wall_time") -> float:
    """The time per step the speed-up compares: every warm-up and timed step, stamped by the checker,
    less the time spent compiling and at most ``allowance_s`` of the first step; in wall time, or in the
    CPU time the checker read from /proc over the same span (``figure``)."""
    r = run.result
    if figure == "cpu_time" and "cpu_span_s" in r:
        left_out = float(r["cpu_compile_s"]) + min(float(r["first_step_cpu_s"]), allowance_s)
        return max(0.0, float(r["cpu_span_s"]) - left_out) / max(int(r["counted_steps"]), 1)
    if "span_s" not in r:  # a run without the checker's stamps (never the case in a check)
        return run.mean_step_s
    left_out = float(r["compile_s"]) + min(float(r["first_step_s"]), allowance_s)
    return max(0.0, float(r["span_s"]) - left_out) / max(int(r["counted_steps"]), 1)


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



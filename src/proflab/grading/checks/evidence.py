"""Check 3, "The bottleneck is gone": what the profiled steps show, read from both versions' traces.

Decided once, after the first round, from each version's profiled steps
(their first runs are profiled after their timed steps). The trace must be
the one the profiler wrote, of the steps the checker stamped from outside;
the profiled steps must do the same work as the timed ones (a version that
works only when profiled fails the second check) and the work the lab names
(its FLOPs, on its shapes). Then the lab's evidence metric is measured in
both traces (``measuring.evidence``) and held to the lab's rule: the
original's bottleneck must be gone from the learner's. A lab with several
bottlenecks at once (``[[evidence]]``) measures each in both traces and
fails naming every one still left (``several``). A file that calls
what only looks like a fix (the lab's ``[evidence.not_a_fix]``) is told why
it is none (``not_a_fix``, which the memory check tells too).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from ... import labs
from ...labs import format_value
from ...measuring import breakdown, evidence
from ...running import execute, storage
from ..rounds import Rounds
from ..trial import FIRST_ROUND
from ..verdicts import FAILED, Check, NotGraded, Report, where_to_look
from . import job_network, rank_share, several

NAME = "evidence"
POINTS = "evidence"  # the [grading] key that pays for it
AFTER: tuple[str, ...] = ("same_results",)  # the checks it waits on
TITLE = "The bottleneck is gone"
WHAT = "the profiler trace of your version no longer shows the bottleneck"
WHEN = (FIRST_ROUND,)


def decide(trial: Rounds, check: Check) -> str | None:
    same = trial.report.check("same_results")
    holds = evidence_holds(trial.lab, trial.report, check, trial.learners[0], trial.loaded, trial.file, same,
                           trial.originals[0])
    return None if holds else FAILED


def evidence_holds(lab: labs.Lab, report: Report, proof: Check, learner_run: execute.Outcome,
                   loaded: dict[str, evidence.Trace], file: Path | None, same: Check,
                   original_run: execute.Outcome | None = None) -> bool:
    """Whether the first round's traces show the bottleneck gone; if not, ``proof`` (or ``same``, for a
    version whose profiled steps do other work) failed, and why. ``loaded``: the traces execute read. A
    torchrun job's traffic counts what its network carried outside the collectives (``job_network``),
    from the first round's runs (``original_run``, ``learner_run``)."""
    ev = lab.evidence
    if "learner" not in report.traces or "original" not in report.traces:
        proof.failed("no trace was written", "a trace from each version", "none",
                     "the profiled steps run after the timed ones: did the pipeline stop early? "
                     "Leave torch.profiler as it is.")
        return False
    changed = [which for which, path in report.traces.items()
               if labs.sha256(Path(path)) != report.trace_sha256.get(which)]
    changed += [which for which, paths in report.rank_traces.items()
                if [labs.sha256(Path(p)) if p else "" for p in paths] != report.rank_trace_sha256.get(which)]
    if changed:
        proof.failed("the trace was changed after the profiler wrote it", "the trace as the profiler wrote it",
                     "a different file", "leave the trace files alone: the checker reads them as they were written")
        return False
    try:  # each trace read once, for every figure taken from it
        traces = {which: loaded.get(which) or evidence.load(path) for which, path in report.traces.items()}
        ranked = {which: [loaded.get(f"{which}@{rank}") or evidence.load(path) for rank, path in enumerate(paths)]
                  for which, paths in report.rank_traces.items()}  # a torchrun job's: every rank's
    except evidence.TraceError as e:
        proof.failed(f"the trace could not be read: {e}", "a readable trace", "unreadable")
        return False
    if not _trace_matches_steps(lab, traces["learner"], learner_run, proof):
        return False
    if not same_work_when_profiled(learner_run, traces["learner"], same, report.figure):
        return False
    if not profiled_steps_did_the_work(learner_run, same, report.figure):
        return False
    if not warmup_step_did_no_more(learner_run, original_run, same, report):
        return False
    if ev.work_ops:
        names = ", ".join(ev.work_ops)
        work = evidence.work_flops(traces["learner"], ev.work_ops)
        needed = ev.min_work_vs_original * evidence.work_flops(traces["original"], ev.work_ops).value
        if work.value < needed and "aten::convolution" in ev.work_ops:
            # a scripted, frozen graph's convolutions, prepacked for oneDNN, leave no event of their own
            hidden = evidence.hidden_convolutions(traces["learner"], traces["original"])
            if hidden.value:
                work = evidence.Measure(value=work.value + hidden.value, unit=work.unit,
                                        summary=f"{work.summary}, and {hidden.summary}", details=work.details)
        if work.value < needed:
            proof.failed(f"the profiled steps did not do the work: {ev.work}",
                         f"at least {needed / 1e6:.1f} MFLOPs per step in {names} "
                         f"({ev.min_work_vs_original:g}× the original's)",
                         f"{work.summary}",
                         "compute each step's results in that step, from its own batch: not at import time, "
                         "not in the warm-up steps, not from a cache")
            return False
    if ev.work_ops and ev.same_shapes:  # the lab's pieces (lab 6's micro-batches) are part of the lesson
        theirs, other = evidence.other_shapes(ranked.get("original") or [traces["original"]],
                                              ranked.get("learner") or [traces["learner"]], ev.work_ops)
        if other:
            proof.failed(f"{ev.work} ran on other shapes than the original's", "the original's: " + "; ".join(theirs[:4]),
                         "; ".join(other[:4]) + (f" (and {len(other) - 4} more)" if len(other) > 4 else ""),
                         ev.same_shapes)
            return False
    if ranked.get("learner") and ranked.get("original"):  # a torchrun job: each rank its own share
        over = rank_share.over_share(ranked["original"], ranked["learner"])
        if over:
            proof.failed(f"rank {over[0][0]} did the work of more than its own share of the job: "
                         f"{over[0][1] / over[0][2]:.1f}× the original rank's",
                         f"at most {rank_share.MAX_RANK_WORK:g}× the original's matrix products on each rank",
                         "; ".join(f"rank {r}: {done / 1e6:.0f} MFLOPs per step (the original's: {base / 1e6:.0f})"
                                   for r, done, base in over),
                         "each rank trains on its own part of the samples (its DistributedSampler); what it "
                         "needs of the other ranks' comes through the collectives, not by doing their work too")
            return False
    figures = []  # (evidence, the original's figure, the learner's), one per bottleneck
    for each in lab.evidences:
        try:
            original = measure(each.metric, traces["original"], ranked.get("original"))
        except evidence.TraceError as e:  # the kit's own profile of the original: this torch records no such figure
            raise NotGraded(f"the original's trace has no {each.label} to compare with ({e})") from None
        except KeyError as e:
            proof.failed(f"the trace could not be read: {e}", "a readable trace", "unreadable")
            return False
        try:
            learner = measure(each.metric, traces["learner"], ranked.get("learner"))
        except (KeyError, evidence.TraceError) as e:
            proof.failed(f"the trace could not be read: {e}", "a readable trace", "unreadable",
                         "leave torch.profiler and the trace files as they are")
            return False
        if ranked.get("learner"):
            learner = job_network.counted(each.metric, original_run, learner_run, original, learner)
        figures.append((each, original, learner))
    records = [{"metric": e.metric, "label": e.label, "unit": e.unit, "original": asdict(o), "learner": asdict(m)}
               for e, o, m in figures]
    report.evidence = records[0]
    report.evidences = [{**r, "met": e.holds(e.counted(m.value, m.details), e.counted(o.value, o.details)),
                         "expected": e.expectation(o.value, m.details)}
                        for r, (e, o, m) in zip(records, figures)]
    report.breakdown = {which: asdict(breakdown.of(trace)) for which, trace in traces.items()}
    why = not_a_fix(lab, file) if file is not None else []
    if len(figures) > 1:
        return several.judged(lab, proof, figures, why)
    _, original, learner = figures[0]
    expected = ev.expectation(original.value, learner.details)
    actual = f"{format_value(learner.value, ev.unit)}: {learner.summary} (original: {original.summary})"
    if ev.holds(ev.counted(learner.value, learner.details), ev.counted(original.value, original.details)):
        proof.passed(f"{ev.label}: {format_value(original.value, ev.unit)} → {format_value(learner.value, ev.unit)}",
                     expected, actual, ev.where)
        proof.details += several.more_to_gain(ev, original, learner)
        return True
    counted = ev.counted(learner.value, learner.details)
    spared = f", {format_value(counted, ev.unit)} counted" if counted != learner.value else ""
    proof.failed(f"{ev.label} is still {format_value(learner.value, ev.unit)}{spared} "
                 f"(the original: {format_value(original.value, ev.unit)})",
                 expected, actual, why[0] if why else f"{ev.where}; {where_to_look(lab)}", details=why)
    return False


# A step may run this much slower while profiled before it is suspected of
# doing work only then (the profiler itself costs up to ~2.5x on lab 2's
# thousands of tiny operators), and by at least this many seconds: no lab's
# sound step is shorter (lab 2's fastest fixes: 0.3-0.5 ms of CPU a step),
# while results yielded from a cache take 0.01-0.03 ms a step and the real
# work behind them 0.36-1.1 ms a profiled step (lab 2, 2-core CPU; 0.5 ms
# here let that through once in CI). How a profiled step is timed:
# same_work_when_profiled.
PROFILED_SLOWDOWN_MAX = 5.0


PROFILED_SLOWDOWN_MIN_S = 0.0001


def _busy_per_step(trace: evidence.Trace) -> list[float]:
    """Seconds each profiled step spent inside operators (the outermost ``cpu_op`` events of every thread,
    summed): the work the step did, without the profiler's own book-keeping between operators, which on a
    step of a millisecond costs several times the step itself. The kit's own ranges around a sample's
    loading (``storage.LOADING_RANGES``) are waits on storage, not operators: threads that load beside the
    steps wait there side by side."""
    busy = []
    for step in trace.steps:
        ops = [e for e in trace.events if e.cat == "cpu_op" and step.ts <= e.ts < step.end
               and e.name not in storage.LOADING_RANGES]
        busy.append(sum(e.dur for e in evidence.outermost(ops)) / 1e6)
    return busy


def same_work_when_profiled(run: execute.Outcome, trace: evidence.Trace, same: Check,
                            figure: str = "wall_time") -> bool:
    """The profiled steps are the timed steps' evidence only if they do the same work.

    What a profiled step did is read from the trace: the time it spent inside operators
    (``_busy_per_step``), not its length, which the profiler's own book-keeping stretches several times
    over on a step of a millisecond (lab 2's index_add fix: 1.1 ms timed, 9.1 ms profiled, with little
    more time inside its operators). A version that works only when profiled spends more time inside
    operators in one profiled step than a timed step lasts, many times over; a sound fix never does (its
    timed step holds the same operators, and more: Python, the loader, waits). Where the lab's figure is
    CPU time, a timed step lasts as long as the CPU it used (its work may not be sleeping on another's).
    """
    busy = _busy_per_step(trace)
    if not busy:
        return True
    profiled = sorted(busy)[len(busy) // 2]
    timed = max(run.mean_step_s, 1e-9)
    steps = len(run.result.get("step_times") or [])
    if figure == "cpu_time" and run.result.get("cpu_window_s") is not None and steps:
        # where the lab's figure is CPU time, against the CPU a timed step used: a step that sleeps while
        # its work is done elsewhere is long on the clock and holds no CPU
        timed = max(min(timed, float(run.result["cpu_window_s"]) / steps), 1e-9)
        traced_cpu = (run.result.get("profiled_cpu_s") or [None, None])[1]
        if traced_cpu is not None:
            # and the profiled steps' work no more than the CPU the kernel counted in them: the trace's
            # durations are the clock's, which a busy machine stretches (lab 8's operators at 51 ms a
            # profiled step against a timed step's 6.5 ms of CPU, once, on a quiet 2-core machine), while
            # work done only when profiled is CPU in the profiled steps
            profiled = min(profiled, float(traced_cpu))
    if profiled > PROFILED_SLOWDOWN_MAX * timed and profiled - timed > PROFILED_SLOWDOWN_MIN_S:
        same.failed(f"a profiled step spent {profiled / timed:.0f}× as long inside operators as a whole timed "
                    f"step took ({profiled * 1000:.2f} ms against {timed * 1000:.2f} ms)",
                    f"at most {PROFILED_SLOWDOWN_MAX:g}× (the operators' own cost of being recorded)",
                    f"{profiled / timed:.0f}×", "do the same work in every step, profiled or not")
        return False
    return True


# A profiled step, stamped by the checker, this much shorter than a timed one (and by at least this many
# seconds) did not do the timed steps' work: the profiler adds to a step, never takes away. A file that
# yields placeholders while profiled and does their work once the profiler has stopped shows a trace
# without the lesson's work (a red-team pass on lab 3: 0.07 M elements read a step against 31.74 M).
PROFILED_SHORTER_MAX = 0.2
PROFILED_SHORTER_MIN_S = 0.01


def profiled_steps_did_the_work(run: execute.Outcome, same: Check, figure: str = "cpu_time") -> bool:
    """The profiled steps against the timed ones, both as the checker stamped them: the median profiled
    step may not be a small fraction of the median timed step. Only where the lab's figure is CPU time, whose
    steps do their work in the step: where it is the clock, a step may wait on work done beside it (lab 1's
    DataLoader workers), and a profiled step that finds its batch ready is rightly short (lab 1 with two
    workers: 47 ms profiled against 257 ms timed)."""
    if figure != "cpu_time":
        return True
    profiled = sorted(run.result.get("profiled_steps_s") or [])
    timed = sorted(run.result.get("step_times") or [])
    if not profiled or not timed:
        return True
    p, t = profiled[len(profiled) // 2], timed[len(timed) // 2]
    if p < PROFILED_SHORTER_MAX * t and t - p > PROFILED_SHORTER_MIN_S:
        same.failed(f"a profiled step took {p * 1000:.1f} ms, a timed step {t * 1000:.1f} ms: the profiled "
                     "steps did not do the timed steps' work, so their trace is not its evidence",
                     f"a profiled step at least {PROFILED_SHORTER_MAX:g}× a timed one (profiling adds to a step)",
                     f"{p / t:.2f}×", "do the same work in every step, profiled or not, inside the step")
        return False
    return True


# The profiler's warm-up step (the first profiled step: its events are recorded, then dropped) is not in the
# trace. What it costs beyond a traced step is the profiler's own start, which the original's run shows: a
# version's may exceed a traced step of its own by that much, and by this factor and these seconds besides.
# More is work done where no trace sees it: the results of the traced steps, worked out there by the real
# model while the traced steps run a decoy (a red-team pass on lab 8: the next three batches' logits).
WARMUP_SLACK = 1.5
WARMUP_SLACK_S = 0.005


def warmup_step_did_no_more(run: execute.Outcome, original: execute.Outcome | None, same: Check,
                            report: Report | None = None) -> bool:
    """The CPU of the profiler's warm-up step against the traced steps', both read by the kernel while the run
    waited stopped at their ends (``profiled_cpu_s``: where the lab's figure is CPU time), beside the
    original's: a warm-up step that did more than a traced step and the profiler's start fails Same
    results, since the trace is not the evidence of the steps' work."""
    mine = run.result.get("profiled_cpu_s")
    theirs = original.result.get("profiled_cpu_s") if original is not None else None
    if not mine or not theirs:
        return True
    (warmup, traced), (their_warmup, their_traced) = mine, theirs
    start = max(0.0, their_warmup - their_traced)  # the profiler's start, as the original's run paid it
    allowed = (traced + start) * WARMUP_SLACK + WARMUP_SLACK_S
    if report is not None:
        report.warmup = {"original_s": list(theirs), "learner_s": list(mine), "allowed_s": allowed}
    if warmup <= allowed:
        return True
    same.failed(f"the profiler's warm-up step, which is not in the trace, used {warmup * 1000:.1f} ms of CPU, "
                f"a traced step {traced * 1000:.1f} ms: work was done where the trace does not see it, so the "
                "trace is not the evidence of the steps' work",
                f"at most {allowed * 1000:.1f} ms: a traced step and the profiler's start (the original's: "
                f"{their_warmup * 1000:.1f} ms against {their_traced * 1000:.1f} ms)",
                f"{warmup * 1000:.1f} ms", "do each step's work in that step, profiled or not")
    return False


# A profiled step in the trace may differ from the same step stamped by the
# checker by the profiler's own book-keeping between steps; more than this
# factor either way means the trace is not of these steps.
TRACE_STEP_FACTOR = 2.0


TRACE_STEP_SLACK_S = 0.02
# A trace longer than the stamps is read with more room: the checker stamps a mark when it reads it, and a
# checker kept off the CPU by another check reads a step's two marks together (a sound lab 2 fix, 0.4 ms steps
# profiled at 14 ms, read 41 ms of trace against stamps under 10.5 ms beside another check). A trace of longer
# steps than the run's shows more work, never less: it cannot hide a bottleneck.
TRACE_LONGER_SLACK_S = 0.05  # a profiled step


def _trace_matches_steps(lab: labs.Lab, trace: evidence.Trace, run: execute.Outcome, proof: Check) -> bool:
    """The trace's steps against the profiled steps the checker stamped from outside: as many, as long."""
    expected = lab.workload.profile_steps - 1  # the schedule's first profiled step only warms the profiler up
    steps = trace.steps
    stamped = run.result.get("profiled_steps_s", [])[1:]
    in_trace = sum(s.dur for s in steps) / 1e6
    outside = sum(stamped)
    longest = outside * TRACE_STEP_FACTOR + TRACE_STEP_SLACK_S + TRACE_LONGER_SLACK_S * expected
    if len(steps) != expected or not (outside / TRACE_STEP_FACTOR - TRACE_STEP_SLACK_S <= in_trace <= longest):
        proof.failed("the trace does not match the profiled steps the checker saw",
                     f"{expected} steps taking about {outside * 1000:.0f} ms in all",
                     f"{len(steps)} steps taking {in_trace * 1000:.0f} ms",
                     "leave torch.profiler and the trace files as they are")
        return False
    return True


def measure(metric: str, trace: evidence.Trace, ranks: list[evidence.Trace] | None) -> evidence.Measure:
    """A trace's figure; a torchrun job's is its ranks' worst (the highest), each rank's said."""
    if not ranks:
        return evidence.measure(metric, trace)
    each = [evidence.measure(metric, t) for t in ranks]
    worst = max(each, key=lambda m: m.value)
    return evidence.Measure(value=worst.value, unit=worst.unit,
                            summary="; ".join(f"rank {rank}: {m.summary}" for rank, m in enumerate(each)),
                            details={**worst.details, "ranks": float(len(each))})


def _calls(path: Path) -> set[str]:
    """The functions a file calls, as written (``gc.collect``, ``torch.cuda.empty_cache``, ``collect``)."""
    import ast

    try:
        tree = ast.parse(path.read_bytes())  # bytes: decoded by their coding line, as Python does
    except (OSError, SyntaxError, ValueError):
        return set()
    return {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}


def not_a_fix(lab: labs.Lab, file: Path) -> list[str]:
    """Why the calls the learner added that look like a fix are none (the lab's ``[evidence.not_a_fix]``):
    a call the file makes and the original does not, named in full or by its last part (``collect`` after
    ``from gc import collect``)."""
    told = [(key, why) for each in lab.evidences for key, why in each.not_a_fix]
    if not told:
        return []
    mine, theirs = _calls(file), _calls(lab.original)

    def calls(names: set[str], key: str) -> bool:
        return any(n == key or n.endswith("." + key) or key.endswith("." + n) for n in names)

    return [f"{key}: {why}" for key, why in told if calls(mine, key) and not calls(theirs, key)]

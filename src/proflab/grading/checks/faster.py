"""Check 4, "Faster": the learner's version is faster than the original by the lab's threshold.

Decided when the rounds are over, from each round's time per step of both
versions (``measures.counted_step_s``): the speed-up is the geometric mean of
the paired rounds' ratios, with a 95% interval (``measuring.stats``). A pass
or a fail only where the whole interval is on one side of the threshold;
"inconclusive" otherwise, after the extra rounds the lab allows: never a coin
flip. The rounds stop early once the interval clears the threshold either
way (``settled``).
"""

from __future__ import annotations

from ... import labs
from ...measuring import stats
from ..rounds import Rounds
from ..trial import OVER
from ..verdicts import Check, Report, verdict_of, where_to_look

NAME = "faster"
POINTS = "faster"  # the [grading] key that pays for it
AFTER: tuple[str, ...] = ("evidence",)  # the checks it waits on
TITLE = "Faster"
WHAT = "your version is faster than the original by the lab's threshold"
WHEN = (OVER,)


def settled(trial: Rounds) -> bool:
    """Whether the rounds so far call the speed-up either way."""
    report = trial.report
    cmp = stats.compare(report.timings["original"], report.timings["learner"])
    return cmp.decide(trial.lab.threshold(report.device)) != stats.UNCLEAR


def decide(trial: Rounds, check: Check) -> str | None:
    lab, report = trial.lab, trial.report
    cmp, measured = compared(lab, report)
    threshold = lab.threshold(report.device)
    expected = f"at least {threshold:g}× on {report.device}"
    interval = stats.uncertainty(cmp.rounds, (cmp.ci_low, cmp.ci_high), (cmp.ratio_low, cmp.ratio_high),
                                 lambda low, high: f"{low:.2f}–{high:.2f}×")
    decision = cmp.decide(threshold)
    if decision == stats.PASS:
        check.passed(f"{cmp.speedup:.2f}× faster than the original over {cmp.rounds} paired rounds "
                     f"({interval})", expected, measured)
    elif decision == stats.FAIL:
        check.failed(f"{cmp.speedup:.2f}× is below the {threshold:g}× this lab asks for on {report.device} "
                     f"({interval})", expected, measured, where_to_look(lab))
    else:
        limit = {"round limit": f"the lab's limit of {lab.workload.round_limit} rounds",
                 "time budget": f"the lab's {lab.workload.budget_s:g} s time budget"}.get(report.stopped, "")
        check.inconclusive(
            f"inconclusive: too noisy to tell. {cmp.speedup:.2f}× over {cmp.rounds} rounds"
            f"{f' ({limit})' if limit else ''}, but the 95% interval {cmp.ci_low:.2f}–{cmp.ci_high:.2f}× straddles "
            f"the {threshold:g}× threshold",
            expected, measured,
            "the machine was too busy to trust these timings: close other programs (or wait for other "
            "jobs to finish) and check again; --rounds N starts with more rounds")
    check.details = _start_up_paid(lab, report, cmp) + _after_paid(lab, report, cmp) + how_timed(lab, report)
    return verdict_of(check)


def compared(lab: labs.Lab, report: Report) -> tuple[stats.Comparison, str]:
    """The rounds' times per step compared, kept in the report (the comparison, the threshold, each version's
    median and p95 step), and what was measured, in words."""
    cmp = stats.compare(report.timings["original"], report.timings["learner"])
    report.comparison = cmp.as_dict()
    report.threshold = lab.threshold(report.device)
    lat = {which: {"median_ms": 1000 * stats.median(times), "p95_ms": 1000 * stats.quantile(times, 0.95)}
           for which, times in report.step_times.items()}
    report.latency = lat
    step = "mean step in CPU time" if report.figure == "cpu_time" else "mean step"
    measured = (f"{cmp.speedup:.2f}× ({step} {cmp.original_s * 1000:.1f} ms → {cmp.learner_s * 1000:.1f} ms; "
                f"median {lat['original']['median_ms']:.1f} ms → {lat['learner']['median_ms']:.1f} ms, "
                f"p95 {lat['original']['p95_ms']:.1f} ms → {lat['learner']['p95_ms']:.1f} ms; "
                f"rounds {cmp.ratio_low:.2f}–{cmp.ratio_high:.2f}×, noise ±{cmp.noise:.0%})")
    return cmp, measured


def how_timed(lab: labs.Lab, report) -> list[str]:
    """What a step's time was, and why (the lab's [timing]), and the turns waited for: a line each."""
    lines = []
    if report.figure == "cpu_time":
        lines.append("timed in CPU time, the CPU seconds of every process and thread of each run, read by the "
                     "checker from /proc: " + (lab.timing_why or "other jobs on the machine move it far less than the clock"))
    elif lab.timing_why and lab.figure(report.device) == "wall_time":
        lines.append(f"timed by the clock: {lab.timing_why}")
    if report.waited_s >= 1:
        lines.append(f"waited {report.waited_s:.0f} s for turns at the machine (other checks were measuring); "
                     "not counted")
    return lines


# Said in the report when the first step's time beyond its allowance is at least this share of the
# version's counted time.
START_UP_SHARE_SHOWN = 0.2


def _after_paid(lab: labs.Lab, report: Report, cmp: stats.Comparison) -> list[str]:
    """A line for a version whose runs did more after their timed window than the original does there:
    that excess counted as its steps' own."""
    counted = [c for c in report.after.get("counted_s") or [] if c]
    if not counted:
        return []
    unit = "CPU seconds" if report.figure == "cpu_time" else "s"
    spent = [s for s in report.after.get("learner_s") or [] if s is not None]
    theirs = [s for s in report.after.get("original_s") or [] if s is not None]
    gap = [c for c in report.after.get("trace_gap_counted_s") or [] if c]
    between = (f" (of it, {stats.median(gap):.2f} {unit} between your last profiled step and your trace's writing, "
               "beyond what the original's took there for a trace of that size)") if gap else ""
    return [f"after the timed steps: your runs went on for {stats.median(spent):.2f} {unit} (the original's "
            f"{stats.median(theirs):.2f}); {stats.median(counted):.2f} {unit} beyond the original's, with a little "
            f"slack, counted as your steps' own{between}. Work moved out of the timed steps is paid for where it "
            "went"]


def _start_up_paid(lab: labs.Lab, report: Report, cmp: stats.Comparison) -> list[str]:
    """A line for a version whose first step ran past what is left out of it, when that excess weighs."""
    first = report.first_step
    if not first:
        return []
    excess = first["learner_s"] - first["allowance_s"]
    counted = cmp.learner_s * max(lab.workload.warmup_steps + lab.workload.timed_steps - 1, 1)
    if excess <= 0 or counted <= 0 or excess / counted < START_UP_SHARE_SHOWN:
        return []
    startup = f" + {lab.workload.startup_s:g} s for the lab's start-up work" if lab.workload.startup_s else ""
    return [f"start-up: your first step took {first['learner_s']:.2f} s; {first['allowance_s']:.2f} s of it is "
            f"left out (the original's first step, {first['original_s']:.2f} s, with a little slack{startup}); "
            f"the other {excess:.2f} s count, {excess / counted:.0%} of your counted time. Work done before the "
            f"first batch ({_before_the_first_batch(lab)}) is paid for like the steps' own"]


def _before_the_first_batch(lab: labs.Lab) -> str:
    """Examples of set-up work, as the lab's fixes could do it (worker processes only where a lab allows them)."""
    if lab.workload.background_workers:
        return "worker processes started, batches prefetched, data read ahead"
    return "a model traced, rewritten or compiled, data read ahead"

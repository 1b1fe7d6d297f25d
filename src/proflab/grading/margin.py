"""The fourth check: the margin over the original, as the lab measures it.

A speed-up over the lab's threshold (*Faster*), an overhead under the lab's
limit (*Low overhead*, lab 0), or a peak memory under the lab's share of the
original's (*Leaner*, lab 5), each from paired rounds and their 95% interval:
a pass or a fail only where the whole interval says so, "inconclusive"
otherwise.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .. import labs
from ..measuring import stats
from ..running import execute
from .bottleneck import not_a_fix
from .verdicts import Check, Report, where_to_look


def series(lab: labs.Lab, report: Report, kind: str = "host") -> tuple[list, list]:
    """What the fourth check compares, paired by round: step times, or (a lab graded on memory) the peaks
    of ``kind`` ("host", "device") of the unprofiled runs."""
    if lab.leaner:
        prefix = "" if kind == "host" else "device_"
        return report.memory.get(prefix + "original", []), report.memory.get(prefix + "learner", [])
    return report.timings["original"], report.timings["learner"]


def record_peaks(report: Report, originals: list[execute.Outcome], learners: list[execute.Outcome]) -> None:
    """Each round's peaks, as read from outside the runs. The first round's runs are profiled (with
    profile_memory, which keeps its own records): only the unprofiled rounds after it compare like with like."""
    def figures(run: execute.Outcome) -> dict:
        return run.result.get("memory") or {}

    later = list(zip(originals, learners))[1:]
    report.memory.update(original=[figures(o).get("peak_mb") for o, _ in later],
                         learner=[figures(m).get("peak_mb") for _, m in later])
    if any(figures(run).get("device_graded") for pair in zip(originals, learners) for run in pair):
        report.memory.update(device_original=[figures(o).get("device_peak_mb") for o, _ in later],
                             device_learner=[figures(m).get("device_peak_mb") for _, m in later])
    first = figures(learners[0])
    report.memory["measured"] = first.get("measured", "")
    report.memory["source"] = "/proc/PID/status: VmRSS summed, VmHWM, VmData growth" + (
        f"; {first['device_source']}" if first.get("device_source") else "")
    report.memory["runs"] = {"original": [figures(o) for o in originals], "learner": [figures(m) for m in learners]}


# On CUDA a lab's leak lives on the device, and the device's peak is held to the lab's share; the host's
# peak, which the CUDA context and the data set dominate in every version, must then be no more than the
# original's, within this: a leak moved from the device to the host is still a leak.
HOST_BESIDE_DEVICE = 1.10


def limit_of(lab: labs.Lab, report: Report, kind: str) -> float:
    """The largest share of the original's peak of ``kind`` ("host", "device") a version may reach."""
    if kind == "host" and "device_original" in report.memory:
        return HOST_BESIDE_DEVICE
    return lab.peak_share(report.device)


def memory_decision(lab: labs.Lab, report: Report) -> tuple[str, str, stats.Comparison | None]:
    """A lab graded on memory: (decision, the kind that decides, its comparison). Every kind of peak
    graded must pass; the worse one is the one reported. "too few": no unprofiled round yet;
    "unreadable": a peak that could not be read from outside."""
    kinds = ["host"] + (["device"] if "device_original" in report.memory else [])
    worst: tuple[str, str, stats.Comparison | None] | None = None
    order = {stats.FAIL: 0, stats.UNCLEAR: 1, stats.PASS: 2}
    for kind in kinds:
        original, learner = series(lab, report, kind)
        if not original:
            return "too few", kind, None
        if any(v is None or v <= 0 for v in original + learner):
            return "unreadable", kind, None
        cmp = stats.compare(original, learner)
        decision = cmp.decide(1.0 / limit_of(lab, report, kind))
        if worst is None or (order[decision], cmp.speedup) < (order[worst[0]], worst[2].speedup):
            worst = (decision, kind, cmp)
    return worst


def grade(lab: labs.Lab, report: Report, faster: Check, file: Path | None = None) -> None:
    if lab.leaner:
        _leaner(lab, report, faster, file)
        return
    cmp = stats.compare(report.timings["original"], report.timings["learner"])
    threshold = lab.threshold(report.device)
    report.comparison = cmp.as_dict()
    report.threshold = threshold
    lat = {which: {"median_ms": 1000 * stats.median(times), "p95_ms": 1000 * stats.quantile(times, 0.95)}
           for which, times in report.step_times.items()}
    report.latency = lat
    step = "mean step in CPU time" if report.figure == "cpu_time" else "mean step"
    measured = (f"{cmp.speedup:.2f}× ({step} {cmp.original_s * 1000:.1f} ms → {cmp.learner_s * 1000:.1f} ms; "
                f"median {lat['original']['median_ms']:.1f} ms → {lat['learner']['median_ms']:.1f} ms, "
                f"p95 {lat['original']['p95_ms']:.1f} ms → {lat['learner']['p95_ms']:.1f} ms; "
                f"rounds {cmp.ratio_low:.2f}–{cmp.ratio_high:.2f}×, noise ±{cmp.noise:.0%})")
    expected = f"at least {threshold:g}× on {report.device}"
    interval = (f"95% interval {cmp.ci_low:.2f}–{cmp.ci_high:.2f}×" if cmp.rounds > 1
                else "one round: no interval")
    decision = cmp.decide(threshold)
    if lab.overhead:
        _overhead(lab, report, faster, cmp, decision, measured)
        return
    if decision == stats.PASS:
        faster.passed(f"{cmp.speedup:.2f}× faster than the original over {cmp.rounds} paired rounds "
                      f"({interval})", expected, measured)
    elif decision == stats.FAIL:
        faster.failed(f"{cmp.speedup:.2f}× is below the {threshold:g}× this lab asks for on {report.device} "
                      f"({interval})", expected, measured, where_to_look(lab))
    else:
        limit = {"round limit": f"the lab's limit of {lab.workload.round_limit} rounds",
                 "time budget": f"the lab's {lab.workload.budget_s:g} s time budget"}.get(report.stopped, "")
        faster.inconclusive(
            f"inconclusive: too noisy to tell. {cmp.speedup:.2f}× over {cmp.rounds} rounds"
            f"{f' ({limit})' if limit else ''}, but the {interval} straddles the {threshold:g}× threshold",
            expected, measured,
            "the machine was too busy to trust these timings: close other programs (or wait for other "
            "jobs to finish) and check again; --rounds N starts with more rounds")
    faster.details = _start_up_paid(lab, report, cmp) + how_timed(lab, report)


def how_timed(lab: labs.Lab, report) -> list[str]:
    """What a step's time was, and why (the lab's [timing]), and the turns waited for: a line each."""
    lines = []
    if report.figure == "cpu_time":
        lines.append("timed in CPU time, the CPU seconds of every process and thread of each run, read by the "
                     "checker from /proc: " + (lab.timing_why or "other jobs on the machine barely move it"))
    elif lab.timing_why and lab.figure(report.device) == "wall_time":
        lines.append(f"timed by the clock: {lab.timing_why}")
    if report.waited_s >= 1:
        lines.append(f"waited {report.waited_s:.0f} s for turns at the machine (other checks were measuring); "
                     "not counted")
    return lines


# Said in the report when the first step's time beyond its allowance is at least this share of the
# version's counted time.
START_UP_SHARE_SHOWN = 0.2


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
            "first batch (worker processes started, batches prefetched, data read ahead) is paid for like the "
            "steps' own"]


def _overhead(lab: labs.Lab, report: Report, faster: Check, cmp: stats.Comparison, decision: str,
              measured: str) -> None:
    """A lab graded on overhead (lab 0): how much slower the profiled version is than the unprofiled one."""
    limit = lab.overhead.get(report.device, lab.overhead["cpu"])
    cost = 1.0 / cmp.speedup - 1.0 if cmp.speedup else float("inf")
    measured = measured.replace(f"{cmp.speedup:.2f}× (", f"{cost:+.0%}, {cmp.speedup:.2f}× the speed (", 1)
    interval = (f"95% interval {1 / cmp.ci_high - 1:+.1%} to {1 / cmp.ci_low - 1:+.1%}"
                if cmp.rounds > 1 and cmp.ci_low > 0 else "one round: no interval")
    expected = f"at most {limit:+.0%} on {report.device}"
    if decision == stats.PASS:
        faster.passed(f"your profiler costs {cost:+.0%} over the unprofiled original, over {cmp.rounds} paired "
                      f"rounds ({interval})", expected, measured)
    elif decision == stats.FAIL:
        faster.failed(f"your profiler costs {cost:+.0%} over the unprofiled original, more than the {limit:.0%} "
                      f"this lab allows on {report.device} ({interval})", expected, measured,
                      "profile fewer steps (a shorter active window), and leave record_shapes, profile_memory "
                      "and with_stack off unless you need them")
    else:
        faster.inconclusive(f"inconclusive: too noisy to tell. {cost:+.0%} over {cmp.rounds} rounds, but the "
                            f"{interval} straddles the {limit:.0%} limit", expected, measured,
                            "the machine was too busy to trust these timings: close other programs and check "
                            "again; --rounds N starts with more rounds")
    faster.details = how_timed(lab, report)


def _held_not_resident(report: Report) -> float:
    """How much of the learner's host peak was held but not resident (median over its unprofiled runs, MB):
    0 where that is within a tenth of its resident peak (allocators keep some memory of their own)."""
    runs = report.memory.get("runs", {}).get("learner", [])[1:]
    gaps = [r["committed_peak_mb"] - max(r["rss_peak_mb"], r["hwm_peak_mb"]) for r in runs
            if r.get("committed_peak_mb") is not None and r.get("rss_peak_mb") is not None]
    resident = [max(r["rss_peak_mb"], r["hwm_peak_mb"]) for r in runs if r.get("rss_peak_mb") is not None]
    if not gaps or not resident:
        return 0.0
    gap = stats.median(gaps)
    return gap if gap > 0.1 * stats.median(resident) else 0.0


def _leaner(lab: labs.Lab, report: Report, faster: Check, file: Path | None) -> None:
    """A lab graded on memory (lab 5): the runs' peaks, read from outside them, against the original's."""
    report.memory["share"] = lab.peak_share(report.device)
    decision, kind, cmp = memory_decision(lab, report)
    share = limit_of(lab, report, kind)
    expected = (f"a peak of at most {share:.0%} of the original's on {report.device}" if share < 1 else
                f"a host peak of at most {share:.0%} of the original's (the device's is held to "
                f"{lab.peak_share(report.device):.0%}): a leak moved to the host is still a leak")
    if decision == "too few":
        faster.inconclusive("no unprofiled round was measured: the first round's runs are profiled, and their "
                            "peaks hold the profiler's own records", expected, "no figure",
                            "check again with --rounds 2 or more")
        return
    if decision == "unreadable":
        where = ("the device's memory, from the driver (nvidia-smi)" if kind == "device"
                 else "the run's memory, from /proc")
        tool = ("put NVIDIA's nvidia-smi on the PATH" if kind == "device" and not shutil.which("nvidia-smi")
                else "nvidia-smi listed no figure for the run's processes (MIG or vGPU?)" if kind == "device"
                else "the checker needs to read /proc/PID/status of the run's processes")
        faster.inconclusive(f"the peak memory could not be read from outside the run: {where}; the checker does "
                            "not take a run's own word for it", expected, "no figure", tool)
        return
    original, learner = series(lab, report, kind)
    report.comparison = cmp.as_dict()
    report.threshold = lab.threshold(report.device)
    ratio = 1.0 / cmp.speedup
    what = ("device memory, from the driver" if kind == "device"
            else "host memory (resident or held, every process), from /proc")
    hidden = _held_not_resident(report) if kind == "host" else 0.0
    if hidden:
        what += (f"; {hidden:.0f} MB of your peak was held without being resident (allocated memory whose "
                 f"pages were handed back to the kernel still belongs to the run, and counts)")
    rounds = ", ".join(f"{o:.0f} → {m:.0f}" for o, m in zip(original, learner))
    measured = (f"peak {stats.median(original):.0f} MB → {stats.median(learner):.0f} MB "
                f"(median of {cmp.rounds} unprofiled runs each; per round: {rounds} MB), {ratio:.0%} of the "
                f"original's; {what}")
    interval = (f"95% interval {1 / cmp.ci_high:.0%}–{1 / cmp.ci_low:.0%}" if cmp.rounds > 1 and cmp.ci_low > 0
                else "one round: no interval")
    if decision == stats.PASS:
        faster.passed(f"your version's peak is {ratio:.0%} of the original's over {cmp.rounds} paired rounds "
                      f"({interval})", expected, measured)
    elif decision == stats.FAIL:
        why = not_a_fix(lab, file) if file is not None else []
        faster.failed(f"your version's {'host ' if share >= 1 else ''}peak is {ratio:.0%} of the original's, "
                      f"more than the {share:.0%} this lab "
                      f"allows on {report.device} ({interval})", expected, measured,
                      why[0] if why else where_to_look(lab), details=why)
    else:
        faster.inconclusive(f"inconclusive: {ratio:.0%} of the original's peak over {cmp.rounds} rounds, but the "
                            f"{interval} straddles the {share:.0%} limit", expected, measured,
                            "something else on this machine moved the memory figures: check again; --rounds N "
                            "starts with more rounds")

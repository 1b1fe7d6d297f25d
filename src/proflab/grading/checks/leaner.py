"""Check 4 of a lab graded on memory (lab 5), "Leaner": the learner's peak memory against the original's.

The peaks are read by the checker from outside the runs (``running.memory``:
the host's from /proc, the device's from the driver), never taken from a
run's own word; the first round's runs are profiled, so only the unprofiled
rounds after it are compared (``measures.record_peaks``). Decided when the
rounds are over, from the paired rounds' peaks and their 95% interval: at
most the lab's share of the original's peak. On CUDA the device holds the
lab's leak, and the host may not take it over (``HOST_BESIDE_DEVICE``);
every kind of peak graded must pass. The rounds stop once it is called
either way, or a peak cannot be read (``settled``).
"""

from __future__ import annotations

import shutil

from ... import labs
from ...measuring import stats
from ..rounds import Rounds
from ..trial import OVER
from ..verdicts import Check, Report, verdict_of, where_to_look
from .evidence import not_a_fix

NAME = "leaner"
POINTS = "faster"  # the [grading] key that pays for it
AFTER: tuple[str, ...] = ("evidence",)  # the checks it waits on
TITLE = "Leaner"
WHAT = ("your version's peak memory, measured by the checker from outside its process, is at most the lab's "
        "share of the original's")
WHEN = (OVER,)


def settled(trial: Rounds) -> bool:
    """Whether the rounds so far call the peaks either way, or show a peak that cannot be read (no more rounds
    will read it)."""
    return memory_decision(trial.lab, trial.report)[0] not in (stats.UNCLEAR, "too few")


def decide(trial: Rounds, check: Check) -> str | None:
    lab, report = trial.lab, trial.report
    report.memory["share"] = lab.peak_share(report.device)
    decision, kind, cmp = memory_decision(lab, report)
    share = limit_of(lab, report, kind)
    expected = (f"a peak of at most {share:.0%} of the original's on {report.device}" if share < 1 else
                f"a host peak of at most {share:.0%} of the original's (the device's is held to "
                f"{lab.peak_share(report.device):.0%}): a leak moved to the host is still a leak")
    if decision == "too few":
        check.inconclusive("no unprofiled round was measured: the first round's runs are profiled, and their "
                           "peaks hold the profiler's own records", expected, "no figure",
                           "check again with --rounds 2 or more")
        return verdict_of(check)
    if decision == "unreadable":
        where = ("the device's memory, from the driver (nvidia-smi)" if kind == "device"
                 else "the run's memory, from /proc")
        tool = ("put NVIDIA's nvidia-smi on the PATH" if kind == "device" and not shutil.which("nvidia-smi")
                else "nvidia-smi listed no figure for the run's processes (MIG or vGPU?)" if kind == "device"
                else "the checker needs to read /proc/PID/status of the run's processes")
        check.inconclusive(f"the peak memory could not be read from outside the run: {where}; the checker does "
                           "not take a run's own word for it", expected, "no figure", tool)
        return verdict_of(check)
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
    interval = stats.uncertainty(cmp.rounds, (cmp.ci_low, cmp.ci_high), (cmp.ratio_low, cmp.ratio_high),
                                 lambda low, high: f"{1 / high:.0%}–{1 / low:.0%}" if low > 0 else "unbounded")
    if decision == stats.PASS:
        check.passed(f"your version's peak is {ratio:.0%} of the original's over {cmp.rounds} paired rounds "
                     f"({interval})", expected, measured)
    elif decision == stats.FAIL:
        why = not_a_fix(lab, trial.file)
        check.failed(f"your version's {'host ' if share >= 1 else ''}peak is {ratio:.0%} of the original's, "
                     f"more than the {share:.0%} this lab "
                     f"allows on {report.device} ({interval})", expected, measured,
                     why[0] if why else where_to_look(lab), details=why)
    else:
        check.inconclusive(f"inconclusive: {ratio:.0%} of the original's peak over {cmp.rounds} rounds, but the "
                           f"{interval} straddles the {share:.0%} limit", expected, measured,
                           "something else on this machine moved the memory figures: check again; --rounds N "
                           "starts with more rounds")
    return verdict_of(check)


def series(lab: labs.Lab, report: Report, kind: str = "host") -> tuple[list, list]:
    """What the check compares, paired by round: the peaks of ``kind`` ("host", "device") of the unprofiled
    runs, the original's and the learner's."""
    prefix = "" if kind == "host" else "device_"
    return report.memory.get(prefix + "original", []), report.memory.get(prefix + "learner", [])


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

"""Check 4 of a lab graded on overhead (lab 0), "Low overhead": what the learner's profiler costs.

The learner's version profiles itself; the original does not. Decided when
the rounds are over, from the same paired rounds and 95% interval as
*Faster* (``faster.compared``), read the other way round: how much slower
the profiled version is than the unprofiled one, at most the lab's
``[overhead]`` for the device. The lab's threshold is then a speed-up below
one (``Lab.threshold``), and the rounds stop once it is called either way.
"""

from __future__ import annotations

from ...measuring import stats
from ..rounds import Rounds
from ..trial import OVER
from ..verdicts import Check, verdict_of
from . import faster
from .faster import compared, how_timed

NAME = "overhead"
POINTS = "faster"  # the [grading] key that pays for it
AFTER: tuple[str, ...] = ("own_profile",)  # the checks it waits on
TITLE = "Low overhead"
WHAT = "your profiled version is at most the lab's overhead slower than the unprofiled one"
WHEN = (OVER,)


def settled(trial: Rounds) -> bool:
    """Whether the rounds so far call the overhead either way: the speed-up against the lab's threshold."""
    return faster.settled(trial)


def decide(trial: Rounds, check: Check) -> str | None:
    lab, report = trial.lab, trial.report
    cmp, measured = compared(lab, report)
    decision = cmp.decide(lab.threshold(report.device))
    limit = lab.overhead.get(report.device, lab.overhead["cpu"])
    cost = 1.0 / cmp.speedup - 1.0 if cmp.speedup else float("inf")
    measured = measured.replace(f"{cmp.speedup:.2f}× (", f"{cost:+.0%}, {cmp.speedup:.2f}× the speed (", 1)
    interval = stats.uncertainty(cmp.rounds, (cmp.ci_low, cmp.ci_high), (cmp.ratio_low, cmp.ratio_high),
                                 lambda low, high: f"{1 / high - 1:+.1%} to {1 / low - 1:+.1%}" if low > 0
                                 else "unbounded")
    expected = f"at most {limit:+.0%} on {report.device}"
    if decision == stats.PASS:
        check.passed(f"your profiler costs {cost:+.0%} over the unprofiled original, over {cmp.rounds} paired "
                     f"rounds ({interval})", expected, measured)
    elif decision == stats.FAIL:
        check.failed(f"your profiler costs {cost:+.0%} over the unprofiled original, more than the {limit:.0%} "
                     f"this lab allows on {report.device} ({interval})", expected, measured,
                     "profile fewer steps (a shorter active window), and leave record_shapes, profile_memory "
                     "and with_stack off unless you need them")
    else:
        check.inconclusive(f"inconclusive: too noisy to tell. {cost:+.0%} over {cmp.rounds} rounds, but the "
                           f"{interval} straddles the {limit:.0%} limit", expected, measured,
                           "the machine was too busy to trust these timings: close other programs and check "
                           "again; --rounds N starts with more rounds")
    check.details = how_timed(lab, report)
    return verdict_of(check)

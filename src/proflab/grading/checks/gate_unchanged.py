"""Check 2 of a gate lab (lab 7), "Passes the unchanged fix": the learner's gate on the fix against itself.

Decided from the first gate the checker runs with the learner's settings:
lab 1's fix as the candidate, against itself as the baseline. Only "no
regression" passes: a false alarm, or "too noisy to call", would block every
pull request that changes nothing. A gate whose settings make the fix fail to
run through (too many steps, a timeout) fails it too.
"""

from __future__ import annotations

from .. import gate as gating
from ..gate_runs import GateRuns, ran_through, slowdown_in_words
from ..trial import ON_DEMAND
from ..verdicts import FAILED, PASSED, Check

NAME = "gate_unchanged"
POINTS = "same_results"  # the [grading] key that pays for it
AFTER: tuple[str, ...] = ("gate_settings",)  # the checks it waits on
TITLE = "Passes the unchanged fix"
WHAT = "your gate, on the fix against itself, says no regression"
WHEN = (ON_DEMAND,)


def decide(trial: GateRuns, check: Check) -> str | None:
    done = trial.gate("unchanged")
    if not ran_through(done, "unchanged", check):
        return FAILED
    judge_unchanged(done, trial.limit, check)
    return None if check.status == PASSED else FAILED


def judge_unchanged(done: gating.GateReport, limit: float, check: Check) -> None:
    """The fix against itself: only "no regression" passes; a false alarm or "too noisy" blocks every pull
    request that changes nothing."""
    told = slowdown_in_words(done)
    if done.verdict == PASSED:
        check.passed(f"no regression on the unchanged fix: {told}", f"its interval under {limit:g}×", told)
    elif done.verdict == FAILED:
        check.failed(f"a false alarm: your gate calls the unchanged fix a regression ({told})",
                     "no regression", told, "a max_slowdown this close to 1 fails pull requests that change "
                     "nothing: choose the smallest slowdown worth failing one for")
    else:
        check.failed(f"your gate could not call the unchanged fix: {told}, too noisy to call against {limit:g}×. "
                     "A gate that cannot pass an unchanged pull request blocks every one", "no regression",
                     f"too noisy to call ({told})", "the interval must fit under max_slowdown: a limit close to "
                     "1.0 asks for more precision than this machine's noise allows; raise it, or give a close "
                     "call more rounds (max_rounds)")

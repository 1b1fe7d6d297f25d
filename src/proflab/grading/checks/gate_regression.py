"""Check 3 of a gate lab (lab 7), "Catches the regression": the learner's gate on the fix undone.

Decided from the second gate the checker runs with the learner's settings,
once the first passed: lab 1's fix undone (its original) as the candidate,
against the fix. Only "regression" passes: a gate that lets a slowdown this
large through, or cannot call it, guards nothing. A gate whose settings make
the candidate fail to run through fails it too: a candidate that broke is no
catch.
"""

from __future__ import annotations

from .. import gate as gating
from ..gate_runs import GateRuns, ran_through, slowdown_in_words
from ..trial import ON_DEMAND
from ..verdicts import FAILED, PASSED, Check

NAME = "gate_regression"
POINTS = "evidence"  # the [grading] key that pays for it
AFTER: tuple[str, ...] = ("gate_unchanged",)  # the checks it waits on
TITLE = "Catches the regression"
WHAT = "your gate, on the fix undone against the fix, says regression"
WHEN = (ON_DEMAND,)


def decide(trial: GateRuns, check: Check) -> str | None:
    done = trial.gate("regression")
    if not ran_through(done, "regression", check):
        return FAILED
    judge_regression(done, trial.limit, check)
    return None if check.status == PASSED else FAILED


def judge_regression(done: gating.GateReport, limit: float, check: Check) -> None:
    """The fix undone against the fix: only "regression" passes."""
    told = slowdown_in_words(done)
    if done.check("no_regression").status == FAILED:
        check.passed(f"regression caught: the fix undone is {told}", f"its interval above {limit:g}×", told)
        return
    said = "no regression" if done.verdict == PASSED else "too noisy to call"
    check.failed(f"your gate let the fix undone through: {told}, {said} against {limit:g}×",
                 f"regression (above {limit:g}×)", told,
                 "a max_slowdown this high lets a slowdown this large through: choose the smallest slowdown worth "
                 "failing a pull request for" if done.verdict == PASSED else
                 "more rounds (rounds, max_rounds) narrow the interval until it clears max_slowdown")

"""Check 2, "Same work, same results": every step processes the same samples, and yields the same values.

Decided on every round: the learner's run and the original's take the same
inputs, drawn fresh for the round (``measures.round_seed``), and each step's
values are compared by the lab's rules (``compare``: exact, or within a
tolerance). A run that stops early, yields another value in any round, or
reads samples that did not come from the lab's storage fails it: a faster
pipeline that does less, or other, work is no fix. (The evidence check fails
it too, for a version that does its work only when profiled.)
"""

from __future__ import annotations

from ..rounds import Rounds
from ..trial import FIRST_ROUND, LATER_ROUND
from ..verdicts import FAILED, Check, where_to_look

NAME = "same_results"
POINTS = "same_results"  # the [grading] key that pays for it
AFTER: tuple[str, ...] = ("runs",)  # the checks it waits on
TITLE = "Same work, same results"
WHAT = "every step processes the same samples and yields the same values as the original"
WHEN = (FIRST_ROUND, LATER_ROUND)


def decide(trial: Rounds, check: Check) -> str | None:
    lab, steps = trial.lab, trial.lab.workload.total_steps
    failed = trial.failed
    if failed is not None and failed.result.get("kind") == "short":
        done = failed.result.get("steps_done", 0)
        check.failed(f"pipeline(cfg) yielded {done} steps; the original yields {steps} for the same data",
                     f"{steps} steps", f"{done} steps",
                     "keep every step of the original: the same batches, the same batch size")
        return FAILED
    differing = trial.differing
    if differing is not None:
        diff = differing.difference
        if diff is not None:
            check.failed(diff.message, "the original's values, step by step", f"step {diff.step} differs",
                         diff.hint or where_to_look(lab))
        else:
            check.failed(differing.unread, "every sample read from the lab's storage", "samples that did not "
                         "come from storage", "read every sample through the lab's dataset (the kit's, as the "
                         "original does): make the reads overlap (DataLoader workers, threads), not disappear")
        return FAILED
    if trial.round_no == 1:
        check.passed(f"all {steps} steps match the original ({', '.join(r.key for r in lab.results)})",
                     expected="the original's values", actual="equal within tolerance")
    return None

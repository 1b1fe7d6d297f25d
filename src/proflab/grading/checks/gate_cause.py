"""Check 4 of a gate lab (lab 7), "Names the cause": the regression's report names what changed.

Decided from the second gate's report, once it caught the regression: among
what changed between the two versions' profiled steps (``gate.describe``),
the name whose self time grew most must be the cause the lab names (the
DataLoader), so that a failed pull request says where to look. A gate that
profiles no steps records no trace, and names nothing.
"""

from __future__ import annotations

from ... import labs
from .. import gate as gating
from ..gate_runs import GateRuns
from ..trial import ON_DEMAND
from ..verdicts import Check, verdict_of

NAME = "gate_cause"
POINTS = "faster"  # the [grading] key that pays for it
AFTER: tuple[str, ...] = ("gate_regression",)  # the checks it waits on
TITLE = "Names the cause"
WHAT = "its report on the regression names what changed"
WHEN = (ON_DEMAND,)


def decide(trial: GateRuns, check: Check) -> str | None:
    judge_cause(trial.gate("regression"), trial.lab.gating, check)
    return verdict_of(check)


def judge_cause(done: gating.GateReport, g: labs.Gating, check: Check) -> None:
    """The regression's report names the cause among what changed (the name whose self time grew most)."""
    because = done.because.get("slower", "")
    if g.cause in because:
        check.passed(f"the report names it: {because}", f"'{g.cause}' among what changed", because)
        return
    said = because or ("nothing: no trace was recorded" if not done.traces else "nothing")
    check.failed(f"the gate failed the pull request without naming the {g.cause}: its report says {said}",
                 f"'{g.cause}' named in the report", said,
                 "profile a few steps of each version (profile_steps of 2 or more): the report then names "
                 f"what changed most; {g.where}")

"""Check 1, "It runs": the learner's file imports, and pipeline(cfg) yields every step without error.

Decided first before anything runs, from the file as it was handed in: a
file that does not parse fails without a process started for it, and one
that reaches for the checker's own machinery is refused by the source audit
(``audit``) and never runs. Then on every round, from the learner's run: a
run that fails, in any round, fails the check, whatever the rounds before
said (what each kind of failure says is ``failures``', shared with the gate
and ``proflab run``). A run that stops early did run: the next check says
what it left out.
"""

from __future__ import annotations

from dataclasses import asdict

from .. import audit
from ..failures import runtime_failure
from ..once import as_handed_in
from ..rounds import Rounds
from ..trial import BEFORE, FIRST_ROUND, LATER_ROUND
from ..verdicts import FAILED, Check

NAME = "runs"
POINTS = "runs"  # the [grading] key that pays for it
AFTER: tuple[str, ...] = ()  # the checks it waits on
TITLE = "It runs"
WHAT = "your file imports, and pipeline(cfg) yields every step without error"
WHEN = (BEFORE, FIRST_ROUND, LATER_ROUND)


def decide(trial: Rounds, check: Check) -> str | None:
    if trial.round_no == 0:
        return _as_handed_in(trial, check)
    name, steps = trial.file.name, trial.lab.workload.total_steps
    failed = trial.failed
    if failed is not None:
        if failed.result.get("kind") == "short":  # it ran: same_results says what it left out
            check.passed(f"{name} ran, but stopped early", actual=f"{failed.result.get('steps_done', 0)} steps")
            return None
        runtime_failure(check, failed, trial.lab, trial.timeout_s)
        if trial.controlled:  # a failure the machine could cause: the original ran through the same way
            check.details = [*(check.details or []), trial.controlled]
        return FAILED
    if trial.differing is not None:  # it ran through: same_results says what it did otherwise
        run = trial.differing.run
        check.passed(f"{name} ran all {steps} steps",
                     actual=f"{run.result['steps_done']} steps in {run.wall_s:.1f} s")
    elif trial.round_no == 1:
        check.passed(f"{name} ran all {steps} steps on {trial.report.device}",
                     actual=f"{trial.learners[0].result['steps_done']} steps")
    return None


def _as_handed_in(trial: Rounds, check: Check) -> str | None:
    """Before anything runs: the file parses (no need to start a process to find that it does not), and the
    source audit, where it is on, refuses none of its lines."""
    broken = as_handed_in(trial.file, "learner")
    if broken is not None:
        runtime_failure(check, broken, trial.lab, trial.timeout_s)
        return FAILED
    if trial.report.audited and _refused(trial, check):
        return FAILED
    return None


def _refused(trial: Rounds, check: Check) -> bool:
    """The source audit: a file that reaches for the checker's own machinery is refused, line by line."""
    lab, file, report = trial.lab, trial.file, trial.report
    findings = audit.audit_file(file, allow=lab.audit.allow, refuse=lab.audit.refuse)
    if not findings:
        return False
    report.refused = [asdict(f) for f in findings]
    first = findings[0]
    more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
    check.failed(f"the checker refuses to run {file.name}: line {first.line}{more}: {first.message}",
                 "a lab file that leaves the checker's process alone",
                 f"{len(findings)} line{'s' if len(findings) > 1 else ''} refused",
                 "change the lines shown; the instructor guide's 'What the checker guards against' says why "
                 "each is refused",
                 [f"{f.line:>4} | {f.code}   ({f.rule})" for f in findings[:8]])
    return True

"""Check 1 of a gate lab (lab 7), "Your gate's settings": the table reads, and sets only how to gate.

Decided before any gate runs, from the learner's file as data (no code of
theirs runs): a ``[tool.proflab.gate]`` table of known settings
(``gate_config``) that sets how to gate (the limit, the rounds, the steps
profiled), never what (the files and their workload are the checker's), for
the lab the exercise gates, within the lab's ranges: a limit this machine's
noise can resolve, and a check that ends in minutes. The settings then aim
the gates (``GateRuns.aim``), on the kit's own fix, verified.
"""

from __future__ import annotations

from pathlib import Path

from ... import labs
from .. import gate_config
from ..gate_runs import GateRuns
from ..trial import ON_DEMAND
from ..verdicts import FAILED, Check

NAME = "gate_settings"
POINTS = "runs"  # the [grading] key that pays for it
AFTER: tuple[str, ...] = ()  # the checks it waits on
TITLE = "Your gate's settings"
WHAT = "the file holds a [tool.proflab.gate] table that sets how to gate"
WHEN = (ON_DEMAND,)


def decide(trial: GateRuns, check: Check) -> str | None:
    found = _settings(trial.lab, trial.file, trial.shown, check)
    if found is None:
        return FAILED
    trial.aim(found)
    how = trial.how
    check.passed(f"{trial.shown.name} gates lab {trial.target.number}'s fix with max_slowdown {trial.limit:g}, "
                 f"{how.get('rounds', gate_config.KEYS['rounds'].default)} to "
                 f"{how.get('max_rounds', gate_config.KEYS['max_rounds'].default)} rounds",
                 actual=", ".join(f"{k} = {v}" for k, v in sorted(how.items())))
    return None


def _settings(lab: labs.Lab, mine: Path, shown: Path, runs: Check) -> dict | None:
    """The learner's settings, read and held to the lab, or None with ``runs`` failed, and why."""
    try:
        found = gate_config.read_file(mine, required=True)
    except gate_config.GateConfigError as e:
        runs.failed(str(e).replace(str(mine), str(shown)), "a [tool.proflab.gate] table of known settings",
                    "a table the gate cannot use", "compare it with the exercise as handed out "
                    f"(`proflab reset {lab.name}` backs yours up first)")
        return None
    g = lab.gating
    what = sorted(set(found) - set(g.settings))
    if what:
        runs.failed(f"{shown.name} sets {', '.join(what)}: those change what is gated, not how",
                    f"only {', '.join(s for s in g.settings if s not in ('file', 'baseline', 'against', 'trace_dir'))}",
                    ", ".join(what), f"this lab grades how you gate lab {g.lab}'s fix: the checker chooses the files "
                    "and their workload; leave the others out")
        return None
    if "lab" in found and _lab_name(found["lab"]) != _lab_name(g.lab):
        runs.failed(f"{shown.name} gates lab {found['lab']}; this lab gates lab {g.lab}'s fix",
                    f'lab = "{g.lab}"', repr(found["lab"]), "set lab to the lab whose fix you gate")
        return None
    for key, (low, high) in g.limits.items():
        if key in found and not low <= found[key] <= high:
            why = RANGE_WHY.get(key, "a check must end in minutes")
            runs.failed(f"{shown.name} sets {key} = {found[key]:g}, outside {low:g}–{high:g}: {why}",
                        f"{key} from {low:g} to {high:g}", f"{found[key]:g}", HELP.get(key, "see the lab's page"))
            return None
    try:
        gate_config.check_rounds(found, shown.name)
    except gate_config.GateConfigError as e:
        runs.failed(str(e), "max_rounds at least rounds", f"{found.get('max_rounds')} < {found.get('rounds')}",
                    "a gate always measures rounds, and a close call at most max_rounds")
        return None
    return found


# Why a setting out of the lab's range is refused, and what to do.
RANGE_WHY = {
    "max_slowdown": "below, the interval of an unchanged fix must fit inside this machine's run-to-run noise, "
                    "which no affordable number of rounds gives; above, a pull request may double the step "
                    "time and pass",
}
HELP = {
    "max_slowdown": "choose the smallest slowdown worth failing a pull request for, that this machine's noise can "
                    "still resolve: run proflab gate on the fix against itself and look at the interval",
}


def _lab_name(value) -> str:
    try:
        return labs.resolve(str(value)).name
    except (labs.LabNotFound, labs.ManifestError):
        return str(value)

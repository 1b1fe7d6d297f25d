"""A drill's check, "The diagnosis matches the profile": what the learner said the profile shows, held to the
original's profile measured in the same check.

A diagnosis drill (``authoring.drills``) asks the learner, before any fix, to write in the file's ``ANSWERS``
where the profile shows the step's time going (``where``: a part of the step as the Overview names it, or an
operator of the table) and how many milliseconds of each profiled step it takes there (``ms_per_step``). The
answer is read from the file's source (a literal; the file is never imported for it). It is right when it
names what the drill's bottleneck shows as (the drill's ``parts``, or an operator among the original's five
costliest by self time whose name holds one of its ``operator_words``), with milliseconds given; how close
they are to what the original's profile in this check reads there (``SLACK``) is said, not graded: two
profiles of one program, at two moments and with other settings, read a cheap operator's time up to 9x
apart here (aten::fill_, 12.8 ms in proflab run's, 1.4 ms in the check's). Decided after the first round,
from the original's trace.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from ...measuring import breakdown, evidence, operators, stats
from ..rounds import Rounds
from ..trial import FIRST_ROUND
from ..verdicts import FAILED, Check

NAME = "diagnosis"
POINTS = "diagnosis"  # the [grading] key that pays for it
AFTER: tuple[str, ...] = ("same_results",)  # the checks it waits on
TITLE = "The diagnosis matches the profile"
WHAT = "where you said the time goes (ANSWERS) is what the original's profile shows, with its ms per step"
WHEN = (FIRST_ROUND,)

# How near the milliseconds said are to the measured ones, said beside the verdict: the checker's profile
# records shapes (its evidence needs them), which adds to every call, so "near" runs from the measured figure
# less the profiler's own cost (scaled by the original's timed step over its profiled one) over SLACK, up to
# SLACK times the measured figure.
SLACK = 3.0
TOP = 5  # a named operator is among the original's costliest


def answers_of(file: Path) -> dict[str, Any] | str:
    """The file's ``ANSWERS`` (a literal dict at the top level), or why there is none to read."""
    try:
        tree = ast.parse(Path(file).read_bytes())
    except (OSError, SyntaxError, ValueError) as e:
        return f"the file cannot be read ({e})"
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ANSWERS" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return "ANSWERS is not written as a literal dict ({\"where\": \"...\", \"ms_per_step\": 12.5})"
            return value if isinstance(value, dict) else "ANSWERS is not a dict"
    return "the file has no ANSWERS"


def _parts(b: breakdown.Breakdown) -> dict[str, float]:
    return {breakdown.LABELS[p]: b.host_ms[p] for p in breakdown.HOST_PARTS}


def _operators(trace: evidence.Trace) -> list[operators.Row]:
    """The original's operators by self time per step, the profiler's own step ranges left out."""
    return [r for r in operators.table(trace, per_step=True) if not r.name.startswith("ProfilerStep")]


def what_it_shows(trace: evidence.Trace) -> str:
    """The original's profile in a line: its largest part, and its costliest operators, each per step."""
    parts = sorted(_parts(breakdown.of(trace)).items(), key=lambda kv: -kv[1])
    rows = _operators(trace)[:3]
    return (f"largest part: {parts[0][0]} {parts[0][1]:.1f} ms a step; costliest operators: "
            + ", ".join(f"{r.name} {r.self_cpu_us / 1000:.1f} ms" for r in rows))


def places(lab, trace: evidence.Trace) -> list[tuple[str, float, bool]]:
    """Where the drill's bottleneck shows in ``trace``, each with its ms per step and whether it is an Overview
    part (else an operator): the drill's parts, then those of the five costliest operators whose name holds one
    of its words, costliest first."""
    found = [(label, ms, True) for label, ms in _parts(breakdown.of(trace)).items() if label in lab.drill.parts]
    return found + [(row.name, row.self_cpu_us / 1000, False) for row in _operators(trace)[:TOP]
                    if any(_names(w, row.name) for w in lab.drill.operator_words)]


def measured_at(lab, trace: evidence.Trace, where: str) -> tuple[str, float] | None:
    """The place ``where`` names in the original's profile, as the drill counts it, and its ms per step; None
    where it names none of the drill's bottleneck's places."""
    said = where.strip().lower()
    if not said:
        return None
    for name, ms, part in places(lab, trace):
        lower = name.lower()
        if said == lower or lower in said or (not part and said in lower):
            return name, ms
    return None


def _names(word: str, name: str) -> bool:
    """Whether ``word`` is a word of the operator's name: ``add`` in ``aten::add_``, never in ``aten::addmm``;
    ``select`` in ``SelectBackward0`` (a lower-case letter on either side joins it to another word)."""
    lower, at = name.lower(), 0
    while (at := lower.find(word.lower(), at)) >= 0:
        end = at + len(word)
        if not (at and name[at - 1].islower()) and not (end < len(name) and name[end].islower()):
            return True
        at += 1
    return False


def _unprofiled_share(trial: Rounds) -> float:
    """The original's timed step over its profiled one, at most 1: what of a profiled step is the step's own."""
    result = trial.originals[0].result if trial.originals else {}
    timed, profiled = result.get("step_times") or [], result.get("profiled_steps_s") or []
    if not timed or not profiled or stats.median(profiled) <= 0:
        return 1.0
    return min(1.0, stats.median(timed) / stats.median(profiled))


def decide(trial: Rounds, check: Check) -> str | None:
    lab, report = trial.lab, trial.report
    given = answers_of(trial.file)
    how = ("profile the original (proflab run), then write in ANSWERS the part of the step (as the Profile tab's "
           "Overview names it) or the operator (key_averages' table) where its time goes, and its ms per step")
    if isinstance(given, str):
        check.failed(given, "ANSWERS = {\"where\": ..., \"ms_per_step\": ...}", "none", how)
        return FAILED
    where, ms = str(given.get("where") or ""), given.get("ms_per_step")
    try:
        trace = trial.loaded.get("original") or evidence.load(report.traces["original"])
    except (KeyError, evidence.TraceError) as e:
        check.failed(f"the original's trace could not be read: {e}", "a readable trace", "unreadable")
        return FAILED
    # what the profile shows is the learner's to find: a wrong answer is told where to look, never the answer
    shows = "not shown here: the original's profile (proflab run, then proflab tensorboard) shows it"
    place = measured_at(lab, trace, where)
    said = f"you said {where or 'nothing'!r}, {ms if ms is not None else '?'} ms a step"
    expected = ("the bottleneck's place in the original's profile, and its ms per step (compared with what this "
                "check's profile reads, said, not graded)")
    if place is None:
        check.failed(f"{said}: that is not where this drill's time goes", expected, shows, how)
        return FAILED
    name, measured = place
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms <= 0:
        check.failed(f"{said}: the place is right; give its milliseconds per step too", expected,
                     "no milliseconds", how)
        return FAILED
    low, high = measured * _unprofiled_share(trial) / SLACK, measured * SLACK
    near = ("about what this check's profile reads" if low <= ms <= high else
            "far from this check's profile: profiles of one program differ with the machine's load and the "
            "profiler's settings (this one records shapes), most for an operator of many cheap calls")
    check.passed(f"{said}; the original's profile: {name}, {measured:.1f} ms a step", expected,
                 f"{name}: {measured:.1f} ms a step")
    check.details = [f"your {ms:g} ms: {near}"]
    return None

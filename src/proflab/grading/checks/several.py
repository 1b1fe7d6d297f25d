"""What "The bottleneck is gone" says of a lab with several bottlenecks at once (``[[evidence]]``).

Not a named check: the evidence check's wording when a lab grades more than one figure. Each figure
was measured in both traces; the fix passes when every one meets its bound, and fails naming each one
still left: its label, its figure against the original's, and where to look. The ones already gone are
said too, so that a learner who fixed one bottleneck sees it counted and what remains.
"""

from __future__ import annotations

from ... import labs
from ...labs import format_value
from ...measuring.evidence import Measure
from ..verdicts import Check, where_to_look

Figure = tuple[labs.Evidence, Measure, Measure]  # the evidence, the original's figure, the learner's


def more_to_gain(ev: labs.Evidence, original: Measure, learner: Measure) -> list[str]:
    """A passing figure still above the evidence's ``more_to_gain_above`` share of the original's: a line."""
    if ev.more_to_gain_above is None or learner.value <= ev.more_to_gain_above * original.value:
        return []
    return [f"more to gain: {ev.label} is still {format_value(learner.value, ev.unit)} ({learner.summary}), "
            f"over {ev.more_to_gain_above:.0%} of the original's {format_value(original.value, ev.unit)}; "
            f"look at {ev.where}"]


def _change(ev: labs.Evidence, original: Measure, learner: Measure) -> str:
    return f"{ev.label}: {format_value(original.value, ev.unit)} → {format_value(learner.value, ev.unit)}"


def judged(lab: labs.Lab, proof: Check, figures: list[Figure], why: list[str]) -> bool:
    """Whether every figure meets its bound; ``proof`` passed or failed, each figure said. ``why``: the
    calls of the file that only look like a fix (``evidence.not_a_fix``)."""
    left = [f for f in figures if not f[0].holds(f[0].counted(f[2].value, f[2].details),
                                                 f[0].counted(f[1].value, f[1].details))]
    gone = [f for f in figures if f not in left]
    expected = "; ".join(f"{ev.label}: {ev.expectation(o.value, m.details)}" for ev, o, m in (left or figures))
    if not left:
        proof.passed("; ".join(_change(*f) for f in figures), expected,
                     "; ".join(f"{ev.label}: {format_value(m.value, ev.unit)}: {m.summary}" for ev, _, m in figures),
                     "; ".join(f"{ev.label}: {ev.where}" for ev, _, _ in figures))
        proof.details += [line for f in figures for line in more_to_gain(*f)]
        return True
    still = "; ".join(f"{ev.label} is still {format_value(m.value, ev.unit)} "
                      f"(the original: {format_value(o.value, ev.unit)})" for ev, o, m in left)
    done = f" (gone: {'; '.join(_change(*f) for f in gone)})" if gone else ""
    actual = "; ".join(f"{ev.label}: {format_value(m.value, ev.unit)}: {m.summary} (original: {o.summary})"
                       for ev, o, m in left)
    look = "look at " + "; ".join(f"{ev.label}: {ev.where}" for ev, _, _ in left)
    details = why + [f"gone: {_change(*f)}" for f in gone] + [
        f"still left: {ev.label}: {m.summary}" for ev, _, m in left]  # where to look: the help, once
    proof.failed(f"{len(left)} of the {len(figures)} bottlenecks still left: {still}{done}", expected, actual,
                 why[0] if why else f"{look}; {where_to_look(lab)}", details=details)
    return False

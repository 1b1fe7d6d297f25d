"""What a named check decides from: a trial, the moments it gives its checks, and what a named check is.

A lab's check is a chain of named checks (``checks.registry``), each in a
module of its own, decided over a trial: the runs the checker makes of the
learner's file. A lab the kit times has its rounds (``rounds.Rounds``: the
original and the learner's version, run in alternating rounds); lab 7, a
gate's settings, has its two gates (``gate_runs.GateRuns``).

A trial gives its checks moments to decide at, in order. At each, every
check of the chain that decides then does so, in the chain's order; the first
that gives a verdict ends the check, and the checks after it stay skipped.
Which moments a check decides at is its ``WHEN``:

    BEFORE        before anything runs: the file as it was handed in
    FIRST_ROUND   after the first round: its runs, profiled, and their traces
    LATER_ROUND   after each later round: its runs, timed only
    OVER          when the rounds are over: every round's figures
    ON_DEMAND     a trial whose checks ask it for what they need, when they
                  need it (lab 7's gates): one moment, every check at it
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

from .. import labs
from .staging import Stage
from .verdicts import Check, Progress

BEFORE, FIRST_ROUND, LATER_ROUND, OVER = "before any run", "the first round", "a later round", "the rounds are over"
ON_DEMAND = "on demand"


class NamedCheck(Protocol):
    """One named check: a module of ``checks`` that holds these, registered by its name in ``checks.registry``."""

    NAME: str  # its own name, in every report, record and JUnit file: runs, same_results, leaner, gate_cause...
    POINTS: str  # the [grading] key that pays for it: runs, same_results, diagnosis, evidence or faster
    AFTER: tuple[str, ...]  # the checks it waits on: each comes before it in every chain it is in
    TITLE: str  # the row's title: "It runs"
    WHAT: str  # what it checks, shown with every verdict
    WHEN: tuple[str, ...]  # the trial's moments it decides at

    def decide(self, trial: Any, check: Check) -> str | None:
        """Decide ``check`` (the report's row ``NAME``) from ``trial``, at one of its moments: None while
        the chain goes on (passed, or not decided yet), else the verdict that ends the whole check."""


class LastCheck(NamedCheck, Protocol):
    """The last check of a chain over rounds: it also says when the rounds so far settle it (no more are run)."""

    def settled(self, trial: Any) -> bool:
        """Whether ``trial``'s rounds so far decide this check either way."""


def rows(named: Sequence[NamedCheck]) -> list[Check]:
    """A report's rows for a chain of named checks, each skipped until it is decided."""
    return [Check(n.NAME, n.TITLE, n.WHAT, points=n.POINTS) for n in named]


@dataclass(frozen=True)
class Asked:
    """What a check was asked to grade, and how (``checks.check``'s arguments)."""

    lab: labs.Lab
    file: Path  # as the learner named it
    label: str = "yours"
    device: str = "auto"
    rounds: int | None = None  # the lab's, if not given
    timeout_s: float | None = None  # the lab's, if not given
    on_progress: Progress = lambda message: None
    audited: bool = True  # False only in the kit's own tests: no source audit
    workdir: Path | None = None  # where the learner's runs run (default: the file's folder)
    staged: Stage | None = None  # the check, set up ahead of its turn (``staging.ahead``)

"""The named checks, registered by name, and the chain each lab is checked by.

A named check is a module of this package (``trial.NamedCheck``): its NAME
(its own, in every report, record and JUnit file), the [grading] key whose
POINTS it earns (runs, same_results, diagnosis, evidence or faster), the
checks it waits on (AFTER: a chain puts them first, and a skipped check says
which one it waited on), its TITLE, WHAT it checks, WHEN it decides (the
trial's moments), and ``decide(trial, check)``, which decides its row from the
trial and says whether the chain goes on. A lab's chain is four of them, in
the order of the report's rows, over the trial its checks decide from:

    a lab the kit times   runs, same_results, evidence, faster   (Rounds)
      a diagnosis drill     runs, same_results, diagnosis, evidence, faster
      its learner profiles  ... own_profile, overhead              (lab 0)
      graded on memory      ... evidence, leaner                   (lab 5)
    a gate's settings     gate_settings, gate_unchanged, gate_regression, gate_cause
                                                                    (GateRuns, lab 7)

A new check is one new module here, written like these, and a line in
``REGISTRY``; ``chain_of`` puts it in the chains of the labs it is for.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from ... import labs
from ..gate_runs import GateRuns
from ..rounds import Rounds
from . import (diagnosis, evidence, faster, gate_cause, gate_regression, gate_settings, gate_unchanged, leaner,
               overhead, own_profile, runs, same_results)

REGISTRY: dict[str, ModuleType] = {
    "runs": runs,
    "same_results": same_results,
    "evidence": evidence,
    "diagnosis": diagnosis,
    "own_profile": own_profile,
    "faster": faster,
    "overhead": overhead,
    "leaner": leaner,
    "gate_settings": gate_settings,
    "gate_unchanged": gate_unchanged,
    "gate_regression": gate_regression,
    "gate_cause": gate_cause,
}


@dataclass(frozen=True)
class Chain:
    """A lab's named checks, in order, and the trial they decide from (made from ``trial.Asked`` and them)."""

    trial: type
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        for i, name in enumerate(self.names):
            missing = [need for need in REGISTRY[name].AFTER if need not in self.names[:i]]
            if missing:  # the kit's own mistake: a chain that runs a check before what it waits on
                raise ValueError(f"check {name!r} waits on {', '.join(missing)}, which must come before it")

    @property
    def checks(self) -> tuple[ModuleType, ...]:
        return tuple(REGISTRY[name] for name in self.names)


def chain_of(lab: labs.Lab) -> Chain:
    """The checks ``lab`` is graded by: by what its manifest grades (a profile of the learner's own, a
    memory peak or an overhead rather than a speed-up, a gate's settings rather than a pipeline)."""
    if lab.kind == "gate":  # lab 7: the exercise is a gate's settings, run on a known fix
        return Chain(GateRuns, ("gate_settings", "gate_unchanged", "gate_regression", "gate_cause"))
    proof = "own_profile" if lab.kind == "own_profile" else "evidence"
    if lab.drill is not None:  # a diagnosis drill: what the learner said the profile shows, before the fix
        return Chain(Rounds, ("runs", "same_results", "diagnosis", proof, lab.margin))
    return Chain(Rounds, ("runs", "same_results", proof, lab.margin))


# The four checks of a lab the kit times, with their plain titles: (name, title, what it checks).
CHECKS = tuple((c.NAME, c.TITLE, c.WHAT) for c in (runs, same_results, evidence, faster))

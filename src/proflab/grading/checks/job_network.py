"""Every byte a torchrun job's ranks exchange counts as traffic, whichever way it went.

The trace counts the bytes the collectives carry (``allreduce_traffic``), from
the calls the profiler recorded. The ranks share one more thing: the
sandbox's network, where the collectives' connections run, and where a rank
could open a channel of its own (a TCP socket to the other rank, the
collectives' key-value store) to send the same gradients without a
collective. Every other channel is closed to them (``running.side_channels``,
``running.landlock.confine``); this one is counted.

The kernel counts every byte sent over the sandbox's network
(``running.readings.network_bytes``), read by the checker at the start and the
end of each rank's timed steps. The original's run says how many bytes its
collectives cost on that network, per byte the trace shows them carry
(gloo's ring, its headers). A version's network carries what its own
collectives explain at that rate, and anything beyond it, past a slack for
the store's own messages, was sent outside the collectives: it is added to
the version's traffic, in the trace's unit, and said.

Where the run had no network of its own (no sandbox: the machine's is shared
with every other program), nothing is read, and the report says so.
"""

from __future__ import annotations

from ...measuring.trace import Measure
from ...running import execute

# The metrics whose figure the kernel's count of the job's network backs (what they count is traffic).
METRICS = frozenset({"allreduce_traffic"})
KEY = "net_bytes_per_step"  # the run's result: bytes its network carried per timed step (marks._from_outside)
# Bytes a step may carry beyond what its collectives explain before the rest counts as traffic: the store's
# heartbeats and barriers, and the rate's noise (a tenth of the original's bytes a step, and at least 256 kB).
SLACK = 0.10
SLACK_BYTES = 256_000


def outside_the_collectives(original: execute.Outcome, learner: execute.Outcome, original_mb: float,
                            learner_mb: float) -> tuple[float, str] | None:
    """The megabytes per step ``learner``'s network carried beyond what its collectives explain (0 when
    none), and the line that says it; None where it cannot be read (no count of either run's network,
    or an original whose collectives carry nothing to learn the rate from)."""
    theirs, mine = original.result.get(KEY), learner.result.get(KEY)
    if theirs is None or mine is None or original_mb <= 0 or float(theirs) <= 0:
        return None
    rate = float(theirs) / (original_mb * 1e6)  # network bytes per byte the original's collectives carry
    explained = rate * learner_mb * 1e6
    beyond = float(mine) - explained
    slack = max(SLACK * float(theirs), SLACK_BYTES)
    said = (f"the job's network, read by the kernel: {float(mine) / 1e6:.1f} MB a timed step "
            f"(the original's: {float(theirs) / 1e6:.1f} MB)")
    if beyond <= slack:
        return 0.0, said
    return beyond / rate / 1e6, (f"{said}, of which {beyond / 1e6:.1f} MB went outside the collectives the "
                                 "trace records (counted as traffic)")


def counted(metric: str, original_run: execute.Outcome | None, learner_run: execute.Outcome,
            original: Measure, learner: Measure) -> Measure:
    """``learner``'s measure of ``metric``, with what its job's network carried outside the collectives
    added (``outside_the_collectives``) where ``metric`` is traffic and both runs' networks were counted."""
    if metric not in METRICS or original_run is None:
        return learner
    found = outside_the_collectives(original_run, learner_run, original.value, learner.value)
    if found is None:
        return Measure(value=learner.value, unit=learner.unit, details={**learner.details, "network": "not counted"},
                       summary=learner.summary + "; the job's network was not counted (no sandbox of its own)")
    extra, said = found
    details = {**learner.details, "network_mb_per_step": float(learner_run.result[KEY]) / 1e6,
               "outside_collectives_mb_per_step": extra}
    return Measure(value=round(learner.value + extra, 2), unit=learner.unit, details=details,
                   summary=f"{learner.summary}; {said}")

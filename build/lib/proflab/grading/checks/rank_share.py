"""A rank of a data-parallel job does its own share of the work, not the job's.

The work floor (``[evidence] work_ops``) says a profiled step did at least
the original's work. In a torchrun job the other bound matters too: a rank
that loads every rank's samples and runs every rank's forward and backward
passes needs no collective at all (its gradients are the job's average,
computed alone), and its traffic reads 0 MB; that is the work of the whole
job on every rank, in place of the lesson. So each rank's work, by size,
must stay within ``MAX_RANK_WORK`` times the same rank's in the original.

The work is counted as the floor counts it, from the shapes the profiler
recorded, but over every matrix product and convolution a step runs
(``PRODUCTS``), not only the lab's ``work_ops``: the other rank's half
written with ``einsum`` (batched products), a vector product or a fused
``addmm`` is still work. Where no product is recorded (the gradients worked
out in numpy), nothing is counted; the source audit and the speed-up are
left to judge it.
"""

from __future__ import annotations

from ...measuring import evidence
from ...measuring.trace import Event, Trace, outermost

# A rank may do this much more than the original's rank, by FLOPs per profiled step: a sound fix does the
# same products (1.0x); a rank that also does one other rank's share does 2x.
MAX_RANK_WORK = 1.5  # the lab page says so (docs/labs/06-distributed.md)

# The products whose FLOPs the work floor counts (measuring.work.flops), and the others a step may run
# instead: each counted once, however deep it runs (the outermost of them on its thread).
PRODUCTS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::convolution",
                      "aten::convolution_backward", "aten::_addmm_activation", "aten::addbmm", "aten::mv",
                      "aten::addmv", "aten::dot", "aten::vdot", "aten::addr"})


def product_flops(event: Event) -> float:
    """FLOPs of one product call, from its recorded shapes (``measuring.work.flops``); 0 when they are missing."""
    return evidence.flops(event)


def rank_flops(trace: Trace) -> float:
    """FLOPs per profiled step of every product a rank's steps ran (``PRODUCTS``), on any thread."""
    n = len(trace.steps)
    calls = outermost(trace.within_steps(lambda e: e.cat == "cpu_op" and e.name in PRODUCTS))
    return sum(product_flops(e) for e in calls) / n if n else 0.0


def over_share(original: list[Trace], learner: list[Trace]) -> list[tuple[int, float, float]]:
    """The ranks whose steps did more than ``MAX_RANK_WORK`` times the original's same rank's work:
    (rank, its FLOPs per step, the original's)."""
    over = []
    for rank, (theirs, mine) in enumerate(zip(original, learner)):
        base, done = rank_flops(theirs), rank_flops(mine)
        if base > 0 and done > MAX_RANK_WORK * base:
            over.append((rank, done, base))
    return over

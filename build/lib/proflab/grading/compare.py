"""Where results are compared: the learner's yielded values against the original's.

A pipeline yields a dict of values once per step. The lab's manifest says,
for each key, what it means and how close the learner's value must be: equal
(``exact``) or within ``|a - b| <= atol + rtol * |b|``. The first difference
found is described in words a learner can act on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from ..labs import Distributed, ResultRule


@dataclass(frozen=True)
class Difference:
    step: int
    key: str
    message: str
    hint: str = ""


def _fmt(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def _first_mismatch(a: Sequence, b: Sequence, rule: ResultRule) -> tuple[int, float] | None:
    worst = None
    for i, (x, y) in enumerate(zip(a, b)):
        if rule.exact:
            if x != y:
                return i, math.inf
            continue
        if isinstance(x, float) and math.isnan(x) or isinstance(y, float) and math.isnan(y):
            if not (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)):
                return i, math.inf
            continue
        excess = abs(x - y) - (rule.atol + rule.rtol * abs(y))
        if excess > 0 and (worst is None or excess > worst[1]):
            worst = (i, excess)
    return worst


def compare(original: list[dict], learner: list[dict], rules: Sequence[ResultRule]) -> Difference | None:
    """The first step and value where ``learner`` differs from ``original``, if any.

    ``learner`` comes from a result file the learner's process could write: values not in the runner's
    form (a step that is no table of values, a value without shape or data) are a difference too.
    """
    try:
        return _compare(original, learner, rules)
    except (TypeError, KeyError, ValueError, IndexError, AttributeError):
        return Difference(0, "", "the values its steps yielded are not in the form the kit's runner records them")


def _compare(original: list[dict], learner: list[dict], rules: Sequence[ResultRule]) -> Difference | None:
    if len(learner) != len(original):
        return Difference(min(len(learner), len(original)), "", f"{len(learner)} steps were recorded, "
                          f"the original recorded {len(original)}")
    for step, (want, got) in enumerate(zip(original, learner)):
        for rule in rules:
            if rule.key not in want:
                continue  # the original does not report it: nothing to hold the learner to
            if rule.key not in got:
                return Difference(step, rule.key, f"step {step} yields no '{rule.key}' ({rule.what}); "
                                  f"yield {{'{rule.key}': ...}} as the original does", rule.hint)
            w, g = want[rule.key], got[rule.key]
            if g["shape"] != w["shape"]:
                return Difference(step, rule.key, f"step {step}: {rule.what} ('{rule.key}') has shape "
                                  f"{tuple(g['shape'])}, the original's {tuple(w['shape'])}", rule.hint)
            hit = _first_mismatch(g["data"], w["data"], rule)
            if hit is not None:
                i, _ = hit
                where = f" at element {i}" if len(w["data"]) > 1 else ""
                bound = "exactly" if rule.exact else f"within rtol={rule.rtol:g}, atol={rule.atol:g}"
                return Difference(step, rule.key, f"step {step}: {rule.what} ('{rule.key}') differs{where}: "
                                  f"{_fmt(g['data'][i])}, the original {_fmt(w['data'][i])} "
                                  f"(must match {bound})", rule.hint)
    return None


def compare_ranks(original: list[list[dict]], learner: Any, rules: Sequence[ResultRule],
                  distributed: Distributed) -> Difference | None:
    """A torchrun job's values against the original's, rank by rank, and between its own ranks.

    First what the ranks must hold alike (``same_on_every_rank``: the weights, which the all-reduce
    keeps in sync): ranks that differ trained apart. Then what each rank computes from its own share
    of the samples (``own_on_each_rank``): every rank with the same values, where the original's
    differ, trained on the same samples. Then each rank against the same rank of the original.
    """
    try:
        if not isinstance(learner, list) or not all(isinstance(values, list) for values in learner):
            raise TypeError("not a list of ranks' values")
        if len(learner) != len(original):
            return Difference(0, "", f"{len(learner)} ranks reported their values, the original's job "
                              f"{len(original)}")
        by_key = {rule.key: rule for rule in rules}
        for key in distributed.same_on_every_rank:
            rule = by_key[key]
            for rank in range(1, len(learner)):
                apart = _compare(learner[0], learner[rank], [rule])
                if apart is not None:
                    return Difference(apart.step, key, f"step {apart.step}: rank {rank}'s '{key}' ({rule.what}) "
                                      "differs from rank 0's: the ranks trained apart. Average the gradients of "
                                      "every rank before each optimizer step (DDP's all-reduce)", rule.hint)
        for key in distributed.own_on_each_rank:
            rule = by_key[key]
            alike = all(_compare(learner[0], learner[r], [rule]) is None for r in range(1, len(learner)))
            if alike and any(_compare(original[0], original[r], [rule]) is not None for r in range(1, len(original))):
                return Difference(0, key, f"every rank yielded the same '{key}' ({rule.what}) at every step: "
                                  "every rank trained on the same samples. Each rank must train on its own share "
                                  "of them (a DistributedSampler)", rule.hint)
        for rank, (want, got) in enumerate(zip(original, learner)):
            diff = _compare(want, got, rules)
            if diff is not None:
                return Difference(diff.step, diff.key, f"rank {rank}, {diff.message}", diff.hint)
    except (TypeError, KeyError, ValueError, IndexError, AttributeError):
        return Difference(0, "", "the values its ranks yielded are not in the form the kit's runner records them")
    return None

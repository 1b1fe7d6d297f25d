"""Where timings become a verdict-ready figure: robust statistics, no numpy.

Runs alternate between the original and the learner's version, so each round
holds one run of each, taken back to back under the same machine load. The
speed-up is the geometric mean of the per-round ratios, with a 95% confidence
interval from Student's t on their logarithms: the verdict is only given when
the whole interval lies on one side of the lab's threshold (``decide``). The
noise is how much runs of the same version disagree with each other (median
absolute deviation relative to the median), which is what a shared, busy
machine inflates.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Sequence


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile, ``q`` in [0, 1] (numpy's default method)."""
    if not values:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError("q must be in [0, 1]")
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation from the median."""
    m = median(values)
    return median([abs(v - m) for v in values])


def relative_noise(values: Sequence[float]) -> float:
    """MAD over median: 0.02 means runs typically sit within ±2% of each other."""
    m = median(values)
    return mad(values) / m if m else math.inf


# Two-sided 95% quantiles of Student's t, by degrees of freedom (30 and up: 2.0).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045)


def t95(df: int) -> float:
    if df < 1:
        return math.inf
    return _T95[df - 1] if df <= len(_T95) else 2.0


PASS, FAIL, UNCLEAR = "pass", "fail", "unclear"


@dataclass(frozen=True)
class Comparison:
    """Original vs learner, from paired rounds of runs."""

    speedup: float  # geometric mean of per-round ratios original / learner
    ci_low: float  # 95% confidence interval of that mean (inf-wide with one round)
    ci_high: float
    ratio_low: float  # smallest per-round ratio
    ratio_high: float  # largest per-round ratio
    original_s: float  # median per-step time of the original
    learner_s: float  # median per-step time of the learner's version
    noise: float  # the larger relative noise of the two versions
    rounds: int

    def as_dict(self) -> dict[str, float | None]:
        """JSON-ready: an unbounded interval end (one round only) is None."""
        return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in asdict(self).items()}

    def decide(self, threshold: float) -> str:
        """PASS or FAIL when the whole confidence interval is on one side of ``threshold``, else UNCLEAR."""
        if self.ci_low >= threshold:
            return PASS
        if self.ci_high < threshold:
            return FAIL
        return UNCLEAR


# From how many paired rounds a report quotes the 95% interval: with two, Student's t has one degree of freedom
# (12.7 times the standard error), and the interval says little more than the two rounds themselves do.
INTERVAL_ROUNDS = 3


def uncertainty(rounds: int, ci: tuple[float, float], ratios: tuple[float, float],
                show: Callable[[float, float], str]) -> str:
    """How a report quotes a paired comparison's uncertainty, with ``show(low, high)`` writing a pair of figures:
    the 95% interval (``ci``) from ``INTERVAL_ROUNDS`` rounds on; from two, the two rounds' own figures
    (``ratios``), a range; from one, nothing."""
    if rounds >= INTERVAL_ROUNDS:
        return f"95% interval {show(*ci)}"
    if rounds == 2:
        return f"rounds {show(*ratios)}: too few for an interval"
    return "one round: no interval"


def compare(original: Sequence[float], learner: Sequence[float]) -> Comparison:
    """Per-step times of paired runs (``original[i]`` and ``learner[i]`` ran in round i)."""
    if len(original) != len(learner) or not original:
        raise ValueError("need the same, non-zero number of runs of each version")
    if min(original) <= 0 or min(learner) <= 0:
        raise ValueError("step times must be positive")
    ratios = [o / m for o, m in zip(original, learner)]
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / len(logs)
    if len(logs) > 1:
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
        half = t95(len(logs) - 1) * sd / math.sqrt(len(logs))
    else:
        half = math.inf
    return Comparison(
        speedup=math.exp(mean),
        ci_low=math.exp(mean - half) if half != math.inf else 0.0,
        ci_high=math.exp(mean + half) if half != math.inf else math.inf,
        ratio_low=min(ratios),
        ratio_high=max(ratios),
        original_s=median(original),
        learner_s=median(learner),
        noise=max(relative_noise(original), relative_noise(learner)),
        rounds=len(ratios),
    )


def ratio_interval(before: Sequence[float], after: Sequence[float], level: float = 0.95,
                   draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A bootstrap interval of median(before) / median(after), from two runs' step times (unpaired):
    each run's steps resampled ``draws`` times (a fixed seed: the same figures give the same interval)."""
    import random

    if not before or not after:
        raise ValueError("a ratio of no values")
    rng = random.Random(seed)
    ratios = sorted(median(rng.choices(before, k=len(before))) / max(median(rng.choices(after, k=len(after))), 1e-12)
                    for _ in range(draws))
    tail = (1.0 - level) / 2
    return quantile(ratios, tail), quantile(ratios, 1.0 - tail)

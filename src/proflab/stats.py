"""Where timings become a verdict-ready figure: robust statistics, no numpy.

Runs alternate between the original and the learner's version, so each round
holds one run of each, taken back to back under the same machine load. The
speed-up is the median of the per-round ratios; the noise is how much runs of
the same version disagree with each other (median absolute deviation relative
to the median), which is what a shared, busy machine inflates.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence


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


@dataclass(frozen=True)
class Comparison:
    """Original vs learner, from paired rounds of runs."""

    speedup: float  # median of per-round ratios original / learner
    ratio_low: float  # smallest per-round ratio
    ratio_high: float  # largest per-round ratio
    original_s: float  # median per-step time of the original
    learner_s: float  # median per-step time of the learner's version
    noise: float  # the larger relative noise of the two versions
    rounds: int

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def compare(original: Sequence[float], learner: Sequence[float]) -> Comparison:
    """Per-step times of paired runs (``original[i]`` and ``learner[i]`` ran in round i)."""
    if len(original) != len(learner) or not original:
        raise ValueError("need the same, non-zero number of runs of each version")
    if min(original) <= 0 or min(learner) <= 0:
        raise ValueError("step times must be positive")
    ratios = [o / m for o, m in zip(original, learner)]
    return Comparison(
        speedup=median(ratios),
        ratio_low=min(ratios),
        ratio_high=max(ratios),
        original_s=median(original),
        learner_s=median(learner),
        noise=max(relative_noise(original), relative_noise(learner)),
        rounds=len(ratios),
    )

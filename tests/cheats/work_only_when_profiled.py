"""Gaming attempt: yield cached results while timed, and do the real work only in the steps after them."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _lab import WORKLOAD, keep, load_solution, precompute  # noqa: E402


def pipeline(cfg):
    solution = load_solution()
    fast = WORKLOAD.warmup_steps + WORKLOAD.timed_steps
    cache = precompute(solution.pipeline, cfg, fast)  # in the first warm-up step
    yield from cache
    real = solution.pipeline(cfg)
    for _ in range(fast):  # catch up, untimed: the profiler has not started yet
        next(real)
    while True:
        yield keep(next(real))

"""Gaming attempt: do all the work in the first (untimed) warm-up step, then yield from a cache."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _lab import WORKLOAD, load_solution, precompute  # noqa: E402


def pipeline(cfg):
    yield from precompute(load_solution().pipeline, cfg, WORKLOAD.total_steps)

"""Gaming attempt: compute every step's results at import time, then yield them from a cache."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _lab import WORKLOAD, cfg_guess, load_solution, precompute  # noqa: E402

CACHE = precompute(load_solution().pipeline, cfg_guess(), WORKLOAD.total_steps)


def pipeline(cfg):
    yield from CACHE

"""A version of the calibration lab whose speed-up follows a schedule, run by run.

PROFLAB_CAL_SPEEDUPS lists the speed-up of each successive run ("1.8,1.25,1.5");
the list repeats. The count of runs so far is kept in the file PROFLAB_CAL_COUNTER.
"""

import os
import time
from pathlib import Path

import torch

counter = Path(os.environ["PROFLAB_CAL_COUNTER"])
run = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(run + 1))
speedups = [float(s) for s in os.environ["PROFLAB_CAL_SPEEDUPS"].split(",")]
SPEEDUP = speedups[run % len(speedups)]


def pipeline(cfg):
    step = 0
    while True:
        time.sleep(cfg.step_ms / 1000 / SPEEDUP)
        yield {"step": torch.ones(4).sum() * step}
        step += 1

"""Calibration lab (tests only): a step that takes a known time.

Each step sleeps ``cfg.step_ms`` and does one tiny tensor operation, so the
trace has the same operators in every version. Versions built from it make a
known speed-up, which lets the tests drive the checker's statistics exactly.
"""

import time

import torch


def pipeline(cfg):
    step = 0
    while True:
        time.sleep(cfg.step_ms / 1000)
        yield {"step": torch.ones(4).sum() * step}
        step += 1

"""Gaming attempt: the original's slow code, with every clock in the process slowed to a third."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _lab import LAB  # noqa: E402
import importlib.util  # noqa: E402

_real = time.perf_counter
_zero = _real()


def _slow():
    return _zero + (_real() - _zero) / 3


time.perf_counter = _slow
time.monotonic = _slow
for module in list(sys.modules.values()):  # the checker's own reference to the clock, too
    if getattr(module, "_clock", None) is _real:
        module._clock = _slow

_spec = importlib.util.spec_from_file_location("cheat_original", LAB.original)
_original = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_original)
pipeline = _original.pipeline

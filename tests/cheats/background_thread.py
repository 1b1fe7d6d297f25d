"""Gaming attempt: a thread computes the steps ahead, on the other core, while the timed steps run."""

import os
import queue
import sys
import threading

sys.path.insert(0, os.path.dirname(__file__))
from _lab import keep, load_solution  # noqa: E402


def pipeline(cfg):
    ready = queue.Queue()
    solution = load_solution()

    def ahead():
        for out in solution.pipeline(cfg):
            ready.put(keep(out))

    threading.Thread(target=ahead, name="ahead", daemon=True).start()
    while True:
        yield ready.get()

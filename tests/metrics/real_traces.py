"""Real traces for the metrics' unit tests: a few steps of a small program under ``torch.profiler``.

Each metric's test makes the trace it needs here, so what it asserts is what
the profiler of the installed torch really records, not a hand-written guess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from proflab.measuring.trace import Trace, load


def profiled(tmp_path: Path, step: Callable[[], object], steps: int = 3, **options) -> Trace:
    """The trace of ``steps`` profiled calls of ``step()``, one ``ProfilerStep#`` each, after one to warm the
    profiler up (as the kit's own schedule does); ``options`` go to ``torch.profiler.profile``
    (``record_shapes``, ``profile_memory``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    path = tmp_path / "trace.pt.trace.json"
    with torch.inference_mode(options.pop("inference", True)), \
            profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                    on_trace_ready=lambda p: p.export_chrome_trace(str(path)), **options) as prof:
        for _ in range(steps + 1):
            step()
            prof.step()
    trace = load(path)
    assert len(trace.steps) == steps
    return trace

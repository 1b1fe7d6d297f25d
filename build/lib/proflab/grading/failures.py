"""What a failed run says: each way a run can fail, in a check's words (rationale, expected, measured, help).

One account of a failed run for every place that runs a learner's file: the
first check of a lab ("It runs"), ``proflab gate``'s first check (which puts
it in a gate's words), and ``proflab run``.
"""

from __future__ import annotations

from pathlib import Path

from .. import labs
from ..running import execute
from .verdicts import Check


def runtime_failure(check: Check, outcome: execute.Outcome, lab: labs.Lab, timeout: float) -> None:
    """``check`` failed by ``outcome``, a run that did not finish: why, by the kind of failure the run reported."""
    r = outcome.result
    name = Path(r.get("file") or outcome.file).name
    place = f"{name}, line {r['line']}" if r.get("line") else name
    kind = r.get("kind", outcome.status)
    details = []
    if r.get("code"):
        details.append(f"{r['line']:>4} | {r['code']}")
    if kind == "syntax":
        check.failed(f"{place}: the file does not parse", "a file Python can import",
                     r.get("message", ""), "fix the line shown (and the one just before it)", details)
    elif kind == "import":
        check.failed(f"{place}: importing the file raised an error", "the file imports cleanly",
                     r.get("message", ""), "look at the top-level code of your file", details)
    elif kind == "missing":
        check.failed(f"{name} defines no pipeline(cfg)", "a function pipeline(cfg) that yields once per step",
                     "no such function", "keep the function name and signature of the exercise")
    elif kind in ("exception", "bad_yield", "not_generator"):
        step = (f" on rank {r['rank']}" if "rank" in r else "") + (f" at step {r['step']}" if "step" in r else "")
        check.failed(f"{place}: your pipeline raised an error{step}", "every step runs",
                     r.get("message", ""), "look at the line shown; --verbose prints the full traceback", details)
    elif kind == "timeout":
        ranks = f": {r['ranks_at']}" if r.get("ranks_at") else ""  # a torchrun job: where each rank stopped
        check.failed(f"{name} did not finish within the time limit ({timeout:g} s){ranks}", f"under {timeout:g} s",
                     "still running, stopped", "look for an endless loop or a wait that never returns; "
                     "`proflab run` shows how far it gets")
    elif kind == "background":
        check.failed(f"{name}: {r.get('message', '')}", "each step does its own work, in the step",
                     "work beside the steps", "do the work of a step inside pipeline(cfg)'s loop, before it "
                     "yields; this lab allows no threads or processes that work on while the steps are timed")
    elif kind == "marks":
        check.failed(f"{name}: {r.get('message', '')}", "every step marked, in order, as the kit's runner marks it",
                     "marks missing or out of order", "leave the kit's runner, its pipe and its file descriptors "
                     "alone; if you did not touch them, run `proflab run` to see whether the run ends early")
    elif kind == "tampered":
        check.failed(f"{name}: {r.get('message', '')}", "the original and the lab's data left as they are",
                     "changed", "a lab file reads the lab's data through the lab's own classes, and writes nothing")
    elif kind == "disk":
        check.failed(f"{name}: {r.get('message', '')}", "a run that leaves the disk with room", "a full disk",
                     "look for files your program writes (a cache, a log, a copy of the data): free the space, "
                     "then check again")
    elif kind == "left_running":
        check.failed(f"{name}: {r.get('message', '')}", "every process it starts stops with it", "stuck processes",
                     "look for processes that wait on a device or a file that never answers")
    elif kind == "trace":
        check.failed(f"{name}: {r.get('message', '')}", "the trace as the profiler wrote it", "a different file",
                     "leave the trace files alone: the checker reads them as the profiler wrote them")
    elif kind == "clock":
        check.failed(f"{name}: {r.get('message', '')}", "the same time by both clocks", "they disagree",
                     "leave time, the profiler and the kit's own modules as they are")
    elif kind == "memory":
        check.failed(f"{name} {r.get('message', '')}", f"under {lab.workload.memory_mb:.0f} MB",
                     "too much memory", "look for data kept from every step (tensors that still require "
                     "grad, a growing list), or a bigger batch than the original's")
    elif kind == "device":
        check.failed(r.get("message", ""), "an available device", outcome.result.get("message", ""),
                     "use --device cpu")
    else:
        check.failed(f"{name}: {r.get('message', 'the run failed')}", "a finished run", kind,
                     "run the file with `proflab run` to see its output")

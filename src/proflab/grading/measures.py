"""What the checker reads from a run, the same way for a lab's rounds and for a gate's.

A step's time as the checker counts it (``counted_step_s``: from its own
stamps, in wall or CPU time, with the first step's set-up left out up to an
allowance), whether a run's values are the original's (``differs``), whether
a run left what the original runs from as it was (``changed_during``), a
round's fresh inputs (``round_seed``), and a lab graded on memory's peaks
(``record_peaks``). The lab's rounds (``rounds``) and ``proflab gate``
(``gate``) both measure with these, so a gate's figures are a check's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .. import labs, paths
from ..measuring import stats
from ..running import execute
from . import compare
from .verdicts import NotGraded, Report


def round_seed() -> int:
    """A round's inputs, drawn by the checker when the round starts (``cfg.seed``, and the data and weights
    the lab kit draws from it): unknown to a file in advance, so nothing kept from another round or
    another check is worth anything."""
    import secrets

    return secrets.randbelow(2**31 - 1) + 1


def fingerprint(folder: Path | None) -> dict[str, tuple[int, int, int]]:
    """Each file of a data folder with its size, modification time and inode: what a rewrite changes."""
    found: dict[str, tuple[int, int, int]] = {}
    if folder is None:
        return found
    try:
        for entry in os.scandir(folder):
            st = entry.stat(follow_symlinks=False)
            found[entry.name] = (st.st_size, st.st_mtime_ns, st.st_ino)
    except OSError:
        pass
    return found


def tampering(original: Path, lab: labs.Lab, data: Path | None, data_print: dict) -> str:
    """What a learner's run changed of what the original is run from (its copy, the lab's data), or ""."""
    try:
        intact = labs.sha256(original) == lab.original_sha256
    except OSError:
        intact = False
    if not intact:
        return "the checker's copy of the original was changed during its run"
    if fingerprint(data) != data_print:
        try:
            (data / "READY").unlink(missing_ok=True)  # rebuilt before the next check: never used again as it is
        except OSError:
            pass
        return f"the lab's data in {paths.display(data)} was changed during its run"
    return ""


def changed_during(outcome: execute.Outcome, learner: bool, original: Path, lab: labs.Lab, data: Path | None,
                   data_print: dict) -> None:
    """After a run: what it is run from (the original's copy, the lab's data) must be as it was. A change
    is the learner's tampering only where the learner's run could have made it; a sandboxed run cannot
    write there (nor can the original's), so the change is another process's, and nothing measured since
    can be trusted: not graded (a data file rewritten during a check once failed a sound fix on a NaN)."""
    changed = tampering(original, lab, data, data_print)
    if not changed:
        return
    if learner and not outcome.sandboxed:
        outcome.status, outcome.result = "error", {"kind": "tampered", "message": changed}
        return
    raise NotGraded(f"{changed}, and not by the run (it cannot write there): another process on this machine "
                    "changed it. Run `proflab data --verify`, then check again")


def _expected(original: execute.Outcome, run: execute.Outcome) -> list[dict]:
    """The values the original's run yielded, for as many steps as ``run`` was asked for (a later run
    stops after its timed steps)."""
    return original.result["results"][:run.steps_asked]


def differs(lab: labs.Lab, original: execute.Outcome, run: execute.Outcome) -> compare.Difference | None:
    """Where ``run``'s values differ from those of the original's run on the same inputs (a torchrun
    job's: rank by rank)."""
    if lab.kind != "job":
        return compare.compare(_expected(original, run), run.result["results"], lab.results)
    expected = [values[:run.steps_asked] for values in original.result["rank_results"]]
    return compare.compare_ranks(expected, run.result.get("rank_results"), lab.results, lab.distributed)


# The learner's first step (its import, the pipeline's set-up and the first
# step's work) may run this much longer than the original's, for scheduling
# noise, before the excess counts as work moved into it.
FIRST_STEP_SLACK = 1.05
FIRST_STEP_SLACK_S = 0.02


def figure_of(lab: labs.Lab, device: str, runs: list[execute.Outcome], wanted: str | None = None) -> str:
    """The figure a step's time is for these runs: ``wanted``, else the lab's for the device ([timing]),
    where every run has it (CPU time needs /proc: elsewhere, wall time)."""
    wanted = wanted or lab.figure(device or "cpu")
    if wanted == "cpu_time" and all("cpu_span_s" in o.result for o in runs):
        return wanted
    return "wall_time"


def first_step_allowance(lab: labs.Lab, originals: list[execute.Outcome], figure: str = "wall_time") -> float:
    """How long a version's first step may take and still be left out of its time, in seconds.

    The first step imports the lab file and builds the pipeline (data, model,
    DataLoader workers) before its work, so it is not timed, but only up to what the original's first step
    took (the median over its runs so far), a little slack, and the lab's
    ``startup_s`` (starting worker processes, for instance). What a version
    does beyond that in its first step is work moved out of the timed steps,
    and counts. Time spent compiling (torch.compile) is left out on top.
    """
    key = "first_step_cpu_s" if figure == "cpu_time" else "first_step_s"
    firsts = [float(o.result.get(key, 0.0)) for o in originals]
    return (stats.median(firsts) if firsts else 0.0) * FIRST_STEP_SLACK + FIRST_STEP_SLACK_S + lab.workload.startup_s


# What a version does after its timed window (its profiled steps, its shutdown) may take this much longer
# than the original does there, for scheduling noise, before the excess counts as work moved out of the
# window. The lab's ``startup_s`` is allowed there too: worker processes started are also shut down.
AFTER_SLACK = 1.10
AFTER_SLACK_S = 0.05


def _after_key(figure: str) -> str:
    return "cpu_after_s" if figure == "cpu_time" else "after_s"


# In ``after_allowance``'s table: the original's time from its last profiled step to its trace's fingerprint
# (the profiler stopped, the trace written: "Q" to "H"), and the size of the trace it wrote then.
TRACE_GAP = "trace_gap"


def _gap_key(figure: str) -> str:
    return "cpu_trace_gap_s" if figure == "cpu_time" else "trace_gap_s"


def after_allowance(lab: labs.Lab, originals: list[execute.Outcome], figure: str = "wall_time") -> dict[Any, Any]:
    """How long a version may run after its timed window and have none of it counted, in seconds, per
    kind of run (by the steps it was asked for: a first run is profiled after its window, a later one is
    not): what the original's runs of that kind took there (their median), with a little slack. Empty for
    a lab whose learner profiles itself (lab 0: its own trace is written after the window).

    Under ``TRACE_GAP``, [seconds, bytes]: what the original's profiled runs took between their last
    profiled step and their trace's fingerprint, and the size of that trace (medians): that gap's allowance
    for a version grows with its own trace's size (``gap_excess_s``)."""
    if lab.kind == "own_profile":
        return {}
    key = _after_key(figure)
    kinds: dict[int, list[float]] = {}
    for o in originals:
        if key in o.result:
            kinds.setdefault(o.steps_asked, []).append(float(o.result[key]))
    allowance: dict[Any, Any] = {steps: stats.median(values) * AFTER_SLACK + AFTER_SLACK_S + lab.workload.startup_s
                                 for steps, values in kinds.items()}
    gaps = [(float(o.result[_gap_key(figure)]), float(o.result["trace_bytes"])) for o in originals
            if _gap_key(figure) in o.result and o.result.get("trace_bytes")]
    if gaps:
        allowance[TRACE_GAP] = [stats.median([g for g, _ in gaps]), stats.median([b for _, b in gaps])]
    return allowance


def gap_excess_s(run: execute.Outcome, after: dict[Any, Any] | None, figure: str = "wall_time") -> float:
    """The seconds ``run`` spent between its last profiled step and its trace's fingerprint beyond what the
    original took there, scaled up for a larger trace than the original's (never down), with the same
    slack as after the window: work moved there out of the profiled steps counts as the steps' own."""
    spent = run.result.get(_gap_key(figure))
    if not after or TRACE_GAP not in after or spent is None:
        return 0.0
    seconds, size = after[TRACE_GAP]
    grown = max(1.0, float(run.result.get("trace_bytes") or 0.0) / size) if size else 1.0
    return max(0.0, float(spent) - (seconds * grown * AFTER_SLACK + AFTER_SLACK_S))


def after_excess_s(run: execute.Outcome, after: dict[Any, Any] | None, figure: str = "wall_time") -> float:
    """The seconds ``run`` spent after its timed window beyond its allowance (``after_allowance``), which
    count as its steps' own, the trace's gap included (``gap_excess_s``): 0 where either is unknown."""
    gap = gap_excess_s(run, after, figure)
    if not after or run.steps_asked not in after:
        return gap
    spent = run.result.get(_after_key(figure))
    return gap + (max(0.0, float(spent) - after[run.steps_asked]) if spent is not None else 0.0)


def counted_step_s(run: execute.Outcome, allowance_s: float, figure: str = "wall_time",
                   after: dict[Any, Any] | None = None) -> float:
    """The time per step the speed-up compares: every warm-up and timed step, stamped by the checker,
    less the time spent compiling and at most ``allowance_s`` of the first step, and what the run did
    after its window beyond the original (``after``: ``after_allowance``); in wall time, or in the CPU
    time of every process the run ever started, read by the kernel over the same span (``figure``)."""
    r = run.result
    moved = after_excess_s(run, after, figure)
    if figure == "cpu_time" and "cpu_span_s" in r:
        left_out = float(r["cpu_compile_s"]) + min(float(r["first_step_cpu_s"]), allowance_s)
        return (max(0.0, float(r["cpu_span_s"]) - left_out) + moved) / max(int(r["counted_steps"]), 1)
    if "span_s" not in r:  # a run without the checker's stamps (never the case in a check)
        return run.mean_step_s
    left_out = float(r["compile_s"]) + min(float(r["first_step_s"]), allowance_s)
    return (max(0.0, float(r["span_s"]) - left_out) + moved) / max(int(r["counted_steps"]), 1)


def record_peaks(report: Report, originals: list[execute.Outcome], learners: list[execute.Outcome]) -> None:
    """Each round's peaks, as read from outside the runs. The first round's runs are profiled (with
    profile_memory, which keeps its own records): only the unprofiled rounds after it compare like with like."""
    def figures(run: execute.Outcome) -> dict:
        return run.result.get("memory") or {}

    later = list(zip(originals, learners))[1:]
    report.memory.update(original=[figures(o).get("peak_mb") for o, _ in later],
                         learner=[figures(m).get("peak_mb") for _, m in later])
    if any(figures(run).get("device_graded") for pair in zip(originals, learners) for run in pair):
        report.memory.update(device_original=[figures(o).get("device_peak_mb") for o, _ in later],
                             device_learner=[figures(m).get("device_peak_mb") for _, m in later])
    first = figures(learners[0])
    report.memory["measured"] = first.get("measured", "")
    report.memory["source"] = "/proc/PID/status: VmRSS summed, VmHWM, VmData growth" + (
        f"; {first['device_source']}" if first.get("device_source") else "")
    report.memory["runs"] = {"original": [figures(o) for o in originals], "learner": [figures(m) for m in learners]}


def stop_reason(lab: labs.Lab, decided: bool, done: int, elapsed_s: float) -> str:
    """Why paired rounds stop after ``done`` of them: "decided", "round limit", "time budget"; "" to go on
    (one more round must fit in the lab's budget, at the pace so far). The checker's rounds and the gate's."""
    if decided:
        return "decided"
    if done >= lab.workload.round_limit:
        return "round limit"
    if elapsed_s + elapsed_s / done > lab.workload.budget_s:
        return "time budget"
    return ""

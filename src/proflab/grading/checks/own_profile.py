"""Check 3 of a lab whose learner profiles (lab 0), "Your own profile": the trace their profiler wrote.

Decided once, after the first round, from the trace the learner's own
torch.profiler wrote into ``cfg.trace_dir`` during the run: exactly one
trace, a window of labelled steps (not the whole loop), written by this
run's profiler, of this run's steps (its clock and the checker's stamps
agree), holding the step the kit profiled itself in the original (the same
operators, as often per step); and the answers the learner read from it
(``ANSWERS``) must match what the kit reads from it (``measuring.answers``).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from ... import labs
from ...measuring import answers, breakdown, evidence
from ...running import execute, outcome
from ..rounds import Rounds
from ..trial import FIRST_ROUND
from ..verdicts import FAILED, Check, Report

NAME = "own_profile"
POINTS = "evidence"  # the [grading] key that pays for it
AFTER: tuple[str, ...] = ("same_results",)  # the checks it waits on
TITLE = "Your own profile"
WHAT = "the trace your profiler wrote: a window of labelled steps, and your answers read from it"
WHEN = (FIRST_ROUND,)


def decide(trial: Rounds, check: Check) -> str | None:
    holds = own_profile(trial.lab, trial.report, check, trial.learners[0], trial.loaded)
    return None if holds else FAILED


def own_profile(lab: labs.Lab, report: Report, proof: Check, run: execute.Outcome,
                loaded: dict[str, evidence.Trace]) -> bool:
    """Lab 0: the trace the learner's own profiler wrote, and the answers they read from it."""
    prof, r = lab.profiling, run.result
    found, trace = r.get("traces_found", 0), loaded.get("learner")
    window = "torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)"
    if found == 0:
        wrote = r.get("trace_dir_files") or []
        proof.failed(f"your code wrote {', '.join(wrote)} in cfg.trace_dir, and no trace: the kit reads a file "
                     "ending in .json or .json.gz" if wrote else "your code wrote no profile",
                     "a trace from torch.profiler (tensorboard_trace_handler, or export_chrome_trace to a .json "
                     "file), in cfg.trace_dir", ", ".join(wrote) or "no trace",
                     "wrap the training loop in torch.profiler.profile(..., "
                     f"schedule={window}, on_trace_ready=tensorboard_trace_handler(cfg.trace_dir)), and call "
                     "prof.step() after every step")
        return False
    if found > 1:
        proof.failed(f"your code wrote {found} traces", "one trace: one window of steps", f"{found} traces",
                     f"profile one window: {window}")
        return False
    if trace is None and r.get("trace_error") == outcome.NO_STEPS:
        proof.failed(f"your profile has no steps ({r.get('trace_mb', 0.0):.1f} MB): it records the whole loop "
                     "as one: profile a window, not the whole loop", f"a window of at most {prof.max_steps} "
                     "ProfilerStep# steps", "no ProfilerStep# in the trace",
                     f"give the profiler a schedule: {window}, and call prof.step() after every step")
        return False
    if trace is None:
        proof.failed(f"your trace could not be read: {r.get('trace_error', 'not a trace')}",
                     "a trace written by tensorboard_trace_handler", "unreadable",
                     "let torch.profiler write the trace: on_trace_ready=tensorboard_trace_handler(cfg.trace_dir)")
        return False
    steps, total = trace.steps, lab.workload.warmup_steps + lab.workload.timed_steps
    size = f"{r.get('trace_mb', 0.0):.1f} MB"
    if len(steps) > prof.max_steps:
        every = " (every step of the loop)" if len(steps) >= total - 1 else ""
        proof.failed(f"your profile holds {len(steps)} steps{every}: profile a window, not the whole loop",
                     f"at most {prof.max_steps} steps", f"{len(steps)} steps, a trace of {size}",
                     f"give the profiler a schedule: {window}; it records only the active steps")
        return False
    written_here = Path(r.get("trace_written_as") or "/").name == Path(r.get("trace") or "").name
    if not written_here or not answers.written_during(trace, r.get("trace_base_ns"), r.get("wall_window", [])):
        proof.failed("the trace was not written by this run's profiler", "a trace torch.profiler wrote during "
                     "this run, into cfg.trace_dir", "a trace from elsewhere (its name or its clock say so)",
                     "let torch.profiler write the trace: on_trace_ready=tensorboard_trace_handler(cfg.trace_dir)")
        return False
    ok, in_trace, outside = answers.matches_stamps(trace, r.get("all_step_s", []))
    if not ok:
        proof.failed("the trace's steps are not this run's steps", f"steps lasting about {outside * 1000:.0f} ms "
                     "in all, as the checker saw them", f"{in_trace * 1000:.0f} ms in the trace",
                     "let torch.profiler write the trace, and call prof.step() once per training step")
        return False
    if not _same_step_as_the_kits(lab, proof, trace, loaded.get("original")):
        return False
    missing = answers.missing_labels(trace, prof.labels)
    if missing:
        label, lacking = next(iter(missing.items()))
        proof.failed(f"your profile has no '{label}' label in {lacking} of its {len(steps)} steps",
                     f"every step labelled: {', '.join(prof.labels)}",
                     "missing: " + ", ".join(f"'{name}'" for name in missing),
                     f"wrap that part of the step in `with torch.profiler.record_function(\"{label}\"):`"
                     + (f"; {prof.where}" if prof.where else ""))
        return False
    given = r.get("answers") or {}
    results, wrong = {}, []
    for a in lab.answers:
        measured = answers.METRICS[a.metric](trace)
        answer = given.get(a.key)
        right = answer is not None and measured.accepts(answer, a.tolerance)
        results[a.key] = {"question": a.question, "given": answer, "measured": measured.value, "right": right}
        if not right:
            said = "no answer" if answer is None or answer == "" else f"you answered {answer!r}"
            wrong.append(f"{a.key}: {said}; your profile says {measured.shown}. Look at {a.where}")
    report.evidence = {"metric": "own_profile", "label": "your own profile", "unit": "", "steps": len(steps),
                       "trace_mb": r.get("trace_mb", 0.0), "labels": list(prof.labels), "answers": results}
    report.breakdown = {"learner": asdict(breakdown.of(trace))}
    if wrong:
        proof.failed(f"{len(wrong)} of your {len(lab.answers)} answers do not match your own profile",
                     "each answer in ANSWERS read from your own trace", f"{len(wrong)} wrong", wrong[0],
                     details=wrong)
        return False
    proof.passed(f"a window of {len(steps)} steps ({size}), every step labelled "
                 f"({', '.join(prof.labels)}), and all {len(lab.answers)} answers match it",
                 f"at most {prof.max_steps} steps, every label, answers from your trace",
                 f"{len(steps)} steps, a trace of {size}")
    return True


def _same_step_as_the_kits(lab: labs.Lab, proof: Check, trace: evidence.Trace,
                           kit: evidence.Trace | None) -> bool:
    """Lab 0: the learner's trace is torch.profiler's (its operators carry the profiler's own ids) and
    holds the step the kit profiled itself in the original (the same operators, as often per step)."""
    how = "let torch.profiler write the trace: on_trace_ready=tensorboard_trace_handler(cfg.trace_dir)"
    why = answers.not_profiler_made(trace)
    if why:
        proof.failed(f"the trace was not written by torch.profiler: {why}", "a trace torch.profiler wrote",
                     "a trace written otherwise", how)
        return False
    if not lab.profiling.kit_steps:
        return True
    if kit is None:
        proof.inconclusive("the kit's own profile of the original step is missing: your trace could not be "
                           "compared with it", "the kit's profile of the original", "none",
                           "check again; if it happens again, the kit is at fault: tell your instructor")
        return False
    unlike = answers.unlike_the_workload(trace, kit)
    if unlike:
        proof.failed(f"your trace's steps are not the lab's training step: {unlike[0]}",
                     "the operators of the original's step, as often per step, as the kit profiled it itself",
                     f"{len(unlike)} difference{'s' if len(unlike) > 1 else ''}",
                     "profile the training loop itself, one prof.step() per training step, and answer from "
                     "that profile; the kit's profile of the original is the 'original' run in proflab "
                     "tensorboard", details=unlike)
        return False
    return True

"""Where a gate lab (lab 7) is graded: the learner's gate settings, run by the checker on a known fix.

The exercise is not a pipeline but the ``[tool.proflab.gate]`` table a
project would keep in its pyproject.toml. The checker reads it (data: no
code of the learner's runs), then runs the real ``proflab gate`` machinery
with it twice, on the kit's own files, verified by their fingerprints:

    1. settings      the table reads, and sets only how to gate, not what
    2. unchanged     the fix against itself: no regression (a false alarm,
                     or "too noisy to call", blocks every pull request)
    3. regression    the fix undone against the fix: a regression
    4. cause         that verdict names what changed (the DataLoader)

Each gate's traces are published in the kit's runs folder as four
TensorBoard runs, ``07-gate/unchanged/baseline``, ``07-gate/unchanged/candidate``,
``07-gate/regression/baseline`` and ``07-gate/regression/candidate`` (``run_name``):
the report names them as TensorBoard lists them, and ``cmd_check`` adds each
gate's Scalars, Text and Images to them (``summaries.write_gate_check``).

The lab carries its own copy of the fix (``[gate] pipeline``, ``pipeline.py``)
for the learner to try the settings on, and to break on purpose, without
having done lab 1; the checker never runs it: it gates the kit's files.
"""

from __future__ import annotations

import fcntl
import time
from pathlib import Path

from .. import labs, paths
from . import gate as gating
from . import gate_config
from .checks import CHECKS, FAILED, PASSED, Check, NotGraded, Progress, Report, snapshot, trace_dir, unreadable, \
    workspace

GATES = ("unchanged", "regression")  # the two gates a check runs, in order
VERSIONS = ("baseline", "candidate")


def run_name(lab: labs.Lab, gate: str, which: str) -> str:
    """A gate's version as TensorBoard lists it under the kit's runs folder: ``07-gate/unchanged/baseline``."""
    return f"{lab.slug}/{gate}/{which}"


TITLES = {
    "runs": ("Your gate's settings", "the file holds a [tool.proflab.gate] table that sets how to gate"),
    "same_results": ("Passes the unchanged fix", "your gate, on the fix against itself, says no regression"),
    "evidence": ("Catches the regression", "your gate, on the fix undone against the fix, says regression"),
    "faster": ("Names the cause", "its report on the regression names what changed"),
}


def checks_of(lab: labs.Lab) -> tuple[tuple[str, str, str], ...]:
    return tuple((name, *TITLES[name]) for name, _, _ in CHECKS)


def check(lab: labs.Lab, file: Path, label: str = "yours", device: str = "auto",
          on_progress: Progress = lambda message: None) -> Report:
    started = time.perf_counter()
    report = Report(lab=lab.name, number=lab.number, title=lab.title, file=str(file), label=label,
                    # the run names the report prints are relative to this: TensorBoard's own (07-gate/...)
                    checks=[Check(*c) for c in checks_of(lab)], runs_dir=str(paths.runs_dir()),
                    against=f"as the gate of lab {lab.gating.lab}'s fix")
    try:
        with workspace("check-") as work:
            try:
                mine = snapshot(file, work / "learner")
            except OSError as e:
                report.verdict, report.error = "error", unreadable(file, e)
                return report
            report.file_sha256 = labs.sha256(mine)
            _grade(lab, mine, Path(file), device, report, on_progress)
    except NotGraded as e:
        report.verdict = "error"
        report.error = f"{e}. This is the kit's or the machine's failure, not your settings'"
    finally:
        report.duration_s = time.perf_counter() - started
    return report


def _settings(lab: labs.Lab, mine: Path, shown: Path, report: Report) -> dict | None:
    """The learner's settings, or None with the first check failed and why."""
    runs = report.check("runs")
    try:
        found = gate_config.read_file(mine, required=True)
    except gate_config.GateConfigError as e:
        runs.failed(str(e).replace(str(mine), str(shown)), "a [tool.proflab.gate] table of known settings",
                    "a table the gate cannot use", "compare it with the exercise as handed out "
                    f"(`proflab reset {lab.name}` backs yours up first)")
        return None
    g = lab.gating
    what = sorted(set(found) - set(g.settings))
    if what:
        runs.failed(f"{shown.name} sets {', '.join(what)}: those change what is gated, not how",
                    f"only {', '.join(s for s in g.settings if s not in ('file', 'baseline', 'against', 'trace_dir'))}",
                    ", ".join(what), f"this lab grades how you gate lab {g.lab}'s fix: the checker chooses the files "
                    "and their workload; leave the others out")
        return None
    if "lab" in found and _lab_name(found["lab"]) != _lab_name(g.lab):
        runs.failed(f"{shown.name} gates lab {found['lab']}; this lab gates lab {g.lab}'s fix",
                    f'lab = "{g.lab}"', repr(found["lab"]), "set lab to the lab whose fix you gate")
        return None
    for key, (low, high) in g.limits.items():
        if key in found and not low <= found[key] <= high:
            why = RANGE_WHY.get(key, "a check must end in minutes")
            runs.failed(f"{shown.name} sets {key} = {found[key]:g}, outside {low:g}–{high:g}: {why}",
                        f"{key} from {low:g} to {high:g}", f"{found[key]:g}", HELP.get(key, "see the lab's page"))
            return None
    try:
        gate_config.check_rounds(found, shown.name)
    except gate_config.GateConfigError as e:
        runs.failed(str(e), "max_rounds at least rounds", f"{found.get('max_rounds')} < {found.get('rounds')}",
                    "a gate always measures rounds, and a close call at most max_rounds")
        return None
    return found


# Why a setting out of the lab's range is refused, and what to do.
RANGE_WHY = {
    "max_slowdown": "below, the interval of an unchanged fix must fit inside this machine's run-to-run noise, "
                    "which no affordable number of rounds gives; above, a pull request may double the step "
                    "time and pass",
}
HELP = {
    "max_slowdown": "choose the smallest slowdown worth failing a pull request for, that this machine's noise can "
                    "still resolve: run proflab gate on the fix against itself and look at the interval",
}


def _lab_name(value) -> str:
    try:
        return labs.resolve(str(value)).name
    except (labs.LabNotFound, labs.ManifestError):
        return str(value)


def _grade(lab: labs.Lab, mine: Path, shown: Path, device: str, report: Report, on_progress: Progress) -> None:
    runs = report.check("runs")
    g = lab.gating
    if labs.sha256(lab.original) != lab.original_sha256:
        report.verdict = "error"
        report.error = (f"{lab.original} was edited; restore it (`git checkout -- {paths.display(lab.original)}`)")
        return
    found = _settings(lab, mine, shown, report)
    if found is None:
        report.verdict = FAILED
        return
    try:
        target = labs.resolve(g.lab)
    except (labs.LabNotFound, labs.ManifestError) as e:
        raise NotGraded(f"lab {lab.number} gates the fix of lab '{g.lab}', which cannot be loaded ({e})") from None
    fix, undone = target.folder / g.fix, target.folder / g.regression
    if not fix.is_file() or labs.sha256(fix) != g.fix_sha256 or not target.original_is_intact():
        raise NotGraded(f"lab {target.number}'s {g.fix} or {g.regression} is not as the kit ships it (restore them "
                        f"with `git checkout -- {paths.display(target.folder)}`)")
    how = {k: v for k, v in found.items() if k not in ("file", "baseline", "against", "trace_dir")}
    limit = how.get("max_slowdown", gate_config.KEYS["max_slowdown"].default)
    runs.passed(f"{shown.name} gates lab {target.number}'s fix with max_slowdown {limit:g}, "
                f"{how.get('rounds', gate_config.KEYS['rounds'].default)} to "
                f"{how.get('max_rounds', gate_config.KEYS['max_rounds'].default)} rounds",
                actual=", ".join(f"{k} = {v}" for k, v in sorted(how.items())))

    def run_gate(candidate: Path, name: str, n: int) -> gating.GateReport | None:
        values = {**how, "lab": target.name, "file": str(candidate), "baseline": str(fix),
                  "trace_dir": str(trace_dir(lab, name))}
        if device != "auto":
            values["device"] = device
        settings = gate_config.Settings(values, {k: "lab 7" for k in values})
        done = gating.run(settings, on_progress=lambda text: on_progress(f"gate {n} of 2 ({name}): {text}"))
        if done.verdict == "error":
            raise NotGraded(f"the {name} gate could not run: {done.error}")
        broken = next((c for c in done.checks if c.name in ("runs", "same_results") and c.status == FAILED), None)
        if broken is not None:  # the settings make a kit's file fail to run (too many steps, a timeout)
            report.check("same_results" if n == 1 else "evidence").failed(
                f"with these settings the {name} gate's candidate does not run through: {broken.rationale}",
                "both versions run every step", broken.actual or "a failed run",
                "ask for fewer steps (warmup_steps, timed_steps, profile_steps): lab 1's data and time limit "
                "are the lab's")
            return None
        report.evidence[name] = {k: getattr(done, k) for k in ("verdict", "slowdown", "because", "duration_s",
                                                               "changes", "traces", "stopped")}
        report.evidence[name]["rounds"] = (done.comparison or {}).get("rounds", 0)
        # what TensorBoard's Scalars and Images show of it: each round's mean step, where a profiled step went
        report.evidence[name].update(max_slowdown=done.max_slowdown, timings=done.timings,
                                     breakdown=done.breakdown, runs=[run_name(lab, name, v) for v in VERSIONS])
        report.traces.update({f"{name}_{which}": path for which, path in done.traces.items()})
        report.device = done.device
        return done

    try:
        report.verdict = _run_both(lab, run_gate, fix, undone, limit, report)
    finally:
        forget_untraced(lab, report)


def _run_both(lab: labs.Lab, run_gate, fix: Path, undone: Path, limit: float, report: Report) -> str:
    """The two gates, the second only when the first passes; the check's verdict."""
    unchanged, caught, cause = (report.check(n) for n in ("same_results", "evidence", "faster"))
    first = run_gate(fix, "unchanged", 1)
    if first is None:
        return FAILED
    judge_unchanged(first, limit, unchanged)
    if unchanged.status != PASSED:
        return FAILED
    second = run_gate(undone, "regression", 2)
    if second is None:
        return FAILED
    judge_regression(second, limit, caught)
    if caught.status == PASSED:
        judge_cause(second, lab.gating, cause)
    return PASSED if cause.status == PASSED else FAILED


def forget_untraced(lab: labs.Lab, report: Report) -> None:
    """A gate this check did not trace (not run, or run without a profile) keeps no runs of an earlier check:
    TensorBoard then lists this check's runs only, the ones its report names. Best effort: a file that cannot
    be removed costs only a stale run."""
    for gate in GATES:
        if any(f"{gate}_{which}" in report.traces for which in VERSIONS):
            continue
        folder = trace_dir(lab, gate)
        if not folder.is_dir():
            continue
        try:
            with open(folder / ".lock", "a+") as lock:  # the lock traces.publish takes on these runs
                fcntl.flock(lock, fcntl.LOCK_EX)
                for which in VERSIONS:
                    for old in [*(folder / which).glob("*.pt.trace.json*"),
                                *(folder / which).glob("events.out.tfevents.*")]:
                        old.unlink(missing_ok=True)
        except OSError:
            pass


# --- what each gate's verdict means for the learner's settings ------------------------

def judge_unchanged(done: gating.GateReport, limit: float, check: Check) -> None:
    """The fix against itself: only "no regression" passes; a false alarm or "too noisy" blocks every pull
    request that changes nothing."""
    told = _told(done)
    if done.verdict == PASSED:
        check.passed(f"no regression on the unchanged fix: {told}", f"its interval under {limit:g}×", told)
    elif done.verdict == FAILED:
        check.failed(f"a false alarm: your gate calls the unchanged fix a regression ({told})",
                     "no regression", told, "a max_slowdown this close to 1 fails pull requests that change "
                     "nothing: choose the smallest slowdown worth failing one for")
    else:
        check.failed(f"your gate could not call the unchanged fix: {told}, too noisy to call against {limit:g}×. "
                     "A gate that cannot pass an unchanged pull request blocks every one", "no regression",
                     f"too noisy to call ({told})", "the interval must fit under max_slowdown: a limit close to "
                     "1.0 asks for more precision than this machine's noise allows; raise it, or give a close "
                     "call more rounds (max_rounds)")


def judge_regression(done: gating.GateReport, limit: float, check: Check) -> None:
    """The fix undone against the fix: only "regression" passes."""
    told = _told(done)
    if done.check("no_regression").status == FAILED:
        check.passed(f"regression caught: the fix undone is {told}", f"its interval above {limit:g}×", told)
        return
    said = "no regression" if done.verdict == PASSED else "too noisy to call"
    check.failed(f"your gate let the fix undone through: {told}, {said} against {limit:g}×",
                 f"regression (above {limit:g}×)", told,
                 "a max_slowdown this high lets a slowdown this large through: choose the smallest slowdown worth "
                 "failing a pull request for" if done.verdict == PASSED else
                 "more rounds (rounds, max_rounds) narrow the interval until it clears max_slowdown")


def judge_cause(done: gating.GateReport, g: labs.Gating, check: Check) -> None:
    """The regression's report names the cause among what changed (the name whose self time grew most)."""
    because = done.because.get("slower", "")
    if g.cause in because:
        check.passed(f"the report names it: {because}", f"'{g.cause}' among what changed", because)
        return
    said = because or ("nothing: no trace was recorded" if not done.traces else "nothing")
    check.failed(f"the gate failed the pull request without naming the {g.cause}: its report says {said}",
                 f"'{g.cause}' named in the report", said,
                 "profile a few steps of each version (profile_steps of 2 or more): the report then names "
                 f"what changed most; {g.where}")


def _told(done: gating.GateReport) -> str:
    s = done.slowdown
    if not s:
        return "not measured"
    rounds = (done.comparison or {}).get("rounds", 0)
    return (f"{s['median']:.2f}× the fix's step time (95% interval {s['low']:.2f}–{s['high']:.2f}×, "
            f"{rounds} rounds)")

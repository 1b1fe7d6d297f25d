"""Where a candidate is gated against a baseline: ``proflab gate``, the checker's machinery for CI.

Both versions are run as the checker runs a lab's two versions: each run a
fresh process forked from one server, timed from outside by the checker's
stamps, in rounds of one run each whose order alternates (round 1: candidate
then baseline; round 2: baseline then candidate; ...). Their values are
compared step by step. The slowdown is the geometric mean of the rounds'
ratios (candidate / baseline) with a 95% interval; the gate calls it only
when the whole interval is on one side of ``max_slowdown``:

    no regression   the interval's top is under max_slowdown     exit 0
    regression      the interval's bottom is above it            exit 1
    too noisy       it straddles it after every extra round      exit 4

The exit codes are the checker's (``verdicts.EXIT_CODES``): a candidate that
breaks fails too (1); a baseline or kit that fails cannot gate (3); 2, a
usage error, is the command's.

A close call gets extra rounds, within ``max_rounds`` and ``budget_s``.
Each version's first run is profiled after its timed steps; from the two
traces the report says what changed: the operators whose self time or calls
moved most per step, and where each version's step went.

No shortcut for identical files: a file unchanged at two revisions still
imports modules that may have changed, so both are always measured.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from .. import labs, paths
from ..measuring import breakdown, evidence, operators, stats, traces
from ..running import execute, forkserver, revision, slots
from .compare import Difference
from .failures import runtime_failure
from .gate_config import Settings
from .measures import (after_allowance, counted_step_s, differs, figure_of, first_step_allowance, fingerprint,
                       stop_reason)
from .once import Runs, as_handed_in, keep_trace
from .staging import prepare_data, snapshot, workspace
from .verdicts import FAILED, INCONCLUSIVE, PASSED, Check, NotGraded, Verdict

VERSIONS = ("baseline", "candidate")

CHECKS = (
    ("runs", "It runs", "the candidate imports, and pipeline(cfg) yields every step without error"),
    ("same_results", "Same results", "every step yields the same values as the baseline's"),
    ("no_regression", "No regression", "the candidate's step time is at most max_slowdown times the baseline's"),
)

# How many of the names that moved the report lists.
CHANGES_SHOWN = 8


@dataclass
class GateReport(Verdict):
    candidate: str
    baseline: str  # as shown: a path, or REV:path
    against: str = ""  # the git revision, when the baseline was taken from one
    commit: str = ""  # what it named
    device: str = "?"
    figure: str = "wall_time"  # what a step's time is (``measures.figure_of``)
    waited_s: float = 0.0  # waiting for turns at the machine, not counted
    verdict: str = FAILED  # passed (no regression) | failed (regression) | inconclusive | error
    error: str = ""  # the baseline or the kit failed: nothing to compare against
    checks: list[Check] = field(default_factory=list)
    max_slowdown: float = 1.10
    comparison: dict[str, Any] | None = None  # baseline as "original", candidate as "learner" (stats.Comparison)
    slowdown: dict[str, float] = field(default_factory=dict)  # candidate / baseline: "median", "low", "high"
    timings: dict[str, list[float]] = field(default_factory=lambda: {v: [] for v in VERSIONS})
    latency: dict[str, dict[str, float]] = field(default_factory=dict)  # per step, ms: median and p95
    breakdown: dict[str, dict[str, Any]] = field(default_factory=dict)  # where a profiled step's time went
    changes: list[dict[str, Any]] = field(default_factory=list)  # per step, largest move first
    # What explains a slower candidate best (the part of the step that grew most, then the name whose self time
    # grew most), and a faster one
    because: dict[str, str] = field(default_factory=dict)  # "slower", "faster": in words
    different: str = ""  # values that differ, when they were allowed to
    traces: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    output: str = ""
    traceback: str = ""
    duration_s: float = 0.0
    stopped: str = ""  # decided | round limit | time budget


@dataclass(frozen=True)
class Gate:
    """What one gate runs: two files, where each runs, and the lab-like workload both run."""

    candidate: Path
    baseline: Path
    baseline_shown: str
    lab: labs.Lab  # the workload and result rules; its "original" is the baseline
    settings: Settings
    workdir: Path  # where the candidate runs (the baseline too, or its image at the revision)
    baseline_workdir: Path
    tree: revision.Tree | None = None
    # What both versions' sandboxes read besides their files and working folders: the project's data
    # folder (cfg.data_dir), which a baseline taken at a revision runs outside of, in the tree's image
    reads: tuple[Path, ...] = ()


def lab_for(s: Settings, baseline: Path) -> labs.Lab:
    """The lab-like description of what both versions run: a lab's (``lab``), or the settings' own."""
    threshold = {"cpu": 1.0 / s.max_slowdown}
    w = {"rounds": s.rounds, "max_rounds": s.max_rounds, "budget_s": float(s.budget_s)}
    if s.lab is not None:
        lab = labs.resolve(str(s.lab))
        for name in (n for n in labs_keys() if s.given(n)):
            w[name] = s.values[name]
        workload = replace(lab.workload, **w)
        return replace(lab, original=baseline, original_sha256=labs.sha256(baseline), thresholds=threshold,
                       overhead={}, leaner={}, workload=workload)
    workload = labs.Workload(
        batch_size=s.batch_size, warmup_steps=s.warmup_steps, timed_steps=s.timed_steps,
        profile_steps=s.profile_steps, timeout_s=float(s.timeout_s), seed=s.seed, memory_mb=float(s.memory_mb),
        threads=s.threads, params=dict(s.params), background_workers=True, background_threads=True,
        data_dir=str(Path(s.data_dir).resolve()), **w)
    return labs.Lab(number=0, name="gate", title="gate", summary="", folder=baseline.parent, original=baseline,
                    exercise=baseline, solution=baseline, original_sha256=labs.sha256(baseline), workload=workload,
                    results=(), evidence=None, thresholds=threshold, hints=(),
                    compile_credit=True)  # a team's own pipeline: its compiling is left out, as a lab 3 fix's


def labs_keys() -> tuple[str, ...]:
    from .gate_config import FROM_LAB

    return FROM_LAB


def _rules(s: Settings, first: list[dict[str, Any]]) -> tuple[labs.ResultRule, ...]:
    """A project's result rules, from the values its baseline yielded: every key, compared within the
    settings' tolerance (exactly: integer and boolean values, and the keys named in ``exact``)."""
    keys: dict[str, str] = {}
    for step in first:
        for key, value in step.items():
            keys.setdefault(key, str(value.get("dtype", "")))
    exact_types = ("int", "bool", "uint")
    return tuple(labs.ResultRule(key=k, what=f"'{k}'", exact=k in s.exact or dtype.startswith(exact_types),
                                 rtol=float(s.rtol), atol=float(s.atol))
                 for k, dtype in keys.items())


Progress = Callable[[str], None]


def run(s: Settings, on_progress: Progress = lambda message: None) -> GateReport:
    """Gate ``s.file`` against its baseline. Never raises for a version's failure: the report says it."""
    started = time.perf_counter()
    report = GateReport(candidate=str(s.file), baseline=str(s.baseline or f"{s.against}:{s.file}"),
                        against=s.against or "", checks=[Check(*c) for c in CHECKS], max_slowdown=s.max_slowdown,
                        settings=dict(s.values))
    try:
        with workspace("gate-") as work:
            gate = _prepare(s, work, report)
            try:
                with slots.turn(on_progress) as slot, forkserver.session():  # one turn: imports, rounds, reading
                    report.waited_s += slot.take_wait()
                    preload = execute.preload_for(gate.baseline, gate.candidate)
                    # each in a sandbox of its own
                    execute.warm(gate.lab, preload, str(gate.baseline), gate.baseline, gate.baseline_workdir,
                                 gate.tree.import_paths(sys.path) if gate.tree else None, reads=gate.reads)
                    execute.warm(gate.lab, preload, str(gate.candidate), gate.candidate, gate.workdir,
                                 reads=gate.reads)
                    data = prepare_data(gate.lab)
                    _measure(gate, report, on_progress, work, data, preload)
            finally:
                _publish(s, report)
    except NotGraded as e:
        report.verdict = "error"
        report.error = f"{e}. This is the kit's or the machine's failure, not the candidate's"
    finally:
        report.duration_s = time.perf_counter() - started
        _in_gate_words(report)
    return report


# The checker's messages speak of a lab's original and its commands; a gate's, of a baseline.
GATE_WORDS = ((", or a bigger batch than the original's", ""),
              ("; `proflab run` shows how far it gets", "; --verbose shows its output"),
              ("run the file with `proflab run` to see its output", "--verbose shows its output"),
              ("the original's", "the baseline's"), ("the original", "the baseline"))


def _in_gate_words(report: GateReport) -> None:
    for c in report.checks:
        for old, new in GATE_WORDS:
            c.rationale, c.expected = c.rationale.replace(old, new), c.expected.replace(old, new)
            c.actual, c.help = c.actual.replace(old, new), c.help.replace(old, new)


def _prepare(s: Settings, work: Path, report: GateReport) -> Gate:
    cwd = Path(s.root).resolve() if s.root else Path.cwd()  # the project's top folder: where both versions run
    try:
        candidate = snapshot(Path(s.file), work / "candidate")
    except OSError as e:
        raise NotGraded(f"{s.file} cannot be read ({e.strerror or e})") from None
    tree = None
    if s.baseline:
        try:
            baseline = snapshot(Path(s.baseline), work / "baseline")
        except OSError as e:
            raise NotGraded(f"{s.baseline} cannot be read ({e.strerror or e})") from None
        shown, base_cwd = paths.display(Path(s.baseline)), cwd
    else:
        tree, baseline = revision.export(s.against, Path(s.file), work / "revision")
        report.commit = tree.commit
        shown = f"{s.against}:{paths.display(Path(s.file))}"
        try:
            base_cwd = tree.image(cwd)
        except ValueError:  # the project is outside the repository: the baseline runs in its top folder
            base_cwd = tree.root
    report.baseline = shown
    lab = lab_for(s, baseline)
    data = Path(lab.workload.data_dir or s.data_dir).resolve()
    return Gate(candidate, baseline, shown, lab, s, cwd, base_cwd if base_cwd.is_dir() else tree.root, tree,
                (data,) if data.is_dir() else ())


def _measure(gate: Gate, report: GateReport, on_progress: Progress, work: Path, data: Path | None,
             preload: tuple[str, ...]) -> None:
    lab, s = gate.lab, gate.settings
    if s.measure:  # the settings' figure on every device: the runs read their CPU time as a check's would
        lab = replace(lab, timing={"cpu": s.measure, "cuda": s.measure})
    runs, same, regression = (report.check(n) for n, *_ in CHECKS)
    name = Path(s.file).name
    broken = as_handed_in(gate.candidate, "candidate", s.file)
    if broken is not None:
        runtime_failure(runs, broken, lab, lab.workload.timeout_s)
        report.verdict = FAILED
        return
    done: dict[str, list[execute.Outcome]] = {v: [] for v in VERSIONS}
    loaded: dict[str, evidence.Trace] = {}
    runs_ = Runs(lab, gate.baseline, data, fingerprint(data), s.device)
    since, waited_before = time.perf_counter(), report.waited_s
    rounds = lab.workload.rounds

    def run_one(which: str, round_no: int) -> execute.Outcome:
        first = not done[which]
        what = gate.baseline_shown if which == "baseline" else name
        on_progress(f"round {round_no}/{rounds}: running the {which} ({what})" if round_no <= rounds else
                    f"extra round {round_no}: the slowdown is close to {s.max_slowdown:g}×, measuring again "
                    f"({which})")
        file = gate.baseline if which == "baseline" else gate.candidate
        outcome = runs_.run_once(
            file, which, which == "candidate", preload=preload,
            trace_dir=work / "traces" / which if first and lab.workload.profile_steps else None,
            workdir=gate.baseline_workdir if which == "baseline" else gate.workdir,
            shown_as=Path(s.file) if which == "candidate" else (Path(s.baseline) if s.baseline else file),
            sys_path=gate.tree.import_paths(sys.path) if gate.tree and which == "baseline" else None,
            steps=None if first else {"profile_steps": 0}, role=str(file), reads=gate.reads)
        if first:
            keep_trace(report, which, outcome, loaded)
        return outcome

    round_no = 0
    moved: list[operators.Change] = []
    while True:
        round_no += 1
        with slots.turn(on_progress) as slot:  # the round in one turn at the machine: its runs, and reading them
            report.waited_s += slot.take_wait()
            for which in (("candidate", "baseline") if round_no % 2 else ("baseline", "candidate")):
                outcome = run_one(which, round_no)
                if which == "candidate" and not done["candidate"]:
                    report.output = outcome.stdout[-2000:]
                if not outcome.ok:
                    report.traceback = outcome.result.get("traceback", "") or outcome.stderr
                    if which == "candidate" and not done["baseline"]:  # the very first run: is it the machine's?
                        base = run_one("baseline", round_no)
                        if not base.ok:
                            report.verdict = "error"
                            report.error = (f"the baseline ({gate.baseline_shown}) fails too "
                                            f"({base.result.get('message', base.status)}): something both need "
                                            "(the data, a dependency, the device) is missing, not the candidate's "
                                            "change; --verbose shows the candidate's traceback")
                            return
                    if which == "candidate":
                        if outcome.result.get("kind") == "short":
                            steps = outcome.result.get("steps_done", 0)
                            runs.failed(f"{name}: pipeline(cfg) stopped after {steps} steps; the gate needs "
                                        f"{lab.workload.total_steps}", f"{lab.workload.total_steps} steps",
                                        f"{steps} steps", "yield once per step, for as long as the gate asks")
                        else:
                            runtime_failure(runs, outcome, lab, lab.workload.timeout_s)
                        report.verdict = FAILED
                    else:
                        report.verdict = "error"
                        report.error = (f"the baseline ({gate.baseline_shown}) failed: "
                                        f"{outcome.result.get('message', outcome.status)}; there is nothing to "
                                        "compare the candidate against")
                    return
                if which == "baseline":
                    if not done["baseline"] and not lab.results:
                        lab = replace(lab, results=_rules(s, outcome.result["results"]))
                    elif done["baseline"] and (diff := differs(lab, done["baseline"][0], outcome)):
                        if not s.allow_different_results:
                            report.verdict = "error"
                            report.error = (f"two runs of the baseline disagree ({diff.message}): it is not "
                                            "deterministic, so a candidate's values cannot be held to it; seed it "
                                            "(cfg.seed), or gate with --allow-different-results")
                            return
                    if done["baseline"]:
                        outcome.result.pop("results")
                        outcome.result.pop("rank_results", None)
                done[which].append(outcome)
            report.device = device = runs_.device

            for run in done["candidate"][len(report.timings["candidate"]):]:
                diff = differs(lab, done["baseline"][0], run)
                if diff is not None and not report.different:
                    if not s.allow_different_results:
                        runs.passed(f"{name} ran all {lab.workload.total_steps} steps")
                        same.failed(diff.message, "the baseline's values, step by step", f"step {diff.step} differs",
                                    _different_help(diff))
                        report.verdict = FAILED
                        return
                    report.different = diff.message
                run.result.pop("results")
                run.result.pop("rank_results", None)
            report.figure = figure_of(lab, device, done["baseline"] + done["candidate"], s.measure)
            allowance = first_step_allowance(lab, done["baseline"], report.figure)
            after = after_allowance(lab, done["baseline"], report.figure)
            for which in VERSIONS:
                report.timings[which] = [counted_step_s(o, allowance, report.figure, after) for o in done[which]]

            if round_no == 1:
                runs.passed(f"{name} ran all {lab.workload.total_steps} steps on {device}",
                            actual=f"{done['candidate'][0].result['steps_done']} steps")
                if report.different:
                    same.passed(f"values differ, as allowed (--allow-different-results): {report.different}",
                                "the baseline's values", "different, allowed")
                else:
                    same.passed(f"all {lab.workload.total_steps} steps yield the baseline's values "
                                f"({', '.join(r.key for r in lab.results) or 'nothing yielded'})",
                                "the baseline's values", "equal within tolerance")
                moved = _what_changed(report, loaded)
                loaded.clear()
            if round_no >= rounds:
                report.stopped = _stop_reason(lab, report, round_no,
                                              time.perf_counter() - since - (report.waited_s - waited_before))
                if report.stopped:
                    break
    report.latency = {which: {"median_ms": 1000 * stats.median(t), "p95_ms": 1000 * stats.quantile(t, 0.95)}
                      for which, t in ((v, [x for o in done[v] for x in o.result["step_times"]]) for v in VERSIONS)}
    _changes(report, moved, _comparison(report).noise)
    _decide(report, regression, lab)


def _different_help(diff: Difference) -> str:
    return ((diff.hint + "; ") if diff.hint else "") + (
        "a faster version must still compute the same values; if the change is meant to alter them "
        "(a new model, another seed), gate with --allow-different-results")


def _comparison(report: GateReport) -> stats.Comparison:
    return stats.compare(report.timings["baseline"], report.timings["candidate"])


def _stop_reason(lab: labs.Lab, report: GateReport, done: int, elapsed_s: float) -> str:
    decided = _comparison(report).decide(lab.threshold(report.device)) != stats.UNCLEAR
    return stop_reason(lab, decided, done, elapsed_s)


def _decide(report: GateReport, regression: Check, lab: labs.Lab) -> None:
    cmp = _comparison(report)
    report.comparison = cmp.as_dict()
    limit = report.max_slowdown
    slow = 1.0 / cmp.speedup
    low = 1.0 / cmp.ci_high if cmp.ci_high not in (0.0, float("inf")) else 0.0
    high = 1.0 / cmp.ci_low if cmp.ci_low > 0 else float("inf")
    report.slowdown = {"median": slow, "low": low, "high": high}
    lat = report.latency
    measured = (f"{slow:.2f}× the baseline's step time (mean step {cmp.original_s * 1000:.1f} ms → "
                f"{cmp.learner_s * 1000:.1f} ms; median {lat['baseline']['median_ms']:.1f} → "
                f"{lat['candidate']['median_ms']:.1f} ms, p95 {lat['baseline']['p95_ms']:.1f} → "
                f"{lat['candidate']['p95_ms']:.1f} ms; noise ±{cmp.noise:.0%})")
    interval = stats.uncertainty(cmp.rounds, (cmp.ci_low, cmp.ci_high), (cmp.ratio_low, cmp.ratio_high),
                                 lambda lo, hi: f"{1 / hi:.2f}–{1 / lo:.2f}×" if lo > 0 else "unbounded")
    expected = f"at most {limit:g}× the baseline's step time"
    change = f"{1 / slow:.2f}× faster" if slow < 1 else f"{slow:.2f}× slower" if slow > 1 else "as fast"
    decision = cmp.decide(lab.threshold(report.device))
    where = ("the report's 'what changed': the operators that moved most, and each version's step; "
             "both traces are in the trace folder (proflab tensorboard --logdir it, then Profile › Diff)")
    if decision == stats.PASS:
        kind = "an improvement" if high < 1.0 else "no regression"
        why = f", because {report.because['faster']}" if high < 1.0 and "faster" in report.because else ""
        if high < 1.0:  # the interval of what it says, the speed-up, not of the step time's ratio
            interval = stats.uncertainty(cmp.rounds, (cmp.ci_low, cmp.ci_high), (cmp.ratio_low, cmp.ratio_high),
                                         lambda lo, hi: f"{lo:.2f}–{hi:.2f}× faster")
        regression.passed(f"{kind}: {change} than the baseline over {cmp.rounds} paired rounds ({interval}){why}",
                          expected, measured)
        report.verdict = PASSED
    elif decision == stats.FAIL:
        regression.failed(f"regression: {slow:.2f}× the baseline's step time, more than the {limit:g}× allowed, "
                          f"over {cmp.rounds} paired rounds ({interval})"
                          + (f", because {report.because['slower']}" if "slower" in report.because else ""),
                          expected, measured, where)
        report.verdict = FAILED
    else:
        limit_text = {"round limit": f"the limit of {lab.workload.round_limit} rounds",
                      "time budget": f"the {lab.workload.budget_s:g} s budget"}.get(report.stopped, "")
        regression.inconclusive(
            f"too noisy to call: {slow:.2f}× over {cmp.rounds} rounds{f' ({limit_text})' if limit_text else ''}, "
            f"but the {interval} straddles the {limit:g}× limit", expected, measured,
            "the machine was too busy (or the difference too close to the limit) for these rounds: more "
            "timed_steps or max_rounds narrow the interval; a quieter runner narrows it most")
        report.verdict = INCONCLUSIVE
    regression.details = (["timed in CPU time: the CPU seconds of every process and thread of each run, read "
                           "from /proc, which other jobs on the machine move far less than the clock (measure = \"cpu_time\")"]
                          if report.figure == "cpu_time" else [])
    if report.waited_s >= 1:
        regression.details.append(f"waited {report.waited_s:.0f} s for turns at the machine (other proflab runs "
                                  "were measuring); not counted")


def _ms(us: float) -> str:
    ms = us / 1000.0
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.1f} ms" if ms >= 1 else f"{ms:.2f} ms"


def _what_changed(report: GateReport, loaded: dict[str, evidence.Trace]) -> list[operators.Change]:
    """From the two first runs' traces: where each step went, and the names that moved per step beyond
    what they vary from step to step (``operators.diff``); ``_changes`` keeps those beyond the rounds'
    noise too, once it is measured."""
    if not all(v in loaded for v in VERSIONS):
        return []
    for which in VERSIONS:
        try:
            found = breakdown.of(loaded[which])
        except (ZeroDivisionError, KeyError, ValueError):
            continue
        report.breakdown[which] = {"step_ms": found.step_ms, "host_ms": found.host_ms,
                                   "device_busy_ms": found.device_busy_ms, "steps": found.steps}
    return [c for c in operators.diff(loaded["baseline"], loaded["candidate"])
            if c.status != "same" and c.name != operators.STEP]


def _changes(report: GateReport, moved: list[operators.Change], noise: float) -> None:
    """What changed: the moves beyond the noise the rounds measured (twice the larger version's run-to-run
    variation, of the name's own time), and any name called a different number of times or not at all.
    Why a version is slower (or faster) says first where each step's time went that moved most (the
    DataLoader wait, host reads, CPU operators, Python between them), then the operator that moved most."""
    beyond = [c for c in moved if c.before is None or c.after is None or c.before.calls != c.after.calls
              or abs(c.self_delta_us) > 2 * noise * c.before.self_cpu_us]
    report.changes = [c.as_dict() for c in beyond[:CHANGES_SHOWN]]
    parts = _part_moves(report, noise)
    for way, sign in (("slower", 1), ("faster", -1)):
        ops = [c for c in beyond if c.self_delta_us * sign > 0]
        part = next((p for p in parts if (p[2] - p[1]) * sign > 0), None)
        said = []
        if part:
            name, was, now = part
            said.append(f"the step's {breakdown.LABELS[name]} went from {_ms(was * 1000)} to {_ms(now * 1000)} per step")
        if ops:
            said.append(("of the operators, " if part else "") + describe(ops[0]))
        if said:
            report.because[way] = "; ".join(said)


def _part_moves(report: GateReport, noise: float) -> list[tuple[str, float, float]]:
    """Each part of the step (``breakdown.HOST_PARTS``) that moved beyond the noise, in ms per step before
    and after, the largest move first: more than two points of the baseline's step
    (``operators.SHARE_MOVED``) and twice the rounds' noise of its own time."""
    before, after = report.breakdown.get("baseline"), report.breakdown.get("candidate")
    if not before or not after:
        return []
    moves = [(part, before["host_ms"][part], after["host_ms"][part]) for part in breakdown.HOST_PARTS]
    moves = [m for m in moves if abs(m[2] - m[1]) > max(operators.SHARE_MOVED * before["step_ms"], 2 * noise * m[1])]
    return sorted(moves, key=lambda m: -abs(m[2] - m[1]))


def _n_calls(n: float) -> str:
    return f"{n:g} call" + ("" if n == 1 else "s")


def describe(change: operators.Change) -> str:
    """One change in words: ``enumerate(DataLoader)#…__next__`` went from 3.1 ms to 290 ms per step."""
    before = change.before.self_cpu_us if change.before else 0.0
    after = change.after.self_cpu_us if change.after else 0.0
    calls = ""
    if change.before and change.after and change.before.calls != change.after.calls:
        calls = f", {change.before.calls:g} → {change.after.calls:g} calls"
    if change.status == "added":
        return f"`{change.name}` is new: {_ms(after)} per step ({_n_calls(change.after.calls)})"
    if change.status == "removed":
        return f"`{change.name}` is gone: it took {_ms(before)} per step ({_n_calls(change.before.calls)})"
    return f"`{change.name}` went from {_ms(before)} to {_ms(after)} per step (self time{calls})"


def _publish(s: Settings, report: GateReport) -> None:
    """Both first runs' traces, into the trace folder: TensorBoard runs 'baseline' and 'candidate'."""
    for which, path in list(report.traces.items()):
        if not Path(path).exists():
            report.traces.pop(which)
            continue
        try:
            report.traces[which] = str(traces.publish(path, Path(s.trace_dir).resolve() / which))
        except OSError:
            report.traces.pop(which)  # the verdict stands; only the trace is not kept


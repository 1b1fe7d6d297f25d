"""Where a learner's fix is graded: four dependent checks, like check50's.

    1. runs          the file imports, and pipeline(cfg) yields every step
    2. same_results  same samples, same number of steps, same values
    3. evidence      the profiler trace shows the bottleneck is gone
    4. faster        the speed-up clears the lab's threshold for this device

The original and the learner's version run alternately, each in a fresh
process forked from one server that imported torch for the whole check
(round 1: learner then original; round 2: original then learner; ...), so
slow drifts in machine load hit both alike. A version's first run is
profiled; later runs stop after the timed steps. When the speed-up is too
close to the threshold to call after the lab's base rounds, more rounds are
measured (within the lab's round limit and time budget); if it still cannot
be called, the verdict is "inconclusive", never a coin flip. A file that is
still the original, byte for byte, runs once, as both versions. The first
failing check stops the chain: later checks are reported as skipped.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable

from ..measuring import breakdown, evidence, stats, traces
from . import compare
from .. import errors, labs, paths
from ..running import execute, forkserver, sandbox
from ..labs import format_value
from .staging import (NotGraded, Stage, original_reads, original_role, prepare_data, snapshot, stage,  # noqa: F401
                      unreadable, workspace)

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
INCONCLUSIVE = "inconclusive"  # too noisy to call either way: neither a pass nor a fail

# name, title, what it checks (shown with every verdict)
CHECKS = (
    ("runs", "It runs", "your file imports, and pipeline(cfg) yields every step without error"),
    ("same_results", "Same work, same results", "every step processes the same samples and yields the same values as the original"),
    ("evidence", "The bottleneck is gone", "the profiler trace of your version no longer shows the bottleneck"),
    ("faster", "Faster", "your version is faster than the original by the lab's threshold"),
)


# In a lab whose learner profiles (lab 0), the last two checks are about their profile and what it costs.
OWN_PROFILE_CHECKS = {
    "evidence": ("Your own profile", "the trace your profiler wrote: a window of labelled steps, and your answers "
                 "read from it"),
    "faster": ("Low overhead", "your profiled version is at most the lab's overhead slower than the unprofiled one"),
}


# In a lab graded on memory (lab 5), the last check is about the run's peak memory.
LEANER_CHECK = ("Leaner", "your version's peak memory, measured by the checker from outside its process, is at "
                "most the lab's share of the original's")


def checks_of(lab: labs.Lab) -> tuple[tuple[str, str, str], ...]:
    """The four checks, as this lab names them."""
    if lab.gating is not None:
        from . import gate_lab

        return gate_lab.checks_of(lab)
    if lab.leaner:
        return tuple((name, *LEANER_CHECK) if name == "faster" else (name, title, text)
                     for name, title, text in CHECKS)
    if lab.profiling is None:
        return CHECKS
    return tuple((name, *OWN_PROFILE_CHECKS.get(name, (title, text))) for name, title, text in CHECKS)


@dataclass
class Check:
    name: str
    title: str
    description: str
    status: str = SKIPPED
    rationale: str = ""
    expected: str = ""
    actual: str = ""
    help: str = ""
    details: list[str] = field(default_factory=list)

    def passed(self, rationale: str, expected: str = "", actual: str = "", help: str = "") -> None:
        self.status, self.rationale, self.expected, self.actual, self.help = PASSED, rationale, expected, actual, help

    def failed(self, rationale: str, expected: str = "", actual: str = "", help: str = "",
               details: list[str] | None = None) -> None:
        self.status, self.rationale, self.expected, self.actual, self.help = FAILED, rationale, expected, actual, help
        self.details = details or []

    def inconclusive(self, rationale: str, expected: str = "", actual: str = "", help: str = "") -> None:
        self.status, self.rationale, self.expected, self.actual, self.help = INCONCLUSIVE, rationale, expected, actual, help


# 0 passed, 1 failed, 3 cannot grade (the original, a gate's baseline, or the kit failed), 4 too noisy to call.
EXIT_CODES = {PASSED: 0, FAILED: 1, "error": 3, INCONCLUSIVE: 4}


class Verdict:
    """What the checker's and the gate's reports share: a verdict, its exit code, checks by name, a record."""

    verdict: str
    checks: list[Check]

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.verdict, 3)

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["exit_code"] = self.exit_code
        return data


@dataclass
class Report(Verdict):
    lab: str
    number: int
    title: str
    file: str
    label: str
    device: str = "?"
    verdict: str = FAILED  # passed | failed | inconclusive | error
    error: str = ""  # the kit or the original failed, not the learner
    checks: list[Check] = field(default_factory=list)
    comparison: dict[str, float] | None = None
    threshold: float | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, list[float]] = field(default_factory=lambda: {"original": [], "learner": []})
    step_times: dict[str, list[float]] = field(default_factory=lambda: {"original": [], "learner": []})
    latency: dict[str, dict[str, float]] = field(default_factory=dict)  # per-step median and p95, ms
    # The first step (import, set-up, first batch): the medians over each version's runs and what of it
    # is left out of the time ("allowance_s"), in seconds
    first_step: dict[str, float] = field(default_factory=dict)
    breakdown: dict[str, dict[str, Any]] = field(default_factory=dict)  # where a profiled step's time went
    # A lab graded on memory: the peaks, in MB, read from outside the runs ("original", "learner": one per
    # unprofiled round; "device_*" likewise on CUDA; "runs": every run's figures; "measured", "source":
    # how), with the share of the original's peak the lab allows ("share")
    memory: dict[str, Any] = field(default_factory=dict)
    traces: dict[str, str] = field(default_factory=dict)
    trace_sha256: dict[str, str] = field(default_factory=dict)  # as each run sent it, the moment it was written
    # A torchrun job's traces, every rank's in order ("traces" holds rank 0's), with their fingerprints
    rank_traces: dict[str, list[str]] = field(default_factory=dict)
    rank_trace_sha256: dict[str, list[str]] = field(default_factory=dict)
    file_sha256: str = ""  # of the copy of the learner's file taken when the check started: what was graded
    audited: bool = True  # False only when the source audit was turned off (the kit's own tests)
    # Whether every run was in a sandbox of the engine's, and which (``sandbox.Engine.describe``): an
    # unsandboxed grade rests on the learner's file keeping to itself
    sandboxed: bool = False
    sandbox: str = ""
    refused: list[dict[str, Any]] = field(default_factory=list)  # what the source audit refused, line by line
    runs_dir: str = ""
    output: str = ""
    traceback: str = ""
    duration_s: float = 0.0
    stopped: str = ""  # why the measuring stopped: decided | round limit | time budget
    against: str = "against the original"  # what the file is checked against, in words (lab 7: the gates it runs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Report":
        """A report from ``as_dict``'s record (a grading's journal)."""
        known, of_check = {f.name for f in fields(cls)}, {f.name for f in fields(Check)}
        values = {k: v for k, v in data.items() if k in known}
        values["checks"] = [Check(**{k: v for k, v in c.items() if k in of_check}) for c in data["checks"]]
        return cls(**values)


Progress = Callable[[str], None]


def trace_dir(lab: labs.Lab, label: str) -> Path:
    """``runs/01-dataloader/original``: one TensorBoard run per lab and version."""
    return paths.runs_dir() / lab.slug / label


def where_to_look(lab: labs.Lab) -> str:
    return f"run `proflab hint {lab.name}` for a hint, and `proflab tensorboard` to compare the traces"


def runtime_failure(check: Check, outcome: execute.Outcome, lab: labs.Lab, timeout: float) -> None:
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


def check(
    lab: labs.Lab,
    file: Path,
    label: str = "yours",
    device: str = "auto",
    rounds: int | None = None,
    timeout_s: float | None = None,
    on_progress: Progress = lambda message: None,
    audited: bool = True,
    workdir: Path | None = None,
    staged: Stage | None = None,
) -> Report:
    """Grade ``file`` against ``lab``'s original. Never raises for a learner's mistake.

    The file is graded from a copy taken when the check starts (saving it
    again during the check changes nothing), run in ``workdir`` (default: its
    own folder). Each check's traces are written apart, then published to
    ``runs/<lab>/``. A failure of the kit or the machine (a full disk, lab
    data that cannot be built) gives the verdict "error" ("not graded").

    ``audited=False`` skips the source audit; the kit's own tests use it to
    show that the checks after it catch what it would have refused. The
    report says so. ``staged``: the check, set up ahead of its turn
    (``staging.stage``, for the same ``lab``, ``file`` and ``workdir``,
    inside the same ``forkserver.session``); it is closed with the check.
    """
    if lab.gating is not None:  # lab 7: the exercise is a gate's settings, run on a known fix
        from . import gate_lab

        return gate_lab.check(lab, file, label, device, on_progress)
    started = time.perf_counter()
    engine = sandbox.engine()
    report = Report(lab=lab.name, number=lab.number, title=lab.title, file=str(file), label=label,
                    checks=[Check(*c) for c in checks_of(lab)], runs_dir=str(paths.runs_dir() / lab.slug),
                    audited=audited, sandboxed=engine.ok, sandbox=engine.describe())
    rounds = rounds or lab.workload.rounds
    timeout = timeout_s or lab.workload.timeout_s
    try:
        with forkserver.session():  # torch is imported once for the check's runs, not once each
            staged = staged or stage(lab, file, workdir)  # both versions' servers start importing now
            try:
                if staged.error:
                    report.verdict, report.error = "error", staged.error
                    return report
                report.file_sha256 = labs.sha256(staged.learner)
                try:
                    # While the servers import, the data are verified and the file audited; the first
                    # timed run waits for every server of the session to be ready.
                    data = prepare_data(lab)
                    forkserver.settle()
                    _grade(lab, staged.learner, label, device, rounds, timeout, report, on_progress,
                           workdir=staged.workdir, work=staged.work, shown_as=Path(file), data=data,
                           preload=staged.preload, original=staged.original)
                finally:
                    _publish_traces(lab, label, report)
                    name_the_file(report, staged.learner, Path(file))
            finally:
                staged.close()
    except NotGraded as e:
        report.verdict = "error"
        report.error = f"{e}. This is the kit's or the machine's failure, not your fix's"
    finally:
        report.duration_s = time.perf_counter() - started
    return report


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


def _publish_traces(lab: labs.Lab, label: str, report: Report) -> None:
    """The traces read for the verdict, moved from the check's private folder to its TensorBoard runs."""
    if report.rank_traces:
        _publish_rank_traces(lab, label, report)
        return
    if report.traces.get("original") and report.traces.get("original") == report.traces.get("learner"):
        source = Path(report.traces["learner"])  # one run stood for both (an unchanged file): a copy for each
        if source.exists():
            copy = source.parent / "original" / ("original." + source.name.split(".", 1)[-1])
            copy.parent.mkdir(exist_ok=True)
            shutil.copyfile(source, copy)
            report.traces["original"] = str(copy)
    for which, path in list(report.traces.items()):
        if not Path(path).exists():
            continue
        try:
            report.traces[which] = str(traces.publish(path, trace_dir(lab, "original" if which == "original"
                                                                        else label)))
        except OSError:
            report.traces.pop(which)  # the verdict stands; only its view in TensorBoard is missing


def _publish_rank_traces(lab: labs.Lab, label: str, report: Report) -> None:
    """A torchrun job's traces: every rank's into the version's TensorBoard run, one worker per rank."""
    same = report.rank_traces.get("original") == report.rank_traces.get("learner")
    for which in ("original", "learner"):
        paths = [p for p in report.rank_traces.get(which, []) if p and Path(p).exists()]
        if not paths:
            continue
        if same and which == "original":  # one job stood for both (an unchanged file): a copy for each
            copies = Path(paths[0]).parent / "original"
            copies.mkdir(exist_ok=True)
            paths = [shutil.copyfile(p, copies / Path(p).name) for p in paths]
        try:
            published = traces.publish_all(paths, trace_dir(lab, "original" if which == "original" else label))
        except OSError:
            report.traces.pop(which, None)  # the verdict stands; only its view in TensorBoard is missing
            continue
        report.rank_traces[which] = [str(p) for p in published]
        report.traces[which] = str(published[0])


def name_the_file(report: Report, snapshot_path: Path, file: Path) -> None:
    """What the report says about the snapshot, said of the learner's own file."""
    report.file = str(file)
    for where in {str(snapshot_path), str(snapshot_path.resolve())}:
        report.traceback = report.traceback.replace(where, str(file))
        report.error = report.error.replace(where, str(file))
        report.output = report.output.replace(where, str(file))
        for c in report.checks:
            c.rationale, c.actual = c.rationale.replace(where, str(file)), c.actual.replace(where, str(file))
            c.details = [line.replace(where, str(file)) for line in c.details]


def _grade(lab, file, label, device, rounds, timeout, report: Report, on_progress: Progress, *,
           workdir: Path, work: Path, shown_as: Path, original: Path, data: Path | None = None,
           preload: tuple[str, ...] | None = None) -> None:
    runs, same, proof, faster = (report.check(n) for n, *_ in CHECKS)
    data_print = fingerprint(data)
    if labs.sha256(original) != lab.original_sha256:
        report.verdict = "error"
        report.error = (f"{lab.original} was edited, so there is nothing trustworthy to compare against. "
                        f"Put your changes in {lab.exercise.name}, then restore the original "
                        f"(`git checkout -- {paths.display(lab.original)}`).")
        return
    try:
        compile(file.read_bytes(), str(file), "exec")
    except SyntaxError as e:  # no need to start a process to find this one
        runtime_failure(runs, execute.Outcome("learner", file, "error", result={
            "kind": "syntax", "message": f"SyntaxError: {e.msg}", "file": str(file), "line": e.lineno,
            "code": (e.text or "").strip()}), lab, timeout)
        report.verdict = FAILED
        return
    if report.audited and _refused(lab, file, report, runs):
        report.verdict = FAILED
        return

    originals: list[execute.Outcome] = []
    learners: list[execute.Outcome] = []
    loaded: dict[str, evidence.Trace] = {}  # the first runs' traces, read once by execute, until the evidence
    measuring_since = time.perf_counter()

    seeds: dict[int, int] = {}

    def run_one(which: str, round_no: int) -> execute.Outcome:
        nonlocal device
        first = not (originals if which == "original" else learners)
        name = "original" if which == "original" else label
        what = "original" if which == "original" else Path(file).name
        on_progress(f"round {round_no}/{rounds}: running the {what}" if round_no <= rounds else
                    f"extra round {round_no}: the speed-up is close to the threshold, measuring again ({what})")
        try:
            outcome = execute.run(lab, original if which == "original" else file, name, device=device,
                                  trace_dir=work / "traces" / which if first else None, timeout_s=timeout,
                                  checking=True, workdir=lab.folder if which == "original" else workdir,
                                  shown_as=lab.original if which == "original" else shown_as,
                                  steps=_steps(lab, which, first),
                                  preload=preload, seed=seeds.setdefault(round_no, round_seed()),
                                  role=original_role(lab) if which == "original" else str(file),
                                  reads=original_reads() if which == "original" else ())
        except errors.KitError as e:
            raise NotGraded(str(e)) from None
        if outcome.status == "kit":
            raise NotGraded(outcome.result.get("message", "the kit failed"))
        if which == "learner" and (changed := tampering(original, lab, data, data_print)):
            outcome.status, outcome.result = "error", {"kind": "tampered", "message": changed}
        if outcome.ok and device == "auto":  # both versions then run where the first one did
            device = outcome.result["device"]
        if outcome.ok and first and outcome.result.get("trace"):
            report.traces[which] = outcome.result["trace"]
            report.trace_sha256[which] = outcome.result.get("trace_sha256") or ""
            if lab.distributed is not None:
                report.rank_traces[which] = list(outcome.result.get("rank_traces") or [])
                report.rank_trace_sha256[which] = list(outcome.result.get("rank_trace_sha256") or [])
                loaded.update({f"{which}@{rank}": t for rank, t in enumerate(outcome.rank_traces) if t is not None})
                outcome.rank_traces = []
            if outcome.trace is not None:
                loaded[which] = outcome.trace
                outcome.trace = None
        return outcome

    # A file that is still the original, byte for byte (the untouched exercise), runs once: that run is
    # the original's too, and the evidence, read from its trace, cannot show a change.
    unchanged = report.file_sha256 == lab.original_sha256

    round_no = 0
    while True:
        round_no += 1
        order = ("learner", "original") if round_no % 2 else ("original", "learner")
        for which in order:
            if unchanged and which == "original":
                outcome = _as_original(learners[0], report, loaded)
            else:
                outcome = run_one(which, round_no)
            if which == "learner":
                if not learners:
                    report.output = outcome.stdout[-2000:]
                if not outcome.ok:
                    report.traceback = outcome.result.get("traceback", "") or outcome.stderr
                    if outcome.result.get("kind") == "short":
                        done = outcome.result.get("steps_done", 0)
                        runs.passed(f"{Path(file).name} ran, but stopped early", actual=f"{done} steps")
                        same.failed(f"pipeline(cfg) yielded {done} steps; the original yields "
                                    f"{lab.workload.total_steps} for the same data",
                                    f"{lab.workload.total_steps} steps", f"{done} steps",
                                    "keep every step of the original: the same batches, the same batch size")
                    else:
                        runtime_failure(runs, outcome, lab, timeout)
                    report.verdict = FAILED
                    return
                learners.append(outcome)
            else:
                if not outcome.ok:
                    report.verdict = "error"
                    report.error = (f"the original itself failed ({outcome.result.get('message', outcome.status)}); "
                                    "this is a problem of the kit or the machine, not of your fix")
                    report.traceback = outcome.result.get("traceback", "") or outcome.stderr
                    return
                originals.append(outcome)
        report.device = device

        for index in range(len(report.timings["learner"]), len(learners)):
            run = learners[index]
            diff = differs(lab, originals[index], run)  # the original's run on the same round's inputs
            unread = (run.result.get("storage") or {}).get("unread")
            if diff is not None or unread:
                runs.passed(f"{Path(file).name} ran all {lab.workload.total_steps} steps",
                            actual=f"{run.result['steps_done']} steps in {run.wall_s:.1f} s")
                if diff is not None:
                    same.failed(diff.message, "the original's values, step by step", f"step {diff.step} differs",
                                diff.hint or where_to_look(lab))
                else:
                    same.failed(unread, "every sample read from the lab's storage", "samples that did not "
                                "come from storage", "read every sample through the lab's dataset (PhotoDataset): "
                                "make the reads overlap (DataLoader workers, threads), not disappear")
                report.verdict = FAILED
                return
            for compared in (run, originals[index]):  # the checker's memory does not grow with every run's values
                compared.result.pop("results", None)
                compared.result.pop("rank_results", None)
        allowance = first_step_allowance(lab, originals)
        report.timings["original"] = [counted_step_s(o, allowance) for o in originals]
        report.timings["learner"] = [counted_step_s(o, allowance) for o in learners]
        report.first_step = {"allowance_s": allowance, **{
            which: stats.median([float(o.result.get("first_step_s", 0.0)) for o in runs_of])
            for which, runs_of in (("original_s", originals), ("learner_s", learners))}}
        report.step_times["original"] = [t for o in originals for t in o.result["step_times"]]
        report.step_times["learner"] = [t for o in learners for t in o.result["step_times"]]
        if lab.leaner:
            _record_peaks(report, originals, learners)

        if round_no == 1:
            runs.passed(f"{Path(file).name} ran all {lab.workload.total_steps} steps on {report.device}",
                        actual=f"{learners[0].result['steps_done']} steps")
            same.passed(f"all {lab.workload.total_steps} steps match the original "
                        f"({', '.join(r.key for r in lab.results)})",
                        expected="the original's values", actual="equal within tolerance")
            if lab.profiling is not None:
                proven = _own_profile(lab, report, proof, learners[0], loaded)
            else:
                proven = _evidence(lab, report, proof, learners[0], loaded, file, same)
            loaded.clear()  # the traces' events are not needed after this
            if not proven:
                report.verdict = FAILED
                return
            if unchanged:
                report.verdict = "error"
                report.error = (f"the lab's original passes its own check ({proof.title}): the lab cannot tell "
                                "a fix from no change here")
                return
        if round_no >= rounds:
            report.stopped = _stop_reason(lab, report, round_no, time.perf_counter() - measuring_since)
            if report.stopped:
                break

    _faster(lab, report, faster, file)
    report.verdict = {PASSED: PASSED, FAILED: FAILED}.get(faster.status, INCONCLUSIVE)


def _as_original(run: execute.Outcome, report: Report, loaded: dict[str, evidence.Trace]) -> execute.Outcome:
    """The run of a file that is the original, byte for byte, taken as the original's run too."""
    for table in (report.traces, report.trace_sha256, report.rank_traces, report.rank_trace_sha256, loaded):
        if "learner" in table:
            table["original"] = table["learner"]
    for key in [k for k in loaded if k.startswith("learner@")]:
        loaded["original@" + key.split("@", 1)[1]] = loaded[key]
    values = {"results": list(run.result["results"])}
    if "rank_results" in run.result:
        values["rank_results"] = [list(v) for v in run.result["rank_results"]]
    return replace(run, version="original", result={**run.result, **values})


def _expected(original: execute.Outcome, run: execute.Outcome) -> list[dict]:
    """The values the original's run yielded, for as many steps as ``run`` was asked for (a later run
    stops after its timed steps)."""
    return original.result["results"][:run.steps_asked]


def differs(lab: labs.Lab, original: execute.Outcome, run: execute.Outcome) -> compare.Difference | None:
    """Where ``run``'s values differ from those of the original's run on the same inputs (a torchrun
    job's: rank by rank)."""
    if lab.distributed is None:
        return compare.compare(_expected(original, run), run.result["results"], lab.results)
    expected = [values[:run.steps_asked] for values in original.result["rank_results"]]
    return compare.compare_ranks(expected, run.result.get("rank_results"), lab.results, lab.distributed)


def _refused(lab: labs.Lab, file: Path, report: Report, runs: Check) -> bool:
    """The source audit, before anything runs: a file that reaches for the checker's own machinery is refused."""
    from . import audit

    findings = audit.audit_file(file, allow=lab.audit.allow, refuse=lab.audit.refuse)
    if not findings:
        return False
    report.refused = [asdict(f) for f in findings]
    first = findings[0]
    more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
    runs.failed(f"the checker refuses to run {file.name}: line {first.line}{more}: {first.message}",
                "a lab file that leaves the checker's process alone",
                f"{len(findings)} line{'s' if len(findings) > 1 else ''} refused",
                "change the lines shown; the instructor guide's 'What the checker guards against' says why "
                "each is refused",
                [f"{f.line:>4} | {f.code}   ({f.rule})" for f in findings[:8]])
    return True


# The learner's first step (its import, the pipeline's set-up and the first
# step's work) may run this much longer than the original's, for scheduling
# noise, before the excess counts as work moved into it.
FIRST_STEP_SLACK = 1.05
FIRST_STEP_SLACK_S = 0.02


def first_step_allowance(lab: labs.Lab, originals: list[execute.Outcome]) -> float:
    """How long a version's first step may take and still be left out of its time, in seconds.

    The first step imports the lab file and builds the pipeline (data, model,
    DataLoader workers) before its work, so it is not timed, but only up to what the original's first step
    took (the median over its runs so far), a little slack, and the lab's
    ``startup_s`` (starting worker processes, for instance). What a version
    does beyond that in its first step is work moved out of the timed steps,
    and counts. Time spent compiling (torch.compile) is left out on top.
    """
    firsts = [float(o.result.get("first_step_s", 0.0)) for o in originals]
    return (stats.median(firsts) if firsts else 0.0) * FIRST_STEP_SLACK + FIRST_STEP_SLACK_S + lab.workload.startup_s


def counted_step_s(run: execute.Outcome, allowance_s: float) -> float:
    """The time per step the speed-up compares: every warm-up and timed step, stamped by the checker,
    less the time spent compiling and at most ``allowance_s`` of the first step."""
    r = run.result
    if "span_s" not in r:  # a run without the checker's stamps (never the case in a check)
        return run.mean_step_s
    left_out = float(r["compile_s"]) + min(float(r["first_step_s"]), allowance_s)
    return max(0.0, float(r["span_s"]) - left_out) / max(int(r["counted_steps"]), 1)


def _stop_reason(lab: labs.Lab, report: Report, done: int, elapsed_s: float) -> str:
    """Why the measuring stops after ``done`` rounds, or "" for another round.

    Another round is run while the speed-up is too close to the threshold to
    call, up to the lab's round limit and while it fits in its time budget.
    """
    if lab.leaner:  # decided, or a peak that could not be read (no more rounds will read it)
        if _memory_decision(lab, report)[0] not in (stats.UNCLEAR, "too few"):
            return "decided"
    elif stats.compare(*_series(lab, report)).decide(lab.threshold(report.device)) != stats.UNCLEAR:
        return "decided"
    if done >= lab.workload.round_limit:
        return "round limit"
    if elapsed_s + elapsed_s / done > lab.workload.budget_s:
        return "time budget"
    return ""


# A step may run this much slower while profiled before it is suspected of
# doing work only then (the profiler itself costs up to ~2.5x on lab 2's
# thousands of tiny operators), and by at least this many seconds. How a
# profiled step is timed: _same_work_when_profiled.
PROFILED_SLOWDOWN_MAX = 5.0
PROFILED_SLOWDOWN_MIN_S = 0.0005


def _busy_per_step(trace: evidence.Trace) -> list[float]:
    """Seconds each profiled step spent inside operators (the outermost ``cpu_op`` events of every thread,
    summed): the work the step did, without the profiler's own book-keeping between operators, which on a
    step of a millisecond costs several times the step itself."""
    from ..measuring.evidence import _outermost

    busy = []
    for step in trace.steps:
        ops = [e for e in trace.events if e.cat == "cpu_op" and step.ts <= e.ts < step.end]
        busy.append(sum(e.dur for e in _outermost(ops)) / 1e6)
    return busy


def _same_work_when_profiled(run: execute.Outcome, trace: evidence.Trace, same: Check) -> bool:
    """The profiled steps are the timed steps' evidence only if they do the same work.

    What a profiled step did is read from the trace: the time it spent inside operators
    (``_busy_per_step``), not its length, which the profiler's own book-keeping stretches several times
    over on a step of a millisecond (lab 2's index_add fix: 1.1 ms timed, 9.1 ms profiled, with little
    more time inside its operators). A version that works only when profiled spends more time inside
    operators in one profiled step than a timed step lasts, many times over; a sound fix never does (its
    timed step holds the same operators, and more: Python, the loader, waits).
    """
    busy = _busy_per_step(trace)
    if not busy:
        return True
    profiled = sorted(busy)[len(busy) // 2]
    timed = max(run.mean_step_s, 1e-9)
    if profiled > PROFILED_SLOWDOWN_MAX * timed and profiled - timed > PROFILED_SLOWDOWN_MIN_S:
        same.failed(f"a profiled step spent {profiled / timed:.0f}× as long inside operators as a whole timed "
                    f"step took ({profiled * 1000:.1f} ms against {timed * 1000:.1f} ms)",
                    f"at most {PROFILED_SLOWDOWN_MAX:g}× (the operators' own cost of being recorded)",
                    f"{profiled / timed:.0f}×", "do the same work in every step, profiled or not")
        return False
    return True


# A profiled step in the trace may differ from the same step stamped by the
# checker by the profiler's own book-keeping between steps; more than this
# factor either way means the trace is not of these steps.
TRACE_STEP_FACTOR = 2.0
TRACE_STEP_SLACK_S = 0.02


def _trace_matches_steps(lab: labs.Lab, trace: evidence.Trace, run: execute.Outcome, proof: Check) -> bool:
    """The trace's steps against the profiled steps the checker stamped from outside: as many, as long."""
    expected = lab.workload.profile_steps - 1  # the schedule's first profiled step only warms the profiler up
    steps = trace.steps
    stamped = run.result.get("profiled_steps_s", [])[1:]
    in_trace = sum(s.dur for s in steps) / 1e6
    outside = sum(stamped)
    if len(steps) != expected or not (
            outside / TRACE_STEP_FACTOR - TRACE_STEP_SLACK_S <= in_trace <= outside * TRACE_STEP_FACTOR + TRACE_STEP_SLACK_S):
        proof.failed("the trace does not match the profiled steps the checker saw",
                     f"{expected} steps taking about {outside * 1000:.0f} ms in all",
                     f"{len(steps)} steps taking {in_trace * 1000:.0f} ms",
                     "leave torch.profiler and the trace files as they are")
        return False
    return True


def _evidence(lab: labs.Lab, report: Report, proof: Check, learner_run: execute.Outcome,
              loaded: dict[str, evidence.Trace], file: Path | None, same: Check) -> bool:
    ev = lab.evidence
    if "learner" not in report.traces or "original" not in report.traces:
        proof.failed("no trace was written", "a trace from each version", "none",
                     "the profiled steps run after the timed ones: did the pipeline stop early? "
                     "Leave torch.profiler as it is.")
        return False
    changed = [which for which, path in report.traces.items()
               if labs.sha256(Path(path)) != report.trace_sha256.get(which)]
    changed += [which for which, paths in report.rank_traces.items()
                if [labs.sha256(Path(p)) if p else "" for p in paths] != report.rank_trace_sha256.get(which)]
    if changed:
        proof.failed("the trace was changed after the profiler wrote it", "the trace as the profiler wrote it",
                     "a different file", "leave the trace files alone: the checker reads them as they were written")
        return False
    try:  # each trace read once, for every figure taken from it
        traces = {which: loaded.get(which) or evidence.load(path) for which, path in report.traces.items()}
        ranked = {which: [loaded.get(f"{which}@{rank}") or evidence.load(path) for rank, path in enumerate(paths)]
                  for which, paths in report.rank_traces.items()}  # a torchrun job's: every rank's
    except evidence.TraceError as e:
        proof.failed(f"the trace could not be read: {e}", "a readable trace", "unreadable")
        return False
    if not _trace_matches_steps(lab, traces["learner"], learner_run, proof):
        return False
    if not _same_work_when_profiled(learner_run, traces["learner"], same):
        report.verdict = FAILED
        return False
    if ev.work_ops:
        names = ", ".join(ev.work_ops)
        work = evidence.work_flops(traces["learner"], ev.work_ops)
        needed = ev.min_work_vs_original * evidence.work_flops(traces["original"], ev.work_ops).value
        if work.value < needed:
            proof.failed(f"the profiled steps did not do the work: {ev.work}",
                         f"at least {needed / 1e6:.1f} MFLOPs per step in {names} "
                         f"({ev.min_work_vs_original:g}× the original's)",
                         f"{work.summary}",
                         "compute each step's results in that step, from its own batch: not at import time, "
                         "not in the warm-up steps, not from a cache")
            return False
    if ev.work_ops and ev.same_shapes:  # the lab's pieces (lab 6's micro-batches) are part of the lesson
        theirs, other = evidence.other_shapes(ranked.get("original") or [traces["original"]],
                                              ranked.get("learner") or [traces["learner"]], ev.work_ops)
        if other:
            proof.failed(f"{ev.work} ran on other shapes than the original's", "the original's: " + "; ".join(theirs[:4]),
                         "; ".join(other[:4]) + (f" (and {len(other) - 4} more)" if len(other) > 4 else ""),
                         ev.same_shapes)
            return False
    try:
        original = _measure(ev.metric, traces["original"], ranked.get("original"))
    except evidence.TraceError as e:  # the kit's own profile of the original: this torch records no such figure
        raise NotGraded(f"the original's trace has no {ev.label} to compare with ({e})") from None
    except KeyError as e:
        proof.failed(f"the trace could not be read: {e}", "a readable trace", "unreadable")
        return False
    try:
        learner = _measure(ev.metric, traces["learner"], ranked.get("learner"))
    except (KeyError, evidence.TraceError) as e:
        proof.failed(f"the trace could not be read: {e}", "a readable trace", "unreadable",
                     "leave torch.profiler and the trace files as they are")
        return False
    report.evidence = {"metric": ev.metric, "label": ev.label, "unit": ev.unit,
                       "original": asdict(original), "learner": asdict(learner)}
    report.breakdown = {which: asdict(breakdown.of(trace)) for which, trace in traces.items()}
    expected = ev.expectation(original.value)
    actual = f"{format_value(learner.value, ev.unit)}: {learner.summary} (original: {original.summary})"
    if ev.holds(learner.value, original.value):
        proof.passed(f"{ev.label}: {format_value(original.value, ev.unit)} → {format_value(learner.value, ev.unit)}",
                     expected, actual, ev.where)
        if ev.more_to_gain_above is not None and learner.value > ev.more_to_gain_above * original.value:
            proof.details.append(f"more to gain: {ev.label} is still {format_value(learner.value, ev.unit)} "
                                 f"({learner.summary}), over {ev.more_to_gain_above:.0%} of the original's "
                                 f"{format_value(original.value, ev.unit)}; look at {ev.where}")
        return True
    why = _not_a_fix(lab, file) if file is not None else []
    proof.failed(f"{ev.label} is still {format_value(learner.value, ev.unit)} "
                 f"(the original: {format_value(original.value, ev.unit)})",
                 expected, actual, why[0] if why else f"{ev.where}; {where_to_look(lab)}", details=why)
    return False


def _steps(lab: labs.Lab, which: str, first: bool) -> dict[str, Any] | None:
    """What a run takes besides the manifest's steps. A version's first run is profiled; the later ones
    only time it, so stop after the timed steps (a lab graded on memory runs every step each time: its
    peak grows with the steps, and each round must compare the same). Lab 0: the learner's file profiles
    itself; the original's first run is profiled by the kit after its timed steps, its record of the work."""
    if lab.profiling is not None:
        if which == "original" and first and lab.profiling.kit_steps:
            return {"profile_steps": lab.profiling.kit_steps, "learner_profiles": False}
        return None
    return None if first or lab.leaner else {"profile_steps": 0}


def _measure(metric: str, trace: evidence.Trace, ranks: list[evidence.Trace] | None) -> evidence.Measure:
    """A trace's figure; a torchrun job's is its ranks' worst (the highest), each rank's said."""
    if not ranks:
        return evidence.measure(metric, trace)
    each = [evidence.measure(metric, t) for t in ranks]
    worst = max(each, key=lambda m: m.value)
    return evidence.Measure(value=worst.value, unit=worst.unit,
                            summary="; ".join(f"rank {rank}: {m.summary}" for rank, m in enumerate(each)),
                            details={**worst.details, "ranks": float(len(each))})


def _own_profile(lab: labs.Lab, report: Report, proof: Check, run: execute.Outcome,
                 loaded: dict[str, evidence.Trace]) -> bool:
    """Lab 0: the trace the learner's own profiler wrote, and the answers they read from it."""
    from ..measuring import answers

    prof, r = lab.profiling, run.result
    found, trace = r.get("traces_found", 0), loaded.get("learner")
    window = "torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)"
    if found == 0:
        proof.failed("your code wrote no profile", "a trace from torch.profiler's tensorboard_trace_handler, in "
                     "cfg.trace_dir", "no trace", "wrap the training loop in torch.profiler.profile(..., "
                     f"schedule={window}, on_trace_ready=tensorboard_trace_handler(cfg.trace_dir)), and call "
                     "prof.step() after every step")
        return False
    if found > 1:
        proof.failed(f"your code wrote {found} traces", "one trace: one window of steps", f"{found} traces",
                     f"profile one window: {window}")
        return False
    if trace is None and r.get("trace_error") == execute.NO_STEPS:
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
    from ..measuring import answers

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


def _series(lab: labs.Lab, report: Report, kind: str = "host") -> tuple[list, list]:
    """What the fourth check compares, paired by round: step times, or (a lab graded on memory) the peaks
    of ``kind`` ("host", "device") of the unprofiled runs."""
    if lab.leaner:
        prefix = "" if kind == "host" else "device_"
        return report.memory.get(prefix + "original", []), report.memory.get(prefix + "learner", [])
    return report.timings["original"], report.timings["learner"]


def _record_peaks(report: Report, originals: list[execute.Outcome], learners: list[execute.Outcome]) -> None:
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


def _memory_decision(lab: labs.Lab, report: Report) -> tuple[str, str, stats.Comparison | None]:
    """A lab graded on memory: (decision, the kind that decides, its comparison). Every kind of peak
    graded must pass; the worse one is the one reported. "too few": no unprofiled round yet;
    "unreadable": a peak that could not be read from outside."""
    kinds = ["host"] + (["device"] if "device_original" in report.memory else [])
    worst: tuple[str, str, stats.Comparison | None] | None = None
    order = {stats.FAIL: 0, stats.UNCLEAR: 1, stats.PASS: 2}
    for kind in kinds:
        original, learner = _series(lab, report, kind)
        if not original:
            return "too few", kind, None
        if any(v is None or v <= 0 for v in original + learner):
            return "unreadable", kind, None
        cmp = stats.compare(original, learner)
        decision = cmp.decide(lab.threshold(report.device))  # 1 / the lab's share
        if worst is None or (order[decision], cmp.speedup) < (order[worst[0]], worst[2].speedup):
            worst = (decision, kind, cmp)
    return worst


def _calls(path: Path) -> set[str]:
    """The functions a file calls, as written (``gc.collect``, ``torch.cuda.empty_cache``, ``collect``)."""
    import ast

    try:
        tree = ast.parse(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return set()
    return {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}


def _not_a_fix(lab: labs.Lab, file: Path) -> list[str]:
    """Why the calls the learner added that look like a fix are none (the lab's ``[evidence.not_a_fix]``):
    a call the file makes and the original does not, named in full or by its last part (``collect`` after
    ``from gc import collect``)."""
    if lab.evidence is None or not lab.evidence.not_a_fix:
        return []
    mine, theirs = _calls(file), _calls(lab.original)

    def calls(names: set[str], key: str) -> bool:
        return any(n == key or n.endswith("." + key) or key.endswith("." + n) for n in names)

    return [f"{key}: {why}" for key, why in lab.evidence.not_a_fix if calls(mine, key) and not calls(theirs, key)]


def _faster(lab: labs.Lab, report: Report, faster: Check, file: Path | None = None) -> None:
    if lab.leaner:
        _leaner(lab, report, faster, file)
        return
    cmp = stats.compare(report.timings["original"], report.timings["learner"])
    threshold = lab.threshold(report.device)
    report.comparison = cmp.as_dict()
    report.threshold = threshold
    lat = {which: {"median_ms": 1000 * stats.median(times), "p95_ms": 1000 * stats.quantile(times, 0.95)}
           for which, times in report.step_times.items()}
    report.latency = lat
    measured = (f"{cmp.speedup:.2f}× (mean step {cmp.original_s * 1000:.1f} ms → {cmp.learner_s * 1000:.1f} ms; "
                f"median {lat['original']['median_ms']:.1f} ms → {lat['learner']['median_ms']:.1f} ms, "
                f"p95 {lat['original']['p95_ms']:.1f} ms → {lat['learner']['p95_ms']:.1f} ms; "
                f"rounds {cmp.ratio_low:.2f}–{cmp.ratio_high:.2f}×, noise ±{cmp.noise:.0%})")
    expected = f"at least {threshold:g}× on {report.device}"
    interval = (f"95% interval {cmp.ci_low:.2f}–{cmp.ci_high:.2f}×" if cmp.rounds > 1
                else "one round: no interval")
    decision = cmp.decide(threshold)
    if lab.overhead:
        _overhead(lab, report, faster, cmp, decision, measured)
        return
    if decision == stats.PASS:
        faster.passed(f"{cmp.speedup:.2f}× faster than the original over {cmp.rounds} paired rounds "
                      f"({interval})", expected, measured)
    elif decision == stats.FAIL:
        faster.failed(f"{cmp.speedup:.2f}× is below the {threshold:g}× this lab asks for on {report.device} "
                      f"({interval})", expected, measured, where_to_look(lab))
    else:
        limit = {"round limit": f"the lab's limit of {lab.workload.round_limit} rounds",
                 "time budget": f"the lab's {lab.workload.budget_s:g} s time budget"}.get(report.stopped, "")
        faster.inconclusive(
            f"inconclusive: too noisy to tell. {cmp.speedup:.2f}× over {cmp.rounds} rounds"
            f"{f' ({limit})' if limit else ''}, but the {interval} straddles the {threshold:g}× threshold",
            expected, measured,
            "the machine was too busy to trust these timings: close other programs (or wait for other "
            "jobs to finish) and check again; --rounds N starts with more rounds")
    faster.details = _start_up_paid(lab, report, cmp)


# Said in the report when the first step's time beyond its allowance is at least this share of the
# version's counted time.
START_UP_SHARE_SHOWN = 0.2


def _start_up_paid(lab: labs.Lab, report: Report, cmp: stats.Comparison) -> list[str]:
    """A line for a version whose first step ran past what is left out of it, when that excess weighs."""
    first = report.first_step
    if not first:
        return []
    excess = first["learner_s"] - first["allowance_s"]
    counted = cmp.learner_s * max(lab.workload.warmup_steps + lab.workload.timed_steps - 1, 1)
    if excess <= 0 or counted <= 0 or excess / counted < START_UP_SHARE_SHOWN:
        return []
    startup = f" + {lab.workload.startup_s:g} s for the lab's start-up work" if lab.workload.startup_s else ""
    return [f"start-up: your first step took {first['learner_s']:.2f} s; {first['allowance_s']:.2f} s of it is "
            f"left out (the original's first step, {first['original_s']:.2f} s, with a little slack{startup}); "
            f"the other {excess:.2f} s count, {excess / counted:.0%} of your counted time. Work done before the "
            "first batch (worker processes started, batches prefetched, data read ahead) is paid for like the "
            "steps' own"]


def _overhead(lab: labs.Lab, report: Report, faster: Check, cmp: stats.Comparison, decision: str,
              measured: str) -> None:
    """A lab graded on overhead (lab 0): how much slower the profiled version is than the unprofiled one."""
    limit = lab.overhead.get(report.device, lab.overhead["cpu"])
    cost = 1.0 / cmp.speedup - 1.0 if cmp.speedup else float("inf")
    measured = measured.replace(f"{cmp.speedup:.2f}× (", f"{cost:+.0%}, {cmp.speedup:.2f}× the speed (", 1)
    interval = (f"95% interval {1 / cmp.ci_high - 1:+.1%} to {1 / cmp.ci_low - 1:+.1%}"
                if cmp.rounds > 1 and cmp.ci_low > 0 else "one round: no interval")
    expected = f"at most {limit:+.0%} on {report.device}"
    if decision == stats.PASS:
        faster.passed(f"your profiler costs {cost:+.0%} over the unprofiled original, over {cmp.rounds} paired "
                      f"rounds ({interval})", expected, measured)
    elif decision == stats.FAIL:
        faster.failed(f"your profiler costs {cost:+.0%} over the unprofiled original, more than the {limit:.0%} "
                      f"this lab allows on {report.device} ({interval})", expected, measured,
                      "profile fewer steps (a shorter active window), and leave record_shapes, profile_memory "
                      "and with_stack off unless you need them")
    else:
        faster.inconclusive(f"inconclusive: too noisy to tell. {cost:+.0%} over {cmp.rounds} rounds, but the "
                            f"{interval} straddles the {limit:.0%} limit", expected, measured,
                            "the machine was too busy to trust these timings: close other programs and check "
                            "again; --rounds N starts with more rounds")


def _held_not_resident(report: Report) -> float:
    """How much of the learner's host peak was held but not resident (median over its unprofiled runs, MB):
    0 where that is within a tenth of its resident peak (allocators keep some memory of their own)."""
    runs = report.memory.get("runs", {}).get("learner", [])[1:]
    gaps = [r["committed_peak_mb"] - max(r["rss_peak_mb"], r["hwm_peak_mb"]) for r in runs
            if r.get("committed_peak_mb") is not None and r.get("rss_peak_mb") is not None]
    resident = [max(r["rss_peak_mb"], r["hwm_peak_mb"]) for r in runs if r.get("rss_peak_mb") is not None]
    if not gaps or not resident:
        return 0.0
    gap = stats.median(gaps)
    return gap if gap > 0.1 * stats.median(resident) else 0.0


def _leaner(lab: labs.Lab, report: Report, faster: Check, file: Path | None) -> None:
    """A lab graded on memory (lab 5): the runs' peaks, read from outside them, against the original's."""
    share = lab.peak_share(report.device)
    report.memory["share"] = share
    expected = f"a peak of at most {share:.0%} of the original's on {report.device}"
    decision, kind, cmp = _memory_decision(lab, report)
    if decision == "too few":
        faster.inconclusive("no unprofiled round was measured: the first round's runs are profiled, and their "
                            "peaks hold the profiler's own records", expected, "no figure",
                            "check again with --rounds 2 or more")
        return
    if decision == "unreadable":
        where = ("the device's memory, from the driver (nvidia-smi)" if kind == "device"
                 else "the run's memory, from /proc")
        tool = ("put NVIDIA's nvidia-smi on the PATH" if kind == "device" and not shutil.which("nvidia-smi")
                else "nvidia-smi listed no figure for the run's processes (MIG or vGPU?)" if kind == "device"
                else "the checker needs to read /proc/PID/status of the run's processes")
        faster.inconclusive(f"the peak memory could not be read from outside the run: {where}; the checker does "
                            "not take a run's own word for it", expected, "no figure", tool)
        return
    original, learner = _series(lab, report, kind)
    report.comparison = cmp.as_dict()
    report.threshold = lab.threshold(report.device)
    ratio = 1.0 / cmp.speedup
    what = ("device memory, from the driver" if kind == "device"
            else "host memory (resident or held, every process), from /proc")
    hidden = _held_not_resident(report) if kind == "host" else 0.0
    if hidden:
        what += (f"; {hidden:.0f} MB of your peak was held without being resident (allocated memory whose "
                 f"pages were handed back to the kernel still belongs to the run, and counts)")
    rounds = ", ".join(f"{o:.0f} → {m:.0f}" for o, m in zip(original, learner))
    measured = (f"peak {stats.median(original):.0f} MB → {stats.median(learner):.0f} MB "
                f"(median of {cmp.rounds} unprofiled runs each; per round: {rounds} MB), {ratio:.0%} of the "
                f"original's; {what}")
    interval = (f"95% interval {1 / cmp.ci_high:.0%}–{1 / cmp.ci_low:.0%}" if cmp.rounds > 1 and cmp.ci_low > 0
                else "one round: no interval")
    if decision == stats.PASS:
        faster.passed(f"your version's peak is {ratio:.0%} of the original's over {cmp.rounds} paired rounds "
                      f"({interval})", expected, measured)
    elif decision == stats.FAIL:
        why = _not_a_fix(lab, file) if file is not None else []
        faster.failed(f"your version's peak is {ratio:.0%} of the original's, more than the {share:.0%} this lab "
                      f"allows on {report.device} ({interval})", expected, measured,
                      why[0] if why else where_to_look(lab), details=why)
    else:
        faster.inconclusive(f"inconclusive: {ratio:.0%} of the original's peak over {cmp.rounds} rounds, but the "
                            f"{interval} straddles the {share:.0%} limit", expected, measured,
                            "something else on this machine moved the memory figures: check again; --rounds N "
                            "starts with more rounds")

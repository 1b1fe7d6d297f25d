"""Where labs are discovered: each folder under ``labs/`` with a ``lab.toml``.

A lab's manifest is declarative, like a rustlings exercise list: its title,
summary, files, the workload every version runs, how results are compared,
which trace evidence proves the fix, the speed-up thresholds per device, and
the hints. Nothing about a lab is scattered through the code.

Every table and key of a manifest is checked when it is read (:func:`load`):
a mistake raises ManifestError naming the file, the table and key, what is
expected and what was found, one problem a line. A broken lab never hides the
others: :func:`discover` returns the labs that load, :func:`broken` (or
:func:`discover_all`) the ones that do not, and why.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from . import paths


class LabNotFound(LookupError):
    pass


class ManifestError(ValueError):
    pass


@dataclass(frozen=True)
class ResultRule:
    """How one value that the pipeline yields each step is compared."""

    key: str
    what: str
    exact: bool = False
    rtol: float = 0.0
    atol: float = 0.0
    hint: str = ""


@dataclass(frozen=True)
class Evidence:
    """A figure measured from the learner's trace, and the bound it must meet.

    Bounds are absolute (``max``, ``min``) or relative to the same figure in
    the original's trace (``max_vs_original``: 0.5 means "at most half").
    """

    metric: str
    label: str
    where: str
    unit: str = ""
    max: float | None = None
    min: float | None = None
    max_vs_original: float | None = None
    # The work every correct version still does in each profiled step: the
    # floating-point operations of the operators in `work_ops` (matrix
    # products, convolutions), computed from the shapes the profiler recorded,
    # at least `min_work_vs_original` times the original's per step. Counted
    # by size, not by name: a step that yields cached results and runs a few
    # throw-away operators on tiny inputs does not reach it.
    work_ops: tuple[str, ...] = ()
    min_work_vs_original: float = 0.9
    work: str = "the model's work"
    # Where the work's pieces are part of the lab (lab 6's micro-batches: its memory budget): the
    # operators in `work_ops` must run on the shapes the original's run on, and this says why.
    same_shapes: str = ""
    # A passing fix whose figure is still above this share of the original's is told there is more to
    # gain (lab 1 with two workers still waits on the DataLoader for much of each step).
    more_to_gain_above: float | None = None
    # Calls that look like a fix and are not one (``[evidence.not_a_fix]``: the call, why not), told to
    # a learner whose file calls one and still fails: gc.collect() frees nothing still referenced.
    not_a_fix: tuple[tuple[str, str], ...] = ()
    # Parts of the figure a sound fix still makes, per step, not held against the bound (``[evidence.allow]``:
    # the measure's detail, how many): lab 4's confusion matrix counted with torch.bincount is one read a step.
    allow: tuple[tuple[str, float], ...] = ()

    def counted(self, value: float, details: dict | None = None) -> float:
        """The figure held against the bound: ``value`` less what ``allow`` lets through (at most as many
        of each allowed part as the measure's ``details`` hold)."""
        details = details or {}
        spared = sum(min(float(details.get(name) or 0.0), float(n)) for name, n in self.allow)
        return round(max(value - spared, 0.0), 6)

    def holds(self, value: float, original: float) -> bool:
        if self.max is not None and value > self.max:
            return False
        if self.min is not None and value < self.min:
            return False
        if self.max_vs_original is not None and value > self.max_vs_original * original:
            return False
        return True

    def expectation(self, original: float, used: dict | None = None) -> str:
        """The bound, said; an allowance (``allow``) named only where the learner's run used it (``used``: its
        measure's details): named to every learner, it would give a lab's fix away (lab 4's bincount)."""
        parts = []
        if self.max_vs_original is not None:
            bound = self.max_vs_original * original
            parts.append(f"at most {format_value(bound, self.unit)} "
                         f"({self.max_vs_original:g}× the original's {format_value(original, self.unit)})")
        if self.max is not None:
            parts.append(f"at most {format_value(self.max, self.unit)}")
        if self.min is not None:
            parts.append(f"at least {format_value(self.min, self.unit)}")
        spared = ", ".join(f"{n:g} {name}" for name, n in self.allow if used is None or (used.get(name) or 0) > 0)
        return " and ".join(parts) + (f" (beside {spared} {self.unit}, not counted)" if spared else "")


def format_value(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value * 100:.0f}%"
    if unit == "ms":
        return f"{value:.1f} ms"
    return f"{value:.4g} {unit}".strip()


@dataclass(frozen=True)
class Grading:
    """Points per check for ``proflab grade`` (the ``[grading]`` table; optional).

    A check that passes earns its points; one that fails, or is skipped because
    an earlier check failed, earns none. An inconclusive speed-up (too noisy to
    call) earns the share ``inconclusive`` of the ``faster`` points. Full marks
    at or above the threshold and the correctness points alone below it:
    ``evidence = 0`` and the speed-up's points on ``faster``.
    """

    runs: float = 1.0
    same_results: float = 3.0
    evidence: float = 3.0
    faster: float = 3.0
    inconclusive: float = 0.0  # share (0 to 1) of the faster points an inconclusive speed-up earns
    diagnosis: float = 0.0  # a drill's: what the learner said its profile shows (only drills check it)

    CHECKS = ("runs", "same_results", "diagnosis", "evidence", "faster")

    def points(self, check: str) -> float:
        return float(getattr(self, check))

    @property
    def max_score(self) -> float:
        return sum(self.points(name) for name in self.CHECKS)


@dataclass(frozen=True)
class Workload:
    batch_size: int
    warmup_steps: int
    timed_steps: int
    profile_steps: int
    rounds: int  # paired rounds always measured
    timeout_s: float
    seed: int = 0
    # When the speed-up is too close to the threshold to call after `rounds`,
    # the checker measures more rounds, up to `max_rounds` (default 3x rounds)
    # and while the whole measurement stays within `budget_s` seconds.
    max_rounds: int | None = None
    budget_s: float = 300.0
    # Resident memory of a run (its process and every process it starts), in MB.
    memory_mb: float = 8192.0
    # Whether a version may start worker processes that work beside the steps
    # (lab 1's fix is DataLoader workers). A Python thread busy during the timed
    # steps fails the check in every lab.
    background_workers: bool = False
    threads: int | None = None  # torch intra-op threads for every version; None: torch's default
    # The timed figure counts every step from the first warm-up step to the
    # last timed one (work moved into the warm-up is still paid for), leaving
    # out only time spent compiling (torch.compile) and the first step up to
    # what the original's first step took, plus `startup_s` seconds (starting
    # DataLoader workers, for instance).
    startup_s: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    # Set by ``proflab gate`` only, for a project's own pipeline (never by a lab's manifest): the folder
    # its cfg.data_dir names (default: the kit's data/), and whether Python threads of its own may work
    # beside the timed steps (a prefetching thread of the project's is its design, not a trick).
    data_dir: str = ""
    background_threads: bool = False

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.timed_steps + self.profile_steps

    @property
    def round_limit(self) -> int:
        return self.max_rounds or 3 * self.rounds


@dataclass(frozen=True)
class Drill:
    """A diagnosis drill's bottleneck (``[drill]``, written by ``authoring.drills``): which one, and what a right
    diagnosis names, a part of the step as the Overview names it or an operator whose name holds a word."""

    bottleneck: str
    parts: tuple[str, ...] = ()
    operator_words: tuple[str, ...] = ()


@dataclass(frozen=True)
class Storage:
    """Modelled storage (the ``[storage]`` table): a folder under ``data/`` served by the checker's
    own storage service, outside the learner's process, each read delayed by ``latency_ms``."""

    folder: str
    latency_ms: float


@dataclass(frozen=True)
class Distributed:
    """A lab run as a torchrun job (``[distributed]``): ``nproc`` ranks on this machine, each the kit's
    runner. Every rank's values are compared with the same rank's of the original; ``same_on_every_rank``
    names the values all ranks must hold alike (the weights, kept in sync by the all-reduce), and
    ``own_on_each_rank`` those each rank computes from its own share of the samples (the loss)."""

    nproc: int = 2
    same_on_every_rank: tuple[str, ...] = ()
    own_on_each_rank: tuple[str, ...] = ()


@dataclass(frozen=True)
class Audit:
    """What the source audit allows in this lab's files beyond the default (``[audit] allow``),
    and what it refuses beyond it (``[audit] refuse``); names from ``proflab.grading.audit``."""

    allow: tuple[str, ...] = ()
    refuse: tuple[str, ...] = ()


@dataclass(frozen=True)
class Profiling:
    """A lab whose learner writes the profiler code (``[profile]``, lab 0): the kit does not profile.

    The learner's own ``torch.profiler`` writes a trace into ``cfg.trace_dir``
    with ``tensorboard_trace_handler``; the checker grades that trace: at most
    ``max_steps`` steps in it (a window, not the whole loop), each holding
    every one of ``labels`` (``record_function`` ranges).
    """

    labels: tuple[str, ...]
    max_steps: int
    where: str = ""  # where to look when the profile misses something
    # The kit's own record of the workload: the original's first run is profiled by the kit for this many
    # steps after its timed ones (the first warms the profiler up), and the learner's trace must hold the
    # same operators, as often per step. 0: no record, no cross-check.
    kit_steps: int = 0


@dataclass(frozen=True)
class Answer:
    """A question about the learner's own profile (``[answers.KEY]``), answered in the file's ``ANSWERS``
    and checked against the figure the checker measures from the learner's trace."""

    key: str
    question: str
    metric: str  # a name in proflab.measuring.answers.METRICS
    where: str
    tolerance: float = 0.0


@dataclass(frozen=True)
class Gating:
    """A lab whose exercise is a gate's settings (``[gate]``, lab 7), not a pipeline: the checker runs
    ``proflab gate`` with them on another lab's fix, once against itself (it must pass) and once with
    the fix undone (``regression``, that lab's original, as the candidate: it must fail, naming ``cause``).
    Only the settings named in ``settings`` may be set (how to gate); what is gated is the checker's."""

    lab: str  # whose fix is gated
    fix: str  # that lab's file that holds the fix ("solution.py")
    fix_sha256: str  # the fix as the kit ships it: an edited one is refused
    regression: str  # the fix undone ("original.py")
    cause: str  # what the gate's report on the regression must name ("DataLoader")
    settings: tuple[str, ...]
    # The range of each number a learner may set, [low, high] (what a check can afford, and the limits a
    # gate on this workload can resolve at all)
    limits: dict[str, tuple[float, float]] = field(default_factory=dict)
    where: str = ""  # where to look when the cause is not named
    # The lab's own copy of the fix, in its folder ("pipeline.py"): what a learner gates and breaks on purpose
    # without having done that lab; the checker never runs it
    pipeline: str = ""


@dataclass(frozen=True)
class Lab:
    number: int
    name: str
    title: str
    summary: str
    folder: Path
    original: Path
    exercise: Path
    solution: Path
    original_sha256: str
    workload: Workload
    results: tuple[ResultRule, ...]
    # The first of the lab's evidences (``[evidence]``, or the first ``[[evidence]]``); None in a lab whose
    # learner profiles ([profile]): their trace is graded
    evidence: Evidence | None
    thresholds: dict[str, float]
    hints: tuple[str, ...]
    docs: str = ""
    # The words and calls that name the lab's fix (``fix_words``): its page may not name them outside a
    # collapsed "After you pass" note, its last hint must name one, its first none (authoring.page_rules)
    fix_words: tuple[str, ...] = ()
    data: str = ""  # "module:function" that prepares the lab's data under data/
    grading: Grading = field(default_factory=Grading)  # points per check, for proflab grade
    storage: Storage | None = None
    audit: Audit = field(default_factory=Audit)
    profiling: Profiling | None = None  # the learner profiles (lab 0): their trace is graded
    answers: tuple[Answer, ...] = ()
    # For a lab graded on overhead ([overhead] instead of [speedup]): at most this share slower
    # than the original, per device; the threshold is then the speed-up 1 / (1 + overhead).
    overhead: dict[str, float] = field(default_factory=dict)
    # For a lab graded on memory ([memory] instead of [speedup]): the peak memory, measured from
    # outside the run, at most this share of the original's, per device; the threshold is then the
    # factor 1 / share by which the original's peak exceeds the learner's.
    leaner: dict[str, float] = field(default_factory=dict)
    distributed: Distributed | None = None  # a torchrun job of several ranks ([distributed], lab 6)
    gating: Gating | None = None  # the exercise is a gate's settings ([gate], lab 7)
    # What the kit shows once the lab is passed (``proflab debrief``): the reference fix, its check, the sound
    # fixes measured ([files] debrief, "debrief.md" in the lab's folder by default); None where there is none
    debrief: Path | None = None
    drill: Drill | None = None  # a diagnosis drill's bottleneck ([drill]): its chain checks the learner's diagnosis
    # Which figure a step's time is, per device ([timing]): "wall_time" (the checker's clock; the
    # default) or "cpu_time" (the CPU seconds of every process and thread of the run, read from /proc,
    # which other jobs on the machine move far less than the clock); and why, in a sentence for the report and the page.
    timing: dict[str, str] = field(default_factory=dict)
    timing_why: str = ""
    # Whether time spent in torch.compile's compiling is left out of a version's time ([timing] compile =
    # true: a lab whose lesson a compiled fix may learn). Elsewhere compiling is work like any other: the
    # compiler runs code of the file's own while it compiles, which no mark can tell from its own work.
    compile_credit: bool = False
    # Every figure the fix must bring down, in order (``[[evidence]]``, a lab with several bottlenecks at
    # once: each is measured in both traces and must meet its own bound); a lab with one ``[evidence]``
    # table has it alone here. The first is ``evidence``, and holds the lab's work floor (work_ops).
    evidences: tuple[Evidence, ...] = ()

    def __post_init__(self) -> None:
        if not self.evidences and self.evidence is not None:
            object.__setattr__(self, "evidences", (self.evidence,))
        elif self.evidences and self.evidence is None:
            object.__setattr__(self, "evidence", self.evidences[0])

    @property
    def slug(self) -> str:
        """The lab's folder name under ``runs/``: ``01-dataloader``."""
        return f"{self.number:02d}-{self.name}"

    def threshold(self, device: str) -> float:
        """The speed-up a version must reach on ``device`` (below 1 for a lab graded on overhead)."""
        if self.overhead:
            return 1.0 / (1.0 + self.overhead.get(device, self.overhead["cpu"]))
        if self.leaner:
            return 1.0 / self.peak_share(device)
        return self.thresholds.get(device, self.thresholds["cpu"])

    def figure(self, device: str) -> str:
        """What a step's time is on ``device``: "wall_time" or "cpu_time" ([timing]; wall time by default)."""
        return self.timing.get(device.split(":")[0], "wall_time")

    def peak_share(self, device: str) -> float:
        """A lab graded on memory: the largest share of the original's peak a version may use on ``device``."""
        return self.leaner.get(device, self.leaner["cpu"])

    def original_is_intact(self) -> bool:
        return sha256(self.original) == self.original_sha256


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- reading a manifest, and checking every key of it ----------------------------
#
# A mistake in a manifest is the kit's, not the learner's: it is refused when
# the manifest is read, with the file, the table and key, what is expected and
# what was found, every problem of the file at once. It never shows up later as
# a traceback, a learner's failed check, or a check that passes a slower fix.

DEVICES = ("cpu", "cuda")  # the keys of [speedup]; cpu is the fallback of every other device
_SLUG = re.compile(r"[a-z0-9][a-z0-9_-]*")
_DATA = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def shown(manifest: Path) -> str:
    """A manifest's path as messages show it: relative to the kit's root when inside it."""
    path = Path(manifest).resolve()
    try:
        return path.relative_to(paths.root()).as_posix()
    except ValueError:
        return paths.display(path)


@dataclass(frozen=True)
class _Kind:
    """What a key's value must be, as a message says it, and the test of a value."""

    expected: str
    ok: Callable[[Any], bool]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(low: int, why: str = "") -> _Kind:
    return _Kind(f"an integer, {low} or more{why}", lambda v: _is_int(v) and v >= low)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _is_file_name(value: Any) -> bool:
    return _is_text(value) and not Path(value).is_absolute() and ".." not in Path(value).parts


def _names(known: dict[str, str], what: str) -> _Kind:
    return _Kind(f"a list of {what} ({', '.join(known)})",
                 lambda v: isinstance(v, list) and all(isinstance(x, str) and x in known for x in v))


_NUMBER = _Kind("a number", _is_number)
_POSITIVE = _Kind("a number above 0", lambda v: _is_number(v) and v > 0)
_NOT_NEGATIVE = _Kind("a number, 0 or more", lambda v: _is_number(v) and v >= 0)
_SPEEDUP = _Kind("a speed-up, a number 1.0 or more", lambda v: _is_number(v) and v >= 1.0)
_TEXT = _Kind("a non-empty string", _is_text)
_STRING = _Kind("a string", lambda v: isinstance(v, str))
_BOOL = _Kind("true or false", lambda v: isinstance(v, bool))
_TABLE = _Kind("a table", lambda v: isinstance(v, dict))
_TEXTS = _Kind("a list of non-empty strings", lambda v: isinstance(v, list) and all(_is_text(x) for x in v))
_ENV = _Kind("a table of strings", lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()))
_NAME = _Kind('a lowercase name of letters, digits, "-" and "_" (like "dataloader")',
              lambda v: isinstance(v, str) and _SLUG.fullmatch(v) is not None)
_DATA_SPEC = _Kind('"module:function" (like "proflab.labkit.photos:ensure_photos")',
                   lambda v: isinstance(v, str) and _DATA.fullmatch(v) is not None)
_SHA = _Kind("the original's SHA-256, 64 hex digits",
             lambda v: isinstance(v, str) and _SHA256.fullmatch(v) is not None)
_FILE = _Kind("a file name in the lab's folder", _is_file_name)
_FOLDER = _Kind("a folder name under data/", _is_file_name)

_EVIDENCES = _Kind("a table ([evidence]), or an array of tables ([[evidence]], one per bottleneck)",
                   lambda v: isinstance(v, dict) or (isinstance(v, list) and all(isinstance(x, dict) for x in v)))

Spec = dict[str, tuple[_Kind, bool]]  # key: (what it must be, whether it is required)

_TOP: Spec = {
    "number": (_integer(0), True),
    "name": (_NAME, True),
    "title": (_TEXT, True),
    "summary": (_TEXT, True),
    "docs": (_STRING, False),
    "data": (_DATA_SPEC, False),
    "hints": (_TEXTS, False),
    "fix_words": (_TEXTS, False),
    "files": (_TABLE, True),
    "workload": (_TABLE, True),
    "results": (_TABLE, True),
    "evidence": (_EVIDENCES, False),
    "speedup": (_TABLE, False),
    "profile": (_TABLE, False),
    "answers": (_TABLE, False),
    "overhead": (_TABLE, False),
    "memory": (_TABLE, False),
    "grading": (_TABLE, False),
    "storage": (_TABLE, False),
    "audit": (_TABLE, False),
    "distributed": (_TABLE, False),
    "timing": (_TABLE, False),
    "drill": (_TABLE, False),
}
_FILES: Spec = {
    "original": (_FILE, False),
    "exercise": (_FILE, False),
    "solution": (_FILE, False),
    "debrief": (_FILE, False),
    "original_sha256": (_SHA, True),
}
_WORKLOAD: Spec = {
    "batch_size": (_integer(1), True),
    "warmup_steps": (_integer(0), True),
    "timed_steps": (_integer(1), True),
    "profile_steps": (_integer(0), True),
    "rounds": (_integer(1), True),
    "timeout_s": (_POSITIVE, True),
    "seed": (_integer(0), False),
    "max_rounds": (_integer(1), False),
    "budget_s": (_POSITIVE, False),
    "memory_mb": (_POSITIVE, False),
    "background_workers": (_BOOL, False),
    "threads": (_integer(1), False),
    "startup_s": (_NOT_NEGATIVE, False),
    "params": (_TABLE, False),
    "env": (_ENV, False),
}
_RULE: Spec = {
    "what": (_TEXT, True),
    "exact": (_BOOL, False),
    "rtol": (_NOT_NEGATIVE, False),
    "atol": (_NOT_NEGATIVE, False),
    "hint": (_STRING, False),
}
_BOUNDS = ("max", "min", "max_vs_original")
_SPEEDUPS: Spec = {"cpu": (_SPEEDUP, True), "cuda": (_SPEEDUP, False)}
_OVERHEAD_SHARE = _Kind("a share of the original's time, above 0 and below 1 (0.25: at most 25% slower)",
                        lambda v: _is_number(v) and 0 < v < 1)
_OVERHEADS: Spec = {"cpu": (_OVERHEAD_SHARE, True), "cuda": (_OVERHEAD_SHARE, False)}
_PEAK_SHARE = _Kind("a share of the original's peak memory, above 0 and below 1 (0.5: at most half)",
                    lambda v: _is_number(v) and 0 < v < 1)
_PEAK_SHARES: Spec = {"cpu": (_PEAK_SHARE, True), "cuda": (_PEAK_SHARE, False)}
FIGURES = ("wall_time", "cpu_time")  # what a step's time is, per device: the clock, or the run's CPU seconds
_FIGURE = _Kind("\"wall_time\" or \"cpu_time\"", lambda v: v in FIGURES)
_TIMING: Spec = {"cpu": (_FIGURE, False), "cuda": (_FIGURE, False), "why": (_TEXT, True), "compile": (_BOOL, False)}
_NOT_A_FIX = _Kind("a table of calls and why each is not a fix ({\"gc.collect\" = \"...\"})",
                   lambda v: isinstance(v, dict) and all(_is_text(x) for x in v.values()))
_ALLOW = _Kind("a table of a figure's parts and how many of each are not counted ({\"bincount()\" = 1})",
               lambda v: isinstance(v, dict) and all(_is_text(k) and _is_number(x) and x >= 0 for k, x in v.items()))
_PROFILE: Spec = {"labels": (_TEXTS, True), "max_steps": (_integer(1), True), "where": (_STRING, False),
                  "kit_steps": (_integer(2, ": the first profiled step only warms the profiler up"), False)}


def _answer_spec() -> Spec:
    from .measuring.answers import METRICS  # no torch

    metric = _Kind(f"one of the checker's answer metrics ({', '.join(sorted(METRICS))})",
                   lambda v: isinstance(v, str) and v in METRICS)
    return {"question": (_TEXT, True), "metric": (metric, True), "where": (_TEXT, True),
            "tolerance": (_NOT_NEGATIVE, False)}
_STORAGE: Spec = {"folder": (_FOLDER, True), "latency_ms": (_POSITIVE, True)}
_DRILL: Spec = {"bottleneck": (_TEXT, True), "parts": (_TEXTS, False), "operator_words": (_TEXTS, False)}
_LAB_NAME = _Kind("a lab's number or name", lambda v: (isinstance(v, int) and not isinstance(v, bool)) or _is_text(v))
_RANGES = _Kind("a table of [low, high] ranges ({rounds = [2, 10]})",
                 lambda v: isinstance(v, dict) and all(isinstance(r, list) and len(r) == 2 and all(map(_is_number, r))
                                                       and r[0] <= r[1] for r in v.values()))
_GATE: Spec = {"lab": (_LAB_NAME, True), "fix": (_FILE, True), "fix_sha256": (_SHA, True),
               "regression": (_FILE, True), "cause": (_TEXT, True), "settings": (_TEXTS, True),
               "limits": (_RANGES, False), "where": (_STRING, False), "pipeline": (_FILE, False)}
# A gate lab runs no pipeline of its own: its workload is only the checker's time limits.
GATE_WORKLOAD = Workload(batch_size=1, warmup_steps=0, timed_steps=1, profile_steps=0, rounds=1, timeout_s=900)
_DISTRIBUTED: Spec = {"nproc": (_integer(2), True), "same_on_every_rank": (_TEXTS, False),
                      "own_on_each_rank": (_TEXTS, False)}


def _evidence_spec() -> Spec:
    from .measuring.metrics import METRICS  # the checker's registry: its metrics import no torch

    metric = _Kind(f"one of the checker's evidence metrics ({', '.join(sorted(METRICS))})",
                   lambda v: isinstance(v, str) and v in METRICS)
    return {
        "metric": (metric, True),
        "label": (_TEXT, True),
        "where": (_TEXT, True),
        "unit": (_STRING, False),
        **{bound: (_NUMBER, False) for bound in _BOUNDS},
        "work_ops": (_TEXTS, False),
        "min_work_vs_original": (_NOT_NEGATIVE, False),
        "work": (_TEXT, False),
        "same_shapes": (_TEXT, False),
        "more_to_gain_above": (_NOT_NEGATIVE, False),
        "not_a_fix": (_NOT_A_FIX, False),
        "allow": (_ALLOW, False),
    }


def _audit_spec() -> Spec:
    from .grading.audit import ALLOWANCES, RESTRICTIONS  # no torch either

    return {"allow": (_names(ALLOWANCES, "allowance names"), False),
            "refuse": (_names(RESTRICTIONS, "restriction names"), False)}


def _got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Problems:
    """The problems found in one manifest, one line each: ``file: [table] key ...``."""

    def __init__(self, where: str):
        self.where = where
        self.lines: list[str] = []

    def add(self, table: str, text: str) -> None:
        self.lines.append(f"{self.where}: " + (f"[{table}] " if table else "") + text)

    def table(self, data: dict, table: str, spec: Spec) -> dict:
        """The keys of ``data`` whose values are what ``spec`` asks; every other key is a problem."""
        unknown = sorted(set(data) - set(spec))
        if unknown:
            self.add(table, f"has unknown key(s) {', '.join(unknown)}; known: {', '.join(spec)}")
        good = {}
        for key, (kind, required) in spec.items():
            if key not in data:
                if required:
                    self.add(table, f"[{key}] is missing" if kind is _TABLE and not table
                             else f"{key} is missing: it must be {kind.expected}")
            elif kind.ok(data[key]):
                good[key] = data[key]
            else:
                self.add(table, f"{key} must be {kind.expected} (got {_got(data[key])})")
        return good


def _grading(table: dict, p: _Problems) -> Grading | None:
    known = (*Grading.CHECKS, "inconclusive")
    unknown = sorted(set(table) - set(known))
    if unknown:
        p.add("grading", f"has unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}")
    good = {}
    for key, value in table.items():
        if key not in known:
            continue
        if not _is_number(value) or value < 0:
            p.add("grading", f"{key} must be a number of points, 0 or more (got {_got(value)})")
        elif key == "inconclusive" and value > 1:
            p.add("grading", f"inconclusive is a share of the faster points, from 0 to 1 (got {_got(value)})")
        else:
            good[key] = float(value)
    if len(good) != len(table):
        return None
    grading = Grading(**good)
    if grading.max_score <= 0:
        p.add("grading", "gives no points at all; give at least one check a point")
        return None
    return grading


# What only the first of several evidences may say: the work every version does is the lab's, checked once.
_FIRST_ONLY = ("work_ops", "min_work_vs_original", "work", "same_shapes")


def _evidences(given: dict | list, p: _Problems) -> tuple[Evidence, ...]:
    """The lab's evidences: one ``[evidence]`` table, or each table of ``[[evidence]]`` (problems named
    ``[evidence[2]]``, counted from 1, as a reader counts the tables in the file)."""
    if isinstance(given, dict):
        one = _evidence(given, "evidence", p)
        return (one,) if one is not None else ()
    if not given:
        p.add("evidence", "names no evidence: give each bottleneck an [[evidence]] table")
    found, metrics = [], {}
    for n, table in enumerate(given, 1):
        where = f"evidence[{n}]"
        for key in _FIRST_ONLY if n > 1 else ():
            if key in table:
                p.add(where, f"{key} belongs in the first [[evidence]] only: the work every version does is "
                             f"the lab's, checked once")
        metric = table.get("metric")
        if isinstance(metric, str) and metric in metrics:
            p.add(where, f"metric {metric!r} is graded already by evidence[{metrics[metric]}]: give both "
                         f"bounds in one table")
        if isinstance(metric, str):
            metrics.setdefault(metric, n)
        one = _evidence({k: v for k, v in table.items() if n == 1 or k not in _FIRST_ONLY}, where, p)
        if one is not None:
            found.append(one)
    return tuple(found) if len(found) == len(given) else ()


def _evidence(table: dict, where: str, p: _Problems) -> Evidence | None:
    """One evidence table, every key checked; None (with its problems in ``p``) when it is not valid."""
    before = len(p.lines)
    good = p.table(table, where, _evidence_spec())
    if not any(bound in table for bound in _BOUNDS):
        p.add(where, "has no bound: give it max, min or max_vs_original")
    if "max" in good and "min" in good and good["min"] > good["max"]:
        p.add(where, f"min ({good['min']!r}) is above max ({good['max']!r}): no value can meet both")
    if len(p.lines) > before:
        return None
    return Evidence(**{**good, "work_ops": tuple(good.get("work_ops", ())),
                       "not_a_fix": tuple(good.get("not_a_fix", {}).items()),
                       "allow": tuple((k, float(v)) for k, v in good.get("allow", {}).items())})


def _files(table: dict, folder: Path, p: _Problems) -> dict[str, Path]:
    """The lab's files; the original, and a solution the manifest names, must be there."""
    good = p.table(table, "files", _FILES)
    found = {}
    for key in ("original", "exercise", "solution"):
        if key in table and key not in good:
            continue  # not a file name: said already
        path = folder / good.get(key, f"{key}.py")
        found[key] = path
        # The exercise is the learner's (proflab reset makes it again); a lab may have no solution.
        needed = key == "original" or (key == "solution" and key in good)
        if needed and not path.is_file():
            p.add("files", f"{key} names {path.name!r}, which is not a file in {Path(p.where).parent.as_posix()}/")
    # What the kit shows once the lab is passed (proflab debrief): never in the site, where it would be read first
    debrief = folder / good.get("debrief", "debrief.md")
    if "debrief" in good and not debrief.is_file():
        p.add("files", f"debrief names {debrief.name!r}, which is not a file in {Path(p.where).parent.as_posix()}/")
    found["debrief"] = debrief if debrief.is_file() else None
    return found


def _build(data: dict, folder: Path, p: _Problems) -> Lab | None:
    """The lab that ``data`` describes, or None with every problem in ``p``."""
    gate_lab = isinstance(data.get("gate"), dict)  # lab 7: no pipeline, so no workload, results or speed-up
    spec = {**_TOP, "gate": (_TABLE, False)}
    if gate_lab:
        spec.update(workload=(_TABLE, False), results=(_TABLE, False))
    top = p.table(data, "", spec)
    files = _files(top["files"], folder, p) if "files" in top else {}
    workload = p.table(top["workload"], "workload", _WORKLOAD) if "workload" in top else {}

    rules = []
    if "results" in top:
        if not top["results"]:
            p.add("results", "names no values: give each value the pipeline yields a [results.NAME] table")
        for key, spec in top["results"].items():
            if not isinstance(spec, dict):
                p.add("results", f"{key} must be a table, [results.{key}] (got {_got(spec)})")
                continue
            good = p.table(spec, f"results.{key}", _RULE)
            if len(good) == len(spec) and "what" in good:
                rules.append(ResultRule(key=key, **good))

    evidences = _evidences(top["evidence"], p) if "evidence" in top else ()

    speedup = p.table(top["speedup"], "speedup", _SPEEDUPS) if "speedup" in top else {}
    overhead = p.table(top["overhead"], "overhead", _OVERHEADS) if "overhead" in top else {}
    leaner = p.table(top["memory"], "memory", _PEAK_SHARES) if "memory" in top else {}
    gating = p.table(top["gate"], "gate", _GATE) if gate_lab else None
    if gating and "pipeline" in gating and not (folder / gating["pipeline"]).is_file():
        p.add("gate", f"pipeline names {gating['pipeline']!r}, which is not a file in "
                      f"{Path(p.where).parent.as_posix()}/")
    timing = p.table(top["timing"], "timing", _TIMING) if "timing" in top else {}
    if not gate_lab and sum(key in top for key in ("speedup", "overhead", "memory")) != 1:
        p.add("", "give one of [speedup] (how much faster a fix must be), [overhead] (how little slower "
                  "a profiled version may be) or [memory] (how much less memory a fix may use at its peak)")
    profiling = p.table(top["profile"], "profile", _PROFILE) if "profile" in top else None
    if profiling is None and "evidence" not in top and not gate_lab:
        p.add("", "[evidence] is missing: it says what the trace of a good fix shows")
    given_steps = workload.get("profile_steps")
    if profiling is None and given_steps is not None and given_steps < 2:
        p.add("workload", f"profile_steps must be an integer, 2 or more (the checker leaves out the first "
                          f"profiled step) (got {given_steps})")
    if profiling is not None and given_steps:
        p.add("workload", f"profile_steps must be 0 in a lab whose learner profiles ([profile]): the kit "
                          f"does not profile it (got {given_steps})")
    answers = []
    for key, spec in (top.get("answers") or {}).items():
        if not isinstance(spec, dict):
            p.add("answers", f"{key} must be a table, [answers.{key}] (got {_got(spec)})")
            continue
        good = p.table(spec, f"answers.{key}", _answer_spec())
        if len(good) == len(spec) and {"question", "metric", "where"} <= set(good):
            answers.append(Answer(key=key, **good))
    grading = _grading(top["grading"], p) if "grading" in top else Grading()
    storage = p.table(top["storage"], "storage", _STORAGE) if "storage" in top else None
    drill = p.table(top["drill"], "drill", _DRILL) if "drill" in top else None
    audit = p.table(top["audit"], "audit", _audit_spec()) if "audit" in top else {}
    distributed = p.table(top["distributed"], "distributed", _DISTRIBUTED) if "distributed" in top else None
    for key in (*(distributed or {}).get("same_on_every_rank", ()), *(distributed or {}).get("own_on_each_rank", ())):
        if key not in {rule.key for rule in rules}:
            p.add("distributed", f"names '{key}', which is not one of the lab's [results]")

    if p.lines:
        return None
    return Lab(
        number=top["number"],
        name=top["name"],
        title=top["title"],
        summary=top["summary"],
        folder=folder,
        original=files["original"],
        exercise=files["exercise"],
        solution=files["solution"],
        debrief=files.get("debrief"),
        original_sha256=top["files"]["original_sha256"].lower(),
        workload=Workload(**workload) if not gate_lab else GATE_WORKLOAD,
        results=tuple(rules),
        evidence=evidences[0] if evidences else None,
        evidences=evidences,
        thresholds={device: float(value) for device, value in speedup.items()},
        hints=tuple(top.get("hints", ())),
        fix_words=tuple(top.get("fix_words", ())),
        docs=top.get("docs", ""),
        data=top.get("data", ""),
        grading=grading,
        storage=Storage(**storage) if storage is not None else None,
        drill=Drill(bottleneck=drill["bottleneck"], parts=tuple(drill.get("parts", ())),
                    operator_words=tuple(drill.get("operator_words", ()))) if drill and "bottleneck" in drill else None,
        audit=Audit(allow=tuple(audit.get("allow", ())), refuse=tuple(audit.get("refuse", ()))),
        profiling=Profiling(labels=tuple(profiling["labels"]), max_steps=profiling["max_steps"],
                            where=profiling.get("where", ""), kit_steps=profiling.get("kit_steps", 0))
        if profiling is not None else None,
        answers=tuple(answers),
        overhead={device: float(value) for device, value in overhead.items()},
        leaner={device: float(value) for device, value in leaner.items()},
        distributed=Distributed(nproc=distributed["nproc"],
                                same_on_every_rank=tuple(distributed.get("same_on_every_rank", ())),
                                own_on_each_rank=tuple(distributed.get("own_on_each_rank", ())))
        if distributed is not None and "nproc" in distributed else None,
        gating=Gating(lab=str(gating["lab"]), fix=gating["fix"], fix_sha256=gating["fix_sha256"].lower(),
                      regression=gating["regression"], cause=gating["cause"], settings=tuple(gating["settings"]),
                      limits={k: (float(a), float(b)) for k, (a, b) in gating.get("limits", {}).items()},
                      where=gating.get("where", ""), pipeline=gating.get("pipeline", ""))
        if gating and len(gating) >= 6 else None,
        timing={device: figure for device, figure in timing.items() if device in DEVICES},
        timing_why=timing.get("why", ""),
        compile_credit=bool(timing.get("compile", False)),
    )


def load(folder: Path) -> Lab:
    """The lab in ``folder``, from its ``lab.toml``; ManifestError lists every problem of the file, one a line."""
    folder = Path(folder)
    manifest = folder / "lab.toml"
    where = shown(manifest)
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"{where}: cannot read it: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"{where}: not valid TOML: {e}") from None
    problems = _Problems(where)
    lab = _build(data, folder, problems)
    if lab is None:
        raise ManifestError("\n".join(problems.lines))
    return lab


# --- finding the labs ---------------------------------------------------------------

@dataclass(frozen=True)
class BrokenLab:
    """A lab folder whose manifest does not load, and why (every problem, one a line).

    ``number`` and ``name`` are the manifest's when it gives valid ones, else
    those of the folder's name (``01_dataloader``); either may be None.
    """

    folder: Path
    message: str
    number: int | None = None
    name: str | None = None

    def answers_to(self, wanted: str) -> bool:
        """Whether ``wanted`` (lower case) names this lab: its folder, its number or its name."""
        prefix = re.match(r"\d+", self.folder.name)
        if wanted.isdigit():
            return int(wanted) in {self.number, int(prefix[0]) if prefix else None}
        names = {self.folder.name.lower(), self.name}
        if self.number is not None and self.name:
            names.add(f"{self.number:02d}-{self.name}")
        return wanted in names


def _identity(folder: Path) -> tuple[int | None, str | None]:
    """The number and name of a lab whose manifest does not load, as far as they can be told."""
    match = re.fullmatch(r"(\d+)[_-](.+)", folder.name)
    number, name = (int(match[1]), match[2].lower()) if match else (None, None)
    try:
        data = tomllib.loads((folder / "lab.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return number, name
    if _is_int(data.get("number")) and data["number"] >= 0:
        number = data["number"]
    if _NAME.ok(data.get("name")):
        name = data["name"]
    return number, name


def discover_all(labs_dir: Path | None = None) -> tuple[list[Lab], list[BrokenLab]]:
    """Every lab folder under ``labs_dir``: the labs that load, by number, and the broken ones.

    Two labs with the same number or name are both broken, each naming the other.
    """
    # the kit's labs, and the diagnosis drills written for its learners (``authoring.drills``)
    folders = [Path(labs_dir)] if labs_dir else [paths.labs_dir(), paths.drills_dir()]
    loaded: list[Lab] = []
    broken_labs: list[BrokenLab] = []
    for manifest in [m for folder in folders for m in sorted(folder.glob("*/lab.toml"))]:
        try:
            loaded.append(load(manifest.parent))
        except ManifestError as e:
            broken_labs.append(BrokenLab(manifest.parent, str(e), *_identity(manifest.parent)))
    clashes: dict[Path, list[str]] = {}
    for what in ("number", "name"):
        groups: dict[Any, list[Lab]] = {}
        for lab in loaded:
            groups.setdefault(getattr(lab, what), []).append(lab)
        for value, same in groups.items():
            for lab in same if len(same) > 1 else ():
                others = ", ".join(shown(other.folder / "lab.toml") for other in same if other is not lab)
                clashes.setdefault(lab.folder, []).append(
                    f"{shown(lab.folder / 'lab.toml')}: {what} {value!r} is also the {what} of {others}; "
                    f"each lab needs its own")
    good = [lab for lab in loaded if lab.folder not in clashes]
    broken_labs += [BrokenLab(lab.folder, "\n".join(clashes[lab.folder]), lab.number, lab.name)
                    for lab in loaded if lab.folder in clashes]
    broken_labs.sort(key=lambda b: (b.number is None, b.number or 0, b.folder.name))
    return sorted(good, key=lambda lab: lab.number), broken_labs


def discover(labs_dir: Path | None = None) -> list[Lab]:
    """The labs under ``labs_dir`` that load, by number; a broken one is left out (see :func:`broken`).

    Only when there are lab folders and not one of them loads does it raise
    ManifestError, with every broken lab's message: there is nothing to do then.
    """
    good, broken_labs = discover_all(labs_dir)
    if not good and broken_labs:
        raise ManifestError("\n".join(b.message for b in broken_labs))
    return good


def broken(labs_dir: Path | None = None) -> list[BrokenLab]:
    """The lab folders under ``labs_dir`` whose manifest does not load, and why."""
    return discover_all(labs_dir)[1]


def resolve(name: str, labs: list[Lab] | None = None) -> Lab:
    """A lab by number (``1``, ``01``) or by name (``dataloader``).

    A name that only a broken lab answers to (its folder ``01_dataloader``, the
    number its folder starts with, or its name) raises ManifestError with why
    that lab is broken; broken labs are looked for in the folders of ``labs``
    (or the kit's ``labs/`` when there are none).
    """
    broken_labs = None
    if labs is None:
        labs, broken_labs = discover_all()
    wanted = name.strip().lower()
    for lab in labs:
        if wanted.isdigit() and int(wanted) == lab.number:
            return lab
        if wanted in (lab.name, lab.slug, lab.folder.name.lower()):
            return lab
    if broken_labs is None:
        folders = sorted({lab.folder.parent for lab in labs}) or [paths.labs_dir()]
        broken_labs = [b for folder in folders for b in discover_all(folder)[1]]
    for b in broken_labs:
        if b.answers_to(wanted):
            raise ManifestError(b.message)
    known = ", ".join(f"{lab.number} ({lab.name})" for lab in labs) or "none found"
    import difflib

    close = difflib.get_close_matches(wanted, [lab.name for lab in labs], n=1, cutoff=0.6)
    guess = f" Did you mean '{close[0]}'?" if close else ""
    raise LabNotFound(f"no lab called '{name}'.{guess} Labs: {known}.")


def find_by_file(path: Path, labs: list[Lab] | None = None) -> Lab | None:
    """The lab whose folder holds ``path``, if any (a broken lab is none)."""
    path = path.resolve()
    for lab in discover_all()[0] if labs is None else labs:
        if path.parent == lab.folder.resolve():
            return lab
    return None

"""What a lab is, once its manifest is read: the ``Lab`` and the tables it is made of.

``labs.reading`` makes a ``Lab`` from a ``lab.toml``, checking every key against ``labs.keys``, the
manifest's vocabulary; ``labs.finding`` finds the labs of the kit.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class LabNotFound(LookupError):
    pass


class ManifestError(ValueError):
    pass


DEVICES = ("cpu", "cuda")  # the keys of [speedup]; cpu is the fallback of every other device
FIGURES = ("wall_time", "cpu_time")  # what a step's time is, per device: the clock, or the run's CPU seconds


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

    @property
    def kind(self) -> str:
        """What the learner hands in, told by the manifest and asked here alone: ``"gate"`` (a gate's settings,
        ``[gate]``: lab 7), ``"own_profile"`` (a pipeline that profiles itself, ``[profile]``: lab 0),
        ``"job"`` (a pipeline run as a torchrun job, ``[distributed]``: lab 6) or ``"pipeline"`` (a pipeline
        the kit runs and profiles)."""
        if self.gating is not None:
            return "gate"
        if self.profiling is not None:
            return "own_profile"
        if self.distributed is not None:
            return "job"
        return "pipeline"

    @property
    def margin(self) -> str:
        """What a fix must do better than the original: ``"leaner"`` (its peak memory, ``[memory]``),
        ``"overhead"`` (at most so much slower, ``[overhead]``) or ``"faster"`` (``[speedup]``)."""
        return "leaner" if self.leaner else "overhead" if self.overhead else "faster"

    def original_is_intact(self) -> bool:
        return sha256(self.original) == self.original_sha256


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# A gate lab runs no pipeline of its own: its workload is only the checker's time limits.
GATE_WORKLOAD = Workload(batch_size=1, warmup_steps=0, timed_steps=1, profile_steps=0, rounds=1, timeout_s=900)

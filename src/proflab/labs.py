"""Where labs are discovered: each folder under ``labs/`` with a ``lab.toml``.

A lab's manifest is declarative, like a rustlings exercise list: its title,
summary, files, the workload every version runs, how results are compared,
which trace evidence proves the fix, the speed-up thresholds per device, and
the hints. Nothing about a lab is scattered through the code.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

    def holds(self, value: float, original: float) -> bool:
        if self.max is not None and value > self.max:
            return False
        if self.min is not None and value < self.min:
            return False
        if self.max_vs_original is not None and value > self.max_vs_original * original:
            return False
        return True

    def expectation(self, original: float) -> str:
        parts = []
        if self.max_vs_original is not None:
            bound = self.max_vs_original * original
            parts.append(f"at most {format_value(bound, self.unit)} "
                         f"({self.max_vs_original:g}× the original's {format_value(original, self.unit)})")
        if self.max is not None:
            parts.append(f"at most {format_value(self.max, self.unit)}")
        if self.min is not None:
            parts.append(f"at least {format_value(self.min, self.unit)}")
        return " and ".join(parts)


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

    CHECKS = ("runs", "same_results", "evidence", "faster")

    def points(self, check: str) -> float:
        return float(getattr(self, check))

    @property
    def max_score(self) -> float:
        return sum(self.points(name) for name in self.CHECKS)


def _grading(table: Any, where: Path) -> Grading:
    if not isinstance(table, dict):
        raise ManifestError(f"{where}: [grading] must be a table of points per check")
    known = (*Grading.CHECKS, "inconclusive")
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ManifestError(f"{where}: [grading] has unknown key(s) {', '.join(unknown)}; "
                            f"known: {', '.join(known)}")
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ManifestError(f"{where}: [grading] {key} must be a number of points, 0 or more (got {value!r})")
    if table.get("inconclusive", 0) > 1:
        raise ManifestError(f"{where}: [grading] inconclusive is a share of the faster points, "
                            f"from 0 to 1 (got {table['inconclusive']!r})")
    grading = Grading(**{key: float(value) for key, value in table.items()})
    if grading.max_score <= 0:
        raise ManifestError(f"{where}: [grading] gives no points at all; give at least one check a point")
    return grading


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

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.timed_steps + self.profile_steps

    @property
    def round_limit(self) -> int:
        return self.max_rounds or 3 * self.rounds


@dataclass(frozen=True)
class Storage:
    """Modelled storage (the ``[storage]`` table): a folder under ``data/`` served by the checker's
    own storage service, outside the learner's process, each read delayed by ``latency_ms``."""

    folder: str
    latency_ms: float


@dataclass(frozen=True)
class Audit:
    """What the source audit allows in this lab's files beyond the default (``[audit] allow``),
    and what it refuses beyond it (``[audit] refuse``); names from ``proflab.audit``."""

    allow: tuple[str, ...] = ()
    refuse: tuple[str, ...] = ()


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
    evidence: Evidence
    thresholds: dict[str, float]
    hints: tuple[str, ...]
    docs: str = ""
    data: str = ""  # "module:function" that prepares the lab's data under data/
    grading: Grading = field(default_factory=Grading)  # points per check, for proflab grade
    storage: Storage | None = None
    audit: Audit = field(default_factory=Audit)

    @property
    def slug(self) -> str:
        """The lab's folder name under ``runs/``: ``01-dataloader``."""
        return f"{self.number:02d}-{self.name}"

    def threshold(self, device: str) -> float:
        return self.thresholds.get(device, self.thresholds["cpu"])

    def original_is_intact(self) -> bool:
        return sha256(self.original) == self.original_sha256


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _require(table: dict, key: str, where: Path) -> Any:
    if key not in table:
        raise ManifestError(f"{where}: missing '{key}'")
    return table[key]


def load(folder: Path) -> Lab:
    manifest = folder / "lab.toml"
    try:
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"{manifest}: {e}") from None
    files = _require(data, "files", manifest)
    run = _require(data, "workload", manifest)
    evidence = _require(data, "evidence", manifest)
    rules = tuple(
        ResultRule(key=key, **spec) for key, spec in _require(data, "results", manifest).items()
    )
    return Lab(
        number=int(_require(data, "number", manifest)),
        name=_require(data, "name", manifest),
        title=_require(data, "title", manifest),
        summary=_require(data, "summary", manifest),
        folder=folder,
        original=folder / files.get("original", "original.py"),
        exercise=folder / files.get("exercise", "exercise.py"),
        solution=folder / files.get("solution", "solution.py"),
        original_sha256=_require(files, "original_sha256", manifest),
        workload=Workload(**run),
        results=rules,
        evidence=Evidence(**{**evidence, "work_ops": tuple(evidence.get("work_ops", ()))}),
        thresholds=dict(_require(data, "speedup", manifest)),
        hints=tuple(data.get("hints", ())),
        docs=data.get("docs", ""),
        data=data.get("data", ""),
        grading=_grading(data["grading"], manifest) if "grading" in data else Grading(),
        storage=Storage(**data["storage"]) if "storage" in data else None,
        audit=Audit(allow=tuple(data.get("audit", {}).get("allow", ())),
                    refuse=tuple(data.get("audit", {}).get("refuse", ()))),
    )


def discover(labs_dir: Path | None = None) -> list[Lab]:
    folder = labs_dir or paths.labs_dir()
    found = [load(p.parent) for p in sorted(folder.glob("*/lab.toml"))]
    return sorted(found, key=lambda lab: lab.number)


def resolve(name: str, labs: list[Lab] | None = None) -> Lab:
    """A lab by number (``1``, ``01``) or by name (``dataloader``)."""
    labs = discover() if labs is None else labs
    wanted = name.strip().lower()
    for lab in labs:
        if wanted.isdigit() and int(wanted) == lab.number:
            return lab
        if wanted in (lab.name, lab.slug, lab.folder.name):
            return lab
    known = ", ".join(f"{lab.number} ({lab.name})" for lab in labs) or "none found"
    raise LabNotFound(f"no lab called '{name}'. Labs: {known}.")


def find_by_file(path: Path, labs: list[Lab] | None = None) -> Lab | None:
    """The lab whose folder holds ``path``, if any."""
    path = path.resolve()
    for lab in discover() if labs is None else labs:
        if path.parent == lab.folder.resolve():
            return lab
    return None

"""What a check says: each named check's verdict, and the report that holds them.

The grading's shared words, at its bottom: the statuses, a ``Check`` (one row
of a report: its name, title, what it checks, and the verdict with its
rationale, expected, measured and help), the ``Report`` of a lab's check, what
the gate's report shares with it (``Verdict``), and ``NotGraded``, the kit's
or the machine's failure. The named checks themselves, with their titles and
texts, are ``checks``'; every report format reads what they wrote here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable

from .. import labs

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
INCONCLUSIVE = "inconclusive"  # too noisy to call either way: neither a pass nor a fail


class NotGraded(Exception):
    """The kit or the machine failed during a check (a full disk, lab data that cannot be built)."""


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
    # The [grading] key that pays for it (``runs``, ``same_results``, ``evidence``, ``faster``, ``diagnosis``):
    # a check's name is its own (lab 5's last is "leaner"), its points are mapped apart. "" in a record
    # written before checks had names of their own: its name was that key.
    points: str = ""
    # A skipped check: the title of the check whose verdict ended the chain before it ("can't check until ...")
    waits_on: str = ""

    @property
    def pays(self) -> str:
        """The [grading] key whose points this check earns."""
        return self.points or self.name

    def skipped_because(self) -> str:
        """Why a skipped check did not run, as the reports say it."""
        return f"can't check until “{self.waits_on}” passes" if self.waits_on else "an earlier check failed"

    def passed(self, rationale: str, expected: str = "", actual: str = "", help: str = "") -> None:
        self.status, self.rationale, self.expected, self.actual, self.help = PASSED, rationale, expected, actual, help

    def failed(self, rationale: str, expected: str = "", actual: str = "", help: str = "",
               details: list[str] | None = None) -> None:
        self.status, self.rationale, self.expected, self.actual, self.help = FAILED, rationale, expected, actual, help
        self.details = details or []

    def inconclusive(self, rationale: str, expected: str = "", actual: str = "", help: str = "") -> None:
        self.status, self.rationale, self.expected, self.actual, self.help = INCONCLUSIVE, rationale, expected, actual, help


def verdict_of(check: Check) -> str:
    """The verdict a lab's last check gives the whole check: passed or failed as it is, else inconclusive."""
    return {PASSED: PASSED, FAILED: FAILED}.get(check.status, INCONCLUSIVE)


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

    def paying(self, points: str) -> Check:
        """The check that earns the points of ``points`` ([grading]'s key: ``evidence``, ``faster``...)."""
        return next(c for c in self.checks if c.pays == points)

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
    # Every figure of the lab's evidence, in the manifest's order (the first is ``evidence``), each with
    # whether it met its bound ("met") and the bound in words ("expected"): a lab with several
    # bottlenecks ([[evidence]]) has one per bottleneck
    evidences: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, list[float]] = field(default_factory=lambda: {"original": [], "learner": []})
    step_times: dict[str, list[float]] = field(default_factory=lambda: {"original": [], "learner": []})
    latency: dict[str, dict[str, float]] = field(default_factory=dict)  # per-step median and p95, ms
    # The first step (import, set-up, first batch): the medians over each version's runs and what of it
    # is left out of the time ("allowance_s"), in seconds
    first_step: dict[str, float] = field(default_factory=dict)
    # After the timed window (profiled steps, shutdown, anything else a run does there), in the report's
    # figure: what each run spent ("original_s", "learner_s"), the allowance per kind of run
    # ("allowance_s", by the steps asked), and what of each learner run counted ("counted_s")
    after: dict[str, Any] = field(default_factory=dict)
    # The profiler's warm-up step (not in the trace) against a traced step, in CPU seconds, as the first round's
    # runs spent them ("original_s", "learner_s": [warm-up, traced]), and what the learner's may spend
    # ("allowed_s"): where the lab's figure is CPU time
    warmup: dict[str, Any] = field(default_factory=dict)
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
    # What a step's time is: "wall_time" (the checker's clock) or "cpu_time" (the CPU seconds of the run's
    # processes and threads, read from /proc), per the lab's [timing] on the device
    figure: str = "wall_time"
    # Turns at the machine (``slots``): seconds waited for a slot, never measured nor counted
    waited_s: float = 0.0
    # What the kit could not do that the verdict does not rest on (a trace not kept: the disk was full)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Report":
        """A report from ``as_dict``'s record (a grading's journal)."""
        if not isinstance(data, dict):
            raise ValueError(f"a report is an object, and this is {_kind(data)}")
        known, of_check = {f.name: f.type for f in fields(cls)}, {f.name: f.type for f in fields(Check)}
        values = {k: v for k, v in data.items() if k in known}
        if not isinstance(values.get("checks"), list):
            raise ValueError(f"its checks are a list, and these are {_kind(values.get('checks'))}")
        for c in values["checks"]:
            if not isinstance(c, dict):
                raise ValueError(f"each of its checks is an object, and one is {_kind(c)}")
        for name, value in values.items():
            if name != "checks" and not _fits(value, known[name]):
                raise ValueError(f"its {name} ({_kind(value)}) does not read as {known[name]}")
        checks = [{k: v for k, v in c.items() if k in of_check} for c in values["checks"]]
        for c in checks:
            for name, value in c.items():
                if not _fits(value, of_check[name]):
                    raise ValueError(f"a check's {name} ({_kind(value)}) does not read as {of_check[name]}")
        values["checks"] = [Check(**c) for c in checks]
        return cls(**values)


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__}"


def _split(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets (an annotation: ``dict[str, float] | None``)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i].strip())
            start = i + len(sep)
    return parts + [text[start:].strip()]


_PLAIN = {"str": str, "int": int, "float": (int, float), "bool": bool, "None": type(None)}


def _fits(value: Any, annotation: str) -> bool:
    """Whether a value read back from JSON fits a field's annotation (its containers one level in)."""
    for alt in _split(annotation, "|"):
        base, _, inner = alt.partition("[")
        args = _split(inner[:-1], ",") if inner else []
        if base == "Any":
            return True
        if base in _PLAIN and isinstance(value, _PLAIN[base]) and not (base == "float" and isinstance(value, bool)):
            return True
        if base == "dict" and isinstance(value, dict):
            return all(isinstance(k, str) for k in value) and (
                not args or all(_fits(v, args[1]) for v in value.values()))
        if base == "list" and isinstance(value, list):
            return not args or args[0] == "Check" or all(_fits(v, args[0]) for v in value)
    return False


Progress = Callable[[str], None]


def where_to_look(lab: labs.Lab) -> str:
    return f"run `proflab hint {lab.name}` for a hint, and `proflab tensorboard` to compare the traces"
